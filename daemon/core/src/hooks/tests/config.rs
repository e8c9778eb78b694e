//! Hook files in both dialects, the settings table, missing and rejected files, reload, project
//! files.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::hooks::config::{Parsed, parse};
use crate::hooks::{Dialect, EventName, FileStatus, HookFileStatus};

fn parsed(dialect: Dialect, root: &Value) -> Parsed {
    parse(dialect, Path::new("/c/f.json"), root).unwrap()
}

/// `(id, event, matcher, command, timeout)` of one handler.
type Summary = (String, EventName, Option<String>, String, Option<Duration>);

fn summary(p: &Parsed) -> Vec<Summary> {
    p.handlers
        .iter()
        .map(|h| {
            (
                h.id.clone(),
                h.event,
                h.matcher_text.clone(),
                h.command.clone(),
                h.timeout,
            )
        })
        .collect()
}

fn sample() -> Value {
    json!({
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard", "timeout": 30}]},
            {"hooks": [{"command": "log"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "backup"}]}]
    })
}

#[test]
fn a_settings_wrapper_and_a_bare_map_parse_identically() {
    for dialect in Dialect::ALL {
        let bare = parsed(dialect, &sample());
        let wrapped = parsed(
            dialect,
            &json!({"permissions": {"allow": []}, "hooks": sample()}),
        );
        assert_eq!(summary(&bare), summary(&wrapped));
        assert_eq!(
            summary(&bare),
            [
                (
                    "/c/f.json#PreToolUse[0][0]".into(),
                    EventName::PreToolUse,
                    Some("Bash".into()),
                    "guard".into(),
                    Some(Duration::from_secs(30))
                ),
                (
                    "/c/f.json#PreToolUse[1][0]".into(),
                    EventName::PreToolUse,
                    None,
                    "log".into(),
                    None
                ),
                (
                    "/c/f.json#Stop[0][0]".into(),
                    EventName::Stop,
                    None,
                    "backup".into(),
                    None
                ),
            ]
        );
    }
}

#[test]
fn unsupported_types_codex_async_and_malformed_hooks_are_skipped_with_warnings() {
    let root = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "prompt", "prompt": "is this ok?"},
        {"type": "http", "url": "ftp://x"},
        {"type": "command", "command": "bg", "async": true},
        "not an object",
        {"type": "command", "command": 7},
        {"type": "command", "command": "  "},
        {"command": "kept"},
        {"type": "command", "command": "also kept", "async": false}
    ]}]}});
    for dialect in Dialect::ALL {
        let p = parsed(dialect, &root);
        let commands: Vec<(&str, bool)> = p
            .handlers
            .iter()
            .map(|h| (h.command.as_str(), h.background))
            .collect();
        // Claude Code runs an async command hook in the background; Codex has none.
        let (kept, async_hooks) = match dialect {
            Dialect::ClaudeCode => (&commands[1..], &commands[..1]),
            Dialect::Codex => (&commands[..], &[][..]),
        };
        assert_eq!(kept, [("kept", false), ("also kept", false)]);
        assert_eq!(
            async_hooks.len(),
            usize::from(dialect == Dialect::ClaudeCode)
        );
        assert!(
            async_hooks
                .iter()
                .all(|(c, background)| *c == "bg" && *background)
        );
        // Ids keep the file's indices, so they do not shift when a sibling is skipped.
        let first_kept = &p.handlers[p.handlers.len() - 2];
        assert_eq!(first_kept.id, "/c/f.json#PreToolUse[0][6]");
        assert_eq!(first_kept.matcher_text, None, "`*` matches everything");
        let all = p.warnings.join("\n");
        let only = match dialect {
            Dialect::ClaudeCode => "only command and http hooks run",
            Dialect::Codex => "only sync command hooks run",
        };
        assert!(
            all.contains(&format!(
                "skipping unsupported \"prompt\" hook on PreToolUse ({only})"
            )),
            "{all}"
        );
        match dialect {
            // Claude Code runs http hooks, but only to http(s) URLs.
            Dialect::ClaudeCode => assert!(
                all.contains("PreToolUse[0][1]: http hook url scheme \"ftp\" is not http or https"),
                "{all}"
            ),
            Dialect::Codex => assert!(all.contains("skipping unsupported \"http\" hook"), "{all}"),
        }
        assert_eq!(
            all.contains("skipping async hook on PreToolUse"),
            dialect == Dialect::Codex,
            "{all}"
        );
        assert!(all.contains("PreToolUse[0][3]: not an object"), "{all}");
        assert!(
            all.contains("PreToolUse[0][4]: no string \"command\""),
            "{all}"
        );
        assert!(all.contains("PreToolUse[0][5]: empty command"), "{all}");
    }
}

#[test]
fn timeouts_are_seconds_and_codex_also_reads_timeout_sec() {
    let root = json!({"Stop": [{"hooks": [
        {"command": "a", "timeoutSec": 5},
        {"command": "b", "timeout": 1.5, "timeoutSec": 9},
        {"command": "c", "timeout": "soon"},
        {"command": "d", "timeout": 0},
        {"command": "e", "timeout": -3}
    ]}]});
    let timeouts = |d| {
        let p = parsed(d, &root);
        (
            p.handlers.iter().map(|h| h.timeout).collect::<Vec<_>>(),
            p.warnings,
        )
    };
    let (codex, warnings) = timeouts(Dialect::Codex);
    assert_eq!(
        codex,
        [
            Some(Duration::from_secs(5)),
            Some(Duration::from_millis(1500)),
            None,
            None,
            None
        ]
    );
    assert_eq!(
        warnings.len(),
        3,
        "invalid timeouts are reported: {warnings:?}"
    );
    let (cc, _) = timeouts(Dialect::ClaudeCode);
    assert_eq!(cc[0], None, "Claude Code has no timeoutSec");
    assert_eq!(cc[1], Some(Duration::from_millis(1500)));
}

#[test]
fn malformed_structure_is_skipped_without_failing() {
    for root in [
        json!(null),
        json!([1, 2]),
        json!("text"),
        json!({"hooks": []}),
    ] {
        let p = parsed(Dialect::ClaudeCode, &root);
        assert!(p.handlers.is_empty(), "{root}");
    }
    let p = parsed(
        Dialect::ClaudeCode,
        &json!({
            "PreToolUse": {"not": "an array"},
            "PostToolUse": [7, {"matcher": "Bash"}, {"hooks": "x"}, {"hooks": [{"command": "ok"}]}],
            "Stop": []
        }),
    );
    assert_eq!(summary(&p).len(), 1);
    assert_eq!(p.handlers[0].id, "/c/f.json#PostToolUse[3][0]");
    assert_eq!(p.warnings.len(), 4, "{:?}", p.warnings);
}

#[test]
fn matchers_on_prompt_and_stop_are_discarded_before_validation() {
    for dialect in Dialect::ALL {
        let p = parsed(
            dialect,
            &json!({
                "UserPromptSubmit": [{"matcher": "[", "hooks": [{"command": "a"}]}],
                "Stop": [{"matcher": "(", "hooks": [{"command": "b"}]}]
            }),
        );
        assert_eq!(p.handlers.len(), 2);
        assert!(
            p.handlers
                .iter()
                .all(|h| h.matcher_text.is_none() && h.matcher.is_all())
        );
    }
}

#[test]
fn unsupported_events_are_ignored_before_their_matchers_are_read() {
    let root = json!({
        "Setup": [{"matcher": "(", "hooks": [{"command": "x"}]}],
        "Notification": [{"hooks": [{"command": "y"}]}],
        "PostToolUseFailure": [{"matcher": "(", "hooks": [{"command": "z"}]}],
        "UserPromptSubmit": [{"hooks": [{"command": "kept"}]}]
    });
    let codex = parsed(Dialect::Codex, &root);
    assert_eq!(summary(&codex).len(), 1, "Codex has no PostToolUseFailure");
    assert!(
        codex
            .warnings
            .iter()
            .any(|w| w.contains("\"PostToolUseFailure\""))
    );
    // Claude Code has PostToolUseFailure, so its invalid matcher rejects the file.
    let err = parse(Dialect::ClaudeCode, Path::new("/c/f.json"), &root).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid claude-code regex matcher \"(\" on event \"PostToolUseFailure\": unclosed group"
    );
}

fn status_of(hooks: &Hooks) -> HookFileStatus {
    let mut list = hooks.list();
    assert_eq!(list.len(), 1, "{list:?}");
    list.remove(0)
}

#[tokio::test]
async fn an_invalid_regex_rejects_the_whole_file() {
    let fx = Fx::new();
    for dialect in Dialect::ALL {
        let root = json!({"hooks": {
            "UserPromptSubmit": [{"hooks": [{"command": format!("touch {}", fx.q("ran"))}]}],
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"command": "true"}]},
                {"matcher": "[", "hooks": [{"command": "true"}]}
            ]
        }});
        let hooks = match dialect {
            Dialect::ClaudeCode => fx.cc(&root),
            Dialect::Codex => fx.codex(&root),
        };
        let status = status_of(&hooks);
        assert_eq!(status.status, FileStatus::Rejected);
        assert!(status.handlers.is_empty());
        let error = status.error.unwrap();
        assert_eq!(
            error,
            format!(
                "invalid {} regex matcher \"[\" on event \"PreToolUse\": unclosed character class",
                dialect.as_str()
            )
        );
        let run = hooks.run(&fx.ctx(), prompt("hi")).await;
        assert!(run.records.is_empty());
        assert!(
            !fx.path("ran").exists(),
            "nothing from a rejected file runs"
        );
    }
}

#[tokio::test]
async fn missing_files_are_reported_and_others_still_load() {
    let fx = Fx::new();
    let good = fx.file(
        "good.json",
        &config("UserPromptSubmit", None, &["echo hi >&2"]),
    );
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![fx.path("nope.json"), good.clone()],
        codex: vec![fx.path("nope-either.json")],
        ..HookSettings::default()
    });
    let list = hooks.list();
    let statuses: Vec<(Dialect, FileStatus)> = list.iter().map(|s| (s.dialect, s.status)).collect();
    assert_eq!(
        statuses,
        [
            (Dialect::ClaudeCode, FileStatus::Missing),
            (Dialect::ClaudeCode, FileStatus::Loaded),
            (Dialect::Codex, FileStatus::Missing),
        ]
    );
    assert_eq!(list[1].path, good);
    assert_eq!(list[1].handlers[0].timeout, Duration::from_secs(600));
    assert_eq!(list[1].handlers[0].event, EventName::UserPromptSubmit);
    let run = hooks.run(&fx.ctx(), prompt("hi")).await;
    assert_eq!(decisions(&run), ["pass"]);
}

#[tokio::test]
async fn not_json_is_rejected() {
    let fx = Fx::new();
    let path = fx.path("bad.json");
    std::fs::write(&path, "{ nope").unwrap();
    let hooks = fx.hooks(HookSettings {
        codex: vec![path],
        ..HookSettings::default()
    });
    let status = status_of(&hooks);
    assert_eq!(status.status, FileStatus::Rejected);
    assert!(status.error.unwrap().contains("is not valid JSON"));
}

#[tokio::test]
async fn reload_rereads_the_files() {
    let fx = Fx::new();
    let hooks = fx.cc(&config("Stop", None, &["true"]));
    assert_eq!(status_of(&hooks).handlers.len(), 1);
    fx.file(
        "cc/settings.json",
        &config("PreToolUse", Some("["), &["true"]),
    );
    let reloaded = hooks.reload();
    assert_eq!(reloaded[0].status, FileStatus::Rejected);
    fx.file("cc/settings.json", &config("Stop", None, &["true", "true"]));
    assert_eq!(hooks.reload()[0].handlers.len(), 2);
    assert_eq!(status_of(&hooks).status, FileStatus::Loaded);
}

#[tokio::test]
async fn project_files_run_only_when_enabled_and_are_listed() {
    let fx = Fx::new();
    let marker = |name: &str| format!("echo x >> {}", fx.q(name));
    let cc = config("UserPromptSubmit", None, &[&marker("cc-ran")]);
    let codex = config("UserPromptSubmit", None, &[&marker("codex-ran")]);
    fx.file("proj/.claude/settings.json", &cc);
    fx.file("proj/.codex/hooks.json", &codex);

    let off = fx.hooks(HookSettings::default());
    assert!(off.run(&fx.ctx(), prompt("p")).await.records.is_empty());
    assert!(!fx.path("cc-ran").exists());

    let on = fx.hooks(HookSettings {
        project_hooks: true,
        ..HookSettings::default()
    });
    let run = on.run(&fx.ctx(), prompt("p")).await;
    assert_eq!(decisions(&run), ["pass", "pass"]);
    assert_eq!(fx.read("cc-ran"), "x\n");
    assert_eq!(fx.read("codex-ran"), "x\n");
    let list = on.list();
    assert_eq!(list.len(), 2);
    assert!(
        list.iter()
            .all(|s| s.project && s.status == FileStatus::Loaded)
    );
    assert_eq!(list[0].path, fx.cwd.join(".claude/settings.json"));
    assert_eq!(list[1].path, fx.cwd.join(".codex/hooks.json"));

    // A change is seen at the next invocation; a bad project file is listed with its error.
    fx.file(
        "proj/.codex/hooks.json",
        &config("PreToolUse", Some("("), &["true"]),
    );
    let run = on.run(&fx.ctx(), prompt("p")).await;
    assert_eq!(decisions(&run), ["pass"]);
    let codex = on
        .list()
        .into_iter()
        .find(|s| s.dialect == Dialect::Codex)
        .unwrap();
    assert_eq!(codex.status, FileStatus::Rejected);
    assert!(
        codex
            .error
            .unwrap()
            .contains("invalid codex regex matcher \"(\"")
    );

    // A project file that is also configured runs once.
    let both = fx.hooks(HookSettings {
        project_hooks: true,
        claude_code: vec![fx.cwd.join(".claude/settings.json")],
        ..HookSettings::default()
    });
    std::fs::remove_file(fx.cwd.join(".codex/hooks.json")).unwrap();
    assert_eq!(decisions(&both.run(&fx.ctx(), prompt("p")).await), ["pass"]);
}

#[test]
fn settings_table_parses_with_defaults_and_refuses_unknown_keys() {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        hooks: HookSettings,
    }
    let f: File = toml::from_str("").unwrap();
    assert_eq!(f.hooks, HookSettings::default());
    assert_eq!(f.hooks.default_timeout, Duration::from_secs(600));
    assert_eq!(f.hooks.stop_continuation_cap, 8);
    assert_eq!(f.hooks.stderr_summary_chars, 500);
    assert!(!f.hooks.project_hooks);

    let f: File = toml::from_str(
        r#"[hooks]
claude_code = ["/a/settings.json"]
codex = ["rel/hooks.json"]
project_hooks = true
default_timeout_ms = 1500
stop_continuation_cap = 2
stderr_summary_chars = 40
"#,
    )
    .unwrap();
    let mut s = f.hooks;
    assert_eq!(s.claude_code, [Path::new("/a/settings.json")]);
    assert_eq!(s.default_timeout, Duration::from_millis(1500));
    assert_eq!((s.stop_continuation_cap, s.stderr_summary_chars), (2, 40));
    assert!(s.project_hooks);
    s.resolve_relative(Path::new("/etc/dsh"));
    assert_eq!(s.codex, [Path::new("/etc/dsh/rel/hooks.json")]);
    assert_eq!(s.claude_code, [Path::new("/a/settings.json")]);

    for bad in [
        "[hooks]\ntimeout = 5",
        "[hooks]\ndefault_timeout_ms = 0",
        "[hooks]\nstderr_summary_chars = 0",
        "[hooks]\nproject_hooks = \"yes\"",
    ] {
        assert!(toml::from_str::<File>(bad).is_err(), "{bad}");
    }
    let zero = HookSettings {
        stderr_summary_chars: 0,
        ..HookSettings::default()
    };
    assert_eq!(
        zero.validate().unwrap_err().to_string(),
        "hooks.stderr_summary_chars must be at least 1"
    );
    assert_eq!(zero.sanitized().stderr_summary_chars, 500);
}

#[tokio::test]
async fn non_regular_files_are_rejected_without_blocking() {
    let fx = Fx::new();
    let dir = fx.path("a-directory.json");
    std::fs::create_dir(&dir).unwrap();
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![dir],
        ..HookSettings::default()
    });
    let status = status_of(&hooks);
    assert_eq!(status.status, FileStatus::Rejected);
    assert!(status.error.unwrap().contains("not a regular file"));

    // A FIFO as a project file would block a reader forever.
    std::fs::create_dir(fx.cwd.join(".claude")).unwrap();
    let fifo = fx.cwd.join(".claude/settings.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let hooks = fx.hooks(HookSettings {
        project_hooks: true,
        ..HookSettings::default()
    });
    assert!(hooks.run(&fx.ctx(), prompt("p")).await.records.is_empty());
    let status = status_of(&hooks);
    assert!(status.project);
    assert_eq!(status.status, FileStatus::Rejected);
}

#[tokio::test]
async fn handles_says_whether_any_file_the_session_would_use_has_the_event() {
    let fx = Fx::new();
    let cwd = fx.cwd.clone();
    let none = fx.hooks(HookSettings::default());
    assert!(!none.handles(EventName::Stop, &cwd).await);

    // A configured file: its events only, and whatever its matchers say.
    let configured = fx.codex(&config("Stop", None, &["true"]));
    assert!(configured.handles(EventName::Stop, &cwd).await);
    assert!(!configured.handles(EventName::UserPromptSubmit, &cwd).await);

    // A project file counts only when project hooks are enabled, and only in its project.
    fx.file(
        "proj/.claude/settings.json",
        &config("UserPromptSubmit", None, &["true"]),
    );
    let off = fx.hooks(HookSettings::default());
    assert!(!off.handles(EventName::UserPromptSubmit, &cwd).await);
    let on = fx.hooks(HookSettings {
        project_hooks: true,
        ..HookSettings::default()
    });
    assert!(on.handles(EventName::UserPromptSubmit, &cwd).await);
    assert!(
        !on.handles(EventName::UserPromptSubmit, &fx.path("elsewhere"))
            .await
    );
}

#[test]
fn claude_code_http_hooks_are_read_with_their_headers() {
    let root = json!({"Stop": [{"hooks": [
        {"type": "http", "url": "https://hooks.example/stop", "timeout": 5,
         "headers": {"Authorization": "Bearer $T"}, "allowedEnvVars": ["T"]},
        {"type": "http"},
        {"type": "http", "url": "http://x", "headers": {"A": 1}},
    ]}]});
    let p = parsed(Dialect::ClaudeCode, &root);
    assert_eq!(p.handlers.len(), 1, "{:?}", p.warnings);
    let h = &p.handlers[0];
    assert_eq!(h.command, "https://hooks.example/stop");
    assert_eq!(h.timeout, Some(Duration::from_secs(5)));
    let http = h.http.as_ref().unwrap();
    assert_eq!(
        http.headers,
        [("Authorization".to_owned(), "Bearer $T".to_owned())]
    );
    assert_eq!(http.allowed_env, ["T"]);
    let all = p.warnings.join("\n");
    assert!(
        all.contains("Stop[0][1]: http hook without a string \"url\""),
        "{all}"
    );
    assert!(
        all.contains("Stop[0][2]: header \"A\" is not a string"),
        "{all}"
    );
}
