//! `dshctl` on a terminal (a pseudo-terminal, as a person would run it): output shown as the
//! command produces it, by `run` and by `prompt`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::time::{Duration, Instant};

use dsh_tests::pty::Pty;
use dsh_tests::shell::{bash_call, new_agent, workdir};
use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin};
use serde_json::json;

/// A command that prints a line a second, three times.
const LOOP: &str = "for i in 1 2 3; do echo $i; sleep 1; done";

const PATIENCE: Duration = Duration::from_secs(60);

/// `dshctl ARGS...` on a terminal, talking to `daemon`.
fn on_terminal(daemon: &TestDaemon, args: &[&str]) -> Pty {
    let socket = daemon.socket.to_str().unwrap();
    let mut full = vec!["--socket", socket];
    full.extend_from_slice(args);
    Pty::spawn(dshctl_bin(), &full, &[])
}

/// `line` without the dimming `dshctl` adds on a terminal.
fn plain(line: &str) -> String {
    line.replace("\x1b[2m", "").replace("\x1b[0m", "")
}

/// When each of the lines `wanted` first appeared on the screen (exactly, as a whole line, its
/// dimming aside).
fn arrivals(pty: &Pty, wanted: &[&str]) -> Vec<Instant> {
    let lines = pty.lines();
    wanted
        .iter()
        .map(|want| {
            lines
                .iter()
                .find(|(_, line)| plain(line) == *want)
                .map(|(at, _)| *at)
                .unwrap_or_else(|| panic!("no line {want:?} on the screen:\n{}", pty.screen()))
        })
        .collect()
}

/// The lines arrived one by one, as produced a second apart (not all together at the end).
fn assert_one_by_one(pty: &Pty, times: &[Instant]) {
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= Duration::from_millis(800),
            "lines arrived {gap:?} apart, not as they were produced; the screen:\n{}",
            pty.screen()
        );
    }
}

#[test]
fn run_prints_the_output_as_the_command_produces_it_and_the_status_last() {
    let daemon = TestDaemon::start();
    let mut pty = on_terminal(&daemon, &["run", "--", LOOP, "; exit 3"]);
    pty.read_to_end(PATIENCE);
    let times = arrivals(&pty, &["1", "2", "3"]);
    assert_one_by_one(&pty, &times);
    assert_eq!(pty.wait().code(), Some(3), "the command's own status");
}

#[test]
fn prompt_shows_a_calls_output_as_it_comes() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(LOOP)]}, {"text": "Done."}]}),
    );
    let mut pty = on_terminal(&daemon, &["prompt", "--agent", &agent, "count"]);
    pty.read_to_end(PATIENCE);
    // Live output is shown indented under its call, as it comes.
    let times = arrivals(&pty, &["  1", "  2", "  3"]);
    assert_one_by_one(&pty, &times);
    assert!(pty.screen().contains("Done."), "{}", pty.screen());
    assert_eq!(pty.wait().code(), Some(0));
}

/// An agent under the `always` approval policy whose one bash call, `c1`, prints `ran`.
fn asking_agent(daemon: &TestDaemon) -> String {
    let cwd = workdir(daemon, "w");
    let script = daemon.write_script(&json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo ran"}}]},
        {"text": "Done."},
    ]}));
    let info = daemon.dshctl_json(&[
        "agent",
        "new",
        "--cwd",
        cwd.to_str().unwrap(),
        "--approval",
        "always",
        "--script",
        script.to_str().unwrap(),
    ]);
    info["agent_id"].as_str().unwrap().to_owned()
}

/// `dshctl prompt` on a terminal, once its approval question is on screen.
fn asked(daemon: &TestDaemon, agent: &str) -> Pty {
    let mut pty = on_terminal(daemon, &["prompt", "--agent", agent, "go"]);
    pty.wait_for("the approval question", PATIENCE, |s| {
        s.contains("allow call c1? [y/N] ")
    });
    pty
}

/// What was shown after the question was asked.
fn after_question(pty: &Pty) -> String {
    let screen = pty.screen();
    let at = screen.find("allow call c1? [y/N] ").unwrap();
    screen[at..].to_owned()
}

#[test]
fn the_approval_question_closes_when_answered_elsewhere_and_says_by_whom() {
    let daemon = TestDaemon::start();
    let agent = asking_agent(&daemon);
    let mut pty = asked(&daemon, &agent);
    // Answered from another "terminal": nothing is typed on this one, yet the turn goes on.
    let answered = daemon.dshctl(&["approve", &agent, "c1", "--allow"]);
    assert!(answered.status.success(), "{answered:?}");
    pty.read_to_end(PATIENCE);
    let after = after_question(&pty);
    assert!(
        after.contains("\x1b[2K✓ allowed call c1 (client pid "),
        "the question line is erased and the decision says who answered:\n{after}"
    );
    assert!(
        after.contains("Done.") && !after.contains("too late"),
        "{after}"
    );
    assert_eq!(pty.wait().code(), Some(0));
}

#[test]
fn the_approval_question_closes_when_the_request_times_out() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[approvals]\ntimeout_ms = 1000\n".into()),
        ..DaemonSpec::default()
    });
    let agent = asking_agent(&daemon);
    let mut pty = asked(&daemon, &agent);
    pty.read_to_end(PATIENCE);
    let after = after_question(&pty);
    assert!(
        after.contains("\x1b[2K✗ denied call c1 (timeout)"),
        "{after}"
    );
    assert!(!after.contains("  ran"), "the call did not run:\n{after}");
    assert_eq!(
        pty.wait().code(),
        Some(0),
        "the turn completed, the model told of the denial"
    );
}

#[test]
fn ctrl_c_at_the_approval_question_cancels_the_turn() {
    let daemon = TestDaemon::start();
    let agent = asking_agent(&daemon);
    let mut pty = asked(&daemon, &agent);
    pty.type_in(b"\x03");
    pty.read_to_end(PATIENCE);
    let after = after_question(&pty);
    assert!(after.contains("turn cancelled"), "{after}");
    assert!(!after.contains("  ran"), "the call did not run:\n{after}");
    assert_eq!(pty.wait().code(), Some(130));
    let shown = daemon.dshctl_json(&["agent", "show", &agent]);
    assert_eq!(shown["state"], "idle", "{shown}");
}

/// The lines of `screen` without the terminal's escape sequences.
fn visible_lines(screen: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut chars = screen.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            // CSI: parameters up to the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain.lines().map(str::to_owned).collect()
}

/// Whether `text` holds a run of 13 digits: a Unix time in milliseconds.
fn has_raw_millis(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_digit())
        .any(|run| run.len() >= 13)
}

#[test]
fn tables_fit_an_80_column_terminal_and_times_read_as_ages() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, &"a-rather-long-directory-name/".repeat(3));
    let parent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "hi"},
                             "child_script": {"replies": [{"text": "child"}]}}]},
            {"text": "Done."},
        ]}),
    );
    let prompted = daemon.dshctl(&["prompt", "--agent", &parent, "go"]);
    assert!(prompted.status.success(), "{prompted:?}");
    let job = daemon.dshctl(&[
        "run",
        "--background",
        "--",
        "sleep 60 # and a long comment that makes this command much wider than the terminal is",
    ]);
    assert!(job.status.success(), "{job:?}");

    for args in [
        &["env", "list"][..],
        &["session", "list"],
        &["agent", "list"],
        &["job", "list"],
    ] {
        let mut pty = on_terminal(&daemon, args);
        pty.read_to_end(PATIENCE);
        let lines = visible_lines(pty.screen());
        assert!(lines.len() > 1, "{args:?}: {}", pty.screen());
        for line in &lines {
            assert!(
                line.chars().count() <= 80,
                "{args:?}: a line of {} columns:\n{}",
                line.chars().count(),
                lines.join("\n")
            );
        }
        // Times are ages, never raw milliseconds; the whole of every id is on one line.
        let screen = lines.join("\n");
        assert!(!has_raw_millis(&screen), "{args:?}:\n{screen}");
        if args[0] == "session" {
            assert!(
                screen.contains(&parent) && screen.contains(" ago "),
                "{screen}"
            );
        }
        assert!(pty.wait().success());
    }
}
