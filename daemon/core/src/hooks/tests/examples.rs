//! The shipped examples (`examples/hooks/`): three real-world scripts, unmodified, with the sample
//! configs installed in the user's home (the executor's `HOME`, the temporary directory) the way
//! their README says: outside the session's workspace, listed in the settings.

use std::path::PathBuf;

use serde_json::json;

use super::*;
use crate::hooks::{Decision, Dialect, EventName, FileStatus, SessionSource};
use crate::test_support::require_jq;

const SCRIPTS: [&str; 3] = ["guard-rm-rf.sh", "backup-transcript.sh", "audit-log.sh"];

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/hooks")
}

/// Copies the scripts to `~/.claude/hooks/` (or `~/.codex/hooks/`) and the sample config to
/// `~/.claude/settings.json` (or `~/.codex/hooks.json`); returns the config's path.
fn install(fx: &Fx, dialect: Dialect) -> PathBuf {
    let (dir, config, name) = match dialect {
        Dialect::ClaudeCode => (".claude", "claude-code/settings.json", "settings.json"),
        Dialect::Codex => (".codex", "codex/hooks.json", "hooks.json"),
    };
    let scripts = fx.path(dir).join("hooks");
    std::fs::create_dir_all(&scripts).unwrap();
    for script in SCRIPTS {
        // `copy` keeps the executable bit the repository gives the scripts.
        std::fs::copy(
            examples().join("scripts").join(script),
            scripts.join(script),
        )
        .unwrap();
    }
    let installed = fx.path(dir).join(name);
    std::fs::copy(examples().join(config), &installed).unwrap();
    installed
}

fn example_hooks(fx: &Fx, dialects: &[Dialect]) -> Hooks {
    require_jq();
    let mut settings = HookSettings::default();
    for d in dialects {
        let file = install(fx, *d);
        match d {
            Dialect::ClaudeCode => settings.claude_code.push(file),
            Dialect::Codex => settings.codex.push(file),
        }
    }
    fx.hooks(settings)
}

/// Where the samples keep what they write: `${XDG_STATE_HOME:-$HOME/.local/state}/dsh` (the
/// executor's environment has no `XDG_STATE_HOME`).
const STATE: &str = ".local/state/dsh";

fn stop() -> HookEvent {
    HookEvent::Stop {
        stop_hook_active: false,
        last_assistant_message: Some("done".into()),
    }
}

#[test]
fn the_sample_configs_load_cleanly() {
    let fx = Fx::new();
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![examples().join("claude-code/settings.json")],
        codex: vec![examples().join("codex/hooks.json")],
        ..HookSettings::default()
    });
    let list = hooks.list();
    for status in &list {
        assert_eq!(status.status, FileStatus::Loaded, "{status:?}");
        assert!(status.warnings.is_empty(), "{status:?}");
    }
    assert_eq!(list[0].handlers.len(), 10);
    assert_eq!(list[1].handlers.len(), 8);
    let guard = |i: usize| {
        list[i]
            .handlers
            .iter()
            .find(|h| h.command.contains("guard-rm-rf.sh"))
            .unwrap()
            .clone()
    };
    for i in [0, 1] {
        assert_eq!(guard(i).event, EventName::PreToolUse);
        assert_eq!(guard(i).matcher.as_deref(), Some("Bash"));
        assert_eq!(
            guard(i).timeout,
            Duration::from_secs(10),
            "timeoutSec for Codex"
        );
    }
}

#[tokio::test]
async fn the_guard_blocks_rm_rf_in_both_dialects() {
    for dialect in Dialect::ALL {
        let fx = Fx::new();
        let hooks = example_hooks(&fx, &[dialect]);
        let run = hooks
            .run(
                &fx.ctx(),
                pre_tool("bash", json!({"command": "rm -rf build/"})),
            )
            .await;
        assert_eq!(run.outcome.decision, Decision::Deny, "{dialect:?}: {run:?}");
        assert_eq!(run.outcome.reason.as_deref(), Some("blocked: rm -rf"));
        assert_eq!(decisions(&run), ["block", "pass"], "guard, then audit");

        let run = hooks
            .run(&fx.ctx(), pre_tool("bash", json!({"command": "ls -la"})))
            .await;
        assert_eq!(run.outcome.decision, Decision::None);
        assert_eq!(decisions(&run), ["pass", "pass"]);

        // The guard's matcher is `Bash`: other tools only reach the audit logger.
        let run = hooks
            .run(
                &fx.ctx(),
                pre_tool("job_kill", json!({"command": "rm -rf /"})),
            )
            .await;
        assert_eq!(decisions(&run), ["pass"]);
    }
}

#[tokio::test]
async fn the_backup_copies_an_existing_transcript_on_stop() {
    for dialect in Dialect::ALL {
        let fx = Fx::new();
        let hooks = example_hooks(&fx, &[dialect]);
        let backup = fx.path(&format!("{STATE}/transcript-backups/s-1.jsonl"));

        // Before the first checkpoint the file does not exist: nothing to copy, no error.
        let run = hooks.run(&fx.ctx(), stop()).await;
        assert_eq!(decisions(&run), ["pass", "pass"], "{dialect:?}");
        assert!(!backup.exists());
        assert!(!fx.transcript_of(&fx.header).exists());

        let transcript = fx.transcript_of(&fx.header);
        std::fs::create_dir_all(transcript.parent().unwrap()).unwrap();
        let content = "{\"version\":0,\"id\":\"s-1\"}\n{\"type\":\"turn/start\"}\n";
        std::fs::write(&transcript, content).unwrap();
        let run = hooks.run(&fx.ctx(), stop()).await;
        assert_eq!(decisions(&run), ["pass", "pass"]);
        assert_eq!(std::fs::read_to_string(&backup).unwrap(), content);
    }
}

#[tokio::test]
async fn the_backup_does_nothing_without_a_transcript_location() {
    for dialect in Dialect::ALL {
        let fx = Fx::with(false);
        let hooks = example_hooks(&fx, &[dialect]);
        let run = hooks.run(&fx.ctx(), stop()).await;
        assert_eq!(decisions(&run), ["pass", "pass"], "{dialect:?}");
        assert!(!fx.path(&format!("{STATE}/transcript-backups")).exists());
        let logged: Value =
            serde_json::from_str(fx.read(&format!("{STATE}/hook-audit.jsonl")).trim()).unwrap();
        let expected = match dialect {
            Dialect::ClaudeCode => json!(""),
            Dialect::Codex => Value::Null,
        };
        assert_eq!(logged["transcript_path"], expected);
    }
}

#[tokio::test]
async fn the_audit_logger_writes_one_json_line_per_hook() {
    let fx = Fx::new();
    let hooks = example_hooks(&fx, &Dialect::ALL);
    let child = Arc::new(SessionHeader::new(
        SessionId::parse("child-1").unwrap(),
        fx.cwd.clone(),
        2,
    ));
    let events = [
        HookEvent::SessionStart {
            source: SessionSource::Startup,
        },
        prompt("hello"),
        pre_tool("bash", json!({"command": "echo hi"})),
        post_tool(
            "bash",
            json!({"command": "echo hi"}),
            bash_output("hi\n", "", 0),
        ),
        HookEvent::SubagentStart {
            child: child.clone(),
            agent_type: "general-purpose".into(),
        },
        HookEvent::SubagentStop {
            child,
            agent_type: "general-purpose".into(),
            last_assistant_message: Some("child done".into()),
        },
        stop(),
        HookEvent::SessionEnd {
            reason: crate::hooks::SessionEndReason::Other,
        },
    ];
    for event in events {
        let run = hooks.run(&fx.ctx(), event).await;
        assert!(
            decisions(&run).iter().all(|d| d == "pass"),
            "{:?}",
            run.records
        );
    }
    let log = fx.read(&format!("{STATE}/hook-audit.jsonl"));
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // `jq -c` keeps each payload's key order: Codex writes `model` right after `hook_event_name`.
    let mut seen: Vec<(bool, String)> = log
        .lines()
        .zip(&lines)
        .map(|(line, v)| {
            let name = v["hook_event_name"].as_str().unwrap().to_owned();
            let codex = line.contains(&format!("\"hook_event_name\":\"{name}\",\"model\""));
            (codex, name)
        })
        .collect();
    seen.sort();
    // The sample configs register these events: all eight fired for Claude Code, and Codex's
    // file has no subagent entries.
    let fired = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "SubagentStart",
        "SubagentStop",
        "Stop",
        "SessionEnd",
    ];
    let mut expected: Vec<(bool, String)> = fired
        .iter()
        .map(|e| (false, (*e).to_owned()))
        .chain(
            fired
                .iter()
                .filter(|e| !e.starts_with("Subagent"))
                .map(|e| (true, (*e).to_owned())),
        )
        .collect();
    expected.sort();
    assert_eq!(seen, expected, "8 Claude Code lines and 6 Codex lines");
    assert!(lines.iter().all(|v| v["session_id"] == "s-1"));
}
