//! The keyless full loop of the design, end to end: the real `dshd` (with an outer harness's
//! `DSH_*` values in its own environment, and startup variables pointing at a file that would
//! forge them), JSONL persistence, a scripted model, a real bash child that reports what it was
//! told, a hook, a `Shell.Run` call and a background job, and the transcript file it was pointed at.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::{Path, PathBuf};

use dsh_tests::shell::{
    background, bash_call, key_values, locate, new_agent, prompt, prompt_results, read_to_end,
    run_json, workdir,
};
use dsh_tests::{DaemonSpec, TestDaemon, private_dir};
use serde_json::json;

/// The managed facts, the outer sentinel, and whether the startup file was sourced (it leaves
/// `marker` behind).
fn facts(marker: &Path) -> String {
    format!(
        r#"echo "home=$DSH_HOME"; echo "shell=$DSH_SHELL"; echo "id=$DSH_SESSION_ID"; echo "jsonl=$DSH_SESSION_JSONL"; echo "sentinel=${{DSH_STALE_SENTINEL-unset}}"; if [ -e '{}' ]; then echo sourced=yes; else echo sourced=no; fi"#,
        marker.display()
    )
}

/// What the first turn's bash prints: [`facts`], and whether the transcript file exists then.
fn report(marker: &Path) -> String {
    format!(
        r#"{}; if [ -e "$DSH_SESSION_JSONL" ]; then echo exists=yes; else echo exists=no; fi"#,
        facts(marker)
    )
}

/// A startup file an outer harness might point `BASH_ENV` and `ENV` at: it exports forged
/// managed values and leaves `<dir>/sourced` behind. Returns the file and the marker.
fn forging_startup_file(dir: &Path) -> (PathBuf, PathBuf) {
    let marker = dir.join("sourced");
    let file = dir.join("outer-bashrc");
    std::fs::write(
        &file,
        format!(
            "export DSH_SESSION_ID=forged DSH_HOME=/forged DSH_SESSION_JSONL=/forged.jsonl \
             DSH_SHELL=forged DSH_STALE_SENTINEL=forged\ntouch '{}'\n",
            marker.display()
        ),
    )
    .unwrap();
    (file, marker)
}

/// A Claude Code hook file whose UserPromptSubmit hook saves its whole environment to `dump`.
fn env_dumping_hook(dir: &Path, dump: &Path) -> PathBuf {
    let file = dir.join("hooks.json");
    let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": format!("env > '{}'", dump.display())}
    ]}]}});
    std::fs::write(&file, hooks.to_string()).unwrap();
    file
}

#[test]
fn first_turn_bash_sees_current_facts_only_and_the_transcript_appears_at_the_checkpoint() {
    let outer = private_dir();
    let (startup, marker) = forging_startup_file(outer.path());
    let hook_env = outer.path().join("hook.env");
    let hooks = env_dumping_hook(outer.path(), &hook_env);
    let daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--persistence".into(), "jsonl".into()],
        env: vec![
            ("DSH_STALE_SENTINEL".into(), "stale".into()),
            ("DSH_SESSION_ID".into(), "outer-session".into()),
            ("DSH_SESSION_JSONL".into(), "/outer/session.jsonl".into()),
            ("DSH_HOME".into(), "/outer/home".into()),
            // What an outer harness or a login shell may have set for its own shells.
            ("BASH_ENV".into(), startup.clone().into()),
            ("ENV".into(), startup.into()),
        ],
        config: Some(format!(
            "[hooks]\nclaude_code = [{}]\n",
            serde_json::to_string(&hooks.display().to_string()).unwrap()
        )),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "project");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"text": "Looking.", "tool_calls": [bash_call(&report(&marker))]},
            {"text": "Done."},
        ]}),
    );
    let path = locate(&daemon, &agent).expect("the JSONL backend names a transcript");
    assert!(
        !std::path::Path::new(&path).exists(),
        "locate or agent creation wrote the transcript"
    );

    let events = prompt(&daemon, &agent, "report your facts");
    let results = prompt_results(&events);
    assert_eq!(results.len(), 1, "{events:?}");
    assert!(!results[0].is_error, "{:?}", results[0]);
    let seen = key_values(&results[0].content);

    assert_eq!(seen["home"], daemon.home.display().to_string());
    assert_eq!(seen["shell"], "1");
    assert_eq!(seen["id"], agent);
    assert_eq!(seen["jsonl"], path);
    assert_eq!(seen["sentinel"], "unset", "an outer DSH_* value leaked");
    assert_eq!(
        seen["sourced"], "no",
        "the agent's bash sourced the startup file"
    );
    // A UserPromptSubmit hook is configured: the session was stored just before it ran, so that
    // no hook is handed a path that does not exist (the next test has no hook).
    assert_eq!(
        seen["exists"], "yes",
        "the session was not stored before its first hook"
    );

    let text = std::fs::read_to_string(&path).expect("the turn's checkpoints wrote the transcript");
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["type"], "session", "{header}");
    assert_eq!(header["id"], agent.as_str(), "{header}");
    assert!(text.ends_with('\n'));
    assert!(
        text.contains(&results[0].call_id),
        "the transcript lacks the bash call"
    );

    // `Shell.Run` for the agent and a background job of it see the same facts, unsourced.
    let expect_facts = |seen: &std::collections::BTreeMap<String, String>, who: &str| {
        assert_eq!(seen["home"], daemon.home.display().to_string(), "{who}");
        assert_eq!(seen["shell"], "1", "{who}");
        assert_eq!(seen["id"], agent, "{who}");
        assert_eq!(seen["jsonl"], path, "{who}");
        assert_eq!(seen["sentinel"], "unset", "{who}");
        assert_eq!(seen["sourced"], "no", "{who} sourced the startup file");
    };
    let out = run_json(&daemon, &["--agent", &agent, "--", &facts(&marker)]);
    assert_eq!(out["exit_code"], 0, "{out}");
    expect_facts(&key_values(out["stdout"].as_str().unwrap()), "Shell.Run");
    let job = background(&daemon, &["--agent", &agent, "--", &facts(&marker)]);
    let mut stdout = String::new();
    let end = read_to_end(&daemon, &job, &mut stdout);
    assert_eq!(end["exit_code"], 0, "{end}");
    expect_facts(&key_values(&stdout), "the background job");

    // The hook ran (before the agent's bash) with no managed value at all: hooks get none, so
    // any DSH_* it saw would have been forged.
    let hook_seen = std::fs::read_to_string(&hook_env).expect("the UserPromptSubmit hook ran");
    let hook_seen = key_values(&hook_seen);
    let forged: Vec<_> = hook_seen.keys().filter(|k| k.starts_with("DSH_")).collect();
    assert!(forged.is_empty(), "the hook saw {forged:?}");
    for name in ["BASH_ENV", "ENV"] {
        assert!(!hook_seen.contains_key(name), "{name} reached the hook");
    }
    assert!(!marker.exists(), "some child sourced the startup file");
}

/// Without hooks nothing stores a session early: the transcript appears at the first turn's
/// checkpoint, after its first step (the path the bash call is given is honest, and empty).
#[test]
fn without_hooks_the_transcript_appears_at_the_first_turns_checkpoint() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--persistence".into(), "jsonl".into()],
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "project");
    let check = r#"if [ -e "$DSH_SESSION_JSONL" ]; then echo exists=yes; else echo exists=no; fi"#;
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(check)]}, {"text": "Done."}]}),
    );
    let path = locate(&daemon, &agent).expect("the JSONL backend names a transcript");
    let events = prompt(&daemon, &agent, "is it there?");
    let results = prompt_results(&events);
    assert_eq!(key_values(&results[0].content)["exists"], "no");
    assert!(
        std::path::Path::new(&path).is_file(),
        "the checkpoint wrote it"
    );
}
