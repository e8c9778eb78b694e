//! Session and subagent lifecycle events: SessionStart on a live agent's first turn (`startup`,
//! and `resume` after a daemon restart), SubagentStart/SubagentStop around `spawn_agent`.

use super::*;

impl World {
    /// Shuts the daemon down and starts it again on the same home, socket and config.
    pub(super) fn restart(&mut self) {
        let out = self.daemon.dshctl(&["shutdown"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.daemon.wait_exit(PATIENCE);
        let dir = std::mem::replace(&mut self.daemon.dir, private_dir());
        let config = self.path("config.toml");
        // The old value only reaps the exited process and removes the placeholder directory.
        drop(std::mem::replace(
            &mut self.daemon,
            TestDaemon::spawn(spec(&config), dir),
        ));
        self.daemon.wait_ready();
    }
}

#[test]
fn session_start_runs_on_the_first_turn_as_startup_and_after_a_resume_as_resume() {
    let mut w = World::new(|dir| {
        Setup::claude_code(hook_file(&[(
            "SessionStart",
            None,
            &format!("cat >> {}", dir.q("session-start.jsonl")),
        )]))
    });
    let agent = w.agent(&json!({"replies": [{"text": "one"}, {"text": "two"}]}));
    assert_eq!(w.prompt(&agent, "first").kind(), "completed");
    assert_eq!(w.prompt(&agent, "second").kind(), "completed");
    let starts = parse_lines(&w.read("session-start.jsonl"));
    assert_eq!(starts.len(), 1, "once per live agent: {starts:?}");
    assert_eq!(starts[0]["source"], "startup");
    assert_eq!(starts[0]["session_id"], agent.as_str());
    assert_eq!(starts[0]["hook_event_name"], "SessionStart");

    w.restart();
    let script = w.script(&json!({"replies": [{"text": "three"}]}));
    let resumed = w.daemon.dshctl_json(&[
        "agent",
        "resume",
        &agent,
        "--script",
        script.to_str().unwrap(),
    ]);
    assert_eq!(resumed["agent_id"], agent.as_str());
    assert_eq!(
        parse_lines(&w.read("session-start.jsonl")).len(),
        1,
        "SessionStart waits for the first turn"
    );
    let turn = w.prompt(&agent, "third");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.text(), "three");
    let starts = parse_lines(&w.read("session-start.jsonl"));
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[1]["source"], "resume");
    assert_eq!(starts[1]["session_id"], agent.as_str());
    let located = w.locate(&agent).unwrap();
    assert_eq!(starts[1]["transcript_path"], located.as_str());
}

#[test]
fn subagent_events_carry_the_parent_session_and_the_childs_id_and_transcript() {
    let w = World::new(|dir| {
        Setup::claude_code(hook_file(&[
            (
                "SubagentStart",
                None,
                &format!("cat > {}", dir.q("start.json")),
            ),
            (
                "SubagentStop",
                None,
                &format!("cat > {}", dir.q("stop.json")),
            ),
        ]))
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "delegating", "tool_calls": [{
            "name": "spawn_agent",
            "arguments": {"prompt": "count to three", "description": "count"},
            "child_script": {"replies": [{"text": "one two three"}]},
        }]},
        {"text": "the child counted"},
    ]}));
    let turn = w.prompt(&agent, "delegate");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.tool_results()[0]["content"], "one two three");

    let sessions = w.daemon.dshctl_json(&["session", "list"]);
    let children: Vec<String> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["header"]["parent_session"] == agent.as_str())
        .map(|s| s["header"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children.len(), 1, "{sessions}");
    let child = &children[0];
    let parent_transcript = w.locate(&agent).unwrap();
    let child_transcript = w.locate(child).unwrap();
    assert_ne!(parent_transcript, child_transcript);

    let start = parse(&w.read("start.json"));
    assert_eq!(start["hook_event_name"], "SubagentStart");
    assert_eq!(start["session_id"], agent.as_str());
    assert_eq!(start["transcript_path"], parent_transcript.as_str());
    assert_eq!(start["cwd"], w.cwd.to_str().unwrap());
    assert_eq!(start["agent_id"], child.as_str());
    assert_eq!(start["agent_type"], "general-purpose");

    let stop = parse(&w.read("stop.json"));
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    assert_eq!(stop["session_id"], agent.as_str());
    assert_eq!(stop["transcript_path"], parent_transcript.as_str());
    assert_eq!(stop["agent_id"], child.as_str());
    assert_eq!(stop["agent_transcript_path"], child_transcript.as_str());
    assert_eq!(stop["last_assistant_message"], "one two three");
    assert_eq!(stop["stop_hook_active"], false);
    // By the time SubagentStop runs the child's turn has ended and been written.
    assert!(Path::new(&child_transcript).is_file());

    // The records are the parent's.
    let events = w.events(&agent);
    let recorded: Vec<&str> = of_type(&events, "hook/invoked")
        .iter()
        .map(|e| e["data"]["event"].as_str().unwrap())
        .collect();
    assert_eq!(recorded, ["SubagentStart", "SubagentStop"]);
}

/// Pattern 16 of `patterns.rs`: hooks that skip subagent calls by the presence of `agent_id`. A
/// child's own events are its parent session's subagent events, as both upstream harnesses fire
/// them: the parent's `session_id`, the child's `agent_id` and `agent_type`.
#[test]
fn hooks_inside_a_child_carry_agent_id_and_the_parents_session() {
    dsh_core::test_support::require_jq();
    let w = World::new(|dir| {
        // Skips subagent calls (the usual guard), records the main thread's. One file per
        // dialect: the two dialects' hooks run at the same time.
        let file = |name: &str| {
            let main_only = format!(
                "input=$(cat); [ -n \"$(printf '%s' \"$input\" | jq -r '.agent_id // empty')\" ] && exit 0; \
                 printf '%s\\n' \"$input\" >> {}",
                dir.q(&format!("main-{name}.jsonl"))
            );
            let all = format!(
                "printf '%s\\n' \"$(cat)\" >> {}",
                dir.q(&format!("all-{name}.jsonl"))
            );
            hook_file(&[
                ("PreToolUse", Some("Bash"), &main_only),
                ("PreToolUse", Some("Bash"), &all),
            ])
        };
        Setup {
            claude_code: vec![file("cc")],
            codex: vec![file("codex")],
            ..Setup::default()
        }
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "delegating", "tool_calls": [
            {"name": "bash", "arguments": {"command": "echo parent"}},
            {"name": "spawn_agent", "arguments": {"prompt": "run one command"},
             "child_script": {"replies": [
                 {"text": "running", "tool_calls": [{"name": "bash", "arguments": {"command": "echo child"}}]},
                 {"text": "ran it"},
             ]}},
        ]},
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    for name in ["cc", "codex"] {
        let main = parse_lines(&w.read(&format!("main-{name}.jsonl")));
        assert_eq!(main.len(), 1, "{name}: the parent's call only: {main:?}");
        assert_eq!(main[0]["tool_input"]["command"], "echo parent");
        assert_eq!(main[0]["session_id"], agent.as_str());
        let all = parse_lines(&w.read(&format!("all-{name}.jsonl")));
        let child: Vec<&Value> = all
            .iter()
            .filter(|p| p["tool_input"]["command"] == "echo child")
            .collect();
        assert_eq!(child.len(), 1, "{name}: {all:?}");
        assert_eq!(
            child[0]["session_id"],
            agent.as_str(),
            "the parent's session"
        );
        assert_ne!(child[0]["agent_id"], agent.as_str());
        assert_eq!(child[0]["agent_type"], "general-purpose");
    }
}
