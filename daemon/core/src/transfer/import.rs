//! Import: what the file is (a ZIP bundle, a Zstandard stream, JSON lines: a session log's or a
//! Claude Code transcript's), read on the blocking pool a line at a time into a [`Builder`],
//! whose batches the async side appends to the active backend. Anything wrong, in the source or
//! the store, deletes what was appended, so a failed import leaves the store as it was.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use tokio::sync::mpsc;

use super::builder::{Batch, Builder};
use super::context::{Context, Found};
use super::jsonl::log_or_transcript;
use super::{TransferError, bundle};
use crate::persistence::{PersistenceError, PersistenceHandle};
use dsh_session::{EventData, SessionId};

const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

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
    /// The new sessions of a bundle's child agents (each a child of the new session or of
    /// another of these), parents first.
    pub descendants: Vec<SessionId>,
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
    // Every session this import wrote to: all of them go again if anything fails.
    let mut written: Vec<SessionId> = Vec::new();
    while let Some((header, events)) = rx.recv().await {
        if !written.contains(&header.id) {
            written.push(header.id.clone());
        }
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
            for session in &written {
                backend.release(session).await;
            }
            tracing::info!(session = %id, format = found.format, events, "session imported");
            Ok(Imported {
                id,
                format: found.format,
                original_id: found.original_id,
                events,
                skipped,
                descendants: found.descendants,
            })
        }
        Err(error) => {
            if !written.contains(&id) {
                written.push(id.clone());
            }
            for session in &written {
                match backend.delete(session).await {
                    Ok(()) | Err(PersistenceError::NotFound(_)) => {}
                    Err(delete) => {
                        tracing::warn!(%session, error = %delete, "cannot remove a failed import")
                    }
                }
                backend.release(session).await;
            }
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
    let mut cx = Context {
        path,
        cwd,
        id,
        builder: Builder::new(tx),
        lineage: None,
    };
    // Checked before opening (opening a FIFO to read would wait for a writer) and on what was
    // opened (the path may have been replaced in between).
    if !std::fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(cx.bad("not a regular file"));
    }
    let file = File::open(path).map_err(unreadable)?;
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(cx.bad("not a regular file"));
    }
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let head = reader.fill_buf().map_err(unreadable)?;
    let (zip, zstd) = (head.starts_with(ZIP_MAGIC), head.starts_with(ZSTD_MAGIC));
    let found = if zip {
        bundle::import(reader.into_inner(), &mut cx)?
    } else if zstd {
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
