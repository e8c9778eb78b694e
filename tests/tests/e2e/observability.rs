//! What an operator sees in dshd's log (`RUST_LOG=info`, the default): the startup line with the
//! version; a prompt of the README's facts script names the agent, the turn's start and end, and
//! the tool call with its session id and call id, each once; a user's refused call is INFO naming
//! the method and code; colour only on a terminal and without `NO_COLOR`.

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
fn a_prompt_logs_its_agent_turn_and_tool_call_each_id_once_and_a_users_mistake_at_info() {
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
    // Each id once: the turn span names the session, the tool_call span inside it the call.
    assert_eq!(call[0].matches(&agent).count(), 1, "{}", call[0]);
    assert_eq!(call[0].matches("call_id=facts").count(), 1, "{}", call[0]);
    let waits = lines_with(&log, &["INFO", "dshd is serving"]);
    assert_eq!(waits.len(), 1, "{}", show());
    assert!(
        waits[0].contains(&format!("version={}", env!("CARGO_PKG_VERSION"))),
        "the startup line names the version: {}",
        waits[0]
    );
    let command = lines_with(&log, &["INFO", "command ended", &session, "exit_code=0"]);
    assert_eq!(command.len(), 1, "{}", show());
    // The refusal, a user's mistake: INFO, with the method (once, the span's), the code and
    // what the client was told.
    let refused = lines_with(&log, &["/dsh.v1.Persistence/Locate", "NotFound", missing]);
    assert_eq!(refused.len(), 1, "{}", show());
    assert!(refused[0].contains(" INFO "), "{}", refused[0]);
    assert_eq!(
        refused[0].matches("/dsh.v1.Persistence/Locate").count(),
        1,
        "{}",
        refused[0]
    );
}

/// dshd on a terminal, until it says it is serving; then Ctrl-C stops it. What it printed.
fn dshd_on_a_terminal(env: &[(&str, &str)]) -> String {
    let dir = dsh_tests::private_dir();
    let home = dir.path().join("home");
    let socket = dir.path().join("dshd.sock");
    let mut pty = dsh_tests::pty::Pty::spawn(
        dsh_tests::dshd_bin(),
        &[
            "--dsh-home",
            home.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ],
        env,
    );
    pty.wait_for("dshd is serving", std::time::Duration::from_secs(60), |s| {
        s.contains("dshd is serving")
    });
    pty.type_in(b"\x03");
    pty.read_to_end(std::time::Duration::from_secs(60));
    let screen = pty.screen().to_owned();
    assert_eq!(pty.wait().code(), Some(0), "{screen}");
    screen
}

#[test]
fn dshd_colours_its_log_on_a_terminal_unless_no_color_is_set() {
    let coloured = dshd_on_a_terminal(&[("RUST_LOG", "info")]);
    assert!(coloured.contains("\x1b["), "{coloured}");
    let plain = dshd_on_a_terminal(&[("RUST_LOG", "info"), ("NO_COLOR", "1")]);
    assert!(!plain.contains('\x1b'), "{plain}");
    assert!(plain.contains("dshd is serving"), "{plain}");
}
