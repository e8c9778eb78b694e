//! Text from models, commands, hooks and sessions on a terminal (issue 39, item 3): `dshctl
//! prompt`, `watch`, `session events`, `run`, `job output`, `job list`, `session list` and the
//! approval question run on a real pseudo-terminal against a real dshd whose scripted model,
//! commands and hook say every kind of sequence a terminal acts on (OSC window titles, hyperlinks
//! and clipboard writes, CSI cursor movement and erasing, BEL, DCS, C1 controls, a carriage
//! return, a bidi override, invalid UTF-8). None of it may reach the terminal raw: the bytes the
//! terminal received hold no control character but dshctl's own dimming (only with colour) and
//! line erasing (its status line and question), and the payload shows escaped (`\x1b`, `\u{9b}`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;
use std::time::Duration;

use dsh_tests::pty::Pty;
use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin, eventually, private_dir};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(60);

/// Every kind of sequence a terminal acts on. None is one of dshctl's own (`ESC[2K`, `ESC[1A`,
/// `ESC[2m`, `ESC[0m`), so one that leaked cannot pass for dshctl's.
const CORPUS: [&str; 16] = [
    "\x1b]0;osc0-title\x07",
    "\x1b]2;osc2-title\x1b\\",
    "\x1b]8;;https://example.invalid/\x1b\\osc8-link\x1b]8;;\x1b\\",
    "\x1b]52;c;ZWNobyBwd25lZA==\x07",
    "\x1b[1;1H",
    "\x1b[3A",
    "\x1b[2J",
    "\x1b[K",
    "\x07",
    "\x1bP$q\"p\x1b\\",
    "\u{9b}2J",
    "\u{9d}0;c1-title\u{9c}",
    "\u{90}$q\"p\u{9c}",
    "\rcarriage-return",
    "\x08backspace",
    "\u{202e}bidi-override\u{202c}",
];

/// How three of the corpus show on screen: the documented escaped forms.
const SHOWN: [&str; 3] = [
    r"\x1b]52;c;ZWNobyBwd25lZA==\x07",
    r"\u{9d}0;c1-title\u{9c}",
    r"\u{202e}bidi-override\u{202c}",
];

/// The corpus on one line.
fn payload() -> String {
    CORPUS.join(" ")
}

/// A bash command that prints the corpus on stdout and on stderr, with invalid UTF-8 between
/// (the corpus holds no single quote).
fn printing() -> String {
    let payload = payload();
    format!("printf '%s' '{payload}'; printf '\\377\\376\\303('; printf '%s\\n' '{payload}' >&2")
}

/// dshctl's dimming: allowed only with colour.
const OWN_SGR: [&[u8]; 2] = [b"\x1b[2m", b"\x1b[0m"];
/// dshctl's line erasing (its status line and its approval question erase and redraw
/// themselves, with a carriage return first); allowed on a terminal whatever the colour.
const OWN_ERASE: [&[u8]; 2] = [b"\x1b[2K", b"\x1b[1A"];

/// Fails the test unless `bytes` (what a terminal received) are UTF-8 and hold no control
/// character but newline, tab, `own` sequences, and carriage returns before a newline (the
/// terminal's own output processing) or before an erase.
fn assert_shown_safely(what: &str, bytes: &[u8], own: &[&[u8]]) {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| {
        let at = e.valid_up_to();
        panic!(
            "{what}: invalid UTF-8 reached the terminal at byte {at}: {:?}",
            String::from_utf8_lossy(&bytes[at.saturating_sub(40)..(at + 40).min(bytes.len())])
        )
    });
    let mut skip_to = 0;
    for (at, c) in text.char_indices() {
        if at < skip_to {
            continue;
        }
        let rest = &bytes[at..];
        if let Some(seq) = own.iter().find(|seq| rest.starts_with(seq)) {
            skip_to = at + seq.len();
            continue;
        }
        if c == '\r' && (rest.starts_with(b"\r\n") || rest.starts_with(b"\r\x1b[2K")) {
            continue;
        }
        let raw = matches!(c, '\0'..='\x08' | '\x0b'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        assert!(
            !raw,
            "{what}: {c:?} reached the terminal raw at byte {at}, here: {:?}\nthe whole screen: {text:?}",
            near(text, at)
        );
    }
}

/// The text around byte `at`.
fn near(text: &str, at: usize) -> &str {
    let mut start = at.saturating_sub(60);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + 60).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[start..end]
}

/// Fails the test unless `screen` shows `needle` (as visible text).
fn assert_shows(what: &str, screen: &str, needle: &str) {
    assert!(
        screen.contains(needle),
        "{what}: {needle:?} is not on the screen:\n{screen}"
    );
}

/// `dshctl ARGS...` on a terminal of its own, with `env` added.
fn on_terminal(daemon: &TestDaemon, args: &[&str], env: &[(&str, &str)]) -> Pty {
    let socket = daemon.socket.to_str().unwrap();
    let mut full = vec!["--socket", socket];
    full.extend_from_slice(args);
    Pty::spawn(dshctl_bin(), &full, env)
}

/// `dshctl ARGS...` on a terminal, to its end.
fn shown(daemon: &TestDaemon, args: &[&str], env: &[(&str, &str)]) -> Pty {
    let mut pty = on_terminal(daemon, args, env);
    pty.read_to_end(PATIENCE);
    pty
}

/// A daemon whose PostToolUse hook says the corpus to the user (`systemMessage`) and stops the
/// turn with it (`stopReason`), and an agent whose model says the corpus and runs [`printing`]
/// (call `c1`). The hook's files live in the returned directory.
fn world() -> (TestDaemon, tempfile::TempDir, String) {
    let hooks = private_dir();
    let said = hooks.path().join("said.json");
    let payload = payload();
    std::fs::write(
        &said,
        json!({"systemMessage": payload, "continue": false, "stopReason": payload}).to_string(),
    )
    .unwrap();
    let command = format!("cat >/dev/null; cat '{}'", said.display());
    let file = hooks.path().join("hooks.json");
    let group = json!({"matcher": "Bash", "hooks": [{"type": "command", "command": command}]});
    std::fs::write(
        &file,
        json!({"hooks": {"PostToolUse": [group]}}).to_string(),
    )
    .unwrap();
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[hooks]\nclaude_code = [{:?}]\n",
            file.to_str().unwrap()
        )),
        ..DaemonSpec::default()
    });
    let agent = daemon.new_agent(
        &daemon.workdir("w"),
        &json!({"replies": [
            {"text": payload, "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": printing()}}]},
            {"text": "never: the hook stopped the turn"},
        ]}),
    );
    (daemon, hooks, agent)
}

/// `dshctl prompt` on a terminal, prompting the corpus (the session's title too).
fn prompted(daemon: &TestDaemon, agent: &str, env: &[(&str, &str)]) -> Pty {
    let pty = shown(daemon, &["prompt", "--agent", agent, &payload()], env);
    assert_shows("prompt", pty.screen(), "── turn 1 stopped");
    pty
}

#[test]
fn prompt_shows_what_the_model_its_command_and_a_hook_say_escaped_without_colour() {
    let (daemon, _hooks, agent) = world();
    let pty = prompted(&daemon, &agent, &[("NO_COLOR", "1")]);
    assert_shown_safely("prompt", pty.bytes(), &OWN_ERASE);
    let screen = pty.screen();
    // The model's text, the call, its live output and result, the hook's message and reason.
    let shown = SHOWN[0];
    assert!(
        screen.matches(shown).count() >= 5,
        "{shown:?} is not on the screen for each of text, call, output, result, hook, end:\n{screen}"
    );
    for needle in SHOWN {
        assert_shows("prompt", screen, needle);
    }
    // Invalid UTF-8 from the command arrives as dshd's replacement characters.
    assert_shows("prompt", screen, "\u{fffd}\u{fffd}\u{fffd}(");
}

#[test]
fn prompt_in_colour_adds_only_its_own_dimming() {
    let (daemon, _hooks, agent) = world();
    // An empty NO_COLOR counts as unset (no-color.org), whatever the test's environment says.
    let pty = prompted(&daemon, &agent, &[("NO_COLOR", "")]);
    let mut own = OWN_ERASE.to_vec();
    own.extend(OWN_SGR);
    assert_shown_safely("prompt in colour", pty.bytes(), &own);
    assert!(
        pty.screen().contains("\x1b[2m"),
        "no dimming: this run had no colour:\n{}",
        pty.screen()
    );
    assert_shows("prompt in colour", pty.screen(), SHOWN[0]);
}

#[test]
fn watch_and_session_events_replay_the_log_escaped() {
    let (daemon, _hooks, agent) = world();
    let turn = daemon.dshctl(&["prompt", "--agent", &agent, &payload()]);
    assert_eq!(
        turn.status.code(),
        Some(1),
        "the hook stops the turn: {turn:?}"
    );

    let mut watch = on_terminal(&daemon, &["watch", &agent, "--from", "0"], &[]);
    watch.wait_for("the end of the replayed turn", PATIENCE, |s| {
        s.contains("── turn 1 stopped")
    });
    watch.type_in(b"\x03");
    watch.read_to_end(PATIENCE);
    let mut own = OWN_ERASE.to_vec();
    own.extend(OWN_SGR);
    assert_shown_safely("watch", watch.bytes(), &own);
    for needle in SHOWN {
        assert_shows("watch", watch.screen(), needle);
    }

    let events = shown(&daemon, &["session", "events", &agent], &[]);
    assert_shown_safely("session events", events.bytes(), &[]);
    assert_shows("session events", events.screen(), r"\u{9d}0;c1-title\u{9c}");
}

#[test]
fn json_on_a_terminal_escapes_c1_and_bidi_as_json_and_keeps_the_text() {
    let (daemon, _hooks, agent) = world();
    let pty = shown(
        &daemon,
        &["--json", "prompt", "--agent", &agent, &payload()],
        &[],
    );
    assert_shown_safely("--json prompt", pty.bytes(), &[]);
    let lines: Vec<Value> = pty
        .screen()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let said = lines
        .iter()
        .find(|l| l["type"] == "assistant/message")
        .unwrap_or_else(|| panic!("no assistant/message: {lines:?}"));
    assert_eq!(
        said["data"]["message"]["text"],
        payload(),
        "the text itself"
    );
    let end = lines.last().unwrap();
    assert_eq!(end["data"]["reason"]["reason"], payload(), "{end}");
}

/// A background job that printed [`printing`]'s output and has ended; its id.
fn ended_job(daemon: &TestDaemon) -> String {
    let started = daemon.dshctl_json(&["run", "--background", "--", &printing()]);
    let job = started["job_id"].as_str().unwrap().to_owned();
    let ended = || {
        daemon.dshctl_json(&["job", "list"])["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["job_id"] == job && j["running"] == false)
    };
    assert!(eventually(PATIENCE, ended), "job {job} did not end");
    job
}

#[test]
fn run_job_output_and_job_list_show_a_commands_escapes_escaped() {
    let daemon = TestDaemon::start();
    let run = shown(&daemon, &["run", "--", &printing()], &[]);
    assert_shown_safely("run", run.bytes(), &[]);
    for needle in SHOWN {
        assert_eq!(
            run.screen().matches(needle).count(),
            2,
            "{needle:?} on stdout and on stderr:\n{}",
            run.screen()
        );
    }

    let job = ended_job(&daemon);
    let list = shown(&daemon, &["job", "list"], &[]);
    assert_shown_safely("job list", list.bytes(), &[]);
    let output = shown(&daemon, &["job", "output", &job], &[]);
    assert_shown_safely("job output", output.bytes(), &[]);
    for needle in SHOWN {
        assert_eq!(
            output.screen().matches(needle).count(),
            2,
            "{needle:?} on stdout and on stderr:\n{}",
            output.screen()
        );
    }
}

#[test]
fn session_list_shows_a_title_with_escapes_escaped() {
    let (daemon, _hooks, agent) = world();
    let turn = daemon.dshctl(&["prompt", "--agent", &agent, &payload()]);
    assert_eq!(
        turn.status.code(),
        Some(1),
        "the hook stops the turn: {turn:?}"
    );
    let listed = daemon.dshctl_json(&["session", "list"]);
    assert!(
        listed["sessions"][0]["title"]
            .as_str()
            .is_some_and(|title| title.starts_with(&CORPUS[..10].join(" "))),
        "the title is the prompt's line, its escapes and all: {listed}"
    );
    let list = shown(&daemon, &["session", "list"], &[]);
    assert_shown_safely("session list", list.bytes(), &[]);
    assert_shows("session list", list.screen(), &agent);
}

/// The spoof of the issue: a command that, printed raw, erases itself and draws an approval
/// request for `ls -la` in its place. The question shows it as it will run, escaped; denied, it
/// does not run.
#[test]
fn the_approval_question_shows_a_hidden_command_escaped() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("pwned");
    let fake = "? approval needed for bash call c1: ls -la";
    let command = format!("touch {} #\r\x1b[K\x1b[A\x1b[K{fake}", marker.display());
    let script = daemon.write_script(&json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": command}}]},
        {"text": "Done."},
    ]}));
    let cwd = daemon.workdir("w");
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
    let agent = info["agent_id"].as_str().unwrap();

    let mut pty = on_terminal(&daemon, &["prompt", "--agent", agent, "go"], &[]);
    pty.wait_for("the approval question", PATIENCE, |s| {
        s.contains("allow call c1? [y/N] ")
    });
    let mut own = OWN_ERASE.to_vec();
    own.extend(OWN_SGR);
    assert_shown_safely("the approval question", pty.bytes(), &own);
    let screen = pty.screen().to_owned();
    let question = &screen[..screen.rfind("allow call c1? [y/N] ").unwrap()];
    let question = &question[question
        .rfind("\n  $ ")
        .unwrap_or_else(|| panic!("the question does not show the command:\n{screen}"))..];
    let escaped = format!(r"$ touch {} #\r\x1b[K\x1b[A\x1b[K{fake}", marker.display());
    assert!(
        question.starts_with(&format!("\n  {escaped}\n")),
        "the question shows the command as it runs, escaped:\n{question}"
    );
    assert!(question.contains("escaped"), "and says so:\n{question}");

    pty.type_in(b"n\n");
    pty.read_to_end(PATIENCE);
    assert_shown_safely("the approval question", pty.bytes(), &own);
    assert_eq!(pty.wait().code(), Some(0));
    assert!(!Path::new(&marker).exists(), "the denied command ran");
}
