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

use dsh_core::{
    AssistantMessage, BlockingPersistence, Event, EventData, MessageSource, SessionHeader,
    SqliteBackend, TurnEndReason, UserMessage, jsonl_log_path,
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
            answer_seq: None,
            usage: None,
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
        let path = jsonl_log_path(root, header);
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

/// A long transcript of about `bytes` bytes as JSONL (header excluded): turns like an agent's
/// working session — a prompt, a bash call whose result is 8 KiB of output (with newlines, quotes
/// and a non-ASCII character, so parsing has escapes to undo), and a short answer — until the
/// serialized events reach `bytes`.
pub fn long_session(bytes: usize) -> Vec<Event> {
    use dsh_session::ToolCallRequest;
    let line = "drwxr-xr-x 2 user user 4096 Dec  1 12:00 \"src\" \u{fc}ber\tmore\n";
    let output: String = line.repeat(8192 / line.len() + 1);
    let mut events = Vec::new();
    let mut size = 0;
    let mut turn = 0;
    while size < bytes {
        turn += 1;
        let call = format!("call_{turn}");
        let arguments = serde_json::json!({ "command": format!("ls -la /work/{turn}") });
        let data = vec![
            EventData::TurnStart { turn },
            EventData::UserMessage {
                message: UserMessage {
                    text: format!("look at directory {turn} and tell me what is there"),
                    source: MessageSource::User,
                },
            },
            EventData::StepStart { turn, step: 1 },
            EventData::AssistantMessage {
                turn,
                step: 1,
                message: AssistantMessage {
                    text: "Let me look.".into(),
                    tool_calls: vec![ToolCallRequest {
                        id: call.clone(),
                        name: "bash".into(),
                        arguments: arguments.clone(),
                    }],
                },
                usage: None,
            },
            EventData::ToolCall {
                turn,
                step: 1,
                call_id: call.clone(),
                name: "bash".into(),
                arguments,
            },
            EventData::ToolResult {
                turn,
                step: 1,
                call_id: call,
                content: output.clone(),
                is_error: false,
                code: None,
                exit_code: None,
            },
            EventData::StepEnd { turn, step: 1 },
            EventData::StepStart { turn, step: 2 },
            EventData::AssistantMessage {
                turn,
                step: 2,
                message: AssistantMessage {
                    text: format!(
                        "Directory {turn} holds the sources. {}",
                        "It is tidy. ".repeat(40)
                    ),
                    tool_calls: Vec::new(),
                },
                usage: None,
            },
            EventData::StepEnd { turn, step: 2 },
            EventData::TurnEnd {
                turn,
                reason: TurnEndReason::Completed,
                answer_seq: None,
                usage: None,
            },
        ];
        for data in data {
            let event = Event {
                seq: events.len() as u64,
                time: 1_700_000_000_000 + i64::from(turn),
                data,
            };
            size += event.to_json().len() + 1;
            events.push(event);
        }
    }
    events
}
