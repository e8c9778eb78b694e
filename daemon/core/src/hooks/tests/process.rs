//! How hooks run: environment, working directory, concurrency, timeouts and cancellation.

use serde_json::json;

use super::*;
use crate::hooks::MergedOutcome;

fn env_map(text: &str) -> std::collections::BTreeMap<String, String> {
    text.split('\0')
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test]
async fn the_environment_is_scrubbed_and_claude_code_gets_its_project_dir() {
    let fx = Fx::new();
    let cc = fx.cc(&config(
        "UserPromptSubmit",
        None,
        &[&format!(
            "env -0 > {}; pwd > {}",
            fx.q("cc-env"),
            fx.q("cc-pwd")
        )],
    ));
    let codex = fx.codex(&config(
        "UserPromptSubmit",
        None,
        &[&format!(
            "env -0 > {}; pwd > {}",
            fx.q("codex-env"),
            fx.q("codex-pwd")
        )],
    ));
    assert_eq!(decisions(&cc.run(&fx.ctx(), prompt("p")).await), ["pass"]);
    assert_eq!(
        decisions(&codex.run(&fx.ctx(), prompt("p")).await),
        ["pass"]
    );

    let cwd = fx.cwd.to_str().unwrap();
    for name in ["cc", "codex"] {
        let env = env_map(&fx.read(&format!("{name}-env")));
        assert_eq!(
            fx.read(&format!("{name}-pwd")).trim(),
            cwd,
            "hooks run in the session cwd"
        );
        assert_eq!(env.get("PLAIN").map(String::as_str), Some("kept"));
        let leaked: Vec<&String> = env
            .keys()
            .filter(|k| k.to_ascii_uppercase().starts_with("DSH_") || k.contains("API_KEY"))
            .collect();
        assert!(leaked.is_empty(), "{name}: {leaked:?} reached the hook");
    }
    let cc_env = env_map(&fx.read("cc-env"));
    assert_eq!(
        cc_env.get("CLAUDE_PROJECT_DIR").map(String::as_str),
        Some(cwd)
    );
    assert!(
        !cc_env.contains_key("CLAUDE_PLUGIN_ROOT"),
        "Claude Code sets CLAUDE_PLUGIN_ROOT only for plugin hooks"
    );
    assert!(!env_map(&fx.read("codex-env")).contains_key("CLAUDE_PROJECT_DIR"));
}

#[tokio::test]
async fn claude_code_expands_its_variables_in_commands() {
    let fx = Fx::new();
    // Single quotes: only a textual expansion can produce the path.
    let command = format!(
        "printf '%s|%s' '${{CLAUDE_PROJECT_DIR}}' '${{CLAUDE_PLUGIN_ROOT}}' > {}",
        fx.q("out")
    );
    let path = fx.file(
        "plugin/hooks/hooks.json",
        &config("Stop", None, &[&command]),
    );
    let stop = HookEvent::Stop {
        stop_hook_active: false,
        last_assistant_message: None,
    };
    let cc = fx.hooks(HookSettings {
        claude_code: vec![path.clone()],
        ..HookSettings::default()
    });
    assert_eq!(decisions(&cc.run(&fx.ctx(), stop.clone()).await), ["pass"]);
    assert_eq!(
        fx.read("out"),
        format!("{}|{}", fx.cwd.display(), fx.path("plugin").display()),
        "the plugin root of <plugin>/hooks/hooks.json is <plugin>"
    );
    let codex = fx.hooks(HookSettings {
        codex: vec![path],
        ..HookSettings::default()
    });
    assert_eq!(decisions(&codex.run(&fx.ctx(), stop).await), ["pass"]);
    assert_eq!(
        fx.read("out"),
        "${CLAUDE_PROJECT_DIR}|${CLAUDE_PLUGIN_ROOT}",
        "Codex does no substitution"
    );
}

#[tokio::test]
async fn matching_hooks_run_concurrently_and_are_recorded_in_configured_order() {
    let fx = Fx::new();
    // Each hook waits for the other's marker (bounded): run one after the other, the first would
    // give up and exit 1.
    let wait_for = |mine: &str, theirs: &str| {
        format!(
            "touch {mine}; for i in $(seq 1 3000); do [ -f {theirs} ] && exit 0; sleep 0.01; done; exit 1",
            mine = fx.q(mine),
            theirs = fx.q(theirs)
        )
    };
    let a = wait_for("a", "b");
    let b = wait_for("b", "a");
    let hooks = fx.cc(&config("PreToolUse", Some("Bash"), &[&a, &b]));
    let run = hooks
        .run(&fx.ctx(), pre_tool("bash", json!({"command": "ls"})))
        .await;
    assert_eq!(decisions(&run), ["pass", "pass"]);
    let order: Vec<(&str, &str)> = run
        .records
        .iter()
        .map(|r| match r {
            EventData::HookInvoked { handler, .. } => ("invoked", handler.as_str()),
            EventData::HookResult { handler, .. } => ("result", handler.as_str()),
            _ => ("?", ""),
        })
        .map(|(kind, h)| (kind, h.rsplit_once('#').map_or(h, |(_, id)| id)))
        .collect();
    assert_eq!(
        order,
        [
            ("invoked", "PreToolUse[0][0]"),
            ("result", "PreToolUse[0][0]"),
            ("invoked", "PreToolUse[0][1]"),
            ("result", "PreToolUse[0][1]"),
        ]
    );
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_with_its_children() {
    let fx = Fx::new();
    let mut root = config(
        "PreToolUse",
        None,
        &[&format!("sleep 31301 & echo $! > {}; wait", fx.q("pid"))],
    );
    root["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"] = json!(1);
    let hooks = fx.cc(&root);
    let run = hooks
        .run(&fx.ctx(), pre_tool("bash", json!({"command": "ls"})))
        .await;
    assert_eq!(
        run.outcome,
        MergedOutcome::default(),
        "a timeout never blocks"
    );
    assert_eq!(decisions(&run), ["error"]);
    let EventData::HookResult {
        exit_code,
        stderr_summary,
        ..
    } = results(&run)[0]
    else {
        unreachable!()
    };
    assert_eq!(*exit_code, None);
    assert_eq!(stderr_summary.as_deref(), Some("[timed out after 1000ms]"));
    let pid = read_pid(&fx.path("pid")).await;
    eventually("the hook's grandchild to die", || {
        !alive(pid, "sleep 31301")
    })
    .await;
}

#[tokio::test]
async fn the_default_timeout_applies_to_hooks_without_one() {
    let fx = Fx::new();
    let path = fx.file(
        "cc.json",
        &config("UserPromptSubmit", None, &["sleep 31302"]),
    );
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![path],
        default_timeout: Duration::from_millis(200),
        ..HookSettings::default()
    });
    let run = hooks.run(&fx.ctx(), prompt("p")).await;
    assert_eq!(decisions(&run), ["error"]);
    assert_eq!(
        hooks.list()[0].handlers[0].timeout,
        Duration::from_millis(200)
    );
}

#[tokio::test]
async fn cancelling_the_token_kills_running_hooks() {
    let fx = Fx::new();
    let hooks = fx.cc(&config(
        "UserPromptSubmit",
        None,
        &[&format!("sleep 31303 & echo $! > {}; wait", fx.q("pid"))],
    ));
    let ctx = fx.ctx();
    let pid_file = fx.path("pid");
    let (run, pid) = tokio::join!(hooks.run(&ctx, prompt("p")), async {
        let pid = read_pid(&pid_file).await;
        ctx.cancel.cancel();
        pid
    });
    assert_eq!(decisions(&run), ["error"]);
    assert_eq!(run.outcome, MergedOutcome::default());
    let EventData::HookResult { stderr_summary, .. } = results(&run)[0] else {
        unreachable!()
    };
    assert_eq!(stderr_summary.as_deref(), Some("[cancelled]"));
    eventually("the cancelled hook's child to die", || {
        !alive(pid, "sleep 31303")
    })
    .await;

    // A token cancelled before the call: nothing starts, and the record says so.
    let run = hooks.run(&ctx, prompt("p")).await;
    assert_eq!(decisions(&run), ["error"]);
}

#[tokio::test]
async fn dropping_the_run_kills_its_hooks() {
    let fx = Fx::new();
    let hooks = fx.cc(&config(
        "UserPromptSubmit",
        None,
        &[&format!("sleep 31304 & echo $! > {}; wait", fx.q("pid"))],
    ));
    let ctx = fx.ctx();
    let pid_file = fx.path("pid");
    let pid = tokio::select! {
        _ = hooks.run(&ctx, prompt("p")) => panic!("the hook should still be running"),
        pid = read_pid(&pid_file) => pid,
    };
    // The run future is gone: its task was aborted and the executor killed the group.
    eventually("the dropped hook's child to die", || {
        !alive(pid, "sleep 31304")
    })
    .await;
}

#[test]
fn the_engine_is_shareable_and_its_runs_can_be_spawned() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let fx = Fx::new();
    let hooks = fx.hooks(HookSettings {
        project_hooks: true,
        ..HookSettings::default()
    });
    send_sync(&hooks);
    let ctx = fx.ctx();
    let run = hooks.run(&ctx, prompt("p"));
    send(&run);
}
