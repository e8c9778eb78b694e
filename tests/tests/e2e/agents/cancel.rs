//! Cancel, close and SIGTERM during turns: turns end aborted with their cause, tools and children stop.

use super::*;

#[test]
fn cancel_during_a_delayed_step_ends_the_turn_aborted_by_the_user() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("cancel"), &slow());
    let running = daemon.prompt_in_background(&id, "wait");
    daemon.wait_for_events(&id, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });
    assert_eq!(
        daemon.dshctl_json(&["agent", "show", &id])["state"],
        "running"
    );

    let cancelled = daemon.dshctl_json(&["agent", "cancel", &id]);
    assert_eq!(cancelled["cancelled"], true);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.code, Some(1), "an aborted turn must exit 1");
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));

    let log = read_session_file(&daemon.located_path(&id)).expect("no log after the turn");
    let end = log.events.last().unwrap();
    assert_eq!(end["type"], "turn/end");
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "cause": "user"})
    );
    assert_eq!(
        types(&log.events),
        [
            "turn/start",
            "user/message",
            "step/start",
            "step/end",
            "turn/end"
        ]
    );
    // Nothing left to cancel; the agent takes the next prompt (its script is spent, so it ends in
    // an error that says so).
    assert_eq!(
        daemon.dshctl_json(&["agent", "cancel", &id])["cancelled"],
        false
    );
    let next = daemon.prompt(&id, "again");
    assert_eq!(next.turn_started(), 2);
    assert_eq!(next.reason().0, "error");
    assert!(next.reason().1.contains("exhausted"), "{:?}", next.reason());
}

#[test]
fn cancel_kills_a_running_bash_call_and_records_its_result() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("started");
    let command = format!("touch {}; sleep 30; echo finished", marker.display());
    let id = daemon.new_agent(
        &daemon.workdir("cancel-tool"),
        &json!({"replies": [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]}),
    );
    let running = daemon.prompt_in_background(&id, "sleep");
    assert!(
        dsh_tests::eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );
    daemon.dshctl_json(&["agent", "cancel", &id]);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1, "the started call has no result");
    assert_eq!(results[0]["isError"], true);
    assert!(!results[0]["content"].as_str().unwrap().contains("finished"));
}

#[test]
fn cancelling_a_parent_cancels_the_child_it_is_waiting_for() {
    let daemon = TestDaemon::start();
    let parent = daemon.new_agent(
        &daemon.workdir("family"),
        &json!({"replies": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "take forever"},
                             "child_script": {"replies": [{"text": "no", "delay_ms": 600_000}]}}]}
        ]}),
    );
    let running = daemon.prompt_in_background(&parent, "delegate");
    let mut child = String::new();
    let found = dsh_tests::eventually(PATIENCE, || {
        let list = daemon.dshctl_json(&["agent", "list"]);
        match list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["parent_agent_id"] == parent.as_str())
        {
            Some(a) => {
                child = a["agent_id"].as_str().unwrap().to_owned();
                true
            }
            None => false,
        }
    });
    assert!(found, "the child agent never appeared");
    daemon.wait_for_events(&child, "child waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });

    daemon.dshctl_json(&["agent", "cancel", &parent]);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["isError"], true);

    let child_log = read_session_file(&daemon.located_path(&child)).expect("no child log");
    let end = child_log.events.last().unwrap();
    assert_eq!(end["type"], "turn/end");
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "cause": "parent"})
    );
}

#[test]
fn closing_an_agent_mid_turn_ends_the_turn_aborted_and_keeps_the_session() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("close"), &slow());
    let path = daemon.located_path(&id);
    let running = daemon.prompt_in_background(&id, "wait");
    daemon.wait_for_events(&id, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });

    let closed = daemon.dshctl_json(&["agent", "close", &id]);
    assert_eq!(closed["closed"], true);
    let prompted = finish_prompt(running);
    assert_eq!(
        prompted.reason(),
        ("aborted".to_owned(), "closed".to_owned())
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    let (kind, _) = refused(&daemon, &["agent", "show", &id]);
    assert_eq!(kind, "not_found");

    let log = read_session_file(&path).expect("closing must checkpoint the session");
    assert_eq!(
        log.events.last().unwrap()["data"]["reason"],
        json!({"kind": "aborted", "cause": "closed"})
    );
    // The stored session can be resumed.
    let resumed = daemon.agent_with_script(&["resume", &id], &json!({"replies": []}));
    assert_eq!(resumed["agent_id"], id.as_str());
    assert_eq!(resumed["turns"], 1);
}

#[test]
fn sigterm_during_turns_exits_zero_within_five_seconds_and_records_the_aborts() {
    let mut daemon = TestDaemon::start();
    // One agent waits for its model, another for a bash call that would sleep for 30 s and
    // ignores SIGTERM (so only the executor's escalation to SIGKILL ends it).
    let waiting = daemon.new_agent(&daemon.workdir("term-model"), &slow());
    let marker = daemon.dir.path().join("sleeping");
    let command = format!("trap '' TERM; touch {}; sleep 30", marker.display());
    let sleeping = daemon.new_agent(
        &daemon.workdir("term-tool"),
        &json!({"replies": [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]}),
    );
    let paths = [
        daemon.located_path(&waiting),
        daemon.located_path(&sleeping),
    ];
    let running = [
        daemon.prompt_in_background(&waiting, "wait"),
        daemon.prompt_in_background(&sleeping, "sleep"),
    ];
    daemon.wait_for_events(&waiting, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });
    assert!(
        dsh_tests::eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );
    assert!(paths.iter().all(|p| !p.exists()));

    let status = daemon.signal_and_wait(Signal::TERM, Duration::from_secs(5));
    assert!(status.success(), "exit {status:?}\n{}", daemon.log_text());
    assert!(!daemon.socket.exists());
    for child in running {
        finish_prompt(child);
    }
    for path in &paths {
        let log = read_session_file(path).expect("shutdown must checkpoint every session");
        let end = log.events.last().unwrap();
        assert_eq!(end["type"], "turn/end", "{}", path.display());
        assert_eq!(
            end["data"]["reason"],
            json!({"kind": "aborted", "cause": "shutdown"})
        );
        assert_eq!(
            count(&log.events, "tool/call"),
            count(&log.events, "tool/result")
        );
    }
    let tool_log = read_session_file(&paths[1]).unwrap();
    assert_eq!(count(&tool_log.events, "tool/result"), 1);
}
