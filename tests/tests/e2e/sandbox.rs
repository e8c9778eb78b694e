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
#[path = "sandbox/policy.rs"]
mod policy;

use std::path::Path;

use dsh_tests::shell::{CallResult, bash_call, prompt, prompt_results};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::{Value, json};

/// A scripted agent in `cwd`, created with `dshctl agent new ... FLAGS`, whose one turn runs each
/// of `commands` as a model bash call, one step each; returns its id.
fn agent(daemon: &TestDaemon, cwd: &Path, flags: &[&str], commands: &[&str]) -> String {
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
    let script = daemon.write_script(script);
    let mut args = vec![
        "agent",
        "new",
        "--cwd",
        cwd.to_str().unwrap(),
        "--script",
        script.to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    daemon.dshctl_json(&args)["agent_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The daemon's `$HOME` (`<dir>/user`), made to exist, so a write to `~/...` that the sandbox
/// failed to refuse would succeed.
fn user_home(daemon: &TestDaemon) -> std::path::PathBuf {
    let home = daemon.dir.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    home
}

/// Prompts `agent` once and returns its bash results in order.
fn results(daemon: &TestDaemon, agent: &str) -> Vec<CallResult> {
    prompt_results(&prompt(daemon, agent, "go"))
}

/// `dshctl --json run ARGS...` whatever its outcome: (exit status, the JSON document or error).
fn run(daemon: &TestDaemon, args: &[&str]) -> (Option<i32>, Value) {
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

/// dshd confines a command by spawning it from a thread restricted to its plan, so dshd itself
/// stays free: after a confined agent's calls it still writes the agent's transcript and runs an
/// unconfined command. The agent's thread holds the directories it opened: its workspace removed
/// and made again between two turns is writable on the next turn, and nothing else is.
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

/// How many of dshd's threads are confined spawning threads.
fn confined_threads(daemon: &TestDaemon) -> usize {
    let tasks = format!("/proc/{}/task", daemon.child.id());
    std::fs::read_dir(&tasks)
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "dsh-confined")
        .count()
}

/// dshd's sandbox temporary root under `tmp` (its `TMPDIR`).
fn sandbox_root(tmp: &Path) -> std::path::PathBuf {
    tmp.join(format!(
        "dsh-sandbox-{}",
        rustix::process::getuid().as_raw()
    ))
}

/// The temporary directories of calls of no agent under `tmp` (dshd's `TMPDIR`): those in
/// `calls-*`, the directory of one dshd.
fn call_dirs(tmp: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(sandbox_root(tmp)) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("calls-")
        })
        .flat_map(|calls| std::fs::read_dir(calls).unwrap().map(|e| e.unwrap().path()))
        .collect()
}

/// Confined threads and temporary directories do not pile up. Calls of no agent with one plan
/// share one thread; each gets an empty temporary directory of its own, removed after the call
/// when the call wrote into it, else handed on to the next call; one waits at most. An agent
/// keeps one thread across its turns, and closing the agent ends it. Stopping dshd removes what
/// is left.
#[test]
fn confined_threads_end_with_their_call_or_agent() {
    let tmp = dsh_tests::private_dir();
    let mut daemon = TestDaemon::start_with(DaemonSpec {
        env: vec![("TMPDIR".into(), tmp.path().into())],
        ..DaemonSpec::default()
    });
    let work = daemon.workdir("threads");
    let patience = std::time::Duration::from_secs(10);
    // A read-only call of no agent in the workspace that prints its TMPDIR (it must be empty).
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
    for _ in 0..3 {
        seen.push(tmpdir_of(r#"touch "$TMPDIR/mine" &&"#));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "calls shared a TMPDIR: {seen:?}");
    for dir in &seen {
        let calls = dir.parent().unwrap();
        assert_eq!(calls.parent().unwrap(), sandbox_root(tmp.path()), "{dir:?}");
        assert!(
            calls
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("calls-")
        );
    }
    assert!(
        dsh_tests::eventually(patience, || seen.iter().all(|dir| !dir.exists())
            && call_dirs(tmp.path()).len() == 1),
        "a used TMPDIR outlived its call, or not one waits for the next: {:?}",
        call_dirs(tmp.path())
    );
    let waiting = call_dirs(tmp.path());
    for _ in 0..2 {
        assert_eq!(
            [tmpdir_of("")],
            waiting.as_slice(),
            "an unused TMPDIR is handed on"
        );
    }
    assert_eq!(
        confined_threads(&daemon),
        1,
        "one thread for the calls of no agent with that plan"
    );

    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "read-only"],
        &["true", "true"],
    );
    results(&daemon, &id);
    assert_eq!(
        confined_threads(&daemon),
        2,
        "one more thread, for the agent's calls"
    );
    daemon.dshctl_json(&["agent", "close", &id]);
    assert!(
        dsh_tests::eventually(patience, || confined_threads(&daemon) == 1),
        "closing the agent left its thread"
    );
    let status = daemon.signal_and_wait(
        rustix::process::Signal::TERM,
        std::time::Duration::from_secs(10),
    );
    assert!(status.success(), "{status}");
    let left: Vec<_> = std::fs::read_dir(sandbox_root(tmp.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "dshd's stop left {left:?}");
}
