//! The three real-world scripts of `examples/hooks/scripts/`, unmodified, installed with the
//! sample configs in the user's home the way the README says (outside every workspace, listed in
//! dshd's config), run by the daemon for a scripted model.

use super::*;

use std::collections::BTreeMap;

const SCRIPTS: [&str; 3] = ["guard-rm-rf.sh", "backup-transcript.sh", "audit-log.sh"];

#[derive(Clone, Copy, Debug)]
enum Layout {
    ClaudeCode,
    Codex,
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hooks")
}

/// The `HOME` dshd (and so every hook) runs with: `<dir>/me`.
const HOME: &str = "me";

/// Where the samples write (`${XDG_STATE_HOME:-$HOME/.local/state}/dsh`): dshd runs with
/// `XDG_STATE_HOME` unset, whatever the environment of the tests.
const STATE: &str = "me/.local/state/dsh";

/// A daemon with the examples installed in `<dir>/me` for `layouts` (`~/.claude/hooks/*.sh` +
/// `~/.claude/settings.json`, `~/.codex/hooks/*.sh` + `~/.codex/hooks.json`) and those files
/// listed in its config.
fn installed(layouts: &[Layout]) -> World {
    dsh_core::test_support::require_jq();
    World::new(|dir| {
        let home = dir.path(HOME);
        let mut setup = Setup {
            env: vec![
                ("HOME".into(), home.display().to_string()),
                ("XDG_STATE_HOME".into(), String::new()),
            ],
            ..Setup::default()
        };
        for layout in layouts {
            let (sub, config, name) = match layout {
                Layout::ClaudeCode => (".claude", "claude-code/settings.json", "settings.json"),
                Layout::Codex => (".codex", "codex/hooks.json", "hooks.json"),
            };
            let scripts = home.join(sub).join("hooks");
            std::fs::create_dir_all(&scripts).unwrap();
            for script in SCRIPTS {
                // `copy` keeps the executable bit the repository gives the scripts.
                std::fs::copy(
                    examples().join("scripts").join(script),
                    scripts.join(script),
                )
                .unwrap();
            }
            let file = home.join(sub).join(name);
            std::fs::copy(examples().join(config), &file).unwrap();
            match layout {
                Layout::ClaudeCode => setup.claude_code_files.push(file),
                Layout::Codex => setup.codex_files.push(file),
            }
        }
        setup
    })
}

#[test]
fn the_example_guard_blocks_a_models_rm_rf_in_both_dialects() {
    let w = installed(&[Layout::ClaudeCode, Layout::Codex]);
    let victim = w.cwd.join("build");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("precious"), "keep me").unwrap();
    let agent = w.agent(&json!({"replies": [
        {"text": "cleaning up", "tool_calls": [
            {"id": "rm", "name": "bash", "arguments": {"command": "rm -rf build"}},
            {"id": "ls", "name": "bash", "arguments": {"command": "ls build > listing.txt"}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "clean the build directory");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);

    assert!(victim.join("precious").exists(), "rm -rf ran");
    let results = turn.tool_results();
    let rm = results.iter().find(|r| r["callId"] == "rm").unwrap();
    assert_eq!(rm["isError"], true, "{rm}");
    assert!(
        rm["content"].as_str().unwrap().contains("blocked: rm -rf"),
        "{rm}"
    );
    // Other commands pass the guard.
    assert_eq!(
        std::fs::read_to_string(w.cwd.join("listing.txt")).unwrap(),
        "precious\n"
    );
    // Both dialects' guards blocked it.
    let events = w.events(&agent);
    let guard_results: Vec<(&str, &str)> = of_type(&events, "hook/result")
        .into_iter()
        .filter(|e| e["data"]["event"] == "PreToolUse" && e["data"]["decision"] == "block")
        .map(|e| {
            (
                e["data"]["dialect"].as_str().unwrap(),
                e["data"]["stderrSummary"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        guard_results,
        [
            ("claude-code", "blocked: rm -rf"),
            ("codex", "blocked: rm -rf")
        ],
        "{events:#?}"
    );
}

#[test]
fn the_example_backup_copies_the_transcript_as_of_the_last_checkpoint_on_stop() {
    let w = installed(&[Layout::ClaudeCode]);
    let agent = w.agent(&json!({"replies": [
        bash_reply("looking", "echo hi"),
        {"text": "done"},
    ]}));
    let transcript = PathBuf::from(w.locate(&agent).unwrap());
    // The script's default: `${XDG_STATE_HOME:-$HOME/.local/state}/dsh/transcript-backups`.
    let backup = w.path(&format!("{STATE}/transcript-backups/{agent}.jsonl"));

    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    let copied = std::fs::read_to_string(&backup)
        .unwrap_or_else(|e| panic!("no backup at {}: {e}", backup.display()));
    let full = std::fs::read_to_string(&transcript).unwrap();
    // Stop runs after the last step's checkpoint and before the turn's: the backup is the file as
    // it was then, a proper prefix of what the turn end wrote.
    assert!(
        full.starts_with(&copied) && full.len() > copied.len(),
        "backup:\n{copied}\ntranscript:\n{full}"
    );
    let types = |text: &str| -> Vec<String> {
        parse_lines(text)
            .iter()
            .filter_map(|l| l["type"].as_str().map(str::to_owned))
            .collect()
    };
    let copied_types = types(&copied);
    assert_eq!(
        copied_types
            .iter()
            .filter(|t| *t == "assistant/message")
            .count(),
        2,
        "{copied_types:?}"
    );
    assert_eq!(copied_types.last().map(String::as_str), Some("step/end"));
    assert!(!copied_types.iter().any(|t| t == "turn/end"));
    assert_eq!(types(&full).last().map(String::as_str), Some("turn/end"));
}

#[test]
fn the_example_audit_logger_records_every_event_the_daemon_fires() {
    let w = installed(&[Layout::ClaudeCode, Layout::Codex]);
    let agent = w.agent(&json!({"replies": [
        {"text": "delegating", "tool_calls": [
            {"name": "bash", "arguments": {"command": "echo hi"}},
            {"name": "spawn_agent", "arguments": {"prompt": "count to three"},
             "child_script": {"replies": [{"text": "one two three"}]}},
        ]},
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    let log = std::fs::read_to_string(w.path(&format!("{STATE}/hook-audit.jsonl"))).unwrap();
    let lines = parse_lines(&log);
    let start = lines
        .iter()
        .find(|l| l["hook_event_name"] == "SubagentStart")
        .expect("a SubagentStart line");
    let child = start["agent_id"].as_str().unwrap().to_owned();

    // What the log holds: (dialect, agent, event) -> count, where the agent is the one the hook
    // fired in. A child's own events are its parent session's subagent events: the parent's
    // `session_id` and the child's `agent_id`. `jq -c` keeps each payload's key order, and Codex
    // writes `model` right after `hook_event_name`.
    let mut logged: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (text, l) in log.lines().filter(|l| !l.is_empty()).zip(&lines) {
        let event = l["hook_event_name"].as_str().unwrap().to_owned();
        let dialect = if text.contains(&format!("\"hook_event_name\":\"{event}\",\"model\"")) {
            "codex"
        } else {
            "claude-code"
        };
        assert_eq!(l["session_id"], agent.as_str(), "{text}");
        let fired_in = match (event.as_str(), l.get("agent_id")) {
            ("SubagentStart" | "SubagentStop", _) | (_, None) => agent.clone(),
            (_, Some(id)) => {
                assert_eq!(l["agent_type"], "general-purpose", "{text}");
                id.as_str().unwrap().to_owned()
            }
        };
        *logged
            .entry((dialect.to_owned(), fired_in, event))
            .or_default() += 1;
    }
    let count = |dialect: &str, session: &str, event: &str| {
        logged
            .get(&(dialect.to_owned(), session.to_owned(), event.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    for (event, parent_cc, parent_codex, child_both) in [
        ("SessionStart", 1, 1, 1),
        ("UserPromptSubmit", 1, 1, 1),
        ("PreToolUse", 2, 2, 0),
        ("PostToolUse", 2, 2, 0),
        ("SubagentStart", 1, 0, 0),
        ("SubagentStop", 1, 0, 0),
        ("Stop", 1, 1, 1),
        ("SessionEnd", 0, 0, 0),
    ] {
        assert_eq!(
            count("claude-code", &agent, event),
            parent_cc,
            "{event}: {logged:?}"
        );
        assert_eq!(
            count("codex", &agent, event),
            parent_codex,
            "{event}: {logged:?}"
        );
        assert_eq!(
            count("claude-code", &child, event),
            child_both,
            "{event}: {logged:?}"
        );
        assert_eq!(
            count("codex", &child, event),
            child_both,
            "{event}: {logged:?}"
        );
    }

    // And that is every invocation of the logger the daemon recorded, in either session (subagent
    // events are recorded in the parent's log, under the parent's session id).
    let listed = w.daemon.dshctl_json(&["hooks", "list"]);
    let audit_handlers: Vec<String> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["handlers"].as_array().unwrap().clone())
        .filter(|h| h["command"].as_str().unwrap().contains("audit-log.sh"))
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(audit_handlers.len(), 8 + 6, "{listed}");
    let mut recorded: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for session in [&agent, &child] {
        for e in of_type(&w.events(session), "hook/invoked") {
            if audit_handlers
                .iter()
                .any(|h| e["data"]["handler"] == h.as_str())
            {
                let key = (
                    e["data"]["dialect"].as_str().unwrap().to_owned(),
                    session.clone(),
                    e["data"]["event"].as_str().unwrap().to_owned(),
                );
                *recorded.entry(key).or_default() += 1;
            }
        }
    }
    assert_eq!(logged, recorded);

    // Closing the agent ends its session: SessionEnd, in both dialects, for the parent only (the
    // child's session ended with its SubagentStop when it was closed after its turn).
    w.daemon.dshctl_json(&["agent", "close", &agent]);
    let ends: Vec<Value> = parse_lines(
        &std::fs::read_to_string(w.path(&format!("{STATE}/hook-audit.jsonl"))).unwrap(),
    )
    .into_iter()
    .filter(|l| l["hook_event_name"] == "SessionEnd")
    .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    for end in &ends {
        assert_eq!(end["session_id"], agent.as_str());
        assert_eq!(end["reason"], "other");
        assert!(end.get("agent_id").is_none());
    }
}

/// The audit sample keeps its log outside every workspace and never writes through a link: with
/// its log replaced by a link to a file of the user's, and a link waiting where the old sample
/// wrote (`<project>/.hook-audit.jsonl`), every run refuses, naming the link, and neither target
/// changes. Once the link is gone it logs again, to a file only the user can read.
#[test]
fn the_example_audit_logger_refuses_to_write_through_a_planted_link() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    let w = installed(&[Layout::ClaudeCode]);
    let victim = w.path("bashrc");
    std::fs::write(&victim, "# mine\n").unwrap();
    let log = w.path(&format!("{STATE}/hook-audit.jsonl"));
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    symlink(&victim, &log).unwrap();
    symlink(&victim, w.cwd.join(".hook-audit.jsonl")).unwrap();

    let agent = w.agent(&json!({"replies": [
        bash_reply("one", "true"),
        {"text": "done"},
        {"text": "done again"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    let events = w.events(&agent);
    let audits: Vec<&Value> = of_type(&events, "hook/result")
        .into_iter()
        .map(|e| &e["data"])
        .filter(|d| {
            let handler = d["handler"].as_str().unwrap();
            !handler.contains("PreToolUse[0]") && !handler.contains("Stop[0][0]")
        })
        .collect();
    // SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop (the guard and the backup
    // aside).
    assert_eq!(audits.len(), 5, "{audits:?}");
    for audit in &audits {
        assert_eq!(audit["decision"], "error", "{audit}");
        let said = audit["stderrSummary"].as_str().unwrap();
        assert!(
            said.contains(&format!(
                "refusing to write {}: it is a symbolic link",
                log.display()
            )),
            "{said}"
        );
    }

    std::fs::remove_file(&log).unwrap();
    assert_eq!(w.prompt(&agent, "again").kind(), "completed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    let logged = parse_lines(&std::fs::read_to_string(&log).unwrap());
    let names: Vec<&str> = logged
        .iter()
        .map(|l| l["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["UserPromptSubmit", "Stop"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&log), 0o600);
}
