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
use std::io::{BufReader, Cursor, Write};

use serde_json::{Value, json};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::context::{Context, Found};
use super::copy::Copy;
use super::jsonl::log_or_transcript;
use super::{BUNDLE_VERSION, TransferError};
use crate::persistence::PersistenceError;
use crate::persistence::jsonl::{header_line, session_dir_name, write_event_lines};
use dsh_session::FORMAT_VERSION;

/// The root session's log in a bundle.
pub(super) const ROOT_LOG: &str = "session.jsonl";
/// The manifest's name.
pub(super) const MANIFEST: &str = "manifest.json";

/// The bundle of `copies` (the root session first). The logs are stored, not compressed: an
/// export then costs what copying the bytes costs (DECISIONS.md, "Export and import").
pub(super) fn write(copies: Vec<Copy>) -> Result<Vec<u8>, TransferError> {
    let failed = |e: &dyn std::fmt::Display| PersistenceError::Task {
        what: "export",
        message: format!("writing the bundle: {e}"),
    };
    let mut sessions = Vec::new();
    let mut logs = Vec::new();
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
        let bytes = match copy.raw {
            Some(raw) => raw,
            None => {
                let mut bytes = header_line(&copy.header);
                write_event_lines(&mut bytes, &copy.events).map_err(|e| failed(&e))?;
                bytes
            }
        };
        sessions.push(json!({
            "id": copy.header.id.as_str(),
            "path": path,
            "parentSession": copy.header.parent_session.as_ref().map(|p| p.as_str()),
            "events": copy.len,
            "backend": copy.backend.as_str(),
            "verbatim": verbatim,
        }));
        logs.push((path, bytes));
    }
    let manifest = json!({
        "format": "dsh-session-bundle",
        "bundleVersion": BUNDLE_VERSION,
        "dshVersion": env!("CARGO_PKG_VERSION"),
        "logFormatVersion": FORMAT_VERSION,
        "exportedAt": dsh_session::now_ms(),
        "sessions": sessions,
    });
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .unix_permissions(0o600);
    let manifest = serde_json::to_vec_pretty(&manifest).map_err(|e| failed(&e))?;
    // The whole archive in one buffer of about its final size: no doubling copies of a long log.
    let total: usize = logs.iter().map(|(_, b)| b.len() + 512).sum::<usize>() + manifest.len();
    let mut zip = ZipWriter::new(Cursor::new(Vec::with_capacity(total + 4096)));
    zip.start_file(MANIFEST, options).map_err(|e| failed(&e))?;
    zip.write_all(&manifest).map_err(|e| failed(&e))?;
    for (path, bytes) in logs {
        let bytes: Vec<u8> = bytes;
        // ZIP64 only where an entry needs it, so every reader opens the usual bundle.
        let options = options.large_file(bytes.len() as u64 >= u64::from(u32::MAX));
        zip.start_file(path, options).map_err(|e| failed(&e))?;
        zip.write_all(&bytes).map_err(|e| failed(&e))?;
    }
    let out = zip.finish().map_err(|e| failed(&e))?;
    Ok(out.into_inner())
}

/// Imports the root session of the bundle in `file`: a dsh bundle (its manifest checked), or a
/// ZIP in upstream's `/export` layout (no manifest). The child agents' logs are checked (names,
/// and that each decompresses with its checksum) but not imported: the root's history already
/// holds each child's answer.
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
    // Every other log is read through once, so a damaged child fails the import too.
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| cx.bad(format!("ZIP entry {i} cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        if name == ROOT_LOG || entry.is_dir() {
            continue;
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
    Ok(Found { format, ..found })
}

/// Whether a ZIP entry's name stays inside the archive's directory when taken as a path.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.contains('\\')
        && !name.contains('\0')
        && name.split('/').all(|part| part != "..")
}
