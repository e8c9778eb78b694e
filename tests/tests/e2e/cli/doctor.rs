//! `dshctl doctor`: one line per check, ✓ or ✗ with the fix; exit 0 only when none failed.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, UNIX_EPOCH};

use dsh_tests::{DaemonSpec, private_dir};

use super::*;

const CHECKS: [&str; 9] = [
    "socket",
    "daemon",
    "home",
    "persistence",
    "model key",
    "config",
    "launcher",
    "hooks",
    "mcp",
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
fn no_model_key_and_no_script_fails_with_the_fix_and_a_script_makes_it_a_warning() {
    // The defaults without a key: agents created without --script have nothing to answer with.
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let key = stdout
        .lines()
        .find(|l| l.contains("model key"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(key.starts_with("✗ model key"), "{key}");
    assert!(
        key.contains("DEEPSEEK_API_KEY") && key.contains("dshctl acp --demo"),
        "the fix names the variable and the keyless demo: {key}"
    );
    assert_eq!(
        daemon.dshctl_json(&["status"])["model_key_configured"],
        false
    );
    // What doctor predicts: an agent on the defaults cannot answer.
    let created = daemon.dshctl_json(&["agent", "new", "--cwd", "/"]);
    let agent = created["agent_id"].as_str().unwrap();
    let prompted = daemon.dshctl(&["prompt", "--agent", agent, "hi"]);
    assert_eq!(prompted.status.code(), Some(1), "{prompted:?}");

    // With a script configured for scripted agents, the missing key is only a warning.
    let dir = private_dir();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"replies": [{"text": "hi"}]}"#).unwrap();
    let scripted = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[model]\nscript = {:?}\n",
                script.display().to_string()
            )),
            ..DaemonSpec::default()
        },
        dir,
    );
    scripted.wait_ready();
    let out = scripted.dshctl(&["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("! model key"), "{stdout}");
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
    assert!(
        config.contains(&format!(
            "fix: check it with dshd --check-config {}",
            daemon.dir.path().join("config.toml").display()
        )) && config.contains("then restart dshd"),
        "{config}"
    );

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

#[test]
fn no_model_key_fails_when_the_configured_provider_needs_one() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[model]\nprovider = \"openai\"\n".into()),
        ..DaemonSpec::default()
    });
    let (code, doc) = doctor_json(&daemon);
    assert_eq!(code, Some(1), "{doc}");
    let key = check(&doc, "model key");
    assert_eq!(key["status"], "error", "{doc}");
    assert!(
        key["detail"].as_str().unwrap().contains("model.provider"),
        "{doc}"
    );
    // What doctor predicts: an agent created on the defaults is refused.
    let created = daemon.dshctl(&["agent", "new", "--cwd", "/"]);
    assert_eq!(created.status.code(), Some(1), "{created:?}");
}

#[test]
fn a_config_file_written_after_start_fails_until_checked_and_applied() {
    // With a key, so that only the config file is at fault.
    let daemon = TestDaemon::start_with(DaemonSpec {
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
        ..DaemonSpec::default()
    });
    assert_eq!(doctor_json(&daemon).0, Some(0));
    let file = daemon.home.join("config.toml");
    std::fs::write(&file, "[agent]\nmax_depth = \"deep\"\n").unwrap();
    let (code, doc) = doctor_json(&daemon);
    assert_eq!(code, Some(1), "{doc}");
    let config = check(&doc, "config");
    assert_eq!(config["status"], "error", "{doc}");
    let fix = config["fix"].as_str().unwrap();
    assert!(fix.contains("dshd --check-config"), "{doc}");

    // The check it names: the bad key, exit 1; fixed, exit 0; starts nothing either way.
    let check_config = |args: &[&std::ffi::OsStr]| {
        dsh_tests::daemon_command(&daemon.dir)
            .arg("--check-config")
            .args(args)
            .output()
            .unwrap()
    };
    let out = check_config(&[file.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("agent.max_depth"), "{out:?}");
    std::fs::write(&file, "[agent]\nmax_depth = 2\n").unwrap();
    let out = check_config(&[file.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!("{}: valid", file.display())),
        "{out:?}"
    );
    // Without FILE: the one dshd would read, <home>/config.toml.
    let out = check_config(&["--dsh-home".as_ref(), daemon.home.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!("{}: valid", file.display())),
        "{out:?}"
    );
    // The running daemon was not disturbed.
    let status = daemon.dshctl_json(&["status"]);
    assert!(status["config_file"].is_null(), "{status}");
}

#[test]
fn a_client_finds_dshd_at_any_default_and_without_one_lists_every_place_looked_at() {
    // dshd started without XDG_RUNTIME_DIR serves <home>/run/dshd.sock.
    let mut daemon = TestDaemon::spawn(
        DaemonSpec {
            no_socket_flag: true,
            ..DaemonSpec::default()
        },
        private_dir(),
    );
    let in_home = daemon.home.join("run/dshd.sock");
    let ready = eventually(Duration::from_secs(20), || {
        dsh_tests::dshctl_at(&in_home, &["status"]).status.success()
    });
    assert!(
        ready,
        "dshd did not serve {}: {}",
        in_home.display(),
        daemon.log_text()
    );
    // A client whose session has XDG_RUNTIME_DIR looks there first, then in the home: found.
    let xdg = daemon.dir.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let home = daemon.home.clone();
    let run = |args: &[&str]| {
        Command::new(dshctl_bin())
            .args(args)
            .env_remove("DSH_SOCKET")
            .env("DSH_HOME", &home)
            .env("XDG_RUNTIME_DIR", &xdg)
            .output()
            .unwrap()
    };
    let out = run(&["--json", "status"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["socket"], in_home.to_str().unwrap(), "{status}");
    let out = run(&["doctor"]);
    assert!(
        text(&out.stdout).starts_with(&format!("✓ socket       {}", in_home.display())),
        "{out:?}"
    );

    // No dshd anywhere: every default is named, in order.
    daemon.kill9();
    let out = run(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = text(&out.stderr);
    let xdg_socket = xdg.join("dsh/dshd.sock");
    assert!(
        said.contains(&format!(
            "no dshd is listening on {} (<home>/run/dshd.sock); also looked at {} (<runtime dir>/dsh/dshd.sock",
            in_home.display(),
            xdg_socket.display(),
        )) && said.contains("nothing there"),
        "{said}"
    );
}

/// The `mcp` check starts each configured server as an agent's first turn would: a server that
/// starts passes with its tool count, one that does not fails with its error and the fix; the
/// throwaway agent it used is gone, its session deleted.
#[test]
fn the_mcp_check_starts_each_configured_server_and_leaves_nothing_behind() {
    let config = format!(
        "[mcp_servers.probe]\ncommand = {:?}\nargs = [{:?}]\n\n[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n",
        dsh_tests::mcp::python().display().to_string(),
        dsh_tests::mcp::probe_server().display().to_string(),
    );
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        ..DaemonSpec::default()
    });
    let (code, doc) = doctor_json(&daemon);
    assert_eq!(code, Some(1), "{doc}");
    let mcp: Vec<&Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "mcp")
        .collect();
    assert_eq!(mcp.len(), 2, "{doc}");
    let (broken, probe) = (mcp[0], mcp[1]);
    assert_eq!(probe["status"], "ok", "{doc}");
    assert!(
        probe["detail"]
            .as_str()
            .unwrap()
            .starts_with("probe: started, "),
        "{doc}"
    );
    assert_eq!(broken["status"], "error", "{doc}");
    let detail = broken["detail"].as_str().unwrap();
    assert!(detail.starts_with("broken did not start: "), "{detail}");
    assert!(detail.contains("No such file or directory"), "{detail}");
    assert!(
        broken["fix"]
            .as_str()
            .unwrap()
            .contains("[mcp_servers.NAME]"),
        "{doc}"
    );
    let agents = daemon.dshctl_json(&["agent", "list"]);
    assert_eq!(agents["agents"], json!([]), "{agents}");
    let sessions = daemon.dshctl_json(&["session", "list"]);
    assert_eq!(sessions["sessions"], json!([]), "{sessions}");
}
