//! `dshctl run` and `dshctl job ...`: commands through the daemon's executor, with the managed
//! environment a bash call of the agent (or of no agent) would get.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run on behalf of this agent (its session's managed facts apply).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Working directory (default: the agent's session directory, else the daemon's).
    #[arg(long, value_name = "DIR")]
    cwd: Option<std::path::PathBuf>,
    /// Timeout in milliseconds (default: the daemon's, 120000).
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// An ordinary environment entry for the command (repeatable); DSH_* keys are refused.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Start as a background job and print its id.
    #[arg(long)]
    background: bool,
    /// Sandbox the command (default: the agent's sandbox with --agent, else none).
    #[command(flatten)]
    sandbox: crate::agent::SandboxArgs,
    /// The command; words are joined with single spaces into one bash command, as ssh does.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn parse_env(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, val)) if !key.is_empty() => Ok((key.to_owned(), val.to_owned())),
        _ => Err(format!("expected K=V, got {value:?}")),
    }
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Output produced since the last read, and the job's state.
    Output {
        /// The job.
        id: String,
    },
    /// Kill the job's whole process group.
    Kill {
        /// The job.
        id: String,
    },
}

/// Runs the command. Without `--json` the command's own exit status is returned (signal: 128 + n,
/// timeout: 124, as `timeout(1)` does); with `--json` the status is in the document.
pub async fn run(client: &Client, out: Output, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir)
            .with_context(|| format!("cannot make {} absolute", dir.display()))?
            .to_string_lossy()
            .into_owned(),
        None => String::new(),
    };
    let response = client
        .shell()
        .run(v1::RunRequest {
            agent_id: args.agent.unwrap_or_default(),
            command: args.command.join(" "),
            cwd,
            timeout_ms: args.timeout_ms.unwrap_or(0),
            env: args.env.into_iter().collect::<HashMap<_, _>>(),
            background: args.background,
            sandbox: args.sandbox.spec(),
        })
        .await?
        .into_inner();
    match response.result {
        Some(v1::run_response::Result::JobId(job_id)) => {
            out.emit(&json!({ "job_id": job_id }), |w| writeln!(w, "{job_id}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(v1::run_response::Result::Finished(o)) => {
            let doc = json!({
                "exit_code": o.exit_code,
                "signal": o.signal,
                "timed_out": o.timed_out,
                "aborted": o.aborted,
                "stdout": o.stdout,
                "stderr": o.stderr,
                "stdout_truncated": o.stdout_truncated,
                "stderr_truncated": o.stderr_truncated,
                "duration_ms": o.duration_ms,
            });
            out.emit(&doc, |w| {
                w.write_all(o.stdout.as_bytes())?;
                let mut err = std::io::stderr().lock();
                err.write_all(o.stderr.as_bytes())?;
                if o.timed_out {
                    writeln!(err, "dshctl: command timed out")?;
                } else if let Some(signal) = &o.signal {
                    writeln!(err, "dshctl: command killed by {signal}")?;
                }
                Ok(())
            })?;
            if out.json {
                return Ok(ExitCode::SUCCESS);
            }
            Ok(exit_status(&o))
        }
        None => anyhow::bail!("dshd sent an empty answer"),
    }
}

fn exit_status(o: &v1::CommandOutcome) -> ExitCode {
    if o.timed_out {
        return ExitCode::from(124);
    }
    match (o.exit_code, &o.signal) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(name)) => ExitCode::from(128 + signal_number(name)),
        (None, None) => ExitCode::FAILURE,
    }
}

fn signal_number(name: &str) -> u8 {
    match name {
        "SIGHUP" => 1,
        "SIGINT" => 2,
        "SIGQUIT" => 3,
        "SIGKILL" => 9,
        "SIGSEGV" => 11,
        "SIGPIPE" => 13,
        "SIGTERM" => 15,
        _ => 0,
    }
}

pub async fn job(client: &Client, out: Output, command: JobCommand) -> anyhow::Result<()> {
    let mut shell = client.shell();
    match command {
        JobCommand::Output { id } => {
            let o = shell
                .job_output(v1::JobOutputRequest { job_id: id.clone() })
                .await?
                .into_inner();
            let end = o.outcome.clone().unwrap_or_default();
            let doc = json!({
                "job_id": id,
                "stdout": o.stdout,
                "stderr": o.stderr,
                "running": o.running,
                "exit_code": end.exit_code,
                "signal": end.signal,
            });
            out.emit(&doc, |w| {
                w.write_all(o.stdout.as_bytes())?;
                std::io::stderr().lock().write_all(o.stderr.as_bytes())?;
                if o.running {
                    writeln!(std::io::stderr(), "dshctl: job {id} is still running")
                } else {
                    writeln!(std::io::stderr(), "dshctl: job {id} has ended")
                }
            })
        }
        JobCommand::Kill { id } => {
            let killed = shell
                .job_kill(v1::JobKillRequest { job_id: id.clone() })
                .await?
                .into_inner()
                .killed;
            out.emit(&json!({ "job_id": id, "killed": killed }), |w| {
                if killed {
                    writeln!(w, "killed {id}")
                } else {
                    writeln!(w, "{id} had already ended")
                }
            })
        }
    }
}
