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

/// What a shutdown that could not save `id` must leave: a failed exit whose log names the session
/// and the one rescue copy in `rescue_dir`, which holds that session. Returns the copy.
fn the_rescue_copy(
    status: std::process::ExitStatus,
    log: &str,
    rescue_dir: &Path,
    id: &str,
) -> SessionFile {
    assert!(
        !status.success(),
        "dshd exited 0 with an unsaved session:\n{log}"
    );
    assert!(
        log.contains(id),
        "the exit does not name the session:\n{log}"
    );
    let copies: Vec<PathBuf> = std::fs::read_dir(rescue_dir)
        .unwrap_or_else(|e| panic!("{}: {e}\n{log}", rescue_dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}\n{log}");
    assert!(log.contains(copies[0].to_str().unwrap()), "{log}");
    let copy = file(&copies[0]);
    assert_eq!(copy.header["id"], id);
    copy
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
    assert_eq!(prompted.text(), "hello");

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
        let results = prompted.tool_results();
        let result = results
            .first()
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

#[path = "persistence/crash.rs"]
mod crash;
#[path = "persistence/faults.rs"]
mod faults;
#[path = "persistence/foreign.rs"]
mod foreign;
#[path = "persistence/lifecycle.rs"]
mod lifecycle;
#[path = "persistence/metadata.rs"]
mod metadata;
#[path = "persistence/pages.rs"]
mod pages;
#[path = "persistence/postgres.rs"]
mod postgres;
#[path = "persistence/postgres_waits.rs"]
mod postgres_waits;
#[path = "persistence/read_only.rs"]
mod read_only;
#[path = "persistence/refusals.rs"]
mod refusals;
#[path = "persistence/selection.rs"]
mod selection;
