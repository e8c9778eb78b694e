//! Stored sessions made in bulk for the tests and benchmarks that need many of them, or long ones,
//! written in the backends' own formats before `dshd` starts.
//!
//! Writing through the backends would cost several fsyncs per session (a new log is published
//! durably), minutes for 100,000 sessions; these helpers write the same bytes without syncing,
//! which is what a store looks like after the fact. The JSONL line format comes from
//! `dsh-core` itself (`Event::to_json`, the header's serialisation), the SQLite rows from
//! `Event::data_json`, so they cannot drift from what the daemon writes.

use std::fs;
use std::path::Path;

use dsh_core::persistence::Persistence;
use dsh_core::persistence::jsonl::log_path;
use dsh_core::persistence::sqlite::SqliteBackend;
use dsh_core::session::{
    AssistantMessage, Event, EventData, MessageSource, SessionHeader, TurnEndReason, UserMessage,
};

/// Line 1 of a JSONL log: the header tagged `"type":"session"`, newline included.
pub fn header_line(header: &SessionHeader) -> String {
    let json = serde_json::to_string(header).unwrap_or_else(|e| panic!("header: {e}"));
    format!("{{\"type\":\"session\",{}\n", &json[1..])
}

/// One short completed turn (turn/start, the prompt, the answer, turn/end) from seq `start`.
pub fn short_turn(start: u64, turn: u32, time: i64) -> Vec<Event> {
    let data = vec![
        EventData::TurnStart { turn },
        EventData::UserMessage {
            message: UserMessage {
                text: format!("prompt {turn}"),
                source: MessageSource::User,
            },
        },
        EventData::AssistantMessage {
            turn,
            step: 1,
            message: AssistantMessage {
                text: "done".into(),
                tool_calls: Vec::new(),
            },
            usage: None,
        },
        EventData::TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
        },
    ];
    (start..)
        .zip(data)
        .map(|(seq, data)| Event { seq, time, data })
        .collect()
}

/// Writes each session as a JSONL log under `root`, where the JSONL backend looks for it.
pub fn jsonl(root: &Path, sessions: &[(SessionHeader, Vec<Event>)]) {
    for (header, events) in sessions {
        let path = log_path(root, header);
        let dir = path
            .parent()
            .unwrap_or_else(|| panic!("{}", path.display()));
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut text = header_line(header);
        for event in events {
            text.push_str(&event.to_json());
            text.push('\n');
        }
        fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Stores each session in the SQLite database `db`: the first through the backend (which creates
/// the database and its schema), the rest as rows in one transaction.
pub fn sqlite(db: &Path, sessions: &[(SessionHeader, Vec<Event>)]) {
    let Some(((first, first_events), rest)) = sessions.split_first() else {
        return;
    };
    let backend =
        SqliteBackend::open(db.to_owned()).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    backend
        .append(first, first_events)
        .unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    drop(backend);
    let mut conn =
        rusqlite::Connection::open(db).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    let tx = conn.transaction().unwrap_or_else(|e| panic!("begin: {e}"));
    {
        let mut session = tx
            .prepare("INSERT INTO sessions(id, header, created_at) VALUES (?1, ?2, ?3)")
            .unwrap_or_else(|e| panic!("prepare: {e}"));
        let mut event = tx
            .prepare(
                "INSERT INTO events(session_id, seq, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .unwrap_or_else(|e| panic!("prepare: {e}"));
        for (header, events) in rest {
            let json = serde_json::to_string(header).unwrap_or_else(|e| panic!("header: {e}"));
            session
                .execute(rusqlite::params![
                    header.id.as_str(),
                    json,
                    header.created_at
                ])
                .unwrap_or_else(|e| panic!("insert session: {e}"));
            for e in events {
                event
                    .execute(rusqlite::params![
                        header.id.as_str(),
                        i64::try_from(e.seq).unwrap_or(i64::MAX),
                        e.data.type_name(),
                        e.time,
                        e.data_json(),
                    ])
                    .unwrap_or_else(|e| panic!("insert event: {e}"));
            }
        }
    }
    tx.commit().unwrap_or_else(|e| panic!("commit: {e}"));
}
