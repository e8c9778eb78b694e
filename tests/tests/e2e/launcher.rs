//! The launcher every command starts through: the `dsh-launch` installed beside dshd when dshd
//! may run it, else dshd's own binary. Either way commands run and the sandbox holds; `status`
//! says which, and the log why.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::Value;

/// A directory holding a copy of dshd and, with `launcher_mode`, a copy of the built
/// `dsh-launch` with that mode: an install as `cargo install` or a package leaves it.
fn install(launcher_mode: Option<u32>) -> (tempfile::TempDir, PathBuf) {
    let bin = dsh_tests::private_dir();
    let dshd = dsh_tests::dshd_copy(bin.path());
    if let Some(mode) = launcher_mode {
        let launcher = bin.path().join("dsh-launch");
        std::fs::copy(dsh_tests::launcher_bin(), &launcher).unwrap();
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (bin, dshd)
}

fn start(dshd: PathBuf) -> TestDaemon {
    // With a model key, so that doctor's verdict is the launcher's alone.
    TestDaemon::start_with(DaemonSpec {
        binary: Some(dshd),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
        ..DaemonSpec::default()
    })
}

/// `dshctl --json run --cwd CWD --sandbox SANDBOX -- COMMAND`: (exit status, JSON document).
fn run(daemon: &TestDaemon, cwd: &Path, sandbox: &str, command: &str) -> (Option<i32>, Value) {
    let cwd = cwd.to_str().unwrap();
    crate::sandbox::run(daemon, &["--cwd", cwd, "--sandbox", sandbox, "--", command])
}

/// A plain and a confined command both run, in a fresh workspace of the daemon's.
fn assert_commands_run(daemon: &TestDaemon) {
    let work = daemon.workdir("work");
    for sandbox in ["off", "workspace-write"] {
        let (code, doc) = run(daemon, &work, sandbox, &format!("echo ran > {sandbox}"));
        assert_eq!(code, Some(0), "{sandbox}: {doc}");
        assert_eq!(doc["exit_code"], 0, "{sandbox}: {doc}");
        assert!(work.join(sandbox).exists(), "{sandbox}: {doc}");
    }
}

fn status_line(daemon: &TestDaemon) -> String {
    let out = daemon.dshctl(&["status"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("launcher"))
        .unwrap_or_else(|| panic!("no launcher line: {out:?}"))
        .to_owned()
}

/// The suite's own daemons run with the launcher beside them, as README installs it.
#[test]
fn the_installed_launcher_is_used_and_status_names_it() {
    let daemon = TestDaemon::start();
    let real = dsh_tests::launcher_bin().canonicalize().unwrap();
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(status["launcher"], real.to_str().unwrap(), "{status}");
    assert_eq!(
        status_line(&daemon),
        format!("launcher     {}", real.display())
    );
    assert_commands_run(&daemon);
}

/// dshd runs a sealed copy of the file it opened and checked at start, for its whole life: an
/// upgrade that renames a new file over the installed one changes nothing, and neither does
/// spoiling the file in place through another link.
#[test]
fn commands_start_through_the_copy_dshd_made_at_start() {
    let (bin, dshd) = install(Some(0o755));
    let launcher = bin.path().join("dsh-launch");
    let same_file = bin.path().join("same-file");
    std::fs::hard_link(&launcher, &same_file).unwrap();
    let daemon = start(dshd);
    assert_eq!(
        daemon.dshctl_json(&["status"])["launcher"],
        launcher.to_str().unwrap()
    );
    assert!(
        daemon
            .log_text()
            .contains("commands start through a sealed copy of the launcher"),
        "{}",
        daemon.log_text()
    );

    let upgrade = bin.path().join("dsh-launch.new");
    std::fs::write(&upgrade, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&upgrade, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&upgrade, &launcher).unwrap();
    assert_commands_run(&daemon);

    std::fs::write(&same_file, b"not a program any more").unwrap();
    assert_commands_run(&daemon);
}

/// A read-only command may `chmod` whatever it can read (Landlock does not govern modes): taking
/// the execute bits off the installed launcher and dshd's own binary, or off dshd's binary when
/// it is its own launcher, stops no later command, confined or not, and no hook.
#[test]
fn chmod_000_of_the_launcher_or_dshd_from_inside_stops_nothing() {
    for installed in [true, false] {
        // Copies, not the hard links `install` makes: a chmod of a link would reach the suite's
        // own dshd and launcher, and every other test running meanwhile.
        let bin = dsh_tests::private_dir();
        let dshd = bin.path().join("dshd");
        std::fs::copy(dsh_tests::dshd_bin(), &dshd).unwrap();
        if installed {
            std::fs::copy(dsh_tests::launcher_bin(), bin.path().join("dsh-launch")).unwrap();
        }
        let dir = dsh_tests::private_dir();
        let hooked = dir.path().join("hooked");
        let settings = dir.path().join("settings.json");
        std::fs::write(
            &settings,
            serde_json::json!({"hooks": {"UserPromptSubmit": [{"hooks": [
                {"type": "command", "command": format!("echo ran >> '{}'", hooked.display())}
            ]}]}})
            .to_string(),
        )
        .unwrap();
        let daemon = TestDaemon::spawn(
            DaemonSpec {
                binary: Some(dshd.clone()),
                config: Some(format!(
                    "[hooks]\nclaude_code = [{:?}]\n",
                    settings.to_str().unwrap()
                )),
                ..DaemonSpec::default()
            },
            dir,
        );
        daemon.wait_ready();
        let chmod = format!(
            "chmod 000 '{}'/* && ls -l '{}' && echo chmodded",
            bin.path().display(),
            bin.path().display()
        );
        let attacker = crate::sandbox::agent(
            &daemon,
            &daemon.workdir("attacker"),
            &["--sandbox", "read-only"],
            &[&chmod],
        );
        let got = crate::sandbox::results(&daemon, &attacker);
        assert!(
            got[0].content.contains("chmodded") && got[0].content.contains("----------"),
            "installed {installed}: {:?}",
            got[0]
        );
        // Every later command starts: a confined agent's, an unconfined one's, a client's, and
        // the hooks of their prompts.
        for flags in [&["--sandbox", "workspace-write"][..], &[]] {
            let id = crate::sandbox::agent(
                &daemon,
                &daemon.workdir("after"),
                flags,
                &["echo still-running"],
            );
            let got = crate::sandbox::results(&daemon, &id);
            assert_eq!(
                got[0].content, "still-running\n",
                "installed {installed}, {flags:?}: {:?}",
                got[0]
            );
        }
        assert_commands_run(&daemon);
        let runs = std::fs::read_to_string(&hooked).unwrap_or_default();
        assert_eq!(
            runs.lines().count(),
            3,
            "installed {installed}: hooks ran {runs:?}"
        );
    }
}

/// Only `dshd` installed: commands start through dshd's own binary, and status and the log say
/// how to start them sooner.
#[test]
fn without_an_installed_launcher_commands_start_through_dshd_itself() {
    let (_bin, dshd) = install(None);
    let daemon = start(dshd);
    assert_eq!(daemon.dshctl_json(&["status"])["launcher"], Value::Null);
    assert_eq!(
        status_line(&daemon),
        "launcher     dshd's own binary (install dsh-launch beside dshd to start commands sooner)"
    );
    let log = std::fs::read_to_string(&daemon.log).unwrap();
    assert!(
        log.contains("commands start through dshd's own binary; installing dsh-launch"),
        "{log}"
    );
    let out = daemon.dshctl(&["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning, not a failure: {doctor}"
    );
    assert!(
        doctor.lines().any(|l| l.starts_with("! launcher")
            && l.contains("cargo install --locked --path daemon/launch")),
        "{doctor}"
    );
    assert_commands_run(&daemon);
}

/// A launcher its group could rewrite is not run: dshd warns, naming what is wrong, and starts
/// commands through its own binary.
#[test]
fn an_installed_launcher_others_may_change_is_not_used() {
    let (_bin, dshd) = install(Some(0o775));
    let daemon = start(dshd);
    assert_eq!(daemon.dshctl_json(&["status"])["launcher"], Value::Null);
    let log = std::fs::read_to_string(&daemon.log).unwrap();
    assert!(
        log.contains("WARN") && log.contains("dsh-launch is writable by its group"),
        "{log}"
    );
    assert_commands_run(&daemon);
}

/// A confined command that could rewrite the installed launcher would choose how the next one is
/// confined: a workspace that holds it is refused, and nothing runs.
#[test]
fn a_writable_root_that_holds_the_installed_launcher_refuses_the_confined_call() {
    let (bin, dshd) = install(Some(0o755));
    let daemon = start(dshd);
    let (code, doc) = run(&daemon, bin.path(), "workspace-write", "echo ran > ran");
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["error"]["kind"], "failed_precondition", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot keep") && message.contains("dsh-launch"),
        "{message}"
    );
    assert!(!bin.path().join("ran").exists());
    let (code, doc) = run(&daemon, bin.path(), "off", "echo ran > ran");
    assert_eq!(code, Some(0), "{doc}");
    assert!(bin.path().join("ran").exists());
}
