//! Export: which sessions (the one asked for, and with `descendants` its child agents', parents
//! before children), each read once, then written in the asked format.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::Write as _;
use std::sync::Arc;

use super::chunks::{Chunks, failed};
use super::copy::{Copy, RawLog};
use super::{TransferError, bundle, claude, markdown};
use crate::agent::{Agent, AgentRegistry};
use crate::persistence::jsonl::session_file_name;
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

/// An export: its bytes as they are written, a file name to save them under, and the sessions
/// it holds.
#[derive(Debug)]
pub struct Exported {
    /// The exported file, in chunks.
    pub chunks: Chunks,
    /// `<id>.zip`, `<id>.md` or `<id>.jsonl`, the id escaped into one path component.
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
    // A client saves under this name: an id is any string, so it is escaped as the JSONL store
    // escapes it (one path component, never `..`).
    let file_name = session_file_name(id.as_str(), format.extension());
    // Encoding a long log is CPU work of its own: not on a runtime worker.
    let chunks = Chunks::spawn(move |out| match format {
        ExportFormat::Bundle => bundle::write(copies, out),
        ExportFormat::Markdown => out
            .write_all(markdown::render(&copies).as_bytes())
            .map_err(|e| failed(&e)),
        ExportFormat::ClaudeJsonl => out
            .write_all(&claude::export(&copies))
            .map_err(|e| failed(&e)),
    });
    Ok(Exported {
        chunks,
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
        && let Some(raw) = open_log(backend.as_ref(), &header).await
    {
        return Ok(Copy {
            header,
            events: Vec::new(),
            raw: Some(raw),
            backend: kind,
        });
    }
    match backend.inspect(id).await {
        Ok(stored) => Ok(Copy {
            header: stored.header,
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

/// The JSONL log of `header`, opened, with its length now (a line being appended after this is
/// left out of the export). `None` when the file cannot be opened: the bundle then writes the
/// stored events, in the same format.
async fn open_log(backend: &dyn Persistence, header: &SessionHeader) -> Option<RawLog> {
    let location = backend.locate(header)?;
    let opened = async {
        let file = tokio::fs::File::open(&location.path).await?;
        let len = file.metadata().await?.len();
        Ok::<_, std::io::Error>(RawLog {
            file: file.into_std().await,
            len,
        })
    };
    match opened.await {
        Ok(raw) => Some(raw),
        Err(error) => {
            tracing::warn!(path = %location.path.display(), %error, "cannot open a log to export; writing its events instead");
            None
        }
    }
}
