//! Every wait on PostgreSQL is bounded, end to end: a server that stops answering without closing
//! anything (every process of it stopped, as in a silent network partition) fails a checkpoint
//! within `postgres.timeout_ms`, and a daemon that vanishes in the middle of a `load` does not
//! keep another waiting on the session's lease row.

use std::io::Write;
use std::process::{Command, Stdio};

use dsh_testkit::postgres::PgServer;

use super::postgres::{config, on, stored_rows_on};
use super::*;

/// PostgreSQL stops answering in the middle of a turn (a tool call is running) and nothing is
/// closed: the step's checkpoint fails within `postgres.timeout_ms` saying the database is
/// unavailable, `status` says so, the turn's events are served from memory, and SIGTERM stops
/// dshd (its save fails in time too) leaving a rescue copy of every acknowledged event. With the
/// server continued and dshd restarted, the database holds a prefix of them, each once, and the
/// copy the whole log: nothing lost, nothing doubled.
#[test]
fn a_silent_database_fails_the_checkpoint_in_time_and_shutdown_rescues_the_turn() {
    let server = PgServer::start();
    let db = server.fresh_database();
    let settings = config(&server.url(&db), 2000, "checkpoint = \"step\"") + "timeout_ms = 1500\n";
    let mut daemon = on(settings.clone());
    let cwd = daemon.workdir("p");
    let go = daemon.dir.path().join("go");
    let script = json!({"replies": [
        {"text": "saved"},
        {"tool_calls": [{"name": "bash", "id": "wait", "arguments": {
            "command": format!("while [ ! -e '{}' ]; do sleep 0.05; done; echo released", go.display())
        }}]},
        {"text": "done"},
    ]});
    let id = daemon.new_agent(&cwd, &script);
    daemon.prompt(&id, "first").assert_completed();
    let saved = daemon.events(&id);

    let running = daemon.prompt_in_background(&id, "second");
    daemon.wait_for_events(&id, "the tool call runs", |e| count(e, "tool/call") == 1);
    let paused = server.pause();
    std::fs::write(&go, "").unwrap();
    // Without a deadline the checkpoint waits for the server forever, and the prompt with it.
    let turn = dsh_tests::agents::finish_prompt(running);
    let (reason, detail) = turn.reason();
    assert_eq!(reason, "error", "{:?}", turn.lines);
    assert!(
        detail.contains("cannot persist the session")
            && detail.contains("unavailable")
            && detail.contains("no answer within 1500 ms"),
        "{detail}"
    );
    let status = daemon.dshctl_json(&["status"]);
    let unavailable = status["persistence_unavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(unavailable.contains("no answer"), "{status}");
    // The turn's events, the ones the database never got included, come from memory.
    let acknowledged = daemon.events(&id);
    assert_eq!(
        count(&acknowledged, "turn/end"),
        2,
        "{:?}",
        types(&acknowledged)
    );
    assert_eq!(acknowledged[..saved.len()], saved[..]);

    // The save at shutdown fails in time as well, and the rescue copy takes the session.
    let status = daemon.signal_and_wait(rustix::process::Signal::TERM, PATIENCE);
    let log = daemon.log_text();
    let copy = the_rescue_copy(status, &log, &daemon.home.join("rescue"), &id);
    assert_eq!(
        copy.events, acknowledged,
        "the rescue copy is not the acknowledged log"
    );

    // Continued: a statement the server had already received may still commit, so the database
    // holds a prefix of the acknowledged log at least as long as what was saved, each event once.
    paused.resume();
    daemon.restart_with(DaemonSpec {
        config: Some(settings),
        ..DaemonSpec::default()
    });
    let stored = daemon.events(&id);
    assert!(
        stored.len() >= saved.len() && stored.len() <= acknowledged.len(),
        "stored {} events; saved {}, acknowledged {}",
        stored.len(),
        saved.len(),
        acknowledged.len()
    );
    assert_eq!(
        stored[..],
        acknowledged[..stored.len()],
        "the database differs"
    );
    assert_contiguous(&stored);
    let (rows, distinct, _) = stored_rows_on(&server, &db, &id);
    assert_eq!((rows, distinct), (stored.len() as u64, stored.len() as u64));
}

/// A daemon is killed (`kill -9`) in the middle of resuming a session: its `load` has taken the
/// session's lease row and waits on a table lock. The server is never told that the daemon is
/// gone (it is reached through a path that keeps the connection open, as a partition does), so
/// its transaction stays open holding the lease row. A second daemon resuming the session is not
/// blocked past the lease: the server ends the abandoned transaction and the second daemon gets
/// the session.
#[test]
fn a_daemon_killed_during_load_does_not_block_another_beyond_the_lease() {
    let server = PgServer::start();
    let db = server.fresh_database();
    let silent = server.silent_path();
    // The killed daemon's own waits are long, so that only the lease can bound the others'.
    let mut a = on(config(&silent.url(&db), 2000, "") + "timeout_ms = 60000\n");
    let b = on(config(&server.url(&db), 2000, ""));

    // A session stored and let go of by b.
    let id = b.new_agent(&b.workdir("p"), &text_replies(&["one"]));
    b.prompt(&id, "first").assert_completed();
    let closed = b.dshctl(&["agent", "close", &id]);
    assert!(closed.status.success(), "{closed:?}");
    let stored = b.events(&id);

    // The events table locked by the test: a `load` takes the lease, then waits for it.
    let mut locker = server
        .psql(&db)
        .args(["-v", "ON_ERROR_STOP=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lock_input = locker.stdin.take().unwrap();
    writeln!(
        lock_input,
        "BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE;"
    )
    .unwrap();
    assert!(
        eventually(PATIENCE, || server
            .sql(
                &db,
                "SELECT count(*) FROM pg_locks WHERE relation = 'events'::regclass \
                 AND mode = 'AccessExclusiveLock' AND granted"
            )
            .trim()
            == "1"),
        "the test's lock was not taken"
    );

    let script = a.write_script(&text_replies(&["a"]));
    let mut resume_a = Command::new(dsh_tests::dshctl_bin())
        .arg("--socket")
        .arg(&a.socket)
        .args(["agent", "resume", &id, "--script", script.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // a's load holds the lease row (not committed) and waits for the events table.
    assert!(
        eventually(PATIENCE, || server
            .sql(
                &db,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%FROM events%'"
            )
            .trim()
            == "1"),
        "a's load never waited for the events table"
    );
    a.kill9();
    let _ = resume_a.wait();
    // The lock released: a's backend reads on, then waits for a client that is gone, in its
    // transaction, holding the lease row.
    writeln!(lock_input, "COMMIT;").unwrap();
    drop(lock_input);
    assert!(locker.wait().unwrap().success());

    // Without a bound on that idle transaction, b's lease request waits for it forever.
    let script = b.write_script(&text_replies(&["b"]));
    let mut resume_b = Command::new(dsh_tests::dshctl_bin())
        .arg("--socket")
        .arg(&b.socket)
        .args(["agent", "resume", &id, "--script", script.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let resumed = dsh_tests::wait_child(&mut resume_b, PATIENCE);
    if resumed.is_none() {
        let _ = resume_b.kill();
    }
    let output = resume_b.wait_with_output().unwrap();
    assert!(
        resumed.is_some_and(|status| status.success()),
        "b could not resume the session a died loading: {output:?}\n{}",
        b.log_text()
    );
    b.prompt(&id, "second").assert_completed();
    let events = b.events(&id);
    assert_eq!(events[..stored.len()], stored[..]);
    assert_contiguous(&events);
    assert_eq!(count(&events, "turn/end"), 2, "{:?}", types(&events));
}
