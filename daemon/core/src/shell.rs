//! Running a command on someone's behalf: the one path a model's `bash` call and a client's
//! `Shell.Run` share. The order matters and is the same for both: the caller's environment and the
//! command are checked, then the managed `DSH_*` snapshot is collected for this one call, and only
//! then is a process started (CONTRACTS §6). A failure before the last step means nothing ran.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::call::ToolExecution;
use crate::exec::{
    CommandOutcome, CommandSpec, ExecError, Executor, JobId, SandboxRequest, Served,
    check_caller_env, check_command,
};
use crate::sandbox::SandboxPolicy;
use crate::shell_env::{CollectError, ShellEnvRegistry};

/// One command to run for a [`ToolExecution`].
#[derive(Debug, Clone, Default)]
pub struct Command {
    /// Passed to `bash -c`.
    pub command: String,
    /// Working directory; the execution's when `None`.
    pub cwd: Option<PathBuf>,
    /// Time limit; the executor's default when `None`.
    pub timeout: Option<Duration>,
    /// Extra environment from a client (never managed names; checked).
    pub env: BTreeMap<String, String>,
    /// Start as a background job and return its id at once.
    pub background: bool,
    /// The sandbox policy; `None` means the calling agent's (unconfined for a call of no agent).
    pub sandbox: Option<SandboxPolicy>,
}

impl Command {
    /// Checks what the caller controls (its environment and the command), before anything else
    /// runs, the snapshot's contributors included: managed values come only from the snapshot,
    /// and startup variables and oversized strings are refused.
    pub fn check(&self) -> Result<(), ExecError> {
        check_caller_env(&self.env)?;
        check_command(&self.command)
    }
}

/// How a command ended up.
#[derive(Debug)]
pub enum Ran {
    /// A foreground command ran to its end (or was stopped).
    Finished(CommandOutcome),
    /// A background job started.
    Started(JobId),
}

/// Why nothing ran.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The managed environment could not be collected.
    #[error("the managed environment could not be collected, so nothing was run: {0}")]
    ManagedEnv(CollectError),
    /// The executor refused the command (bad input, limits, shutdown) or could not start it.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// By hand rather than `#[from]`: the cause is in the message (the model and clients see it), so
/// it is not also a `source()` that a chain would print again.
impl From<CollectError> for RunError {
    fn from(error: CollectError) -> Self {
        Self::ManagedEnv(error)
    }
}

/// Runs commands with a fresh managed snapshot each.
#[derive(Debug, Clone)]
pub struct Shell {
    /// Runs the processes and keeps the jobs.
    executor: Arc<Executor>,
    /// Collects each call's `DSH_*` snapshot.
    shell_env: ShellEnvRegistry,
}

impl Shell {
    /// A shell running through `executor` with snapshots from `shell_env`.
    pub fn new(executor: Arc<Executor>, shell_env: ShellEnvRegistry) -> Self {
        Self {
            executor,
            shell_env,
        }
    }

    /// The executor, for the job operations that need no snapshot.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Runs `command` for `exec`. A foreground command stops when `exec.cancel` fires; a
    /// background job outlives the call and belongs to the calling agent (killed when it closes).
    pub async fn run(&self, exec: &ToolExecution, command: Command) -> Result<Ran, RunError> {
        let background = command.background;
        let spec = self.spec(exec, command).await?;
        let owner = spec.spill_owner.clone();
        if background {
            let job = self.executor.start(spec, owner)?;
            tracing::info!(job = %job, "background job started");
            return Ok(Ran::Started(job));
        }
        let outcome = self.executor.run(spec).await?;
        tracing::info!(
            exit_code = outcome.exit_code,
            signal = outcome.signal_name(),
            timed_out = outcome.timed_out,
            duration_ms = outcome.duration.as_millis(),
            "command ended"
        );
        Ok(Ran::Finished(outcome))
    }

    /// Starts `command` for `exec` as a served process (an MCP server): the same checks,
    /// snapshot, sandbox and environment as [`Self::run`], collected once, at its start. It
    /// belongs to the calling agent and lives until its handle is dropped.
    pub async fn serve(&self, exec: &ToolExecution, command: Command) -> Result<Served, RunError> {
        let spec = self.spec(exec, command).await?;
        Ok(self.executor.serve(spec, exec.session_id())?)
    }

    /// The spec of `command` for `exec`, with this call's managed snapshot.
    async fn spec(&self, exec: &ToolExecution, command: Command) -> Result<CommandSpec, RunError> {
        command.check()?;
        let managed = self.shell_env.collect(exec).await?.into_inner();
        let owner = exec.session_id().cloned();
        // The workspace `workspace-write` may write is the agent's cwd, whatever the call's own
        // working directory says.
        let (policy, workspace) = match &exec.agent {
            Some(agent) => (agent.sandbox, agent.header.cwd.clone()),
            None => (SandboxPolicy::UNCONFINED, exec.cwd.clone()),
        };
        let sandbox = SandboxRequest {
            policy: command.sandbox.unwrap_or(policy),
            workspace,
        };
        Ok(CommandSpec {
            command: command.command,
            cwd: command.cwd.unwrap_or_else(|| exec.cwd.clone()),
            timeout: command.timeout,
            env: command.env,
            managed,
            stdin: None,
            cancel: if command.background {
                CancellationToken::new()
            } else {
                exec.cancel.clone()
            },
            // Whoever asked is told where the full output is; it stays until the agent closes.
            spill_owner: owner,
            sandbox: Some(sandbox),
            // A job's output is read later (job_output); only a foreground command streams.
            output: if command.background {
                None
            } else {
                exec.output.clone()
            },
            // The agent's client's environment, when it sent one (`AgentContext::env`).
            base_env: exec.agent.as_ref().and_then(|a| a.env.clone()),
        })
    }
}
