//! The persistence contract (CONTRACTS §4.3–§4.6), one suite run against every backend, plus the
//! backend-specific checks and the swap logic of [`super::handle::checkpoint`].
//!
//! Every test uses real files in a private (0700) temporary directory, real fsyncs and a real
//! SQLite database.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::handle::{DurableCursor, checkpoint};
use super::jsonl::{self, JsonlBackend};
use super::sqlite::SqliteBackend;
use super::{BackendKind, Persistence, PersistenceError, PersistenceHandle, Repair};
use dsh_session::repair::TOOL_OUTCOME_UNKNOWN;
use dsh_session::{
    AssistantMessage, Event, EventData, MessageSource, Origin, SessionHeader, SessionId,
    SessionLog, ToolCallRequest, TurnEndReason, UserMessage,
};

mod backends;
mod meta;
mod pages;
mod postgres;
mod postgres_tls;
mod suite;

// ---------------------------------------------------------------------------------------------
// Fixtures

/// A private scratch directory: `tempfile` makes 0755 directories, so work in a 0700 child.
struct Scratch {
    _guard: tempfile::TempDir,
    dir: PathBuf,
}

fn scratch() -> Scratch {
    let guard = tempfile::tempdir().unwrap();
    let dir = guard.path().join("t");
    fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    Scratch { _guard: guard, dir }
}

/// How the suite drives one backend.
trait Fixture {
    /// A fresh instance over the store kept in `dir`.
    fn open(dir: &Path) -> Arc<dyn Persistence>;
    /// Tears the end of the session's log the way a crash in the middle of an append would; `None`
    /// where that cannot happen.
    fn tear(dir: &Path, header: &SessionHeader) -> Option<Vec<u8>>;
    /// Damages the stored event `seq`; returns the path and line the corruption error must name.
    fn damage(dir: &Path, header: &SessionHeader, seq: u64) -> (PathBuf, usize);
    /// What the store holds, to tell whether anything was written: the files under `dir`, or
    /// a database's rows.
    fn footprint(dir: &Path) -> Vec<String> {
        listing(dir)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    }
}

struct Jsonl;
struct Sqlite;
struct Postgres;

fn jsonl_root(dir: &Path) -> PathBuf {
    dir.join("home").join("sessions")
}

fn sqlite_db(dir: &Path) -> PathBuf {
    dir.join("home").join("sessions.sqlite3")
}

impl Fixture for Jsonl {
    fn open(dir: &Path) -> Arc<dyn Persistence> {
        Arc::new(super::OnBlockingPool::new(
            JsonlBackend::new(jsonl_root(dir)).unwrap(),
        ))
    }

    fn tear(dir: &Path, header: &SessionHeader) -> Option<Vec<u8>> {
        let path = jsonl::log_path(&jsonl_root(dir), header);
        let mut bytes = fs::read(&path).unwrap();
        let torn = b"{\"type\":\"turn/start\",\"seq\":99,\"ti";
        bytes.extend_from_slice(torn);
        fs::write(&path, bytes).unwrap();
        Some(torn.to_vec())
    }

    fn damage(dir: &Path, header: &SessionHeader, seq: u64) -> (PathBuf, usize) {
        let path = jsonl::log_path(&jsonl_root(dir), header);
        let text = fs::read_to_string(&path).unwrap();
        let line = usize::try_from(seq).unwrap() + 2;
        let damaged: String = text
            .split_inclusive('\n')
            .enumerate()
            .map(|(i, l)| {
                if i + 1 == line {
                    "{\"type\":\"oops\"}\n"
                } else {
                    l
                }
            })
            .collect();
        fs::write(&path, damaged).unwrap();
        (path, line)
    }
}

impl Fixture for Sqlite {
    fn open(dir: &Path) -> Arc<dyn Persistence> {
        Arc::new(super::OnBlockingPool::new(
            SqliteBackend::open(sqlite_db(dir)).unwrap(),
        ))
    }

    /// Each append is one transaction: a crash leaves it committed or absent, never half there.
    /// The equivalent of a torn tail, a turn left open, is covered by `open_turn_is_closed`.
    fn tear(_dir: &Path, _header: &SessionHeader) -> Option<Vec<u8>> {
        None
    }

    fn damage(dir: &Path, header: &SessionHeader, seq: u64) -> (PathBuf, usize) {
        let conn = rusqlite::Connection::open(sqlite_db(dir)).unwrap();
        let changed = conn
            .execute(
                "UPDATE events SET data = '{not json' WHERE session_id = ?1 AND seq = ?2",
                rusqlite::params![header.id.as_str(), i64::try_from(seq).unwrap()],
            )
            .unwrap();
        assert_eq!(changed, 1);
        (sqlite_db(dir), usize::try_from(seq).unwrap() + 1)
    }
}

/// The database of the store kept in `dir`: a fresh one of the shared test server, created on
/// first use and named in a file beside `dir` (not in it: the suite compares `dir`'s listings).
fn postgres_db(dir: &Path) -> String {
    let marker = dir.parent().unwrap().join("postgres-db");
    if let Ok(name) = fs::read_to_string(&marker) {
        return name;
    }
    let name = dsh_testkit::postgres::shared().fresh_database();
    fs::write(&marker, &name).unwrap();
    name
}

fn postgres_url(dir: &Path) -> String {
    dsh_testkit::postgres::shared().url(&postgres_db(dir))
}

impl Fixture for Postgres {
    fn footprint(dir: &Path) -> Vec<String> {
        let server = dsh_testkit::postgres::shared();
        let db = postgres_db(dir);
        if server
            .sql(&db, "SELECT to_regclass('sessions') IS NULL")
            .trim()
            == "t"
        {
            return Vec::new();
        }
        server
            .sql(
                &db,
                "SELECT 'session ' || id FROM sessions UNION ALL \
                 SELECT 'event ' || session_id || ' ' || seq FROM events UNION ALL \
                 SELECT 'lease ' || session_id FROM leases ORDER BY 1",
            )
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn open(dir: &Path) -> Arc<dyn Persistence> {
        let options = super::postgres::PostgresOptions::new(&postgres_url(dir)).unwrap();
        crate::persistence::open_postgres(options).unwrap()
    }

    /// Each append is one transaction, as in SQLite.
    fn tear(_dir: &Path, _header: &SessionHeader) -> Option<Vec<u8>> {
        None
    }

    fn damage(dir: &Path, header: &SessionHeader, seq: u64) -> (PathBuf, usize) {
        let server = dsh_testkit::postgres::shared();
        let changed = server.sql(
            &postgres_db(dir),
            &format!(
                "UPDATE events SET data = '{{not json' WHERE session_id = '{}' AND seq = {seq} RETURNING 1",
                header.id.as_str().replace('\'', "''")
            ),
        );
        assert_eq!(changed.trim(), "1");
        let shown = super::postgres::Target::parse(&postgres_url(dir)).unwrap();
        (
            PathBuf::from(shown.shown()),
            usize::try_from(seq).unwrap() + 1,
        )
    }
}

fn id(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

fn header(name: &str) -> SessionHeader {
    SessionHeader::new(id(name), PathBuf::from("/work/project"), 1_700_000_000_000)
}

fn ev(seq: u64, data: EventData) -> Event {
    Event {
        seq,
        time: 1_700_000_000_000 + i64::try_from(seq).unwrap(),
        data,
    }
}

/// The data of one complete turn: eight events.
fn turn_data(turn: u32) -> Vec<EventData> {
    let call = format!("call-{turn}");
    vec![
        EventData::TurnStart { turn },
        EventData::StepStart { turn, step: 1 },
        EventData::UserMessage {
            message: UserMessage {
                text: format!("prompt {turn} \u{fc} \"quoted\"\n"),
                source: MessageSource::User,
            },
        },
        EventData::AssistantMessage {
            turn,
            step: 1,
            message: AssistantMessage {
                text: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: call.clone(),
                    name: "bash".into(),
                    arguments: json!({"command": "ls"}),
                }],
            },
            usage: None,
        },
        EventData::ToolCall {
            turn,
            step: 1,
            call_id: call.clone(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
        },
        EventData::ToolResult {
            turn,
            step: 1,
            call_id: call,
            content: "a\nb".into(),
            is_error: false,
            code: None,
            exit_code: None,
        },
        EventData::StepEnd { turn, step: 1 },
        EventData::TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
            answer_seq: None,
            usage: None,
        },
    ]
}

fn events_from(start: u64, data: Vec<EventData>) -> Vec<Event> {
    (start..).zip(data).map(|(seq, d)| ev(seq, d)).collect()
}

fn turn(start: u64, n: u32) -> Vec<Event> {
    events_from(start, turn_data(n))
}

/// A turn cut off by a crash: a step open and a tool call without a result.
fn open_turn(start: u64, turn: u32) -> Vec<Event> {
    events_from(
        start,
        vec![
            EventData::TurnStart { turn },
            EventData::StepStart { turn, step: 1 },
            EventData::ToolCall {
                turn,
                step: 1,
                call_id: "lost".into(),
                name: "bash".into(),
                arguments: json!({"command": "make"}),
            },
        ],
    )
}

/// Every file and directory under `dir`, with file contents. SQLite's `-shm` index is left out
/// (its readers legitimately rewrite it), and so is an empty `-wal`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        for entry in fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
                out.insert(path, None);
            } else if !path.to_string_lossy().ends_with("-shm") {
                let bytes = fs::read(&path).unwrap();
                // An empty write-ahead log is no log: SQLite makes one whenever it opens.
                if !(bytes.is_empty() && path.to_string_lossy().ends_with("-wal")) {
                    out.insert(path, Some(bytes));
                }
            }
        }
    }
    out
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir).into_keys().collect()
}
