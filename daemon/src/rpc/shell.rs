//! `dsh.v1.Shell`: commands for an agent or for no agent, and background jobs.

use std::path::PathBuf;
use std::time::Duration;
use tracing::Instrument as _;

use std::pin::Pin;

use dsh_proto::v1::{self, shell_server};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::callers::Callers;
use super::convert::{exec_status, sandbox_policy};
use crate::peer::Peer;
use dsh_core::{
    Command, CommandOutcome, ExecError, JobId, JobInfo, JobState, OutputFeed, OutputStream, Ran,
    RunError, SandboxPolicy, Shell, ToolExecution,
};

/// The `Shell` service.
pub struct ShellService {
    /// Runs the commands.
    shell: Shell,
    /// Turns a request into the execution it stands for.
    callers: Callers,
}

impl ShellService {
    /// A service running commands through `shell` for `callers`.
    pub fn new(shell: Shell, callers: Callers) -> Self {
        Self { shell, callers }
    }

    /// Job `id`, when `peer` may see it: a client inside an agent's command sees that agent's
    /// jobs only (`Provenance::may_see_jobs_of`). Another's is NOT_FOUND exactly as an unknown
    /// job is, so its existence is not told, and nothing of it is read or consumed.
    fn visible_job(&self, peer: &Peer, id: &JobId) -> Result<(), Status> {
        let info = self.shell.executor().job_info(id).map_err(exec_status)?;
        if peer.provenance.may_see_jobs_of(info.owner.as_ref()) {
            Ok(())
        } else {
            tracing::info!(job = %id, client = %peer.provenance, "job hidden from a client inside another agent's command");
            Err(exec_status(ExecError::UnknownJob(id.clone())))
        }
    }
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

/// A job's facts for the wire.
fn job_info(job: &JobInfo) -> v1::JobInfo {
    let end = match job.state {
        JobState::Running => None,
        JobState::Finished(end) => Some(end),
    };
    v1::JobInfo {
        job_id: job.id.to_string(),
        agent_id: job
            .owner
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        command: job.command.clone(),
        running: end.is_none(),
        started_at_ms: job
            .started_at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        exit_code: end.and_then(|e| e.exit_code),
        signal: end.and_then(|e| e.signal).map(dsh_core::signal_name),
        killed: end.is_some_and(|e| e.killed),
    }
}

fn job_id(value: String) -> Result<JobId, Status> {
    JobId::parse(&value).map_err(|e| Status::invalid_argument(format!("job_id: {e}")))
}

type Reply<T> = Result<Response<T>, Status>;

/// Bytes of live output that wait for one slow `RunStream` client before pieces are dropped:
/// the budget a watcher has for streamed text.
const LIVE_OUTPUT_BUDGET: usize = dsh_core::PENDING_TEXT_BUDGET;

/// The status of a run that could not start.
fn run_status(error: RunError) -> Status {
    match error {
        RunError::ManagedEnv(e) => Status::failed_precondition(format!("managed environment: {e}")),
        RunError::Exec(e) => exec_status(e),
    }
}

impl ShellService {
    /// The execution and command a request stands for, checked.
    fn prepare(&self, req: v1::RunRequest) -> Result<(ToolExecution, Command), Status> {
        if req.command.trim().is_empty() {
            return Err(Status::invalid_argument("command: required"));
        }
        let mut command = Command {
            command: req.command,
            cwd: None,
            timeout: (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms)),
            env: req.env.into_iter().collect(),
            background: req.background,
            sandbox: None,
        };
        // What the caller controls is refused before the agent is even looked up.
        command.check().map_err(exec_status)?;
        let exec = self.callers.execution(req.agent_id, req.cwd, "bash")?;
        // The agent's policy unless the request names one; for no agent, none (the caller is
        // the user).
        let base = exec
            .agent
            .as_ref()
            .map_or(SandboxPolicy::UNCONFINED, |agent| agent.sandbox);
        command.sandbox = Some(sandbox_policy(req.sandbox, base)?);
        Ok((exec, command))
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends the feed's output as it comes, then the outcome; returns (dropping `run`, which kills
/// the command) as soon as the client is gone.
async fn forward(
    mut run: AbortOnDrop<Result<Ran, RunError>>,
    feed: OutputFeed,
    tx: tokio::sync::mpsc::Sender<Result<v1::RunStreamResponse, Status>>,
) {
    use v1::run_stream_response::Event;
    let mut ended = None;
    loop {
        let chunks = tokio::select! {
            () = tx.closed() => return,
            result = &mut run.0, if ended.is_none() => {
                // Every piece of output was handed to the feed before the run returned.
                ended = Some(result);
                feed.close();
                continue;
            }
            chunks = feed.next() => chunks,
        };
        let Some(chunks) = chunks else { break };
        for chunk in chunks {
            let stream = match chunk.stream {
                OutputStream::Stdout => v1::OutputStream::Stdout,
                OutputStream::Stderr => v1::OutputStream::Stderr,
            };
            let message = v1::RunStreamResponse {
                event: Some(Event::Output(v1::OutputChunk {
                    stream: stream as i32,
                    offset: chunk.offset,
                    text: chunk.text,
                })),
            };
            if tx.send(Ok(message)).await.is_err() {
                return;
            }
        }
    }
    let last = match ended {
        Some(Ok(Ok(Ran::Finished(o)))) => Ok(v1::RunStreamResponse {
            event: Some(Event::Finished(outcome(&o))),
        }),
        Some(Ok(Ok(Ran::Started(_)))) => Err(Status::internal("a foreground run started a job")),
        Some(Ok(Err(error))) => Err(run_status(error)),
        Some(Err(join)) => Err(Status::internal(format!(
            "the command's task failed: {join}"
        ))),
        None => Err(Status::internal("the run ended without an outcome")),
    };
    let _ = tx.send(last).await;
}

#[tonic::async_trait]
impl shell_server::Shell for ShellService {
    type RunStreamStream =
        Pin<Box<dyn Stream<Item = Result<v1::RunStreamResponse, Status>> + Send>>;

    async fn run(&self, request: Request<v1::RunRequest>) -> Reply<v1::RunResponse> {
        let (exec, command) = self.prepare(request.into_inner())?;
        // A client that goes away drops this future, and the executor kills the command.
        let result = match self.shell.run(&exec, command).await.map_err(run_status)? {
            Ran::Started(job) => v1::run_response::Result::JobId(job.to_string()),
            Ran::Finished(o) => v1::run_response::Result::Finished(outcome(&o)),
        };
        Ok(Response::new(v1::RunResponse {
            result: Some(result),
        }))
    }

    async fn run_stream(&self, request: Request<v1::RunRequest>) -> Reply<Self::RunStreamStream> {
        use v1::run_stream_response::Event;
        let (mut exec, command) = self.prepare(request.into_inner())?;
        if command.background {
            let job = match self.shell.run(&exec, command).await.map_err(run_status)? {
                Ran::Started(job) => job.to_string(),
                Ran::Finished(_) => return Err(Status::internal("a background run finished")),
            };
            let message = v1::RunStreamResponse {
                event: Some(Event::JobId(job)),
            };
            return Ok(Response::new(Box::pin(tokio_stream::once(Ok(message)))));
        }
        let feed = OutputFeed::new(LIVE_OUTPUT_BUDGET);
        exec.output = Some(feed.tap());
        let shell = self.shell.clone();
        // The command runs in a task of its own, so a client that reads slowly never keeps its
        // pipes from being read; the task is aborted (and the command killed, as for `Run`)
        // when the client goes away.
        let run = AbortOnDrop(tokio::spawn(
            async move { shell.run(&exec, command).await }.in_current_span(),
        ));
        // Two messages wait at most: the rest of the backlog is the feed's, bounded.
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(forward(run, feed, tx).in_current_span());
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn job_output(
        &self,
        request: Request<v1::JobOutputRequest>,
    ) -> Reply<v1::JobOutputResponse> {
        let peer = crate::connection::peer_of(&request);
        let id = job_id(request.into_inner().job_id)?;
        self.visible_job(&peer, &id)?;
        let output = self.shell.executor().job_output(&id).map_err(exec_status)?;
        let (running, end) = match &output.state {
            dsh_core::JobState::Running => (true, None),
            dsh_core::JobState::Finished(end) => (false, Some(end)),
        };
        let note = [
            ("stdout", output.stdout_missing),
            ("stderr", output.stderr_missing),
        ]
        .into_iter()
        .filter_map(|(stream, missing)| {
            missing.map(|(bytes, why)| format!("{bytes} bytes of {stream} were not kept: {why}"))
        })
        .collect::<Vec<_>>()
        .join("; ");
        Ok(Response::new(v1::JobOutputResponse {
            stdout: output.stdout.clone(),
            stderr: output.stderr.clone(),
            running,
            stdout_offset: output.stdout_offset,
            stderr_offset: output.stderr_offset,
            more: output.more,
            stdout_missing: output.stdout_missing.map_or(0, |(bytes, _)| bytes),
            stderr_missing: output.stderr_missing.map_or(0, |(bytes, _)| bytes),
            note,
            outcome: end.map(|end| v1::CommandOutcome {
                exit_code: end.exit_code,
                signal: end.signal.map(dsh_core::signal_name),
                duration_ms: u64::try_from(end.duration.as_millis()).unwrap_or(u64::MAX),
                rendered: output.render(),
                ..v1::CommandOutcome::default()
            }),
        }))
    }

    async fn job_kill(&self, request: Request<v1::JobKillRequest>) -> Reply<v1::JobKillResponse> {
        let peer = crate::connection::peer_of(&request);
        let id = job_id(request.into_inner().job_id)?;
        self.visible_job(&peer, &id)?;
        let killed = self.shell.executor().job_kill(&id).map_err(exec_status)?;
        Ok(Response::new(v1::JobKillResponse { killed }))
    }

    async fn list_jobs(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Reply<v1::ListJobsResponse> {
        let peer = crate::connection::peer_of(&request);
        // Only a live agent's jobs are asked for: an unknown id is NOT_FOUND, not "no jobs".
        let owner = self.callers.live_agent(request.into_inner().agent_id)?;
        let jobs = self
            .shell
            .executor()
            .list_jobs(owner.as_ref())
            .iter()
            .filter(|job| peer.provenance.may_see_jobs_of(job.owner.as_ref()))
            .map(job_info)
            .collect();
        Ok(Response::new(v1::ListJobsResponse { jobs }))
    }
}
