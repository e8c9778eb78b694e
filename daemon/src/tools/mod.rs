//! Model-facing tools and the [`ToolExecution`] that carries one call's identity.
//!
//! The execution's `agent` field is the only carrier of "who is calling": nothing reads a current
//! session from global state, so concurrent calls of different agents can never see each other's
//! facts.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::session::{SessionHeader, SessionId};

/// The agent a tool call belongs to.
#[derive(Debug, Clone)]
pub struct AgentContext {
    /// The agent's session header (its id is the agent id).
    pub header: Arc<SessionHeader>,
    /// The top-most live ancestor when the agent was created (itself for top-level agents).
    pub root: SessionId,
}

/// One tool call: who makes it, where in the turn, and how to cancel it.
#[derive(Debug, Clone)]
pub struct ToolExecution {
    /// Call id (unique within the session; generated for calls from outside a turn).
    pub call_id: String,
    /// Tool name, e.g. `bash`.
    pub tool_name: String,
    /// The calling agent; `None` for calls made on behalf of no agent (`Shell.Run` without one).
    pub agent: Option<AgentContext>,
    /// Turn number, inside a turn.
    pub turn: Option<u32>,
    /// Step number, inside a turn.
    pub step: Option<u32>,
    /// Working directory of the call.
    pub cwd: PathBuf,
    /// Cancelled when the call must stop (turn cancelled, daemon shutting down).
    pub cancel: CancellationToken,
}
