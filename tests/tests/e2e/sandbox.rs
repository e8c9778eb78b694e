//! The Landlock sandbox of model bash calls, end to end through the real `dshd` (issue 15): what
//! `workspace-write` and `read-only` let a command write, network `off`, children and background
//! jobs, the attacks a confined command could try (links, `..`, escaping its group), and refusing
//! a policy the kernel cannot enforce. Every write test checks the file system afterwards, so it
//! fails if the command was not confined.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

#[path = "sandbox/attacks.rs"]
mod attacks;
#[path = "sandbox/clients.rs"]
mod clients;
#[path = "sandbox/daemon_state.rs"]
mod daemon_state;
#[path = "sandbox/escape.rs"]
mod escape;
#[path = "sandbox/policy.rs"]
mod policy;
#[path = "sandbox/recycled.rs"]
mod recycled;
#[path = "sandbox/secrets.rs"]
mod secrets;

use std::path::Path;

use dsh_tests::shell::{CallResult, bash_call, prompt, prompt_results};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::{Value, json};

/// A scripted agent in `cwd`, created with `dshctl agent new ... FLAGS`, whose one turn runs each
/// of `commands` as a model bash call, one step each; returns its id.
pub(crate) fn agent(daemon: &TestDaemon, cwd: &Path, flags: &[&str], commands: &[&str]) -> String {
    let mut replies: Vec<Value> = commands
        .iter()
        .map(|c| json!({"tool_calls": [bash_call(c)]}))
        .collect();
    replies.push(json!({"text": "done"}));
    scripted_agent(daemon, cwd, flags, &json!({ "replies": replies }))
}

/// An agent in `cwd`, created with `dshctl agent new ... FLAGS`, whose model follows `script`;
/// returns its id.
fn scripted_agent(daemon: &TestDaemon, cwd: &Path, flags: &[&str], script: &Value) -> String {
    user_home(daemon);
    daemon.new_agent_with(cwd, flags, script)
}

/// The daemon's `$HOME` (`<dir>/user`), made to exist, so a write to `~/...` that the sandbox
/// failed to refuse would succeed.
fn user_home(daemon: &TestDaemon) -> std::path::PathBuf {
    let home = daemon.dir.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    home
}

/// Prompts `agent` once and returns its bash results in order.
pub(crate) fn results(daemon: &TestDaemon, agent: &str) -> Vec<CallResult> {
    prompt_results(&prompt(daemon, agent, "go"))
}

/// `dshctl --json run ARGS...` whatever its outcome: (exit status, the JSON document or error).
pub(crate) fn run(daemon: &TestDaemon, args: &[&str]) -> (Option<i32>, Value) {
    let mut full = vec!["--json", "run"];
    full.extend_from_slice(args);
    let out = daemon.dshctl(&full);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "dshctl run {args:?}: no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), doc)
}

/// The kernel's Landlock ABI as `dshctl status` reports it.
fn kernel_abi(daemon: &TestDaemon) -> u64 {
    daemon.dshctl_json(&["status"])["landlock_abi"]
        .as_u64()
        .unwrap()
}

/// A daemon with `[sandbox]` set to `section` (TOML lines).
fn daemon_with(section: &str) -> TestDaemon {
    TestDaemon::start_with(DaemonSpec {
        config: Some(format!("[sandbox]\n{section}\n")),
        ..DaemonSpec::default()
    })
}

/// Landlock is there on every machine this suite runs on (CI's kernel has ABI 7); a machine
/// without it fails here, naming the reason, rather than in every test.
#[test]
fn status_reports_the_landlock_abi() {
    let daemon = TestDaemon::start();
    let status = daemon.dshctl_json(&["status"]);
    let abi = status["landlock_abi"].as_u64().unwrap();
    assert!(
        abi >= 4,
        "these tests need Landlock ABI 4 or newer: {status}"
    );
    assert_eq!(
        status["landlock"],
        format!("this kernel offers Landlock ABI {abi}"),
        "{status}"
    );
    let human = daemon.dshctl(&["status"]);
    assert!(
        String::from_utf8_lossy(&human.stdout).contains(&format!(
            "landlock     this kernel offers Landlock ABI {abi}"
        )),
        "{human:?}"
    );
}

/// dshd confines nothing of its own (the launcher confines itself before it runs the command), so
/// it stays free: after a confined agent's calls it still writes the agent's transcript and runs
/// an unconfined command. Each call is confined to the directories its launcher opened: the
/// workspace removed and made again between two turns is writable on the next turn, and nothing
/// else is.
#[test]
fn dshd_stays_unconfined_and_a_workspace_made_again_stays_writable() {
    let daemon = TestDaemon::start();
    let home = user_home(&daemon);
    let work = daemon.workdir("w");
    let call = |c: &str| json!({"tool_calls": [bash_call(c)]});
    let script = json!({ "replies": [
        call("touch one && echo one-ok"), {"text": "first"},
        call("touch two && echo two-ok; touch ~/outside"), {"text": "second"},
    ]});
    let id = scripted_agent(&daemon, &work, &["--sandbox", "workspace-write"], &script);
    let first = results(&daemon, &id);
    assert!(first[0].content.contains("one-ok"), "{first:?}");
    std::fs::remove_dir_all(&work).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let second = results(&daemon, &id);
    assert!(second[0].content.contains("two-ok"), "{second:?}");
    assert!(
        second[0].content.contains("Permission denied"),
        "{second:?}"
    );
    assert!(work.join("two").exists() && !home.join("outside").exists());

    let located = daemon.dshctl_json(&["session", "locate", &id]);
    let path = located["location"]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{located}"));
    let log = std::fs::read_to_string(path).unwrap();
    assert!(log.contains("two-ok"), "dshd wrote the second turn: {log}");
    let (code, out) = run(
        &daemon,
        &[
            "--sandbox",
            "off",
            "--cwd",
            work.to_str().unwrap(),
            "--",
            "touch",
            "../free",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(work.join("../free").exists());
}

/// The entries of `dir`, sorted (none when it is not there).
fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    all.sort();
    all
}

/// Private temporary directories live in a private place of the user's (here `<home>/run/sandbox`,
/// the test daemon having no `XDG_RUNTIME_DIR`), never at a predictable `/tmp` path: another user
/// who made `$TMPDIR/dsh-sandbox-<uid>` first (or planted a link there), which used to stop every
/// sandboxed call, changes nothing. Each call of no agent gets an empty one of its own, removed
/// after it; an agent's lasts until it closes; stopping dshd removes what is left.
#[test]
fn temporary_directories_are_private_fresh_and_removed() {
    let tmp = dsh_tests::private_dir();
    let squatted = tmp.path().join(format!(
        "dsh-sandbox-{}",
        rustix::process::getuid().as_raw()
    ));
    std::fs::create_dir(&squatted).unwrap();
    if rustix::process::geteuid().is_root() {
        // Another user's, as a squatter's would be.
        std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
    } else {
        std::fs::remove_dir(&squatted).unwrap();
        std::os::unix::fs::symlink(tmp.path(), &squatted).unwrap();
    }
    let mut daemon = TestDaemon::start_with(DaemonSpec {
        env: vec![("TMPDIR".into(), tmp.path().into())],
        ..DaemonSpec::default()
    });
    let root = daemon.home.join("run/sandbox");
    let work = daemon.workdir("tmpdirs");
    let patience = std::time::Duration::from_secs(10);
    let tmpdir_of = |command: &str| {
        let (code, out) = run(
            &daemon,
            &[
                "--sandbox",
                "read-only",
                "--cwd",
                work.to_str().unwrap(),
                "--",
                &format!(r#"test -z "$(ls -A "$TMPDIR")" && {command} echo "$TMPDIR""#),
            ],
        );
        assert_eq!(
            code,
            Some(0),
            "the call's TMPDIR was not empty and its own: {out}"
        );
        std::path::PathBuf::from(out["stdout"].as_str().unwrap().trim())
    };
    let mut seen = Vec::new();
    for command in [r#"touch "$TMPDIR/mine" &&"#, "", ""] {
        seen.push(tmpdir_of(command));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "calls shared a TMPDIR: {seen:?}");
    for dir in &seen {
        assert_eq!(dir.parent().unwrap(), root, "{dir:?}");
    }
    assert!(
        dsh_tests::eventually(patience, || entries(&root).is_empty()),
        "a TMPDIR outlived its call: {:?}",
        entries(&root)
    );
    let mode = std::fs::symlink_metadata(&root).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o700
    );

    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "read-only"],
        &[r#"touch "$TMPDIR/kept" && echo "$TMPDIR""#],
    );
    let got = results(&daemon, &id);
    let dir = std::path::PathBuf::from(got[0].content.trim());
    assert_eq!(dir, root.join(&id), "{:?}", got[0]);
    assert!(dir.join("kept").exists());
    daemon.dshctl_json(&["agent", "close", &id]);
    assert!(!dir.exists(), "closing the agent left {dir:?}");

    let live = agent(&daemon, &work, &["--sandbox", "read-only"], &["true"]);
    results(&daemon, &live);
    assert_eq!(entries(&root), [root.join(&live)]);
    let status = daemon.signal_and_wait(
        rustix::process::Signal::TERM,
        std::time::Duration::from_secs(10),
    );
    assert!(status.success(), "{status}");
    assert_eq!(
        entries(&root),
        Vec::<std::path::PathBuf>::new(),
        "dshd's stop left them"
    );
    assert!(
        !daemon.log_text().contains("dsh-sandbox"),
        "the squatted path was looked at: {}",
        daemon.log_text()
    );
}

/// The places for temporary directories are tried in order: an `XDG_RUNTIME_DIR` whose
/// `dsh-sandbox` is not the user's private directory (here a link planted in its place) is
/// reported in the log and skipped for the next place; the calls run.
#[test]
fn an_unusable_place_for_temporary_directories_is_reported_and_skipped() {
    let runtime = dsh_tests::private_dir();
    let elsewhere = runtime.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, runtime.path().join("dsh-sandbox")).unwrap();
    let daemon = TestDaemon::start_with(DaemonSpec {
        env: vec![("XDG_RUNTIME_DIR".into(), runtime.path().into())],
        ..DaemonSpec::default()
    });
    let work = daemon.workdir("skip");
    let (code, out) = run(
        &daemon,
        &[
            "--sandbox",
            "read-only",
            "--cwd",
            work.to_str().unwrap(),
            "--",
            r#"touch "$TMPDIR/x" && echo "$TMPDIR""#,
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out["stdout"]
            .as_str()
            .unwrap()
            .starts_with(daemon.home.join("run/sandbox/").to_str().unwrap()),
        "{out}"
    );
    assert_eq!(entries(&elsewhere), Vec::<std::path::PathBuf>::new());
    let log = daemon.log_text();
    assert!(
        log.contains("cannot hold sandbox temporary directories")
            && log.contains(runtime.path().join("dsh-sandbox").to_str().unwrap()),
        "{log}"
    );
}
