//! The keyless full loop of the design, end to end: the real `dshd` (with an outer harness's
//! `DSH_*` values in its own environment), JSONL persistence, a scripted model, a real bash child
//! that reports what it was told, and the transcript file it was pointed at.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use dsh_tests::shell::{bash_call, key_values, locate, new_agent, prompt, prompt_results, workdir};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::json;

/// What the first turn's bash prints: the managed facts, the outer sentinel, and whether the
/// transcript file exists at that moment.
const REPORT: &str = r#"echo "home=$DSH_HOME"; echo "shell=$DSH_SHELL"; echo "id=$DSH_SESSION_ID"; echo "jsonl=$DSH_SESSION_JSONL"; echo "sentinel=${DSH_STALE_SENTINEL-unset}"; if [ -e "$DSH_SESSION_JSONL" ]; then echo exists=yes; else echo exists=no; fi"#;

#[test]
fn first_turn_bash_sees_current_facts_only_and_the_transcript_appears_at_the_checkpoint() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--persistence".into(), "jsonl".into()],
        env: vec![
            ("DSH_STALE_SENTINEL".into(), "stale".into()),
            ("DSH_SESSION_ID".into(), "outer-session".into()),
            ("DSH_SESSION_JSONL".into(), "/outer/session.jsonl".into()),
            ("DSH_HOME".into(), "/outer/home".into()),
        ],
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "project");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"text": "Looking.", "tool_calls": [bash_call(REPORT)]},
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
        seen["exists"], "no",
        "the transcript existed during the first step of the first turn"
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
}
