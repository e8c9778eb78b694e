//! `dshctl doctor`: one line per check, ✓ or ✗ with the fix; exit 0 only when none failed.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, UNIX_EPOCH};

use dsh_tests::{DaemonSpec, private_dir};

use super::*;

const CHECKS: [&str; 7] = [
    "socket",
    "daemon",
    "home",
    "persistence",
    "model key",
    "config",
    "hooks",
];

/// A daemon whose config names one Claude Code hook file holding `hook_json`.
fn daemon_with_hook_file(hook_json: &str, env: Vec<(OsString, OsString)>) -> TestDaemon {
    let dir = private_dir();
    let hooks = dir.path().join("hooks.json");
    std::fs::write(&hooks, hook_json).unwrap();
    let spec = DaemonSpec {
        config: Some(format!(
            "[hooks]\nclaude_code = [{:?}]\n",
            hooks.display().to_string()
        )),
        env,
        ..DaemonSpec::default()
    };
    let daemon = TestDaemon::spawn(spec, dir);
    daemon.wait_ready();
    daemon
}

/// `dshctl --json doctor`: (exit code, the document).
fn doctor_json(daemon: &TestDaemon) -> (Option<i32>, Value) {
    let out = daemon.dshctl(&["--json", "doctor"]);
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

fn check<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {doc}"))
}

#[test]
fn a_healthy_setup_passes_every_check_one_line_each() {
    let daemon = daemon_with_hook_file(
        r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}"#,
        vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
    );
    let out = daemon.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), CHECKS.len(), "{stdout}");
    for (line, name) in lines.iter().zip(CHECKS) {
        assert!(line.starts_with(&format!("✓ {name}")), "{stdout}");
    }
    assert!(stdout.contains("1 file loaded, 1 handler"), "{stdout}");

    let (code, doc) = doctor_json(&daemon);
    assert_eq!(code, Some(0));
    assert_eq!(doc["healthy"], true);
    let names: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(names, CHECKS);

    // What doctor read is in Status.
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(status["model_key_configured"], true);
    let config = daemon.dir.path().join("config.toml");
    assert_eq!(status["config_file"], config.display().to_string());
}

#[test]
fn no_model_key_is_a_warning_that_still_passes() {
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let key = stdout
        .lines()
        .find(|l| l.contains("model key"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(key.starts_with("! model key"), "{key}");
    assert!(
        key.contains("DEEPSEEK_API_KEY"),
        "the fix names the variable: {key}"
    );
    assert_eq!(
        daemon.dshctl_json(&["status"])["model_key_configured"],
        false
    );
}

#[test]
fn broken_hook_files_a_changed_config_and_a_shared_socket_directory_fail_with_their_fixes() {
    let daemon = daemon_with_hook_file("{ not json", Vec::new());
    let hooks = daemon.dir.path().join("hooks.json").display().to_string();

    let (code, doc) = doctor_json(&daemon);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["healthy"], false);
    let broken = check(&doc, "hooks");
    assert_eq!(broken["status"], "error", "{doc}");
    assert!(broken["detail"].as_str().unwrap().contains(&hooks), "{doc}");
    assert!(
        broken["fix"]
            .as_str()
            .unwrap()
            .contains("dshctl hooks reload"),
        "{doc}"
    );
    assert_eq!(check(&doc, "config")["status"], "ok", "{doc}");

    // The config file is edited after dshd read it: what runs is not what is on disk.
    let started = daemon.dshctl_json(&["status"])["started_at_ms"]
        .as_u64()
        .unwrap();
    let later = UNIX_EPOCH + Duration::from_millis(started) + Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(daemon.dir.path().join("config.toml"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    let out = daemon.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let config = stdout.lines().find(|l| l.contains(" config ")).unwrap();
    assert!(
        config.starts_with("✗ config") && config.contains("changed after dshd started"),
        "{config}"
    );
    assert!(config.contains("fix: restart dshd"), "{config}");

    // A socket directory others may write: someone could replace the socket.
    let run = daemon.socket.parent().unwrap();
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = daemon.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let first = stdout.lines().next().unwrap();
    assert!(
        first.starts_with("✗ socket") && first.contains(&format!("chmod 700 {}", run.display())),
        "{stdout}"
    );
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn without_a_daemon_the_socket_fails_and_the_rest_is_not_checked() {
    let dir = private_dir();
    let socket = dir.path().join("dshd.sock");
    let out = dsh_tests::dshctl_at(&socket, &["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), CHECKS.len(), "{stdout}");
    assert!(lines[0].starts_with("✗ socket"), "{stdout}");
    assert!(lines[0].contains("fix: start dshd"), "{stdout}");
    for line in &lines[1..] {
        assert!(line.starts_with("· "), "{stdout}");
    }
}
