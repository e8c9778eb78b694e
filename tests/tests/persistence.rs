//! Sessions and swappable persistence end to end, through the real `dshd` and `dshctl`: where
//! `locate` says a transcript lives, what the JSONL file and the SQLite database hold, swaps that
//! lose nothing, fork, spawn, resume across restarts, crash repair after `kill -9`, and corrupt logs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_proto::v1;
use dsh_tests::agents::{
    PATIENCE, SessionFile, assert_contiguous, count, has_step_end, has_step_start,
    read_session_file, types,
};
use dsh_tests::{DaemonSpec, TestDaemon, eventually};
use serde_json::{Value, json};

const ONE_TURN: [&str; 6] = [
    "turn/start",
    "user/message",
    "step/start",
    "assistant/message",
    "step/end",
    "turn/end",
];

fn text_replies(texts: &[&str]) -> Value {
    json!({ "replies": texts.iter().map(|t| json!({ "text": t })).collect::<Vec<_>>() })
}

/// What `projectKey` makes of a cwd whose bytes are all safe except `/` and the spaces given.
fn expected_key(cwd: &Path) -> String {
    cwd.to_str()
        .unwrap()
        .trim_start_matches('/')
        .replace('/', "-")
        .replace(' ', "~20")
}

/// Opens the daemon's database (never creating it: an empty file would be a different state).
fn open_db(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .unwrap_or_else(|e| panic!("{}: {e}", db.display()))
}

/// The events of one session in the SQLite database, in the `session events` JSON shape.
fn db_events(db: &Path, id: &str) -> Vec<Value> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT seq, type, time, data FROM events WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([id], |r| {
        let data: String = r.get(3)?;
        Ok(json!({
            "seq": r.get::<_, i64>(0)?,
            "type": r.get::<_, String>(1)?,
            "time": r.get::<_, i64>(2)?,
            "data": serde_json::from_str::<Value>(&data).unwrap(),
        }))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The stored header of one session in the SQLite database.
fn db_header(db: &Path, id: &str) -> Option<Value> {
    let conn = open_db(db);
    conn.query_row("SELECT header FROM sessions WHERE id = ?1", [id], |r| {
        r.get::<_, String>(0)
    })
    .ok()
    .map(|h| serde_json::from_str(&h).unwrap())
}

fn file(path: &Path) -> SessionFile {
    read_session_file(path).unwrap_or_else(|| panic!("{} does not exist", path.display()))
}

fn stop_gracefully(daemon: &mut TestDaemon) {
    let out = daemon.dshctl(&["shutdown"]);
    assert!(out.status.success(), "{out:?}");
    assert!(daemon.wait_exit(Duration::from_secs(10)).success());
}

fn assert_serving(daemon: &TestDaemon) {
    assert!(
        daemon.dshctl(&["status"]).status.success(),
        "the daemon stopped serving; log:\n{}",
        daemon.log_text()
    );
}

/// `dshctl --json ARGS` that must fail: returns the error document's (kind, message).
fn refused(daemon: &TestDaemon, args: &[&str]) -> (String, String) {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = daemon.dshctl(&full);
    assert_eq!(out.status.code(), Some(1), "{args:?} did not fail: {out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = doc["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&message),
        "stderr lacks the message: {stderr}"
    );
    (doc["error"]["kind"].as_str().unwrap().to_owned(), message)
}

#[test]
fn jsonl_locate_names_the_exact_path_and_only_the_first_checkpoint_creates_it() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("my proj");
    let id = daemon.new_agent(&cwd, &text_replies(&["hello"]));

    let location = daemon.locate(&id);
    let root = daemon.home.join("sessions");
    let want = root
        .join(format!("--{}--", expected_key(&cwd)))
        .join(&id)
        .join("session.jsonl");
    assert_eq!(
        location,
        json!({"kind": "jsonl", "path": want.to_str().unwrap()})
    );
    assert!(!want.exists(), "locate or create wrote the file");
    assert!(!root.exists(), "locate or create made the sessions root");

    let prompted = daemon.prompt(&id, "say hello");
    prompted.assert_completed();
    assert_eq!(prompted.turn_ended()["text"], "hello");

    let stored = file(&want);
    assert_eq!(stored.header["type"], "session");
    assert_eq!(stored.header["id"], id.as_str());
    assert_eq!(stored.header["cwd"], cwd.to_str().unwrap());
    assert_eq!(stored.header["version"], 0);
    assert_eq!(stored.header["delegationDepth"], 0);
    assert_contiguous(&stored.events);
    assert_eq!(types(&stored.events), ONE_TURN);
    assert_eq!(stored.events, daemon.events(&id));
    // The location does not move once the file exists.
    assert_eq!(daemon.locate(&id), location);
}

#[test]
fn sqlite_locate_is_null_and_prompts_land_in_the_database() {
    let mut daemon = TestDaemon::start();
    let db = daemon.home.join("sessions.sqlite3");
    let described = daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    assert_eq!(
        described,
        json!({"name": "sqlite", "path": db.to_str().unwrap()})
    );
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "sqlite");

    let cwd = daemon.workdir("p");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    assert_eq!(daemon.locate(&id), Value::Null, "new session");
    daemon.prompt(&id, "first").assert_completed();
    assert_eq!(daemon.locate(&id), Value::Null, "live session");

    let live = daemon.events(&id);
    assert_eq!(types(&live), ONE_TURN);
    assert_eq!(db_events(&db, &id), live);
    let header = db_header(&db, &id).expect("no sessions row");
    assert_eq!(header["id"], id.as_str());
    assert_eq!(header["cwd"], cwd.to_str().unwrap());
    assert!(
        !daemon.home.join("sessions").exists(),
        "the JSONL backend was written while SQLite was active"
    );

    // Back to JSONL: locate names the file again, and the next checkpoint writes the whole log.
    let described = daemon.dshctl_json(&["persistence", "use", "jsonl"]);
    assert_eq!(described["name"], "jsonl");
    let path = daemon.located_path(&id);
    assert!(!path.exists());
    daemon.prompt(&id, "second").assert_completed();
    let live = daemon.events(&id);
    assert_eq!(file(&path).events, live);
    assert_eq!(live.len(), 2 * ONE_TURN.len());

    // A daemon started on SQLite reads the session from the database, not from the file.
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec {
        args: vec!["--persistence".into(), "sqlite".into()],
        ..DaemonSpec::default()
    });
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "sqlite");
    assert_eq!(daemon.locate(&id), Value::Null, "stored session");
    let stored = daemon.events(&id);
    assert_eq!(stored, db_events(&db, &id));
    assert_eq!(stored, live[..ONE_TURN.len()]);
}

#[test]
fn two_swaps_lose_no_event_of_any_session() {
    let daemon = TestDaemon::start();
    let db = daemon.home.join("sessions.sqlite3");
    let cwd = daemon.workdir("swap");
    let script = text_replies(&["r1", "r2", "r3", "r4"]);
    let a = daemon.new_agent(&cwd, &script);
    let b = daemon.new_agent(&cwd, &script);
    daemon.prompt(&a, "a1").assert_completed();

    // Swap 1: to SQLite. `a` has a JSONL file, `b` has nothing stored anywhere, `c` starts here.
    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    let c = daemon.new_agent(&cwd, &script);
    for id in [&a, &b, &c] {
        daemon.prompt(id, "on sqlite").assert_completed();
    }
    for id in [&a, &b, &c] {
        let live = daemon.events(id);
        assert_contiguous(&live);
        assert_eq!(db_events(&db, id), live, "database copy of {id}");
        assert_eq!(count(&live, "turn/end"), if id == &a { 2 } else { 1 });
    }

    // Swap 2: back to JSONL. Each file gets every event it lacks: `a` continues its file, `b` and
    // `c` get a whole log (header included) at their next checkpoint.
    daemon.dshctl_json(&["persistence", "use", "jsonl"]);
    for id in [&a, &b, &c] {
        daemon.prompt(id, "on jsonl").assert_completed();
    }
    for id in [&a, &b, &c] {
        let live = daemon.events(id);
        let stored = file(&daemon.located_path(id));
        assert_eq!(stored.header["id"], id.as_str());
        assert_eq!(stored.events, live, "JSONL copy of {id}");
    }

    // And once more to SQLite: the database catches up on what it missed while JSONL was active.
    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    daemon.prompt(&a, "sqlite again").assert_completed();
    let live = daemon.events(&a);
    assert_eq!(count(&live, "turn/end"), 4);
    assert_eq!(db_events(&db, &a), live);
}

#[test]
fn fork_copies_the_completed_prefix_into_a_new_file_after_an_end_seed() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork");
    let source = daemon.new_agent(&cwd, &text_replies(&["first", "late"]));
    daemon.prompt(&source, "one").assert_completed();
    let source_path = daemon.located_path(&source);
    let source_bytes = std::fs::read(&source_path).unwrap();
    let prefix = daemon.events(&source);

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["forked"]));
    let fork_id = fork["agent_id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, source);
    assert_eq!(fork["header"]["parent_session"], source.as_str());
    assert_eq!(fork["header"]["seed_length"], prefix.len());
    assert_eq!(fork["header"]["cwd"], cwd.to_str().unwrap());

    let fork_path = daemon.located_path(&fork_id);
    assert_ne!(fork_path, source_path);
    assert_eq!(
        fork_path.parent().unwrap().parent(),
        source_path.parent().unwrap().parent()
    );
    let stored = file(&fork_path);
    assert_eq!(stored.header["id"], fork_id.as_str());
    assert_eq!(stored.header["parentSession"], source.as_str());
    assert_eq!(stored.header["seedLength"], prefix.len());
    assert_eq!(stored.events[..prefix.len()], prefix[..], "copied prefix");
    assert_eq!(stored.events[prefix.len()]["type"], "session/end-seed");
    assert_eq!(stored.events[prefix.len()]["seq"], prefix.len());
    assert_eq!(stored.events.len(), prefix.len() + 1);

    let prompted = daemon.prompt(&fork_id, "two");
    prompted.assert_completed();
    assert_eq!(
        prompted.turn_started(),
        2,
        "turn numbers continue in a fork"
    );
    assert_contiguous(&file(&fork_path).events);
    assert_eq!(
        std::fs::read(&source_path).unwrap(),
        source_bytes,
        "forking wrote to the source"
    );
}

#[test]
fn fork_of_a_running_agent_copies_only_its_completed_turns() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork-running");
    let source = daemon.new_agent(
        &cwd,
        &json!({"replies": [{"text": "done"}, {"text": "never", "delay_ms": 600_000}]}),
    );
    daemon.prompt(&source, "one").assert_completed();
    let completed = daemon.events(&source);
    let running = daemon.prompt_in_background(&source, "two");
    daemon.wait_for_events(&source, "turn 2 waiting for the model", |e| {
        has_step_start(e, 2, 1)
    });

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["x"]));
    let fork_id = fork["agent_id"].as_str().unwrap();
    assert_eq!(fork["header"]["seed_length"], completed.len());
    let stored = file(&daemon.located_path(fork_id));
    assert_eq!(stored.events[..completed.len()], completed[..]);
    assert_eq!(
        types(&stored.events[completed.len()..]),
        ["session/end-seed"]
    );

    daemon.dshctl_json(&["agent", "cancel", &source]);
    let ended = dsh_tests::agents::finish_prompt(running);
    assert_eq!(ended.reason().0, "aborted");
}

#[test]
fn fork_of_a_stored_session_after_a_restart_reads_it_from_the_backend() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork-stored");
    let source = daemon.new_agent(&cwd, &text_replies(&["kept"]));
    daemon.prompt(&source, "one").assert_completed();
    let stored = file(&daemon.located_path(&source)).events;
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec::default());

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["x"]));
    let fork_id = fork["agent_id"].as_str().unwrap();
    assert_eq!(fork["header"]["parent_session"], source.as_str());
    let copy = file(&daemon.located_path(fork_id)).events;
    assert_eq!(copy[..stored.len()], stored[..]);
    assert_eq!(copy[stored.len()]["type"], "session/end-seed");
}

#[test]
fn spawn_writes_a_subagent_header_in_the_parents_project_directory() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("spawn");
    let parent = daemon.new_agent(&cwd, &text_replies(&["parent"]));
    daemon.prompt(&parent, "p").assert_completed();
    let parent_events = daemon.events(&parent);

    let child = daemon.agent_with_script(&["spawn", "--parent", &parent], &text_replies(&["kid"]));
    let child_id = child["agent_id"].as_str().unwrap().to_owned();
    assert_eq!(child["parent_agent_id"], parent.as_str());
    assert_eq!(child["header"]["parent_session"], parent.as_str());
    assert_eq!(child["header"]["origin"], "subagent");
    assert_eq!(child["header"]["delegation_depth"], 1);
    assert_eq!(child["header"]["cwd"], cwd.to_str().unwrap());

    let parent_path = daemon.located_path(&parent);
    let child_path = daemon.located_path(&child_id);
    assert_eq!(
        child_path.parent().unwrap().parent(),
        parent_path.parent().unwrap().parent(),
        "child and parent must share the project directory"
    );
    assert!(!child_path.exists());

    daemon.prompt(&child_id, "c").assert_completed();
    let stored = file(&child_path);
    assert_eq!(stored.header["parentSession"], parent.as_str());
    assert_eq!(stored.header["origin"], "subagent");
    assert_eq!(stored.header["delegationDepth"], 1);
    assert_eq!(stored.header["cwd"], cwd.to_str().unwrap());
    assert_eq!(types(&stored.events), ONE_TURN);
    assert_eq!(
        file(&parent_path).events,
        parent_events,
        "the child wrote to its parent's log"
    );
}

#[test]
fn resume_after_a_restart_continues_the_id_location_and_turn_numbers() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("resume");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    daemon.prompt(&id, "2").assert_completed();
    let location = daemon.locate(&id);
    let before = file(&daemon.located_path(&id));
    stop_gracefully(&mut daemon);
    let path = PathBuf::from(location["path"].as_str().unwrap());
    assert_eq!(
        file(&path).events,
        before.events,
        "a graceful stop changed a closed log"
    );

    daemon.restart_with(DaemonSpec::default());
    let resumed = daemon.agent_with_script(&["resume", &id], &text_replies(&["three"]));
    assert_eq!(resumed["agent_id"], id.as_str());
    assert_eq!(resumed["turns"], 2);
    assert_eq!(daemon.locate(&id), location);

    let prompted = daemon.prompt(&id, "3");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 3);

    let after = file(&daemon.located_path(&id));
    assert_eq!(after.header, before.header, "the header changed on resume");
    assert_contiguous(&after.events);
    let n = before.events.len();
    assert_eq!(after.events[..n], before.events[..]);
    assert_eq!(after.events[n]["type"], "session/end-seed");
    assert_eq!(count(&after.events, "session/end-seed"), 1);
    assert_eq!(types(&after.events[n + 1..]), ONE_TURN);
}

#[test]
fn resuming_twice_without_a_prompt_appends_a_single_end_seed() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("twice");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    let turn_one = file(&path).events;

    for round in 0..2 {
        stop_gracefully(&mut daemon);
        daemon.restart_with(DaemonSpec::default());
        daemon.agent_with_script(&["resume", &id], &text_replies(&[]));
        let live = daemon.events(&id);
        assert_eq!(live.len(), turn_one.len() + 1, "round {round}: {live:?}");
        assert_eq!(live.last().unwrap()["type"], "session/end-seed");
    }
    // The second graceful stop wrote nothing new: the log already ended with the marker.
    stop_gracefully(&mut daemon);
    let stored = file(&path).events;
    assert_eq!(stored.len(), turn_one.len() + 1);
    assert_eq!(count(&stored, "session/end-seed"), 1);

    daemon.restart_with(DaemonSpec::default());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["two"]));
    let prompted = daemon.prompt(&id, "2");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    let stored = file(&path).events;
    assert_contiguous(&stored);
    assert_eq!(count(&stored, "session/end-seed"), 1);
}

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

#[test]
fn a_torn_tail_is_cut_on_resume() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("torn");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);
    let clean = std::fs::read(&path).unwrap();
    let mut torn = clean.clone();
    torn.extend_from_slice(br#"{"type":"turn/start","seq":6,"ti"#);
    std::fs::write(&path, &torn).unwrap();

    daemon.restart_with(DaemonSpec::default());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["two"]));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        clean,
        "the torn tail was not cut"
    );
    let prompted = daemon.prompt(&id, "2");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    assert_contiguous(&file(&path).events);
}

#[test]
fn each_bash_call_sees_the_backend_active_when_it_runs() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("env");
    let probe = json!({"tool_calls": [{"name": "bash", "arguments": {"command":
        "if [ -n \"${DSH_SESSION_JSONL+x}\" ]; then \
           if [ -e \"$DSH_SESSION_JSONL\" ]; then echo \"$DSH_SESSION_JSONL exists\"; \
           else echo \"$DSH_SESSION_JSONL absent\"; fi; \
         else echo unset; fi"}}]});
    let id = daemon.new_agent(
        &cwd,
        &json!({"replies": [probe, {"text": "1"}, probe, {"text": "2"}, probe, {"text": "3"}, probe, {"text": "4"}]}),
    );
    let seen = |text: &str| {
        let prompted = daemon.prompt(&id, text);
        prompted.assert_completed();
        let result = prompted
            .lines
            .iter()
            .find(|l| l["type"] == "tool_result")
            .unwrap_or_else(|| panic!("no tool result: {:?}", prompted.lines));
        result["content"].as_str().unwrap().trim().to_owned()
    };
    let path = daemon.located_path(&id);
    // The first step of the first turn runs before the first checkpoint: named, not yet there.
    assert_eq!(seen("1"), format!("{} absent", path.display()));
    assert_eq!(seen("2"), format!("{} exists", path.display()));

    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    assert_eq!(seen("3"), "unset");

    let other = daemon.dir.path().join("other-root");
    daemon.dshctl_json(&[
        "persistence",
        "use",
        "jsonl",
        "--root",
        other.to_str().unwrap(),
    ]);
    let moved = daemon.located_path(&id);
    assert!(moved.starts_with(&other), "{}", moved.display());
    assert_eq!(seen("4"), format!("{} absent", moved.display()));
    assert_eq!(file(&moved).events, daemon.events(&id));
}

#[tokio::test]
async fn an_unreadable_backend_location_is_an_invalid_argument_naming_the_field() {
    let daemon = TestDaemon::start();
    let a_file = daemon.dir.path().join("plain-file");
    std::fs::write(&a_file, "x").unwrap();
    let a_dir = daemon.workdir("a-directory");
    for (args, field, path) in [
        (["jsonl", "--root"], "jsonl.root", &a_file),
        (["sqlite", "--path"], "sqlite.path", &a_dir),
    ] {
        let path = path.to_str().unwrap();
        let (kind, message) = refused(&daemon, &["persistence", "use", args[0], args[1], path]);
        assert_eq!(kind, "invalid_argument", "{message}");
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
        assert!(message.contains(path), "{message}");
    }
    let status = daemon
        .client()
        .await
        .persistence()
        .r#use(v1::UseBackendRequest {
            backend: Some(v1::use_backend_request::Backend::Jsonl(v1::JsonlBackend {
                root: a_file.display().to_string(),
            })),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "jsonl"
    );
    assert_serving(&daemon);
}

#[test]
fn a_foreign_database_is_refused_and_the_active_backend_kept() {
    let daemon = TestDaemon::start();
    let foreign = daemon.dir.path().join("notes.db");
    std::fs::write(&foreign, "these are my notes, not a database\n".repeat(200)).unwrap();
    let before = std::fs::read(&foreign).unwrap();
    let (kind, message) = refused(
        &daemon,
        &[
            "persistence",
            "use",
            "sqlite",
            "--path",
            foreign.to_str().unwrap(),
        ],
    );
    assert_eq!(kind, "failed_precondition");
    assert!(message.contains(foreign.to_str().unwrap()), "{message}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "the foreign file was changed"
    );
    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "jsonl"
    );
    let id = daemon.new_agent(&daemon.workdir("kept"), &text_replies(&["ok"]));
    daemon.prompt(&id, "still jsonl?").assert_completed();
    assert!(daemon.located_path(&id).exists());
}

#[tokio::test]
async fn a_corrupt_log_refuses_resume_naming_file_and_line_and_is_left_untouched() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("corrupt");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    daemon.prompt(&id, "2").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);

    // Line 3 is turn 1's user/message, well before the last turn/end.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert!(lines[2].contains("\"user/message\""), "{}", lines[2]);
    lines[2] = "{\"type\":\"user/message\",\"seq\":1,\"oops\n";
    let corrupt = lines.concat();
    std::fs::write(&path, &corrupt).unwrap();

    daemon.restart_with(DaemonSpec::default());
    let (kind, message) = refused(&daemon, &["agent", "resume", &id]);
    let place = format!("{}:3:", path.display());
    assert!(
        message.contains(&place),
        "message does not name {place}: {message}"
    );
    assert_eq!(kind, "data_loss");

    let status = daemon
        .client()
        .await
        .agents()
        .resume(v1::ResumeAgentRequest {
            session_id: id.clone(),
            model: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(status.message().contains(&place), "{}", status.message());

    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        corrupt,
        "file changed"
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    assert_serving(&daemon);
}

/// Creates an agent in `cwd`, runs one scripted turn to its end over gRPC, and closes it.
async fn one_closed_session(client: &dsh_client::Client, cwd: &Path) -> String {
    use tokio_stream::StreamExt;
    let mut agents = client.agents();
    let id = agents
        .create(v1::CreateAgentRequest {
            cwd: cwd.display().to_string(),
            model: Some(v1::ModelSpec {
                script_json: text_replies(&["done"]).to_string(),
                ..v1::ModelSpec::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id;
    let mut turn = agents
        .prompt(v1::PromptRequest {
            agent_id: id.clone(),
            text: "go".into(),
        })
        .await
        .unwrap()
        .into_inner();
    while turn.next().await.transpose().unwrap().is_some() {}
    agents
        .close(v1::CloseAgentRequest {
            agent_id: id.clone(),
        })
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn closed_sessions_do_not_keep_their_log_files_open() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("many");
    let client = daemon.client().await;
    let open_logs = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.child.id()))
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.unwrap().path()).ok())
            .filter(|target| target.to_string_lossy().contains("session.jsonl"))
            .count()
    };
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(one_closed_session(&client, &cwd).await);
    }
    assert_eq!(
        open_logs(),
        0,
        "the daemon keeps the logs of closed sessions open (a long-running daemon runs out of file descriptors)"
    );
    // Released sessions still resume and take turns where they left off.
    let first = &ids[0];
    daemon.agent_with_script(&["resume", first], &text_replies(&["again"]));
    let prompted = daemon.prompt(first, "more");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    let stored = file(&daemon.located_path(first)).events;
    assert_contiguous(&stored);
    assert_eq!(stored, daemon.events(first));
}
