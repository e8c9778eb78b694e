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

/// `CLAUDE_ENV_FILE` (issue 45): what a Claude Code SessionStart hook exports reaches the
/// agent's later bash calls (`$PATH` expanded against the agent's own), and an export of a
/// managed `DSH_*` key is refused in the hook's record while the managed value stands.
#[test]
fn claude_env_file_exports_reach_later_commands_and_dsh_keys_are_refused() {
    let w = World::new(|_| {
        Setup::claude_code(hook_file(&[(
            "SessionStart",
            None,
            &super::upstream::run_fixture("own/session-start-env.sh", ""),
        )]))
    });
    std::fs::create_dir(w.cwd.join("bin")).unwrap();
    let tool = w.cwd.join("bin/projtool");
    std::fs::write(&tool, "#!/bin/sh\necho projtool ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = w.agent(&json!({"replies": [
        bash_reply("", "echo \"env=$NODE_ENV id=$DSH_SESSION_ID\"; projtool; echo \"path=$PATH\""),
        {"text": "done"},
    ]}));
    assert_eq!(
        w.prompt(&agent, "check the environment").kind(),
        "completed"
    );
    let events = w.events(&agent);
    let results = of_type(&events, "tool/result");
    let out = results[0]["data"]["content"].as_str().unwrap();
    assert!(out.contains("env=development"), "{out}");
    assert!(out.contains(&format!("id={agent}")), "{out}");
    assert!(out.contains("projtool ran"), "{out}");
    let path = out.lines().find_map(|l| l.strip_prefix("path=")).unwrap();
    assert!(
        path.ends_with(&format!(":{}/bin", w.cwd.display())),
        "{path}"
    );
    assert!(
        path.contains("/usr/bin"),
        "the agent's own PATH comes first: {path}"
    );
    let start = super::upstream::results_of(&events, "SessionStart");
    assert_eq!(start.len(), 1, "{start:?}");
    assert!(
        start[0].2.contains(
            "CLAUDE_ENV_FILE: refused DSH_SESSION_ID: managed values come only from the snapshot"
        ),
        "{start:?}"
    );
    // The file was the hook's alone, and is gone.
    let left: Vec<_> = std::fs::read_dir(w.daemon.home.join("run/spill/hook-env"))
        .map(|d| d.collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// Notification `idle_prompt` (issue 45): a top-level agent that waits for its next prompt for
/// `hooks.idle_prompt_ms` fires it once per wait, in Claude Code's words; a close ends the wait.
#[test]
fn an_agent_waiting_for_its_next_prompt_notifies_once_per_wait() {
    let w = World::new(|dir| Setup {
        claude_code: vec![hook_file(&[(
            "Notification",
            Some("idle_prompt"),
            &dir.script(
                "idle.sh",
                &format!(
                    "#!/bin/sh\ncat >> {f}\necho >> {f}\n",
                    f = dir.q("idle.jsonl")
                ),
            ),
        )])],
        hooks_toml: "idle_prompt_ms = 300".into(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [{"text": "one"}, {"text": "two"}]}));
    let count = || {
        std::fs::read_to_string(w.path("idle.jsonl"))
            .map(|t| parse_lines(&t).len())
            .unwrap_or(0)
    };
    for (turn, prompt) in [(1, "first"), (2, "second")] {
        assert_eq!(w.prompt(&agent, prompt).kind(), "completed");
        assert!(
            eventually(PATIENCE, || count() == turn),
            "no idle notification after turn {turn}"
        );
    }
    w.daemon.dshctl_json(&["agent", "close", &agent]);
    let lines = parse_lines(&w.read("idle.jsonl"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["hook_event_name"], "Notification");
        assert_eq!(line["notification_type"], "idle_prompt");
        assert_eq!(line["message"], "Claude is waiting for your input");
        assert_eq!(line["session_id"], agent.as_str());
    }
}

/// Claude Code's SessionStart `sessionTitle` names the session, as a person's title would
/// (issue 45): `dshctl session show` and the log have it.
#[test]
fn a_session_start_hook_titles_the_session() {
    let w = World::new(|dir| {
        Setup::claude_code(hook_file(&[(
            "SessionStart",
            None,
            &dir.script(
                "title.sh",
                "#!/bin/sh\ncat > /dev/null\necho '{\"hookSpecificOutput\":{\"hookEventName\":\"SessionStart\",\"sessionTitle\":\"fix the login bug\"}}'\n",
            ),
        )]))
    });
    let agent = w.agent(&json!({"replies": [{"text": "on it"}]}));
    assert_eq!(w.prompt(&agent, "the login fails").kind(), "completed");
    let titles: Vec<Value> = of_type(&w.events(&agent), "session/title")
        .into_iter()
        .map(|e| e["data"]["title"].clone())
        .collect();
    assert_eq!(titles, [json!("fix the login bug")]);
}
