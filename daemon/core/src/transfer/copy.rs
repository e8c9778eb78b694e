//! One session as an export reads it.

use std::fs::File;

use crate::persistence::BackendKind;
use dsh_session::{Event, SessionHeader};

/// One session as exported: its header, and its events or, for a bundle from a JSONL store, its
/// log file (the bundle copies its bytes unchanged, and nothing parses them).
#[derive(Debug)]
pub(super) struct Copy {
    pub(super) header: SessionHeader,
    /// Empty when `raw` holds the log.
    pub(super) events: Vec<Event>,
    pub(super) raw: Option<RawLog>,
    pub(super) backend: BackendKind,
}

/// A JSONL store's log file, opened once: its bytes up to `len` are the log when it was opened
/// (the store only appends, so they stay as they are while they are read).
#[derive(Debug)]
pub(super) struct RawLog {
    pub(super) file: File,
    pub(super) len: u64,
}
