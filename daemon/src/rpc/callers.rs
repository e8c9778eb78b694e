//! Who a client's call stands for. `Shell.Run` and `ShellEnv.Collect` act on behalf of a live
//! agent or of no agent; [`Callers`] turns the request's `agent_id` and `cwd` into the
//! [`ToolExecution`] the core runs with, and nothing more of the daemon.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::convert::{agent_status, session_id};
use dsh_core::{AgentRegistry, SessionId, ToolExecution};

/// What it takes to build a client call's execution.
#[derive(Debug, Clone)]
pub struct Callers {
    /// The live agents a call may be made on behalf of.
    agents: Arc<AgentRegistry>,
    /// The cwd of a call for no agent that names none (`default_cwd` in the config).
    default_cwd: PathBuf,
    /// Cancelled at shutdown, so a client's foreground command stops with the daemon.
    shutdown: CancellationToken,
}

impl Callers {
    /// Callers acting for `agents`, defaulting to `default_cwd`, stopped by `shutdown`.
    pub fn new(
        agents: Arc<AgentRegistry>,
        default_cwd: PathBuf,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            agents,
            default_cwd,
            shutdown,
        }
    }

    /// The execution a request stands for: on behalf of the live agent `agent_id` (none when
    /// empty), in `cwd` (the agent's, or the default, when empty).
    pub fn execution(
        &self,
        agent_id: String,
        cwd: String,
        tool_name: &str,
    ) -> Result<ToolExecution, Status> {
        let agent = if agent_id.is_empty() {
            None
        } else {
            let id = session_id("agent_id", agent_id)?;
            Some(self.agents.get(&id).map_err(agent_status)?)
        };
        let cwd = if cwd.is_empty() {
            agent
                .as_ref()
                .map_or_else(|| self.default_cwd.clone(), |a| a.header().cwd.clone())
        } else {
            let path = PathBuf::from(&cwd);
            if !path.is_absolute() {
                return Err(Status::invalid_argument(format!(
                    "cwd: {cwd:?} is not an absolute path"
                )));
            }
            dsh_core::home::normalize(&path)
        };
        Ok(ToolExecution {
            call_id: format!("rpc_{}", uuid::Uuid::now_v7().simple()),
            tool_name: tool_name.to_owned(),
            agent: agent.map(|a| a.context().clone()),
            turn: None,
            step: None,
            cwd,
            cancel: self.shutdown.child_token(),
            output: None,
        })
    }

    /// The id of the live agent `agent_id`, or `None` when it is empty; NOT_FOUND when no such
    /// agent is live.
    pub fn live_agent(&self, agent_id: String) -> Result<Option<SessionId>, Status> {
        if agent_id.is_empty() {
            return Ok(None);
        }
        let id = session_id("agent_id", agent_id)?;
        self.agents.get(&id).map_err(agent_status)?;
        Ok(Some(id))
    }

    /// The shutdown token, for streams that must end with the daemon.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}
