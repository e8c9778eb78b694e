//! One session as an export reads it.

use crate::persistence::BackendKind;
use dsh_session::{Event, SessionHeader};

/// One session as exported: its header and events and, from a JSONL store, its log's bytes as
/// stored (the bundle copies them unchanged).
#[derive(Debug)]
pub(super) struct Copy {
    pub(super) header: SessionHeader,
    pub(super) events: Vec<Event>,
    pub(super) raw: Option<Vec<u8>>,
    pub(super) backend: BackendKind,
}
