//! Export: which sessions (the one asked for, and with `descendants` its child agents', parents
//! before children), each read once, then written in the asked format.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::copy::Copy;
use super::{TransferError, bundle, claude, markdown};
use crate::agent::{Agent, AgentRegistry};
use crate::persistence::{BackendKind, Persistence, PersistenceError};
use dsh_session::{Origin, SessionHeader, SessionId};

/// What an export is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// A ZIP of the logs (`session.jsonl`, `subagents/<id>/session.jsonl`) and a manifest.
    Bundle,
    /// A transcript a person reads.
    Markdown,
    /// Claude Code's transcript JSONL, which tools written for Claude Code read.
    ClaudeJsonl,
}

impl ExportFormat {
    /// The name on the wire and the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bundle => "bundle",
            Self::Markdown => "markdown",
            Self::ClaudeJsonl => "claude-jsonl",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Self::Bundle => "zip",
            Self::Markdown => "md",
            Self::ClaudeJsonl => "jsonl",
        }
    }
}

/// An export: its bytes, a file name to save them under, and how many sessions it holds.
#[derive(Debug)]
pub struct Exported {
    /// The exported file.
    pub bytes: Vec<u8>,
    /// `<id>.zip`, `<id>.md` or `<id>.jsonl`.
    pub file_name: String,
    /// The session and the descendants exported with it.
    pub sessions: Vec<SessionId>,
}

/// Exports session `id` (live or stored in the active backend) as `format`; with `descendants`,
/// its child agents' sessions too, however deep. A live session is checkpointed first, as a
/// step's end would, so the export holds everything it logged until then.
pub async fn export(
    registry: &AgentRegistry,
    id: &SessionId,
    format: ExportFormat,
    descendants: bool,
) -> Result<Exported, TransferError> {
    let backend = registry.services().persistence.backend();
    let mut ids = vec![id.clone()];
    if descendants {
        ids.extend(descendants_of(registry, backend.as_ref(), id).await?);
    }
    let mut copies = Vec::with_capacity(ids.len());
    for session in &ids {
        let raw = format == ExportFormat::Bundle;
        copies.push(read(registry, &backend, session, raw).await?);
    }
    let file_name = format!("{}.{}", id.as_str(), format.extension());
    // Encoding a long log is CPU work of its own: not on a runtime worker.
    let bytes = tokio::task::spawn_blocking(move || match format {
        ExportFormat::Bundle => bundle::write(copies),
        ExportFormat::Markdown => Ok(markdown::render(&copies).into_bytes()),
        ExportFormat::ClaudeJsonl => Ok(claude::export(&copies)),
    })
    .await
    .map_err(|e| PersistenceError::Task {
        what: "export",
        message: e.to_string(),
    })??;
    Ok(Exported {
        bytes,
        file_name,
        sessions: ids,
    })
}

/// The child agents' sessions under `root`, stored or live, each after its parent.
async fn descendants_of(
    registry: &AgentRegistry,
    backend: &dyn Persistence,
    root: &SessionId,
) -> Result<Vec<SessionId>, TransferError> {
    let mut children: HashMap<SessionId, BTreeSet<(i64, SessionId)>> = HashMap::new();
    let live = registry.list();
    let headers = backend
        .list()
        .await?
        .into_iter()
        .chain(live.iter().map(|a| a.header().as_ref().clone()));
    for header in headers {
        if let (Some(parent), Some(Origin::Subagent)) = (&header.parent_session, header.origin) {
            children
                .entry(parent.clone())
                .or_default()
                .insert((header.created_at, header.id.clone()));
        }
    }
    let mut out = Vec::new();
    let mut queue = VecDeque::from([root.clone()]);
    let mut seen = BTreeSet::from([root.clone()]);
    while let Some(parent) = queue.pop_front() {
        for (_, child) in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.clone()) {
                out.push(child.clone());
                queue.push_back(child.clone());
            }
        }
    }
    Ok(out)
}

/// Session `id` as the active backend stores it after a checkpoint of its live agent, if it has
/// one; a live session with nothing to store yet is read from memory.
async fn read(
    registry: &AgentRegistry,
    backend: &Arc<dyn Persistence>,
    id: &SessionId,
    raw: bool,
) -> Result<Copy, TransferError> {
    let live: Option<Arc<Agent>> = registry.get(id).ok();
    if let Some(agent) = &live {
        agent.checkpoint(registry.services()).await?;
    }
    let kind = backend.kind();
    // A bundle from a JSONL store copies the file: only its header is read (parsing a long log
    // would cost what a resume costs, for nothing).
    if raw
        && kind == BackendKind::Jsonl
        && let Some(header) = backend.header(id).await?
        && let Some(raw) = stored_bytes(backend.as_ref(), &header).await
    {
        let lines = raw.iter().filter(|&&b| b == b'\n').count();
        return Ok(Copy {
            header,
            events: Vec::new(),
            len: lines.saturating_sub(1),
            raw: Some(raw),
            backend: kind,
        });
    }
    match backend.inspect(id).await {
        Ok(stored) => Ok(Copy {
            header: stored.header,
            len: stored.events.len(),
            events: stored.events,
            raw: None,
            backend: kind,
        }),
        Err(PersistenceError::NotFound(_)) => match live {
            Some(agent) => {
                let (header, events) =
                    agent.read_log(|log| (log.header().as_ref().clone(), log.events().to_vec()));
                Ok(Copy {
                    header,
                    len: events.len(),
                    events,
                    raw: None,
                    backend: kind,
                })
            }
            None => Err(TransferError::NotFound(id.clone())),
        },
        Err(other) => Err(other.into()),
    }
}

/// The bytes of a JSONL log up to its last complete line (a line being appended right now, by the
/// session's agent, is left out). `None` when the file cannot be read: the bundle then writes the
/// stored events, in the same format.
async fn stored_bytes(backend: &dyn Persistence, header: &SessionHeader) -> Option<Vec<u8>> {
    let location = backend.locate(header)?;
    let mut bytes = match tokio::fs::read(&location.path).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(path = %location.path.display(), %error, "cannot read a log to export; writing its events instead");
            return None;
        }
    };
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    Some(bytes)
}
