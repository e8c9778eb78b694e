//! What a reader of one import source works with: the file, where the new session works unless
//! the source says, the new id, and the [`Builder`] its events go to; and what it found.

use std::path::{Path, PathBuf};

use super::TransferError;
use super::builder::Builder;
use super::lines::LineError;
use dsh_session::{AgentSettings, SessionHeader, SessionId, validate_cwd};

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
