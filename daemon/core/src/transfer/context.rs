//! What a reader of one import source works with: the file, where the new session works unless
//! the source says, the new id, and the [`Builder`] its events go to; and what it found.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::TransferError;
use super::builder::Builder;
use super::lines::LineError;
use dsh_session::{AgentSettings, Origin, SessionHeader, SessionId, validate_cwd};

/// The sessions of one import so far, by the id each had in the source: its new id and its
/// delegation depth (a bundle's child agents name their parent by its old id).
pub(super) type Lineage = HashMap<String, (SessionId, u32)>;

/// What reading a source found, besides its events.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) format: &'static str,
    pub(super) original_id: Option<String>,
    /// The new sessions of a bundle's child agents, parents first.
    pub(super) descendants: Vec<SessionId>,
}

/// What a reader of one source needs: where it is, where the new session works unless the source
/// says, the new id, and the builder its events go to.
pub(super) struct Context<'a> {
    pub(super) path: &'a Path,
    pub(super) cwd: &'a Path,
    pub(super) id: &'a SessionId,
    pub(super) builder: Builder,
    /// For a bundle's child agent: the sessions imported before it, its parent among them.
    pub(super) lineage: Option<&'a Lineage>,
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

    /// Sets the new session's header, in the source's directory when it is one here, else in the
    /// importer's: a top-level session, or the child agent of the new session of the source's
    /// `parent` when this import brought that one in.
    pub(super) fn set_header(
        &mut self,
        source_cwd: Option<&str>,
        settings: Option<AgentSettings>,
        parent: Option<&str>,
    ) {
        let cwd = source_cwd
            .map(PathBuf::from)
            .filter(|c| validate_cwd(c).is_ok() && c.is_dir())
            .unwrap_or_else(|| self.cwd.to_owned());
        let mut header = SessionHeader::new(self.id.clone(), cwd, dsh_session::now_ms());
        header.settings = settings;
        let parent = parent.and_then(|p| self.lineage.and_then(|l| l.get(p)));
        if let Some((parent, depth)) = parent {
            header.parent_session = Some(parent.clone());
            header.origin = Some(Origin::Subagent);
            header.delegation_depth = depth.saturating_add(1);
        }
        self.builder.header = Some(header);
    }
}
