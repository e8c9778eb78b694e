//! Sessions leaving and entering dsh (CONTRACTS §4.8): exporting a session (and its child agents)
//! as a bundle of logs, a Markdown transcript or a Claude Code transcript, and importing a dsh
//! bundle or log, an upstream DeepSeek Harness log (plain or Zstandard) or a Claude Code
//! transcript as a new session.
//!
//! Export reads; the only thing it writes is a checkpoint of each live session it exports, the
//! same checkpoint a step's end makes (it waits for the session's cursor, never for its turn).
//! Import writes one new session into the active backend, in batches of whole turns, and deletes
//! it again if anything fails on the way, so nothing half-imported stays; the source is opened
//! read-only and only read.

mod blocks;
mod builder;
mod bundle;
mod chunks;
mod claude;
mod context;
mod copy;
mod export;
mod import;
mod jsonl;
mod lines;
mod markdown;
mod surface;
#[cfg(test)]
mod tests;
mod upstream;

use std::path::PathBuf;

pub use chunks::Chunks;
pub use export::{ExportFormat, Exported, export};
pub use import::{Imported, import};

use crate::agent::AgentError;
use crate::persistence::PersistenceError;
use dsh_session::SessionId;

/// The bundle's manifest version (`manifest.json`'s `bundleVersion`): the layout of the ZIP, apart
/// from the log format inside it (`logFormatVersion`, the header's `version`).
pub const BUNDLE_VERSION: u32 = 1;

/// Why an export or an import failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// No live or stored session has this id.
    #[error("no session {0}")]
    NotFound(SessionId),
    /// The store failed.
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    /// A live session could not be read or checkpointed.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The file to import cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file to import is not something dsh imports, or is damaged: what is wrong, where.
    #[error("{path}: {what}; nothing was imported")]
    BadInput {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the line, frame or entry.
        what: String,
    },
    /// The file is a log of a format version this dsh does not read.
    #[error(
        "{path}: {format} log format version {version} is not supported (this dsh reads version {supported}); nothing was imported"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Whose format (`dsh`, `upstream DeepSeek Harness`, `dsh bundle`).
        format: &'static str,
        /// The version the file names.
        version: u64,
        /// The version this dsh reads.
        supported: u64,
    },
}
