//! The bundle: a ZIP in upstream's `/export` layout, `session.jsonl` at the root and each child
//! agent's log at `subagents/<id>/session.jsonl` (the id escaped as the JSONL store escapes it),
//! plus `manifest.json` naming the dsh version, the bundle version and the log format version
//! (docs/LOG-FORMAT.md). A log from the JSONL store is its file's bytes; from another store, the
//! same lines written from its events.
//!
//! Reading one for import never extracts anything: entries are read from the archive into the
//! store. An entry whose name could climb out of a directory (absolute, `..`, a backslash) is
//! refused all the same, since a bundle with one was not written by dsh.

use std::fs::File;
use std::io::{BufReader, Write};
use std::os::unix::fs::FileExt as _;

use serde_json::{Value, json};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::chunks::{CHUNK, ChunkWriter, failed};
use super::context::{Context, Found, Lineage};
use super::copy::{Copy, RawLog};
use super::jsonl::log_or_transcript;
use super::{BUNDLE_VERSION, TransferError};
use crate::persistence::jsonl::{header_line, session_dir_name, write_event_lines};
use dsh_session::{EventData, FORMAT_VERSION, SessionId};

/// The root session's log in a bundle.
pub(super) const ROOT_LOG: &str = "session.jsonl";
/// The manifest's name.
pub(super) const MANIFEST: &str = "manifest.json";

/// Writes the bundle of `copies` (the root session first) to `out`, as it goes: each log is
/// streamed (a JSONL store's file read a block at a time), so no log is held whole, and the
/// manifest comes last, when every log's event count is known. The entries are stored, not
/// compressed (an export then costs what copying the bytes costs, DECISIONS.md "Export and
/// import"), and carry their sizes and CRC after their data (a data descriptor), as a ZIP written
/// in one pass does; readers take them from the central directory.
pub(super) fn write(copies: Vec<Copy>, out: &mut ChunkWriter) -> Result<(), TransferError> {
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .unix_permissions(0o600);
    let mut zip = ZipWriter::new_stream(out);
    let mut sessions = Vec::new();
    for (i, copy) in copies.into_iter().enumerate() {
        let path = if i == 0 {
            ROOT_LOG.to_owned()
        } else {
            format!(
                "subagents/{}/{ROOT_LOG}",
                session_dir_name(copy.header.id.as_str())
            )
        };
        let verbatim = copy.raw.is_some();
        let events = match copy.raw {
            Some(raw) => {
                // ZIP64 only where an entry needs it, so every reader opens the usual bundle.
                let large = raw.len >= u64::from(u32::MAX);
                zip.start_file(path.as_str(), options.large_file(large))
                    .map_err(|e| failed(&e))?;
                let lines = copy_lines(&raw, &mut zip).map_err(|e| failed(&e))?;
                lines.saturating_sub(1)
            }
            None => {
                let mut bytes = header_line(&copy.header);
                write_event_lines(&mut bytes, &copy.events).map_err(|e| failed(&e))?;
                let large = bytes.len() as u64 >= u64::from(u32::MAX);
                zip.start_file(path.as_str(), options.large_file(large))
                    .map_err(|e| failed(&e))?;
                zip.write_all(&bytes).map_err(|e| failed(&e))?;
                copy.events.len()
            }
        };
        sessions.push(json!({
            "id": copy.header.id.as_str(),
            "path": path,
            "parentSession": copy.header.parent_session.as_ref().map(|p| p.as_str()),
            "events": events,
            "backend": copy.backend.as_str(),
            "verbatim": verbatim,
        }));
    }
    let manifest = json!({
        "format": "dsh-session-bundle",
        "bundleVersion": BUNDLE_VERSION,
        "dshVersion": env!("CARGO_PKG_VERSION"),
        "logFormatVersion": FORMAT_VERSION,
        "exportedAt": dsh_session::now_ms(),
        "sessions": sessions,
    });
    let manifest = serde_json::to_vec_pretty(&manifest).map_err(|e| failed(&e))?;
    zip.start_file(MANIFEST, options).map_err(|e| failed(&e))?;
    zip.write_all(&manifest).map_err(|e| failed(&e))?;
    zip.finish().map_err(|e| failed(&e))?;
    Ok(())
}

/// Copies `raw`'s complete lines (up to the last newline within its length: a line being
/// appended is left out, not cut) to `to`; how many lines it copied.
fn copy_lines(raw: &RawLog, to: &mut impl Write) -> std::io::Result<usize> {
    let mut buf = vec![0; CHUNK];
    let end = last_line_end(&raw.file, raw.len, &mut buf)?;
    let (mut at, mut lines) = (0, 0);
    while at < end {
        let n = usize::try_from(end - at).map_or(buf.len(), |left| left.min(buf.len()));
        let block = &mut buf[..n];
        read_at(&raw.file, block, at)?;
        lines += block.iter().filter(|&&b| b == b'\n').count();
        to.write_all(block)?;
        at += n as u64;
    }
    Ok(lines)
}

/// Fills `block` from `file` at `at`; the log's length was read when it was opened, so a short
/// read means it shrank.
fn read_at(file: &File, block: &mut [u8], at: u64) -> std::io::Result<()> {
    file.read_exact_at(block, at).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::new(e.kind(), "the log became shorter while it was exported")
        } else {
            e
        }
    })
}

/// Where the last complete line of `file`'s first `len` bytes ends, read backwards a block at
/// a time through `buf` (usually one block: a line being appended is short).
fn last_line_end(file: &File, len: u64, buf: &mut [u8]) -> std::io::Result<u64> {
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let block = &mut buf[..(end - start) as usize];
        read_at(file, block, start)?;
        if let Some(i) = block.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Imports the bundle in `file`: a dsh bundle (its manifest checked), or a ZIP in upstream's
/// `/export` layout (no manifest). The root session is imported through `cx`, each child agent's
/// log as a new child session of it (or of another child) beside it; every entry is read through
/// first, so a damaged one (names, checksums) fails the import before anything is stored.
pub(super) fn import(file: File, cx: &mut Context<'_>) -> Result<Found, TransferError> {
    let mut archive = ZipArchive::new(file).map_err(|e| {
        cx.bad(format!(
            "not a readable ZIP archive ({e}); the file may be cut short"
        ))
    })?;
    let mut has_root = false;
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| cx.bad(format!("ZIP entry {i} cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        if !safe_name(&name) || entry.enclosed_name().is_none() {
            return Err(cx.bad(format!(
                "ZIP entry {name:?} names a path outside the bundle (absolute, `..` or a backslash); a dsh bundle has none"
            )));
        }
        has_root |= name == ROOT_LOG;
    }
    if !has_root {
        return Err(cx.bad(format!("the ZIP archive has no {ROOT_LOG} at its root")));
    }
    let manifest = match archive.by_name(MANIFEST) {
        Ok(entry) => Some(
            serde_json::from_reader::<_, Value>(entry)
                .map_err(|e| cx.bad(format!("{MANIFEST} is not JSON: {e}")))?,
        ),
        Err(zip::result::ZipError::FileNotFound) => None,
        Err(e) => return Err(cx.bad(format!("{MANIFEST} cannot be read: {e}"))),
    };
    if let Some(manifest) = &manifest {
        let version = manifest.get("bundleVersion").and_then(Value::as_u64);
        if version != Some(u64::from(BUNDLE_VERSION)) {
            return Err(TransferError::UnsupportedVersion {
                path: cx.path.to_owned(),
                format: "dsh bundle",
                version: version.unwrap_or(u64::MAX),
                supported: u64::from(BUNDLE_VERSION),
            });
        }
        let log_version = manifest.get("logFormatVersion").and_then(Value::as_u64);
        if log_version.is_none_or(|v| v > u64::from(FORMAT_VERSION)) {
            return Err(TransferError::UnsupportedVersion {
                path: cx.path.to_owned(),
                format: "dsh",
                version: log_version.unwrap_or(u64::MAX),
                supported: u64::from(FORMAT_VERSION),
            });
        }
    }
    // Every other entry is read through once, so a damaged one fails the import too.
    let mut children = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| cx.bad(format!("ZIP entry {i} cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        if name == ROOT_LOG || entry.is_dir() {
            continue;
        }
        if is_child_log(&name) {
            children.push(i);
        }
        std::io::copy(&mut entry, &mut std::io::sink())
            .map_err(|e| cx.bad(format!("ZIP entry {name:?} is damaged: {e}")))?;
    }
    let entry = archive
        .by_name(ROOT_LOG)
        .map_err(|e| cx.bad(format!("{ROOT_LOG} cannot be read: {e}")))?;
    let container = format!("ZIP entry {ROOT_LOG}");
    let found = log_or_transcript(BufReader::new(entry), &container, cx)?;
    let format = match (found.format, manifest.is_some()) {
        ("dsh-jsonl", true) => "dsh-bundle",
        ("upstream-jsonl", _) => "upstream-export",
        (other, _) => other,
    };
    let descendants = import_children(&mut archive, &children, cx, found.original_id.as_deref())?;
    Ok(Found {
        format,
        descendants,
        ..found
    })
}

/// Imports the child agents' logs (`subagents/<id>/session.jsonl`, parents before children, as
/// an export writes them) as child sessions of the sessions this import made of their parents;
/// a log whose parent is not among them becomes a top-level session.
fn import_children(
    archive: &mut ZipArchive<File>,
    children: &[usize],
    root: &mut Context<'_>,
    root_id: Option<&str>,
) -> Result<Vec<SessionId>, TransferError> {
    let mut lineage = Lineage::new();
    if let Some(old) = root_id {
        lineage.insert(old.to_owned(), (root.id.clone(), 0));
    }
    let mut made = Vec::new();
    for &i in children {
        let entry = archive
            .by_index(i)
            .map_err(|e| root.bad(format!("ZIP entry {i} cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        let id = SessionId::new_v7();
        let mut cx = Context {
            path: root.path,
            cwd: root.cwd,
            id: &id,
            builder: root.builder.sibling(),
            lineage: Some(&lineage),
        };
        let container = format!("ZIP entry {name}");
        let found = log_or_transcript(BufReader::new(entry), &container, &mut cx)?;
        let depth = cx.builder.header.as_ref().map_or(0, |h| h.delegation_depth);
        let Context { builder, .. } = cx;
        let (read, skipped) = (builder.read, builder.skipped);
        builder.finish(EventData::Imported {
            format: found.format.to_owned(),
            source: format!("{}!{name}", root.path.to_string_lossy()),
            original_id: found.original_id.clone(),
            events: read,
            skipped,
        })?;
        if let Some(old) = found.original_id {
            lineage.insert(old, (id.clone(), depth));
        }
        made.push(id);
    }
    Ok(made)
}

/// Whether a ZIP entry is a child agent's log: `subagents/<id>/session.jsonl`.
fn is_child_log(name: &str) -> bool {
    name.strip_prefix("subagents/")
        .and_then(|rest| rest.strip_suffix(&format!("/{ROOT_LOG}")))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Whether a ZIP entry's name stays inside the archive's directory when taken as a path.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.contains('\\')
        && !name.contains('\0')
        && name.split('/').all(|part| part != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(bytes: &[u8], len: u64) -> RawLog {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        RawLog { file, len }
    }

    #[test]
    fn the_lines_are_copied_up_to_the_last_newline_within_the_length() {
        let mut out = Vec::new();
        let lines = copy_lines(&raw(b"{\"h\":1}\n{\"e\":1}\n{\"e\":", 21), &mut out).unwrap();
        assert_eq!((lines, out.as_slice()), (2, &b"{\"h\":1}\n{\"e\":1}\n"[..]));
        // Bytes appended after the length was read are not the export's.
        let mut out = Vec::new();
        assert_eq!(copy_lines(&raw(b"a\nb\nc\n", 2), &mut out).unwrap(), 1);
        assert_eq!(out, b"a\n");
    }

    #[test]
    fn a_log_that_became_shorter_fails_saying_so() {
        let error = copy_lines(&raw(b"a\nb\n", 400), &mut Vec::new()).unwrap_err();
        assert!(error.to_string().contains("became shorter"), "{error}");
    }
}
