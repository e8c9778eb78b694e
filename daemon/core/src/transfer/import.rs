//! Import: what the file is (a ZIP bundle, a Zstandard stream, JSON lines: a session log's or a
//! Claude Code transcript's), read on the blocking pool a line at a time into a [`Builder`],
//! whose batches the async side appends to the active backend. Anything wrong, in the source or
//! the store, deletes what was appended, so a failed import leaves the store as it was.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::sync::mpsc;

use super::builder::{Batch, Builder};
use super::lines::{LineError, Lines};
use super::{TransferError, bundle, claude, upstream};
use crate::persistence::jsonl::parse_header_line;
use crate::persistence::{PersistenceError, PersistenceHandle};
use dsh_session::{
    AgentSettings, Event, EventData, FORMAT_VERSION, SessionHeader, SessionId, validate_cwd,
};

const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// How many lines after a log's header are looked at to tell dsh's events from upstream's.
const SNIFF_LINES: usize = 256;

/// What an import made.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The new session.
    pub id: SessionId,
    /// What the source was (`session/imported`'s `format`).
    pub format: &'static str,
    /// The id the session had in the source, when it had one.
    pub original_id: Option<String>,
    /// How many events the new session has.
    pub events: u64,
    /// How many source records were left out.
    pub skipped: u64,
}

/// What reading a source found, besides its events.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) format: &'static str,
    pub(super) original_id: Option<String>,
}

/// What a reader of one source needs: where it is, where the new session works unless the source
/// says, the new id, and the builder its events go to.
pub(super) struct Context<'a> {
    pub(super) path: &'a Path,
    pub(super) cwd: &'a Path,
    pub(super) id: &'a SessionId,
    pub(super) builder: Builder,
}

impl Context<'_> {
    /// A refusal of the source: `what` is wrong with it.
    pub(super) fn bad(&self, what: impl Into<String>) -> TransferError {
        TransferError::BadInput {
            path: self.path.to_owned(),
            what: what.into(),
        }
    }

    /// A line could not be read: `container` says from what (the file, a ZIP entry, a
    /// Zstandard stream).
    pub(super) fn line_error(&self, container: &str, error: LineError) -> TransferError {
        match error {
            LineError::Io(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.bad(format!("{container} is cut short ({error})"))
            }
            LineError::Io(error) => self.bad(format!("{container} cannot be read: {error}")),
            LineError::TooLong { line } => self.bad(format!(
                "line {line} of {container} is longer than {} MiB",
                super::lines::MAX_LINE / (1024 * 1024)
            )),
        }
    }

    /// Sets the new session's header: a new top-level session in the source's directory when it
    /// is one here, else in the importer's.
    pub(super) fn set_header(&mut self, source_cwd: Option<&str>, settings: Option<AgentSettings>) {
        let cwd = source_cwd
            .map(PathBuf::from)
            .filter(|c| validate_cwd(c).is_ok() && c.is_dir())
            .unwrap_or_else(|| self.cwd.to_owned());
        let mut header = SessionHeader::new(self.id.clone(), cwd, dsh_session::now_ms());
        header.settings = settings;
        self.builder.header = Some(header);
    }
}

/// Imports the file at `path` into the active backend as a new session working in the source's
/// directory, or in `cwd` when the source has none that exists here.
pub async fn import(
    persistence: &PersistenceHandle,
    path: &Path,
    cwd: &Path,
) -> Result<Imported, TransferError> {
    let backend = persistence.backend();
    let id = SessionId::new_v7();
    let (tx, mut rx) = mpsc::channel::<Batch>(2);
    let reader = {
        let (path, cwd, id) = (path.to_owned(), cwd.to_owned(), id.clone());
        tokio::task::spawn_blocking(move || read_source(&path, &cwd, &id, tx))
    };
    let mut failure = None;
    while let Some((header, events)) = rx.recv().await {
        if let Err(error) = backend.append(&header, &events).await {
            failure = Some(error);
            break;
        }
    }
    // The reader stops at its next batch once nobody takes them.
    drop(rx);
    let read = reader.await.map_err(|e| PersistenceError::Task {
        what: "import",
        message: e.to_string(),
    });
    let outcome = match (failure, read) {
        (Some(error), _) => Err(error.into()),
        (None, Err(error)) => Err(error.into()),
        (None, Ok(outcome)) => outcome,
    };
    match outcome {
        Ok((found, events, skipped)) => {
            backend.release(&id).await;
            tracing::info!(session = %id, format = found.format, events, "session imported");
            Ok(Imported {
                id,
                format: found.format,
                original_id: found.original_id,
                events,
                skipped,
            })
        }
        Err(error) => {
            match backend.delete(&id).await {
                Ok(()) | Err(PersistenceError::NotFound(_)) => {}
                Err(delete) => {
                    tracing::warn!(session = %id, error = %delete, "cannot remove a failed import")
                }
            }
            backend.release(&id).await;
            Err(error)
        }
    }
}

/// Reads the source and builds the session's events (on the blocking pool): the source's format,
/// how many events the session has, and how many source records were left out.
fn read_source(
    path: &Path,
    cwd: &Path,
    id: &SessionId,
    tx: mpsc::Sender<Batch>,
) -> Result<(Found, u64, u64), TransferError> {
    let unreadable = |source| TransferError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    let mut cx = Context {
        path,
        cwd,
        id,
        builder: Builder::new(tx),
    };
    if !meta.is_file() {
        return Err(cx.bad("not a regular file"));
    }
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let head = reader.fill_buf().map_err(unreadable)?.to_vec();
    let found = if head.starts_with(ZIP_MAGIC) {
        bundle::import(reader.into_inner(), &mut cx)?
    } else if head.starts_with(ZSTD_MAGIC) {
        let decoder = zstd::stream::read::Decoder::with_buffer(reader).map_err(unreadable)?;
        let found = log_or_transcript(BufReader::new(decoder), "the Zstandard stream", &mut cx)?;
        match found.format {
            "upstream-jsonl" => Found {
                format: "upstream-zstd",
                ..found
            },
            _ => found,
        }
    } else {
        log_or_transcript(reader, "the file", &mut cx)?
    };
    let Context { builder, .. } = cx;
    let (read, skipped) = (builder.read, builder.skipped);
    let events = builder.finish(EventData::Imported {
        format: found.format.to_owned(),
        source: path.to_string_lossy().into_owned(),
        original_id: found.original_id.clone(),
        events: read,
        skipped,
    })?;
    Ok((found, events, skipped))
}

/// A session log (dsh's or upstream's) or a Claude Code transcript, as JSON lines.
pub(super) fn log_or_transcript<R: BufRead>(
    reader: R,
    container: &str,
    cx: &mut Context<'_>,
) -> Result<Found, TransferError> {
    let mut lines = Lines::new(reader);
    let Some((_, first, _)) = lines.next_line().map_err(|e| cx.line_error(container, e))? else {
        return Err(cx.bad(format!("{container} is empty")));
    };
    let first = first.to_vec();
    let value: Value = serde_json::from_slice(&first)
        .map_err(|e| cx.bad(format!("line 1 of {container} is not JSON: {e}")))?;
    match value.get("type").and_then(Value::as_str) {
        Some("session") => log(&first, &value, lines, container, cx),
        _ if claude::is_record(&value) => claude::import(&value, lines, container, cx),
        _ => Err(cx.bad(format!(
            "line 1 of {container} is neither a session log's header (\"type\":\"session\") nor a Claude Code transcript record"
        ))),
    }
}

/// A session log: its header, then events in dsh's vocabulary or upstream's, told apart by the
/// shape of its first message.
fn log<R: BufRead>(
    header_line: &[u8],
    header: &Value,
    mut lines: Lines<R>,
    container: &str,
    cx: &mut Context<'_>,
) -> Result<Found, TransferError> {
    let mut ahead: Vec<(u64, Vec<u8>, usize)> = Vec::new();
    let mut flavour = None;
    while ahead.len() < SNIFF_LINES && flavour.is_none() {
        match lines.next_line().map_err(|e| cx.line_error(container, e))? {
            Some((n, line, bytes)) => {
                flavour = sniff(line);
                ahead.push((n, line.to_vec(), bytes));
            }
            None => break,
        }
    }
    let dsh = flavour.unwrap_or_else(|| {
        let mut map = header.as_object().cloned().unwrap_or_default();
        map.remove("type");
        map.remove("version");
        map.insert("version".into(), 0.into());
        serde_json::from_value::<SessionHeader>(Value::Object(map)).is_ok()
    });
    let version = header.get("version").and_then(Value::as_u64);
    let original_id = header.get("id").and_then(Value::as_str).map(str::to_owned);
    if !dsh {
        if version != Some(upstream::VERSION) {
            return Err(TransferError::UnsupportedVersion {
                path: cx.path.to_owned(),
                format: "upstream DeepSeek Harness",
                version: version.unwrap_or(u64::MAX),
                supported: upstream::VERSION,
            });
        }
        let cwd = header.get("cwd").and_then(Value::as_str);
        cx.set_header(cwd, None);
        upstream::events(ahead, lines, container, cx)?;
        return Ok(Found {
            format: "upstream-jsonl",
            original_id,
        });
    }
    match version {
        Some(v) if v <= u64::from(FORMAT_VERSION) => {}
        other => {
            return Err(TransferError::UnsupportedVersion {
                path: cx.path.to_owned(),
                format: "dsh",
                version: other.unwrap_or(u64::MAX),
                supported: u64::from(FORMAT_VERSION),
            });
        }
    }
    let source = parse_header_line(header_line)
        .map_err(|e| cx.bad(format!("line 1 of {container}: {e}")))?;
    cx.set_header(source.cwd.to_str(), source.settings);
    let mut expected = 0u64;
    for (n, line, bytes) in ahead {
        dsh_line(cx, container, n, &line, bytes, &mut expected)?;
    }
    while let Some((n, line, bytes)) = lines.next_line().map_err(|e| cx.line_error(container, e))? {
        dsh_line(cx, container, n, line, bytes, &mut expected)?;
    }
    Ok(Found {
        format: "dsh-jsonl",
        original_id,
    })
}

/// One line of a dsh log: an event whose seq is the next one.
fn dsh_line(
    cx: &mut Context<'_>,
    container: &str,
    n: u64,
    line: &[u8],
    bytes: usize,
    expected: &mut u64,
) -> Result<(), TransferError> {
    let event = Event::from_line(line)
        .map_err(|e| cx.bad(format!("line {n} of {container} is not a dsh event: {e}")))?;
    if event.seq != *expected {
        return Err(cx.bad(format!(
            "line {n} of {container} has seq {} where {expected} was expected",
            event.seq
        )));
    }
    *expected += 1;
    cx.builder.consumed(bytes);
    cx.builder.read += 1;
    cx.builder.push(event.time, event.data)
}

/// Whether an event line is dsh's (`Some(true)`) or upstream's (`Some(false)`), when its type
/// tells: the two vocabularies share names, and differ in the shape of messages.
fn sniff(line: &[u8]) -> Option<bool> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let data = value.get("data")?;
    match value.get("type")?.as_str()? {
        "user/message" | "assistant/message" => Some(
            data.get("message")
                .is_some_and(|m| m.get("text").is_some() && m.get("content").is_none())
                && data.get("role").is_none(),
        ),
        "tool/result" => Some(data.get("callId").is_some()),
        "tool/call" => Some(!data.get("arguments").is_some_and(Value::is_string)),
        _ => None,
    }
}
