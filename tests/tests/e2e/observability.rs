//! What an operator sees in dshd's log (`RUST_LOG=info`, the default): a prompt of the README's
//! facts script names the agent, the turn's start and end, and the tool call with its session id
//! and call id; a refused call is a warning naming the method and code.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;

use dsh_tests::TestDaemon;

/// The log lines containing every one of `needles`.
fn lines_with<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|line| needles.iter().all(|n| line.contains(n)))
        .collect()
}

#[test]
fn a_prompt_logs_its_agent_turn_and_tool_call_and_a_refusal_logs_a_warning() {
    let mut daemon = TestDaemon::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scripts/facts.json");
    let created = daemon.dshctl_json(&[
        "agent",
        "new",
        "--cwd",
        "/",
        "--script",
        script.to_str().unwrap(),
    ]);
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let prompt = daemon.dshctl(&["prompt", "--agent", &agent, "which facts?"]);
    assert!(prompt.status.success(), "{prompt:?}");
    let missing = "00000000-0000-7000-8000-000000000000";
    let refused = daemon.dshctl(&["session", "locate", missing]);
    assert!(!refused.status.success());
    // Stopped, so every line is written before the log is read.
    assert!(daemon.dshctl(&["shutdown"]).status.success());
    daemon.wait_exit(std::time::Duration::from_secs(20));

    let log = daemon.log_text();
    let session = format!("session={agent}");
    let show = || format!("log:\n{log}");
    assert_eq!(
        lines_with(&log, &["INFO", "agent is live", &session, "how=\"create\""]).len(),
        1,
        "{}",
        show()
    );
    assert_eq!(
        lines_with(&log, &["INFO", "turn started", &session, "turn=1"]).len(),
        1,
        "{}",
        show()
    );
    let ended = lines_with(&log, &["INFO", "turn ended", &session, "turn=1"]);
    assert_eq!(ended.len(), 1, "{}", show());
    assert!(ended[0].contains("reason=\"completed\""), "{}", ended[0]);
    // The tool call, inside its span: session, turn, step, call id, tool.
    let call = lines_with(
        &log,
        &[
            "INFO",
            "tool call ended",
            &session,
            "call_id=facts",
            "tool=bash",
        ],
    );
    assert_eq!(call.len(), 1, "{}", show());
    let command = lines_with(&log, &["INFO", "command ended", &session, "exit_code=0"]);
    assert_eq!(command.len(), 1, "{}", show());
    // The refusal: a warning with the method, the code and what the client was told.
    let warned = lines_with(
        &log,
        &["WARN", "/dsh.v1.Persistence/Locate", "NotFound", missing],
    );
    assert_eq!(warned.len(), 1, "{}", show());
}
