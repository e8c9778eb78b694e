//! `hooks.claude_code_transcript = "claude"`: a Claude-Code-format projection of a session for
//! the Claude Code hooks that parse `transcript_path` (Anthropic's `ralph-wiggum` Stop hook greps
//! it for `"role":"assistant"` lines and reads `.message.content[].text`).
//!
//! The projection is JSONL as Claude Code writes its transcripts: one record per user prompt,
//! assistant message and tool result, each `{"type": "user"|"assistant", "uuid", "parentUuid",
//! "sessionId", "cwd", "timestamp", "isSidechain", "userType", "version", "message": {...}}`;
//! assistant messages carry `content` blocks (`text`, `tool_use` with the tool as Claude Code
//! names it), tool results a user message with a `tool_result` block. Hook context and Stop
//! continuations (plugin messages) are user records marked `isMeta`, as Claude Code marks the
//! messages it injects.
//!
//! The file is appended to while its agent is live: the session log only grows, so before each
//! Claude Code hook runs the events appended since the last sync are projected and written (the
//! cost is one small append per hook run that has new events; none when the setting is
//! `session`, the default). A dshd that projects a session for the first time (after a restart,
//! a resume) writes the file anew from the first event. Files are private (0600, in a 0700
//! directory under the harness home) and live as long as the session is stored, as Claude Code
//! keeps its transcripts: brought up to date when the agent closes, so a SessionEnd archiver or a
//! later reader finds the whole conversation, and removed with `session delete`. A child agent's
//! projection (SubagentStop's `agent_transcript_path`) is a sidechain, as Claude Code writes its
//! subagents' transcripts. Where and how the files are written is `file.rs`: never through a link.

mod file;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Value, json};

use self::file::{clear, create, open_dir, open_existing, prepare};
use super::Dialect;
use super::tools;
use crate::locks::lock;
use dsh_session::{Event, EventData, MessageSource, SessionHeader, SessionId};

/// What `transcript_path` names for Claude Code hooks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptMode {
    /// The session's own file, as the persistence backend locates it (the design's default).
    #[default]
    Session,
    /// A Claude-Code-format projection kept up to date before each hook runs.
    Claude,
}

/// The events of a session, read for its projection.
pub trait SessionEvents: Send + Sync {
    /// The events from `seq` on, in order.
    fn events_from(&self, seq: u64) -> Vec<Event>;
}

/// One session's projection: where it is and how far it got.
#[derive(Debug)]
struct Projection {
    path: PathBuf,
    /// The next log seq to project.
    next_seq: u64,
    /// The uuid of the last record written (the next one's `parentUuid`).
    last_uuid: Option<String>,
}

/// The projections of the live sessions, by session.
#[derive(Debug)]
pub(super) struct Transcripts {
    dir: PathBuf,
    sessions: Mutex<HashMap<SessionId, Projection>>,
}

impl Transcripts {
    /// The projections `mode` asks for, under `dir` (`None`: a directory of this process under
    /// the system's temporary directory); with `session`, none, and whatever an earlier dshd left
    /// in `dir` is removed.
    pub(super) fn for_settings(mode: TranscriptMode, dir: Option<&Path>) -> Option<Self> {
        match (mode, dir) {
            (TranscriptMode::Claude, dir) => Some(Self::new(dir.map_or_else(
                || std::env::temp_dir().join(format!("dsh-transcripts-{}", std::process::id())),
                Path::to_path_buf,
            ))),
            (TranscriptMode::Session, Some(dir)) => {
                clear(dir);
                None
            }
            (TranscriptMode::Session, None) => None,
        }
    }

    /// Projections under `dir`, made dshd's own (what an earlier dshd wrote there stays: it is
    /// written anew at its session's first sync).
    pub(super) fn new(dir: PathBuf) -> Self {
        if let Err(error) = prepare(&dir) {
            tracing::warn!(
                dir = %dir.display(), %error,
                "cannot use this directory for Claude Code transcript projections; hooks get their path, but no projection is written"
            );
        }
        Self {
            dir,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The projection file of `id` (whether or not it was written yet).
    pub(super) fn path(&self, id: &SessionId) -> PathBuf {
        self.dir.join(file_name(id))
    }

    /// Appends what `events` logged since the last sync of `header`'s session to its projection.
    /// A failure is logged and leaves the file as it was (the hook still runs, reading what is
    /// there).
    pub(super) fn sync(&self, header: &SessionHeader, model: &str, events: &dyn SessionEvents) {
        let mut sessions = lock(&self.sessions);
        let projection = sessions
            .entry(header.id.clone())
            .or_insert_with(|| Projection {
                path: self.path(&header.id),
                next_seq: 0,
                last_uuid: None,
            });
        let name = file_name(&header.id);
        let written = open_dir(&self.dir).and_then(|dir| {
            let mut existing = None;
            if projection.next_seq > 0 {
                match open_existing(&dir, &name) {
                    Ok(file) => existing = Some(file),
                    Err(error) => {
                        tracing::warn!(
                            session = %header.id, path = %projection.path.display(), %error,
                            "the Claude Code transcript projection was replaced; writing it again"
                        );
                        projection.next_seq = 0;
                        projection.last_uuid = None;
                    }
                }
            }
            let new = events.events_from(projection.next_seq);
            let Some(last) = new.last() else {
                return Ok(());
            };
            let next_seq = last.seq + 1;
            let mut last_uuid = projection.last_uuid.clone();
            let mut text = String::new();
            for event in &new {
                if let Some(record) = record(header, model, event, last_uuid.as_deref()) {
                    last_uuid = record["uuid"].as_str().map(str::to_owned);
                    text.push_str(&record.to_string());
                    text.push('\n');
                }
            }
            let mut file = match existing {
                Some(file) => file,
                None => create(&dir, &name)?,
            };
            file.write_all(text.as_bytes())?;
            projection.next_seq = next_seq;
            projection.last_uuid = last_uuid;
            Ok(())
        });
        if let Err(error) = written {
            tracing::warn!(
                session = %header.id,
                path = %projection.path.display(),
                %error,
                "cannot write the Claude Code transcript projection"
            );
        }
    }

    /// Brings `header`'s projection up to date one last time and stops following it (its agent
    /// was closed); the file stays. Nothing when it was never projected by this dshd.
    pub(super) fn close(&self, header: &SessionHeader, model: &str, events: &dyn SessionEvents) {
        if lock(&self.sessions).contains_key(&header.id) {
            self.sync(header, model, events);
        }
        lock(&self.sessions).remove(&header.id);
    }

    /// Removes `id`'s projection (its session was deleted).
    pub(super) fn delete(&self, id: &SessionId) {
        let removed = lock(&self.sessions).remove(id);
        let path = removed.map_or_else(|| self.path(id), |p| p.path);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot remove a transcript projection");
            }
        }
    }
}

/// The projection's file name: an id is any string, so it is escaped into one path component
/// (a UUID, every id dsh makes, is kept as it is).
fn file_name(id: &SessionId) -> String {
    crate::persistence::jsonl::session_file_name(id.as_str(), "jsonl")
}

/// The Claude Code record of `event`, when it has one: the hooks' projection, and the
/// `claude-jsonl` export (`transfer/claude.rs`), which writes the same records.
pub(crate) fn record(
    header: &SessionHeader,
    model: &str,
    event: &Event,
    parent: Option<&str>,
) -> Option<Value> {
    let (kind, message, meta) = match &event.data {
        EventData::UserMessage { message } => (
            "user",
            json!({"role": "user", "content": message.text}),
            !matches!(message.source, MessageSource::User),
        ),
        EventData::AssistantMessage { message, usage, .. } => {
            let mut content = Vec::new();
            if !message.text.is_empty() {
                content.push(json!({"type": "text", "text": message.text}));
            }
            for call in &message.tool_calls {
                content.push(json!({
                    "type": "tool_use",
                    "id": call.id,
                    "name": tools::payload_name(Dialect::ClaudeCode, &call.name),
                    "input": tools::input(Dialect::ClaudeCode, &call.name, &call.arguments, &header.cwd),
                }));
            }
            let stop = if message.tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            let mut message = json!({
                "id": format!("msg_{}_{}", header.id.as_str(), event.seq),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": null,
            });
            // The provider's counts in the Messages API's shape, which token loggers read;
            // absent when the provider reported none (never a zero it did not report).
            if let Some(usage) = usage {
                message["usage"] = json!({
                    "input_tokens": usage.input_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": usage.cache_read_tokens.unwrap_or(0),
                    "output_tokens": usage.output_tokens,
                });
            }
            ("assistant", message, false)
        }
        EventData::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => (
            "user",
            json!({"role": "user", "content": [{
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content,
                "is_error": is_error,
            }]}),
            false,
        ),
        _ => return None,
    };
    // A child agent's records are a sidechain of its parent's session, as Claude Code writes a
    // subagent's transcript: the parent's session id, the child's as `agentId`.
    let session = header.parent_session.as_ref().unwrap_or(&header.id);
    let mut record = json!({
        "parentUuid": parent,
        "isSidechain": header.parent_session.is_some(),
        "userType": "external",
        "cwd": header.cwd.to_string_lossy(),
        "sessionId": session.as_str(),
        // A semver string, as Claude Code writes its own: readers check it (ccusage drops a
        // record whose `version` is not one); `entrypoint` says which program wrote it.
        "version": env!("CARGO_PKG_VERSION"),
        "entrypoint": "dsh",
        "type": kind,
        "message": message,
        "uuid": format!("{}-{}", header.id.as_str(), event.seq),
        "timestamp": timestamp(event.time),
    });
    if header.parent_session.is_some() {
        record["agentId"] = json!(header.id.as_str());
    }
    if meta {
        record["isMeta"] = Value::Bool(true);
    }
    Some(record)
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds, as Claude Code writes them.
pub(crate) fn timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{AssistantMessage, ToolCallRequest, UserMessage};

    struct Log(Vec<Event>);

    impl SessionEvents for Log {
        fn events_from(&self, seq: u64) -> Vec<Event> {
            self.0.iter().filter(|e| e.seq >= seq).cloned().collect()
        }
    }

    fn event(seq: u64, data: EventData) -> Event {
        Event {
            seq,
            time: 1_764_680_400_123,
            data,
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_764_680_400_123), "2025-12-02T13:00:00.123Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_projection_is_claude_codes_records_appended_as_the_log_grows() {
        let dir = tempfile::tempdir().unwrap();
        let header = SessionHeader::new(SessionId::parse("s-1").unwrap(), PathBuf::from("/p"), 2);
        let transcripts = Transcripts::new(dir.path().join("t"));
        let mut log = Log(vec![
            event(0, EventData::TurnStart { turn: 1 }),
            event(
                1,
                EventData::UserMessage {
                    message: UserMessage {
                        text: "fix it".into(),
                        source: MessageSource::User,
                    },
                },
            ),
            event(
                2,
                EventData::AssistantMessage {
                    turn: 1,
                    step: 1,
                    message: AssistantMessage {
                        text: "looking".into(),
                        tool_calls: vec![ToolCallRequest {
                            id: "c1".into(),
                            name: "bash".into(),
                            arguments: json!({"command": "ls", "timeout_ms": 5}),
                        }],
                    },
                    usage: Some(dsh_session::Usage {
                        input_tokens: 120,
                        output_tokens: 30,
                        cache_read_tokens: Some(20),
                        reasoning_tokens: None,
                    }),
                },
            ),
        ]);
        transcripts.sync(&header, "m", &log);
        let path = transcripts.path(&header.id);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        log.0.push(event(
            3,
            EventData::ToolResult {
                turn: 1,
                step: 1,
                call_id: "c1".into(),
                content: "a\nb\n".into(),
                is_error: false,
                code: None,
                exit_code: None,
            },
        ));
        transcripts.sync(&header, "m", &log);
        transcripts.sync(&header, "m", &log);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0]["type"], "user");
        assert_eq!(lines[0]["message"]["content"], "fix it");
        assert_eq!(lines[0]["parentUuid"], Value::Null);
        assert_eq!(lines[1]["parentUuid"], lines[0]["uuid"]);
        assert_eq!(lines[2]["parentUuid"], lines[1]["uuid"]);
        assert!(
            text.contains("\"role\":\"assistant\""),
            "what scripts grep for"
        );
        assert_eq!(
            lines[1]["message"]["content"],
            json!([{"type": "text", "text": "looking"},
                   {"type": "tool_use", "id": "c1", "name": "Bash",
                    "input": {"command": "ls", "timeout": 5}}])
        );
        assert_eq!(lines[2]["message"]["content"][0]["tool_use_id"], "c1");
        // The provider's usage, in the shape token loggers read.
        assert_eq!(
            lines[1]["message"]["usage"],
            json!({"input_tokens": 120, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 20, "output_tokens": 30})
        );
        assert!(lines[2]["message"].get("usage").is_none());
        assert_eq!(lines[0]["timestamp"], "2025-12-02T13:00:00.123Z");
        // Closing keeps the file, brought up to date; deleting the session removes it.
        log.0.push(event(
            4,
            EventData::AssistantMessage {
                turn: 1,
                step: 2,
                message: AssistantMessage {
                    text: "done".into(),
                    tool_calls: Vec::new(),
                },
                usage: None,
            },
        ));
        transcripts.close(&header, "m", &log);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
        // A later dshd (or a resume) writes it anew from the first event, never twice.
        let again = Transcripts::new(dir.path().join("t"));
        assert!(path.exists(), "a new dshd keeps what the last one wrote");
        again.sync(&header, "m", &log);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
        again.delete(&header.id);
        assert!(!path.exists());
    }

    /// An id is any string: one that reads as a path is written, and deleted, inside the
    /// projection directory, never where the path would point.
    #[test]
    fn a_projection_stays_in_its_directory_whatever_the_session_id() {
        let dir = tempfile::tempdir().unwrap();
        let below = dir.path().join("a/b");
        std::fs::create_dir_all(&below).unwrap();
        let header =
            SessionHeader::new(SessionId::parse("../../x").unwrap(), PathBuf::from("/p"), 2);
        let outside = below.join("x.jsonl");
        std::fs::write(&outside, "someone's file\n").unwrap();
        let transcripts = Transcripts::new(below.join("t/claude"));
        let log = Log(vec![event(
            0,
            EventData::UserMessage {
                message: UserMessage {
                    text: "hello".into(),
                    source: MessageSource::User,
                },
            },
        )]);
        transcripts.sync(&header, "m", &log);
        let path = transcripts.path(&header.id);
        assert_eq!(path, below.join("t/claude/..~2F..~2Fx.jsonl"));
        assert!(std::fs::read_to_string(&path).unwrap().contains("hello"));
        transcripts.delete(&header.id);
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "someone's file\n"
        );
    }

    #[test]
    fn a_child_agents_projection_is_a_sidechain_of_its_parents_session() {
        let dir = tempfile::tempdir().unwrap();
        let mut header =
            SessionHeader::new(SessionId::parse("kid").unwrap(), PathBuf::from("/p"), 2);
        header.parent_session = Some(SessionId::parse("mom").unwrap());
        let transcripts = Transcripts::new(dir.path().join("t"));
        let log = Log(vec![event(
            0,
            EventData::UserMessage {
                message: UserMessage {
                    text: "count the files".into(),
                    source: MessageSource::User,
                },
            },
        )]);
        transcripts.sync(&header, "m", &log);
        let text = std::fs::read_to_string(transcripts.path(&header.id)).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["isSidechain"], true);
        assert_eq!(line["sessionId"], "mom");
        assert_eq!(line["agentId"], "kid");
    }
}
