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
    // The projection the hook read is private, in Claude Code's records, and goes when the
    // agent is closed; the session itself stays dsh's.
    let projection = w
        .daemon
        .home
        .join(format!("run/spill/claude-transcripts/{agent}.jsonl"));
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
    assert!(!projection.exists(), "the projection outlived its agent");
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
    w.daemon.home.join("run/spill/claude-transcripts")
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

/// Whatever is in the projection directory when dshd starts is removed, links (not followed),
/// directories and files alike; what links led to is untouched.
#[test]
fn the_projection_directory_is_emptied_when_dshd_starts() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    let mut w = World::new(|_| Setup {
        hooks_toml: "claude_code_transcript = \"claude\"".into(),
        ..Setup::default()
    });
    let dir = projections(&w);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/s-2.jsonl"), "{}\n").unwrap();
    std::fs::write(dir.join("s-1.jsonl"), "{}\n").unwrap();
    let victim = w.path("bashrc");
    std::fs::write(&victim, "# mine\n").unwrap();
    symlink(&victim, dir.join("s-3.jsonl")).unwrap();
    let elsewhere = w.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("kept"), "kept\n").unwrap();
    symlink(&elsewhere, dir.join("s-4.jsonl")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();

    w.daemon
        .signal_and_wait(rustix::process::Signal::TERM, PATIENCE);
    w.daemon.restart_with(spec(&w.path("config.toml")));

    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    let mode = std::fs::symlink_metadata(&dir)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("kept")).unwrap(),
        "kept\n"
    );
}
