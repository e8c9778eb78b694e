//! `dsh.v1.Shell`: commands for an agent or for no agent, and background jobs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_proto::v1::{self, shell_server};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::convert::{agent_status, exec_status, sandbox_policy, session_id};
use crate::daemon::Daemon;
use dsh_core::call::ToolExecution;
use dsh_core::exec::{
    CommandOutcome, CommandSpec, JobId, SandboxRequest, check_caller_env, check_command,
};
use dsh_core::sandbox::SandboxPolicy;

/// The `Shell` service.
pub struct ShellService {
    daemon: Arc<Daemon>,
}

impl ShellService {
    /// Binds the service to `daemon`.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

/// The execution a request stands for: on behalf of a live agent, or of no agent.
pub fn execution(
    daemon: &Daemon,
    agent_id: String,
    cwd: String,
    tool_name: &str,
) -> Result<ToolExecution, Status> {
    let agent = if agent_id.is_empty() {
        None
    } else {
        let id = session_id("agent_id", agent_id)?;
        Some(daemon.agents.get(&id).map_err(agent_status)?)
    };
    let cwd = if cwd.is_empty() {
        agent.as_ref().map_or_else(
            || daemon.config.default_cwd.clone(),
            |a| a.header().cwd.clone(),
        )
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
        cancel: daemon.shutdown_token().child_token(),
    })
}

/// An outcome for the wire.
pub fn outcome(o: &CommandOutcome) -> v1::CommandOutcome {
    let path = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    v1::CommandOutcome {
        exit_code: o.exit_code,
        signal: o.signal_name(),
        timed_out: o.timed_out,
        aborted: o.aborted,
        stdout: o.stdout.clone(),
        stderr: o.stderr.clone(),
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        stdout_spill_path: path(&o.stdout_spill),
        stderr_spill_path: path(&o.stderr_spill),
        duration_ms: u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
        rendered: o.render(),
    }
}

fn job_id(value: String) -> Result<JobId, Status> {
    JobId::parse(&value).map_err(|e| Status::invalid_argument(format!("job_id: {e}")))
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl shell_server::Shell for ShellService {
    async fn run(&self, request: Request<v1::RunRequest>) -> Reply<v1::RunResponse> {
        let req = request.into_inner();
        if req.command.trim().is_empty() {
            return Err(Status::invalid_argument("command: required"));
        }
        // Checked before anything else runs (the snapshot's contributors included): managed
        // values come only from the snapshot, startup variables and oversized strings are refused.
        let env = req.env.into_iter().collect();
        check_caller_env(&env).map_err(exec_status)?;
        check_command(&req.command).map_err(exec_status)?;
        let exec = execution(&self.daemon, req.agent_id, req.cwd, "bash")?;
        // The agent's policy by default; for no agent, none (the caller is the user).
        let (base, workspace) = match &exec.agent {
            Some(agent) => (agent.sandbox, agent.header.cwd.clone()),
            None => (SandboxPolicy::UNCONFINED, exec.cwd.clone()),
        };
        let sandbox = SandboxRequest {
            policy: sandbox_policy(req.sandbox, base)?,
            workspace,
        };
        let managed = self
            .daemon
            .shell_env
            .collect(&exec)
            .await
            .map_err(|e| Status::failed_precondition(format!("managed environment: {e}")))?
            .into_inner();
        let spec = CommandSpec {
            command: req.command,
            cwd: exec.cwd.clone(),
            timeout: (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms)),
            env,
            managed,
            stdin: None,
            cancel: if req.background {
                CancellationToken::new()
            } else {
                exec.cancel.clone()
            },
            spill_owner: exec.session_id().cloned(),
            sandbox: Some(sandbox),
        };
        let result = if req.background {
            let job = self
                .daemon
                .executor
                .start(spec, exec.session_id().cloned())
                .map_err(exec_status)?;
            v1::run_response::Result::JobId(job.to_string())
        } else {
            // A client that goes away drops this future, and the executor kills the command.
            let o = self.daemon.executor.run(spec).await.map_err(exec_status)?;
            v1::run_response::Result::Finished(outcome(&o))
        };
        Ok(Response::new(v1::RunResponse {
            result: Some(result),
        }))
    }

    async fn job_output(
        &self,
        request: Request<v1::JobOutputRequest>,
    ) -> Reply<v1::JobOutputResponse> {
        let id = job_id(request.into_inner().job_id)?;
        let output = self.daemon.executor.job_output(&id).map_err(exec_status)?;
        let (running, end) = match &output.state {
            dsh_core::exec::JobState::Running => (true, None),
            dsh_core::exec::JobState::Finished(end) => (false, Some(end)),
        };
        Ok(Response::new(v1::JobOutputResponse {
            stdout: output.stdout.clone(),
            stderr: output.stderr.clone(),
            running,
            outcome: end.map(|end| v1::CommandOutcome {
                exit_code: end.exit_code,
                signal: end.signal.map(dsh_core::exec::signal_name),
                duration_ms: u64::try_from(end.duration.as_millis()).unwrap_or(u64::MAX),
                rendered: output.render(),
                ..v1::CommandOutcome::default()
            }),
        }))
    }

    async fn job_kill(&self, request: Request<v1::JobKillRequest>) -> Reply<v1::JobKillResponse> {
        let id = job_id(request.into_inner().job_id)?;
        let killed = self.daemon.executor.job_kill(&id).map_err(exec_status)?;
        Ok(Response::new(v1::JobKillResponse { killed }))
    }
}
