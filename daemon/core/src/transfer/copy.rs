//! One session as an export reads it.

use crate::persistence::BackendKind;
use dsh_session::{Event, SessionHeader};

/// One session as exported: its header, and its events or, for a bundle from a JSONL store, its
/// log's bytes as stored (the bundle copies them unchanged, and nothing parses them).
#[derive(Debug)]
pub(super) struct Copy {
    pub(super) header: SessionHeader,
    /// Empty when `raw` holds the log.
    pub(super) events: Vec<Event>,
    pub(super) raw: Option<Vec<u8>>,
    /// How many events the log holds.
    pub(super) len: usize,
    pub(super) backend: BackendKind,
}
