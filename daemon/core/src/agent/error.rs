//! Why an agent operation was refused, and what a shutdown could not save.

use std::path::PathBuf;

use super::model::{InvalidModel, UnusableModel};
use crate::persistence::PersistenceError;
use dsh_session::SessionId;

/// Why an agent operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No live agent has this id.
    #[error("no live agent {0}")]
    NotFound(SessionId),
    /// No stored session has this id.
    #[error("no session {0} in the active persistence backend")]
    SessionNotFound(SessionId),
    /// The session is already live.
    #[error("session {0} is already live as an agent")]
    AlreadyLive(SessionId),
    /// A new agent was asked for under the id of a stored session.
    #[error("session_id: session {0} exists; resume it instead of creating it")]
    SessionExists(SessionId),
    /// A setting a child agent takes from its parent was asked to change on the child.
    #[error("agent {0} is a child agent: its settings are its parent's to set")]
    ChildSettings(SessionId),
    /// The session is live, and the operation needs it stored only (deleting it).
    #[error("session {0} is live: close its agent first (dshctl agent close {0})")]
    Live(SessionId),
    /// The agent runs no turn for a steer to join.
    #[error("agent {0} is not running a turn; use prompt to start one")]
    NotRunning(SessionId),
    /// A title a person gave is unusable.
    #[error("title: {0}")]
    InvalidTitle(dsh_session::TitleError),
    /// A fork point that is not the end of a completed step or turn.
    #[error(
        "at_seq: {seq} is not the end of a completed step or turn of session {session}; {}",
        valid_text(valid)
    )]
    InvalidForkPoint {
        /// The session forked.
        session: SessionId,
        /// The seq asked for.
        seq: u64,
        /// The nearest valid seqs (before and after it).
        valid: Vec<u64>,
    },
    /// A turn is running.
    #[error("agent {id} is busy with turn {turn}; wait for it to end or cancel it")]
    Busy {
        /// The agent.
        id: SessionId,
        /// The running turn.
        turn: u32,
    },
    /// The agent is being closed.
    #[error("agent {0} is closed")]
    Closed(SessionId),
    /// The cwd is unusable.
    #[error("cwd {}: {reason}", path.display())]
    InvalidCwd {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The model choice is unusable.
    #[error(transparent)]
    InvalidModel(#[from] InvalidModel),
    /// A child asked for a sandbox looser than its parent's.
    #[error(transparent)]
    LooserSandbox(#[from] crate::sandbox::LooserPolicy),
    /// The chosen provider needs an API key the daemon does not have.
    #[error("{}", super::provider::ModelError::MissingKey { variable: variable.clone() })]
    NoModelKey {
        /// The environment variable that should hold the key.
        variable: String,
    },
    /// No approval request of this agent waits for an answer under this call id.
    #[error(
        "agent {agent} has no approval request waiting for call {call_id} (it was answered, timed out, or never asked)"
    )]
    NoPendingApproval {
        /// The agent.
        agent: SessionId,
        /// The call id given.
        call_id: String,
    },
    /// Spawning would exceed the configured delegation depth.
    #[error(
        "a child of agent {parent} would be at delegation depth {depth}, beyond the limit of {limit} (agent.max_depth); do the task yourself"
    )]
    TooDeep {
        /// The would-be parent.
        parent: SessionId,
        /// The child's depth.
        depth: u32,
        /// The configured maximum.
        limit: u32,
    },
    /// The registry holds the configured maximum of live agents.
    #[error(
        "{limit} agents are live, the limit (agent.max_live_agents); close one or wait for children to finish"
    )]
    TooMany {
        /// The configured maximum.
        limit: usize,
    },
    /// Persistence failed (including a corrupt log on resume).
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    /// The daemon is shutting down.
    #[error("dshd is shutting down")]
    ShuttingDown,
}

fn valid_text(valid: &[u64]) -> String {
    match valid {
        [] => "the session has no completed step yet".to_owned(),
        [one] => format!("the nearest valid seq is {one}"),
        many => format!(
            "the nearest valid seqs are {}",
            many.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

/// A session the shutdown could not save to its backend.
#[derive(Debug)]
pub struct Unsaved {
    /// The session.
    pub id: SessionId,
    /// Why its checkpoint failed.
    pub error: PersistenceError,
    /// Where its whole log was written instead, if anywhere could take it.
    pub rescue: Result<PathBuf, PersistenceError>,
}

impl From<UnusableModel> for AgentError {
    fn from(error: UnusableModel) -> Self {
        match error {
            UnusableModel::Invalid(invalid) => Self::InvalidModel(invalid),
            UnusableModel::NoKey { variable } => Self::NoModelKey { variable },
        }
    }
}

/// By hand rather than `#[from]`: the cause is in the message, so it is not also a `source()`
/// that a chain would print again.
impl From<dsh_session::TitleError> for AgentError {
    fn from(error: dsh_session::TitleError) -> Self {
        Self::InvalidTitle(error)
    }
}
