//! Hook processes: a timeout kills the hook with its children and the turn goes on; cancelling the
//! turn kills a hook that is still running.

use super::*;

/// A hook command that starts a grandchild `sleep <tag>1` (pid to `<name>-child.pid`), writes its
/// own pid to `<name>.pid`, then sleeps `<tag>2` itself. `tag` keeps the processes recognisable.
fn sleeper(dir: &Dir, name: &str, tag: u32) -> String {
    format!(
        "cat > /dev/null; sleep {tag}1 & echo $! > {child}; echo $$ > {own}; sleep {tag}2",
        child = dir.q(&format!("{name}-child.pid")),
        own = dir.q(&format!("{name}.pid")),
    )
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_children_and_the_turn_continues() {
    let w = World::new(|dir| {
        Setup::claude_code(
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": sleeper(dir, "slow", 300), "timeout": 1}
            ]}]}}),
        )
    });
    let agent = w.agent(&json!({"replies": [
        bash_reply("creating the marker", &format!("touch {}", w.q("marker"))),
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "go");

    // The timeout is a non-blocking error: the call ran and the turn completed.
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.text(), "done");
    assert!(w.path("marker").exists(), "the tool did not run");
    let events = w.events(&agent);
    let results = of_type(&events, "hook/result");
    assert_eq!(results.len(), 1, "{events:#?}");
    assert_eq!(results[0]["data"]["decision"], "error", "{}", results[0]);
    // The hook and the grandchild it left behind are gone.
    assert_gone(w.pid("slow.pid"), "3002");
    assert_gone(w.pid("slow-child.pid"), "sleep 3001");
}

/// Starts a turn whose `event` hook sleeps, waits until it runs, cancels the turn, and checks that
/// the turn ended aborted and the hook's processes are gone. The model's first reply creates
/// `<dir>/marker` (unless `event` is Stop, which runs after the last reply). Returns the world and
/// the agent.
fn cancel_while(event: &str, tag: u32) -> (World, String) {
    let matcher = (event == "PreToolUse").then_some("Bash");
    let w = World::new(|dir| {
        Setup::claude_code(hook_file(&[(event, matcher, &sleeper(dir, "hook", tag))]))
    });
    let replies = if event == "Stop" {
        json!([{"text": "done"}, {"text": "never asked"}])
    } else {
        json!([
            bash_reply("creating the marker", &format!("touch {}", w.q("marker"))),
            {"text": "done"},
        ])
    };
    let agent = w.agent(&json!({ "replies": replies }));
    let prompt = w.prompt_in_background(&agent, "go");
    let hook = w.pid("hook.pid");
    let child = w.pid("hook-child.pid");
    // The pid files are written before the processes exec `sleep`: wait for the exec.
    let running = || alive(hook, &format!("{tag}2")) && alive(child, &format!("sleep {tag}1"));
    assert!(
        eventually(Duration::from_secs(20), running),
        "the hook {hook} ({:?}, {:?}) or its child {child} ({:?}, {:?}) is not running; daemon log:\n{}",
        dsh_core::test_support::proc_state(hook),
        std::fs::read_to_string(format!("/proc/{hook}/cmdline")).ok(),
        dsh_core::test_support::proc_state(child),
        std::fs::read_to_string(format!("/proc/{child}/cmdline")).ok(),
        w.daemon.log_text()
    );

    let cancelled = w.daemon.dshctl_json(&["agent", "cancel", &agent]);
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let turn = Turn::wait(prompt);
    assert_eq!(turn.kind(), "aborted", "{:?}", turn.lines);
    assert_gone(hook, &format!("{tag}2"));
    assert_gone(child, &format!("sleep {tag}1"));
    assert!(!w.path("marker").exists(), "the tool ran after the cancel");
    (w, agent)
}

#[test]
fn cancelling_a_turn_kills_its_running_user_prompt_submit_hook() {
    let (w, agent) = cancel_while("UserPromptSubmit", 400);
    let events = w.events(&agent);
    assert!(
        of_type(&events, "assistant/message").is_empty(),
        "no model request after the cancel: {events:#?}"
    );
}

#[test]
fn cancelling_a_turn_kills_its_running_pre_tool_use_hook() {
    let (w, agent) = cancel_while("PreToolUse", 500);
    let events = w.events(&agent);
    // The call still got a result, and the model was not asked again.
    assert_eq!(of_type(&events, "tool/result").len(), 1, "{events:#?}");
    assert_eq!(
        of_type(&events, "assistant/message").len(),
        1,
        "{events:#?}"
    );
}

#[test]
fn cancelling_a_turn_kills_its_running_stop_hook_and_the_turn_ends_aborted() {
    let (w, agent) = cancel_while("Stop", 600);
    let events = w.events(&agent);
    let ends = of_type(&events, "turn/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["data"]["reason"]["kind"], "aborted", "{}", ends[0]);
    assert_eq!(
        of_type(&events, "assistant/message").len(),
        1,
        "no further step after the cancel: {events:#?}"
    );
}
