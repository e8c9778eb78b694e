//! Sources of JSON lines: a session log (dsh's own, or upstream's: the same header, events told
//! apart by the shape of their messages) or a Claude Code transcript.

use std::io::BufRead;

use serde_json::Value;

use super::context::{Context, Found};
use super::lines::Lines;
use super::{TransferError, claude, upstream};
use crate::persistence::jsonl::parse_header_line;
use dsh_session::{Event, FORMAT_VERSION, SessionHeader};

/// How many lines after a log's header (and, so that memory stays bounded, at most how many of
/// their bytes) are looked at to tell dsh's events from upstream's.
const SNIFF_LINES: usize = 256;
const SNIFF_BYTES: usize = 16 * 1024 * 1024;

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
    let mut held = 0usize;
    while ahead.len() < SNIFF_LINES && held < SNIFF_BYTES && flavour.is_none() {
        match lines.next_line().map_err(|e| cx.line_error(container, e))? {
            Some((n, line, bytes)) => {
                flavour = sniff(line);
                held += line.len();
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

/// Whether an event line is dsh's (`Some(true)`) or upstream's (`Some(false)`), when it tells:
/// the two vocabularies share names. A message (`user/message`, `assistant/message`,
/// `tool/result`) is dsh's when it reads as dsh's event, whose members are checked strictly;
/// a type only one of them has tells by itself; the shared ones whose data has the same shape
/// (turns, steps, `tool/call`, `session/end-seed`) tell nothing.
fn sniff(line: &[u8]) -> Option<bool> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let kind = value.get("type")?.as_str()?;
    match kind {
        "user/message" | "assistant/message" | "tool/result" => {
            Some(Event::from_line(line).is_ok_and(|e| e.data.known_type_name().is_some()))
        }
        "turn/start" | "turn/end" | "step/start" | "step/end" | "tool/call"
        | "session/end-seed" => None,
        _ if upstream::LEFT_OUT.contains(&kind) => Some(false),
        _ if dsh_session::EventData::is_known_type(kind) => Some(true),
        _ => None,
    }
}
