//! Settings changed on a live agent (`dshctl agent set`, `Agents.Configure`): in place, logged,
//! and what the session resumes with; refused during a turn and on a child.

use super::*;

fn sandbox_of(daemon: &TestDaemon, id: &str) -> Value {
    daemon.dshctl_json(&["agent", "show", id])["sandbox"].clone()
}

#[test]
fn a_sandbox_set_on_a_live_agent_is_logged_and_kept_by_a_resume() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("w");
    let script = daemon.write_script(&json!({"replies": [{"text": "one"}, {"text": "two"}]}));
    let script = script.to_str().unwrap();
    let work_str = work.to_str().unwrap();
    let created = daemon.dshctl_json(&[
        "agent",
        "new",
        "--cwd",
        work_str,
        "--script",
        script,
        "--sandbox",
        "workspace-write",
        "--network",
        "on",
    ]);
    let id = created["agent_id"].as_str().unwrap().to_owned();
    daemon.prompt(&id, "first").assert_completed();

    let set = daemon.dshctl_json(&[
        "agent",
        "set",
        &id,
        "--sandbox",
        "read-only",
        "--network",
        "off",
        "--approval",
        "always",
    ]);
    assert_eq!(
        set["sandbox"],
        json!({"mode": "read-only", "network": "off"}),
        "{set}"
    );
    assert_eq!(set["approval"], "always", "{set}");
    assert_eq!(set["turns"], 1, "the same live agent: {set}");
    // One event with every setting, stored at once (the session has had a turn).
    let events = daemon.events(&id);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "session/settings", "{last}");
    assert_eq!(
        (&last["data"]["approval"], &last["data"]["sandbox"]),
        (
            &json!("always"),
            &json!({"mode": "read-only", "network": "off"})
        ),
        "{last}"
    );
    // Asking for what it runs with already logs nothing.
    daemon.dshctl_json(&["agent", "set", &id, "--sandbox", "read-only"]);
    assert_eq!(daemon.events(&id).len(), events.len());

    // Closed and resumed without sandbox options: the sandbox it last ran with.
    daemon.dshctl_json(&["agent", "close", &id]);
    daemon.dshctl_json(&["agent", "resume", &id, "--script", script]);
    assert_eq!(
        sandbox_of(&daemon, &id),
        json!({"mode": "read-only", "network": "off"})
    );
    daemon.prompt(&id, "second").assert_completed();
}

#[test]
fn settings_are_refused_during_a_turn_and_on_a_child() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("w");
    let script = json!({"replies": [{"text": "slow", "delay_ms": 600_000}]});
    let id = daemon.new_agent(&work, &script);
    let running = daemon.prompt_in_background(&id, "wait");
    assert!(
        dsh_tests::eventually(Duration::from_secs(20), || {
            daemon.dshctl_json(&["agent", "show", &id])["state"] == "running"
        }),
        "the turn did not start"
    );
    let refused = daemon.dshctl(&["agent", "set", &id, "--approval", "never"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("busy"),
        "{refused:?}"
    );
    daemon.dshctl_json(&["agent", "cancel", &id]);
    let _ = dsh_tests::agents::finish_prompt(running);
    let child = daemon.dshctl_json(&[
        "agent",
        "spawn",
        "--parent",
        &id,
        "--script",
        daemon
            .write_script(&json!({"replies": [{"text": "c"}]}))
            .to_str()
            .unwrap(),
    ]);
    let child = child["agent_id"].as_str().unwrap();
    let refused = daemon.dshctl(&["agent", "set", child, "--approval", "never"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("its parent's to set"),
        "{refused:?}"
    );
}
