//! Crashes (`kill -9`) at several points of a turn, and the repair on resume.

use super::*;

#[test]
fn a_crash_in_the_first_model_delay_leaves_no_file_and_nothing_to_resume() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("crash-first");
    let id = daemon.new_agent(
        &cwd,
        &json!({"replies": [{"text": "late", "delay_ms": 600_000}]}),
    );
    let path = daemon.located_path(&id);
    let running = daemon.prompt_in_background(&id, "hi");
    daemon.wait_for_events(&id, "step 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });
    assert!(
        !path.exists(),
        "the file exists before the first checkpoint"
    );

    daemon.kill9();
    let prompt = dsh_tests::agents::finish_prompt(running);
    assert_eq!(
        prompt.code,
        Some(1),
        "a prompt cut off by a crash must fail"
    );
    assert!(!path.exists());

    daemon.restart_with(DaemonSpec::default());
    let (kind, message) = refused(&daemon, &["agent", "resume", &id]);
    assert_eq!(kind, "not_found");
    assert!(message.contains(&id), "{message}");
    assert!(!path.exists());
    assert_serving(&daemon);
}

/// A script whose first turn answers with text, and whose second turn calls `bash` in step 1 and
/// gets `step_two` (something that never ends) as the model's answer in step 2.
fn crash_script(step_two: Value) -> Value {
    json!({"replies": [
        {"text": "warm"},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo one"}, "id": "call-one"}]},
        step_two,
    ]})
}

/// Resumes `id` after a crash and checks what every crash must leave: the checkpointed prefix
/// intact, every durable tool call answered (a lost outcome as `TOOL_OUTCOME_UNKNOWN`), the open
/// turn closed as interrupted, a file that loads and takes the next turn. Returns the repaired log.
fn resume_after_crash(daemon: &mut TestDaemon, id: &str, before: &SessionFile) -> Vec<Value> {
    daemon.restart_with(DaemonSpec::default());
    let path = daemon.located_path(id);
    daemon.agent_with_script(&["resume", id], &text_replies(&["after"]));
    let repaired = file(&path);
    assert_eq!(repaired.header, before.header);
    assert_contiguous(&repaired.events);
    let n = before.events.len();
    assert_eq!(
        repaired.events[..n],
        before.events[..],
        "checkpointed prefix"
    );
    let closers = &repaired.events[n..];
    let last = closers.last().expect("the open turn was not closed");
    assert_eq!(last["type"], "turn/end");
    assert_eq!(last["data"]["turn"], 2);
    assert_eq!(last["data"]["reason"]["kind"], "interrupted");
    for call in repaired.events.iter().filter(|e| e["type"] == "tool/call") {
        let call_id = &call["data"]["callId"];
        let results: Vec<&Value> = repaired
            .events
            .iter()
            .filter(|e| e["type"] == "tool/result" && e["data"]["callId"] == *call_id)
            .collect();
        assert_eq!(
            results.len(),
            1,
            "call {call_id} has {} results",
            results.len()
        );
        if closers.contains(results[0]) {
            assert_eq!(results[0]["data"]["code"], "TOOL_OUTCOME_UNKNOWN");
            assert_eq!(results[0]["data"]["isError"], true);
        }
    }
    // Turn 1 is intact.
    assert_eq!(types(&repaired.events[..ONE_TURN.len()]), ONE_TURN);
    assert_eq!(
        repaired.events[ONE_TURN.len() - 1]["data"]["reason"]["kind"],
        "completed"
    );

    let prompted = daemon.prompt(id, "again");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 3);
    let stored = file(&path).events;
    assert_contiguous(&stored);
    assert_eq!(stored[..repaired.events.len()], repaired.events[..]);
    assert_eq!(count(&stored, "session/end-seed"), 1);
    repaired.events
}

#[test]
fn a_crash_during_step_two_keeps_step_one_and_closes_the_turn_interrupted() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("crash-step2");
    let id = daemon.new_agent(
        &cwd,
        &crash_script(json!({"text": "never", "delay_ms": 600_000})),
    );
    let path = daemon.located_path(&id);
    daemon.prompt(&id, "first").assert_completed();
    let running = daemon.prompt_in_background(&id, "second");
    daemon.wait_for_file(&path, "step 1 of turn 2 checkpointed", |f| {
        has_step_end(&f.events, 2, 1)
    });
    daemon.wait_for_events(&id, "step 2 waiting for the model", |e| {
        has_step_start(e, 2, 2)
    });
    let before = file(&path);
    assert!(has_step_end(&before.events, 2, 1));

    daemon.kill9();
    dsh_tests::agents::finish_prompt(running);
    let repaired = resume_after_crash(&mut daemon, &id, &before);
    // Step 1 ended and its call was answered, so only the turn needed closing.
    assert_eq!(types(&repaired[before.events.len()..]), ["turn/end"]);
}

#[test]
fn a_crash_during_a_tool_call_closes_the_turn_and_answers_every_durable_call() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("crash-tool");
    let pid_file = daemon.dir.path().join("sleeper.pid");
    let command = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let id = daemon.new_agent(
        &cwd,
        &crash_script(json!({"tool_calls": [
            {"name": "bash", "arguments": {"command": command}, "id": "call-sleep"}
        ]})),
    );
    let path = daemon.located_path(&id);
    daemon.prompt(&id, "first").assert_completed();
    let running = daemon.prompt_in_background(&id, "second");
    let sleeper = {
        let mut pid = None;
        let found = eventually(PATIENCE, || {
            pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            pid.is_some()
        });
        assert!(found, "the bash call never started");
        pid.unwrap()
    };
    daemon.wait_for_file(&path, "step 1 of turn 2 checkpointed", |f| {
        has_step_end(&f.events, 2, 1)
    });
    let before = file(&path);

    daemon.kill9();
    // The crash orphans the sleeping tool process; end it so it does not outlive the test.
    if let Some(pid) = rustix::process::Pid::from_raw(sleeper) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    dsh_tests::agents::finish_prompt(running);
    let repaired = resume_after_crash(&mut daemon, &id, &before);
    assert!(
        !has_step_end(&repaired, 2, 2),
        "step 2 was never checkpointed, so repair cannot know it: {repaired:?}"
    );
}

#[test]
fn an_unanswered_durable_tool_call_is_closed_with_tool_outcome_unknown() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("unknown-outcome");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);

    // What a writer that made a tool call durable and then died would leave: turn 2 open in step
    // 1, with a call and no result.
    let mut lines = std::fs::read_to_string(&path).unwrap();
    let n = file(&path).events.len() as u64;
    let time = 1_700_000_000_000_i64;
    let call = json!({"id": "call-lost", "name": "bash", "arguments": {"command": "rm -rf build"}});
    for (i, (kind, data)) in [
        ("turn/start", json!({"turn": 2})),
        (
            "user/message",
            json!({"message": {"text": "clean", "source": {"kind": "user"}}}),
        ),
        ("step/start", json!({"turn": 2, "step": 1})),
        (
            "assistant/message",
            json!({"turn": 2, "step": 1, "message": {"text": "", "toolCalls": [call]}}),
        ),
        (
            "tool/call",
            json!({"turn": 2, "step": 1, "callId": "call-lost", "name": "bash",
                   "arguments": {"command": "rm -rf build"}}),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let event = json!({"type": kind, "seq": n + i as u64, "time": time, "data": data});
        lines.push_str(&format!("{event}\n"));
    }
    std::fs::write(&path, lines).unwrap();
    let before = file(&path);

    let repaired = resume_after_crash(&mut daemon, &id, &before);
    let closers = &repaired[before.events.len()..];
    assert_eq!(types(closers), ["tool/result", "step/end", "turn/end"]);
    assert_eq!(closers[0]["data"]["callId"], "call-lost");
    assert_eq!(closers[0]["data"]["code"], "TOOL_OUTCOME_UNKNOWN");
    assert_eq!(closers[1]["data"], json!({"turn": 2, "step": 1}));
}

#[test]
fn a_crash_on_sqlite_is_repaired_like_on_jsonl() {
    let sqlite = || DaemonSpec {
        args: vec!["--persistence".into(), "sqlite".into()],
        ..DaemonSpec::default()
    };
    let mut daemon = TestDaemon::start_with(sqlite());
    let db = daemon.home.join("sessions.sqlite3");
    let cwd = daemon.workdir("crash-sqlite");
    let id = daemon.new_agent(
        &cwd,
        &crash_script(json!({"text": "never", "delay_ms": 600_000})),
    );
    daemon.prompt(&id, "first").assert_completed();
    let running = daemon.prompt_in_background(&id, "second");
    assert!(
        eventually(PATIENCE, || has_step_end(&db_events(&db, &id), 2, 1)),
        "step 1 of turn 2 was not checkpointed"
    );
    daemon.wait_for_events(&id, "step 2 waiting for the model", |e| {
        has_step_start(e, 2, 2)
    });
    let before = db_events(&db, &id);

    daemon.kill9();
    dsh_tests::agents::finish_prompt(running);
    daemon.restart_with(sqlite());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["after"]));
    let repaired = db_events(&db, &id);
    assert_contiguous(&repaired);
    assert_eq!(repaired[..before.len()], before[..]);
    assert_eq!(types(&repaired[before.len()..]), ["turn/end"]);
    assert_eq!(
        repaired.last().unwrap()["data"]["reason"]["kind"],
        "interrupted"
    );

    let prompted = daemon.prompt(&id, "again");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 3);
    let live = daemon.events(&id);
    assert_eq!(db_events(&db, &id), live);
    assert_eq!(count(&live, "session/end-seed"), 1);
}

/// `kill -9` at several points of a turn whose children are running: after the restart every
/// acknowledged turn is there — the parent's, and those of the children whose answers the parent
/// had received — and every stored session, children included, resumes.
#[test]
fn a_crash_while_children_run_loses_no_acknowledged_turn_of_any_session() {
    use dsh_tests::shell::spawn_call;
    let quick = |n: u32| json!({"replies": [{"text": format!("quick {n}")}]});
    let slow = json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 600"}}]},
        {"text": "never"},
    ]});
    let script = json!({"replies": [
        {"tool_calls": [spawn_call("a", &quick(1)), spawn_call("b", &quick(2))]},
        {"text": "first turn done"},
        {"tool_calls": [spawn_call("c", &quick(3)), spawn_call("d", &slow)]},
        {"text": "never"},
    ]});
    type Point = fn(&TestDaemon, &str) -> bool;
    let points: [(&str, Point); 3] = [
        ("the second turn has started", |d, id| {
            d.events(id)
                .iter()
                .any(|e| e["type"] == "turn/start" && e["data"]["turn"] == 2)
        }),
        ("the second turn's children were spawned", |d, id| {
            count(&d.events(id), "tool/call") >= 4
        }),
        ("a child of the second turn is in its bash call", |d, _| {
            d.dshctl_json(&["session", "list"])["sessions"]
                .as_array()
                .unwrap()
                .len()
                >= 4
                && d.dshctl_json(&["agent", "list"])
                    .to_string()
                    .contains("running")
        }),
    ];
    for (what, reached) in points {
        let mut daemon = TestDaemon::start();
        let cwd = daemon.workdir("p");
        let parent = daemon.new_agent(&cwd, &script);
        daemon.prompt(&parent, "first").assert_completed();
        let acknowledged = daemon.events(&parent);
        let running = daemon.prompt_in_background(&parent, "second");
        assert!(
            eventually(PATIENCE, || reached(&daemon, &parent)),
            "{what}: never reached\n{}",
            daemon.log_text()
        );
        daemon.kill9();
        let _ = dsh_tests::agents::finish_prompt(running);
        daemon.restart_with(DaemonSpec::default());

        let stored = daemon.events(&parent);
        assert_eq!(
            stored[..acknowledged.len()],
            acknowledged[..],
            "{what}: the acknowledged first turn changed"
        );
        // Children whose answers the parent's durable log holds were saved before it got them.
        let answered = stored
            .iter()
            .filter(|e| e["type"] == "tool/result" && e["data"]["isError"] == false)
            .count();
        let children = dsh_tests::shell::children_of(&daemon, &parent);
        let complete = children
            .iter()
            .filter(|c| count(&daemon.events(c), "turn/end") == 1)
            .count();
        assert!(
            complete >= answered,
            "{what}: {answered} child answers acknowledged, {complete} child sessions complete"
        );
        for session in children.iter().chain([&parent]) {
            let resumed = daemon.agent_with_script(&["resume", session], &text_replies(&["ok"]));
            assert_eq!(resumed["agent_id"], session.as_str(), "{what}: {resumed}");
        }
    }
}
