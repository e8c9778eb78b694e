//! `hooks.claude_code_transcript`: Anthropic's `ralph-wiggum` plugin (copied verbatim, see
//! `tests/fixtures/hooks/SOURCES.md`) parses `transcript_path` as a Claude Code transcript; with
//! `"claude"` it loops as in Claude Code, with the default `"session"` it finds no assistant
//! messages and stops.

use super::upstream::{fixture, results_of};
use super::*;

/// A world running Anthropic's `ralph-wiggum` plugin as installed (its `hooks/hooks.json` names
/// `${CLAUDE_PLUGIN_ROOT}/hooks/stop-hook.sh`), with `transcript` as `claude_code_transcript`,
/// and a loop set up by the plugin's own `/ralph-loop` script in the session's project.
fn ralph_world(transcript: &str) -> World {
    dsh_core::test_support::require_jq();
    dsh_core::test_support::require_perl();
    let w = World::new(|_| Setup {
        claude_code_files: vec![fixture("claude-code-ralph-wiggum/hooks/hooks.json")],
        hooks_toml: format!("claude_code_transcript = \"{transcript}\""),
        ..Setup::default()
    });
    let setup = Command::new("bash")
        .arg(fixture(
            "claude-code-ralph-wiggum/scripts/setup-ralph-loop.sh",
        ))
        .args(["Make", "the", "greeting", "friendly"])
        .args(["--completion-promise", "DONE", "--max-iterations", "10"])
        .current_dir(&w.cwd)
        .output()
        .unwrap();
    assert!(setup.status.success(), "{setup:?}");
    assert!(w.cwd.join(".claude/ralph-loop.local.md").exists());
    w
}

/// The model's three answers: two without the promise, then the promise.
fn ralph_script() -> Value {
    json!({"replies": [
        {"text": "I changed the greeting."},
        {"text": "I checked it again; it reads well."},
        {"text": "All done. <promise>DONE</promise>"},
    ]})
}

/// With `claude_code_transcript = "claude"`, the ralph-wiggum Stop hook loops as in Claude Code:
/// it finds the last assistant message in the transcript, feeds the same prompt back until the
/// model outputs the completion promise, then lets the turn end and removes its state file.
#[test]
fn ralph_wiggum_loops_until_its_completion_promise_with_a_claude_code_transcript() {
    let w = ralph_world("claude");
    let agent = w.agent(&ralph_script());
    let turn = w.prompt(&agent, "Make the greeting friendly");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.text(), "All done. <promise>DONE</promise>");
    assert!(
        !w.cwd.join(".claude/ralph-loop.local.md").exists(),
        "the hook removes its state when the promise is seen"
    );
    let events = w.events(&agent);
    let stops: Vec<String> = results_of(&events, "Stop")
        .into_iter()
        .map(|(_, decision, _)| decision)
        .collect();
    assert_eq!(
        stops,
        ["block", "block", "pass"],
        "{:?}",
        w.daemon.log_text()
    );
    // Each continuation is the loop's prompt, fed back as Claude Code feeds a Stop reason.
    let continuations: Vec<&str> = plugin_messages(&events)
        .iter()
        .filter(|e| e["data"]["message"]["source"]["plugin"] == "hooks")
        .filter_map(|e| e["data"]["message"]["text"].as_str())
        .collect();
    assert_eq!(
        continuations,
        ["Make the greeting friendly", "Make the greeting friendly"]
    );
    let messages: Vec<&str> = of_type(&events, "hook/result")
        .iter()
        .filter_map(|e| e["data"]["systemMessage"].as_str())
        .collect();
    assert!(
        messages[0].starts_with("🔄 Ralph iteration 2 | To stop: output <promise>DONE</promise>"),
        "{messages:?}"
    );
    // The projection the hook read is private, in Claude Code's records, and stays as long as
    // the session does (issue 45); the session itself stays dsh's.
    let projection = projections(&w).join(format!("{agent}.jsonl"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&projection).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let records = parse_lines(&std::fs::read_to_string(&projection).unwrap());
    let assistant: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 3, "{records:?}");
    assert_eq!(
        assistant[2]["message"]["content"][0]["text"],
        "All done. <promise>DONE</promise>"
    );
    assert_ne!(w.locate(&agent).as_deref(), projection.to_str());
    w.daemon.dshctl_json(&["agent", "close", &agent]);
    let kept = parse_lines(&std::fs::read_to_string(&projection).unwrap());
    assert_eq!(kept, records, "the projection stays whole after the close");
    w.daemon
        .dshctl_json(&["session", "delete", &agent, "--yes"]);
    assert!(!projection.exists(), "the projection outlived its session");
}

/// The default (`session`) keeps the design: `transcript_path` is dsh's own log, in which the
/// ralph-wiggum hook finds no Claude Code assistant messages, so it stops the loop at once.
#[test]
fn with_the_session_transcript_ralph_wiggum_stops_at_once() {
    let w = ralph_world("session");
    let agent = w.agent(&ralph_script());
    let turn = w.prompt(&agent, "Make the greeting friendly");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.text(), "I changed the greeting.");
    let events = w.events(&agent);
    let stops = results_of(&events, "Stop");
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert!(
        stops[0]
            .2
            .contains("Ralph loop: No assistant messages found in transcript")
            || stops[0].2.contains("Ralph loop: Transcript file not found"),
        "{stops:?}"
    );
}

/// The projection directory of a world with `claude_code_transcript = "claude"`.
fn projections(w: &World) -> PathBuf {
    w.daemon.home.join("transcripts/claude")
}

/// A link planted where a session's projection goes (issue 39, item 11) is not written through:
/// its target keeps its bytes, and the hook still reads the session's projection, which dshd
/// wrote to a file of its own in the link's place.
#[test]
fn a_link_planted_at_a_projection_is_not_written_through() {
    use std::os::unix::fs::symlink;
    dsh_core::test_support::require_jq();
    let w = World::new(|dir| Setup {
        claude_code: vec![hook_file(&[(
            "Stop",
            None,
            &format!("cp \"$(jq -r .transcript_path)\" {}", dir.q("seen.jsonl")),
        )])],
        hooks_toml: "claude_code_transcript = \"claude\"".into(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [{"text": "hello there"}]}));
    let victim = w.path("bashrc");
    std::fs::write(&victim, "# mine\n").unwrap();
    std::fs::create_dir_all(projections(&w)).unwrap();
    let projection = projections(&w).join(format!("{agent}.jsonl"));
    symlink(&victim, &projection).unwrap();

    let turn = w.prompt(&agent, "hi");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    let meta = std::fs::symlink_metadata(&projection).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    let seen = parse_lines(&w.read("seen.jsonl"));
    let texts: Vec<&Value> = seen
        .iter()
        .filter(|r| r["type"] == "assistant")
        .map(|r| &r["message"]["content"][0]["text"])
        .collect();
    assert_eq!(texts, ["hello there"], "{seen:?}");
}

/// Projections outlive their dshd (issue 45): after a restart the file is still there, whole;
/// the resumed session's first hook writes it anew from the first event (nothing twice), in
/// the place of a link planted meanwhile, which is not followed; the directory is made private
/// again at start. A dshd started with `session` removes them all.
#[test]
fn a_projection_outlives_dshd_and_is_written_anew_once_after_a_resume() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    dsh_core::test_support::require_jq();
    let mut w = World::new(|dir| Setup {
        claude_code: vec![hook_file(&[(
            "Stop",
            None,
            &format!("cp \"$(jq -r .transcript_path)\" {}", dir.q("seen.jsonl")),
        )])],
        hooks_toml: "claude_code_transcript = \"claude\"".into(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [{"text": "one"}]}));
    assert_eq!(w.prompt(&agent, "first").kind(), "completed");
    let dir = projections(&w);
    let projection = dir.join(format!("{agent}.jsonl"));
    let before = std::fs::read_to_string(&projection).unwrap();

    w.restart();
    assert_eq!(std::fs::read_to_string(&projection).unwrap(), before);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let victim = w.path("bashrc");
    std::fs::write(&victim, "# mine\n").unwrap();
    std::fs::remove_file(&projection).unwrap();
    symlink(&victim, &projection).unwrap();
    let script = w.script(&json!({"replies": [{"text": "two"}]}));
    w.daemon.dshctl_json(&[
        "agent",
        "resume",
        &agent,
        "--script",
        script.to_str().unwrap(),
    ]);
    assert_eq!(w.prompt(&agent, "second").kind(), "completed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    let records = parse_lines(&std::fs::read_to_string(&projection).unwrap());
    let said: Vec<&Value> = records
        .iter()
        .filter(|r| r["isMeta"].is_null())
        .map(|r| &r["message"]["content"])
        .collect();
    assert_eq!(
        said,
        [
            &json!("first"),
            &json!([{"type": "text", "text": "one"}]),
            &json!("second"),
            &json!([{"type": "text", "text": "two"}]),
        ],
        "{records:?}"
    );
    let uuids: std::collections::HashSet<&str> = records
        .iter()
        .map(|r| r["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids.len(), records.len(), "a record written twice");
    assert_eq!(parse_lines(&w.read("seen.jsonl")), records);

    // Started with `session`, dshd keeps no projection it does not keep up to date.
    w.daemon
        .signal_and_wait(rustix::process::Signal::TERM, PATIENCE);
    std::fs::write(
        w.path("config.toml"),
        "[hooks]\nclaude_code_transcript = \"session\"\n",
    )
    .unwrap();
    w.daemon.restart_with(spec(&w.path("config.toml")));
    assert!(!dir.exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
}

/// Transcript readers written for Claude Code (issue 45; our own fixtures in the shape of
/// published ones, see SOURCES.md): a SubagentStop summariser finds the child's task and answer
/// in `agent_transcript_path`, a Claude Code sidechain; a SessionEnd archiver copies the whole
/// conversation, and the projection is still there, whole, after the close.
#[test]
fn a_subagent_summariser_and_a_session_end_archiver_read_claude_code_transcripts() {
    dsh_core::test_support::require_jq();
    let w = World::new(|_| Setup {
        claude_code: vec![hook_file(&[
            (
                "SubagentStop",
                None,
                &super::upstream::run_fixture("own/subagent-summary.sh", ""),
            ),
            (
                "SessionEnd",
                None,
                &super::upstream::run_fixture("own/session-end-archive.sh", ""),
            ),
        ])],
        hooks_toml: "claude_code_transcript = \"claude\"".into(),
        ..Setup::default()
    });
    std::fs::create_dir(w.cwd.join(".git")).unwrap();
    let agent = w.agent(&json!({"replies": [
        {"text": "delegating", "tool_calls": [
            {"id": "kid", "name": "spawn_agent", "arguments": {"prompt": "count to three"},
             "child_script": {"replies": [{"text": "one two three"}]}},
        ]},
        {"text": "done"},
    ]}));
    assert_eq!(
        w.prompt(&agent, "delegate the counting").kind(),
        "completed"
    );
    let summaries = std::fs::read_to_string(w.cwd.join(".claude/subagent-summaries.md")).unwrap();
    let lines: Vec<&str> = summaries.lines().collect();
    assert_eq!(lines.len(), 1, "{summaries}");
    assert!(lines[0].starts_with("- "), "{summaries}");
    assert!(
        lines[0].ends_with(": count to three => one two three"),
        "{summaries}"
    );
    assert!(
        !lines[0].contains(&format!("- {agent}:")),
        "the child's id, not the parent's"
    );

    w.daemon.dshctl_json(&["agent", "close", &agent]);
    let archive = w.cwd.join(format!(".claude/archive/{agent}.jsonl"));
    let archived = std::fs::read_to_string(&archive).unwrap();
    let records = parse_lines(&archived);
    let said: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "assistant")
        .map(|r| &r["message"]["content"][0]["text"])
        .collect();
    assert_eq!(said, ["delegating", "done"], "{archived}");
    let projection = projections(&w).join(format!("{agent}.jsonl"));
    assert_eq!(std::fs::read_to_string(&projection).unwrap(), archived);
}
