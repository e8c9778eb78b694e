//! `dshctl run` and `dshctl job ...`: commands through the daemon's executor, with the managed
//! environment a bash call of the agent (or of no agent) would get.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;
use crate::safe;

pub const RUN_AFTER_HELP: &str = "\
Examples:
  dshctl run -- 'echo $DSH_HOME'
  dshctl run --agent 0199a2b3 -- make test        as the agent's bash call would run it
  dshctl run --background -- 'sleep 60; date'      prints a job id; see `dshctl job list`
  dshctl --json run -- 'exit 3'; echo $?           the outcome as JSON, then 3

Exit status: the command's own status (also with --json); 124 when it timed out; 128+N when a
signal N ended it; 1 when dshd refused it; 2 bad usage. --background exits 0 once the job started.";

pub const JOB_AFTER_HELP: &str = "\
Examples:
  dshctl job list
  dshctl job output 0199b7c1        a unique prefix of the id will do (with or without job-)
  dshctl job kill job-0199b7c1

Exit status: 0 success; 1 the daemon refused (e.g. no such job); 2 bad usage.";

#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// Run on behalf of this agent (its session's managed facts apply; a unique id prefix will do).
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

const JOB_OUTPUT_AFTER_HELP: &str = "\
Examples:
  dshctl job output job-0199a2b3            # the next part of its output
  dshctl job output --follow job-0199a2b3   # everything, to the end of the job

Exit status: 0 success; 1 the daemon refused (e.g. no such job); 2 bad usage.";

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Background jobs: running ones, and finished ones whose output can still be read.
    List {
        /// Only the jobs of this live agent.
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
    },
    /// The next output since the last read (at most 64 KiB of each stream; run again while it
    /// says more is waiting), and the job's state. With --json: `stdout_offset`/`stderr_offset`
    /// (where in the whole output this part starts), `more`, and `note` for output no copy kept.
    #[command(after_help = JOB_OUTPUT_AFTER_HELP)]
    Output {
        /// The job (a unique id prefix will do).
        id: String,
        /// Keep reading until the job has ended and all of its output is printed (with --json:
        /// one document per read, one per line).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Kill the job's whole process group.
    Kill {
        /// The job (a unique id prefix will do).
        id: String,
    },
}

/// Runs the command and returns its own exit status (signal: 128 + n, timeout: 124, as
/// `timeout(1)` does), with `--json` too (the document says the same).
pub async fn run(client: &Client, out: Output, args: RunArgs) -> anyhow::Result<ExitCode> {
    let agent_id = match &args.agent {
        Some(agent) => client.resolve(IdKind::Agent, agent).await?,
        None => String::new(),
    };
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir)
            .with_context(|| format!("cannot make {} absolute", dir.display()))?
            .to_string_lossy()
            .into_owned(),
        None => String::new(),
    };
    let request = v1::RunRequest {
        agent_id,
        command: args.command.join(" "),
        cwd,
        timeout_ms: args.timeout_ms.unwrap_or(0),
        env: args.env.into_iter().collect::<HashMap<_, _>>(),
        background: args.background,
        sandbox: args.sandbox.spec(),
    };
    if !out.json && !args.background {
        return run_streaming(client, request).await;
    }
    let response = client.shell().run(request).await?.into_inner();
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
                let mut err = safe::stderr();
                err.write_all(o.stderr.as_bytes())?;
                how_it_ended(&mut err, &o)
            })?;
            Ok(exit_status(&o))
        }
        None => anyhow::bail!("dshd sent an empty answer"),
    }
}

/// The human form: the output as the command produces it (`Shell.RunStream`), how it ended last.
/// On a terminal its control characters are shown escaped, as everything dshctl prints: the
/// command runs without a terminal, so it draws no screens to keep, and its output is often what
/// a model wrote.
async fn run_streaming(client: &Client, request: v1::RunRequest) -> anyhow::Result<ExitCode> {
    use v1::run_stream_response::Event;
    let mut stream = client.shell().run_stream(request).await?.into_inner();
    // One writer per stream for the whole run: a piece may end inside a character, or with the
    // carriage return of a CRLF.
    let (mut out, mut err) = (safe::stdout(), safe::stderr());
    // Per stream, the offset the next piece should start at.
    let mut next = [0_u64; 2];
    while let Some(message) = stream.message().await? {
        match message.event {
            Some(Event::Output(chunk)) => {
                let stderr = chunk.stream == v1::OutputStream::Stderr as i32;
                let expected = &mut next[usize::from(stderr)];
                if chunk.offset > *expected {
                    writeln!(
                        err,
                        "dshctl: [{} bytes of {} not shown: the terminal was slower than the command]",
                        chunk.offset - *expected,
                        if stderr { "stderr" } else { "stdout" },
                    )?;
                }
                *expected = chunk.offset + chunk.text.len() as u64;
                let w: &mut dyn Write = if stderr { &mut err } else { &mut out };
                crate::output::finish(w.write_all(chunk.text.as_bytes()).and_then(|()| w.flush()))?;
            }
            Some(Event::Finished(o)) => {
                drop(out);
                crate::output::finish(how_it_ended(&mut err, &o))?;
                return Ok(exit_status(&o));
            }
            Some(Event::JobId(job_id)) => {
                crate::output::finish(writeln!(out, "{job_id}"))?;
                return Ok(ExitCode::SUCCESS);
            }
            None => {}
        }
    }
    anyhow::bail!("dshd ended the stream without the command's outcome")
}

/// Says on `err` when the command timed out or a signal ended it.
fn how_it_ended(err: &mut dyn Write, o: &v1::CommandOutcome) -> std::io::Result<()> {
    if o.timed_out {
        writeln!(err, "dshctl: command timed out")?;
    } else if let Some(signal) = &o.signal {
        writeln!(err, "dshctl: command killed by {signal}")?;
    }
    Ok(())
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
        JobCommand::List { agent } => {
            let agent_id = match &agent {
                Some(agent) => client.resolve(IdKind::Agent, agent).await?,
                None => String::new(),
            };
            let jobs = shell
                .list_jobs(v1::ListJobsRequest { agent_id })
                .await?
                .into_inner()
                .jobs;
            let doc = json!({ "jobs": jobs.iter().map(|j| json!({
                "job_id": j.job_id,
                "agent_id": (!j.agent_id.is_empty()).then_some(&j.agent_id),
                "command": j.command,
                "state": state(j),
                "running": j.running,
                "started_at_ms": j.started_at_ms,
                "exit_code": j.exit_code,
                "signal": j.signal,
                "killed": j.killed,
            })).collect::<Vec<_>>() });
            out.emit(&doc, |w| {
                if jobs.is_empty() {
                    return writeln!(w, "no background jobs");
                }
                let mut table =
                    crate::output::table(&["JOB", "AGENT", "STATE", "STARTED", "COMMAND"]);
                for j in &jobs {
                    table.add_row([
                        j.job_id.clone(),
                        crate::output::short_id(&j.agent_id),
                        state(j),
                        crate::output::ago(j.started_at_ms),
                        one_line(&j.command),
                    ]);
                }
                writeln!(w, "{table}")
            })
        }
        JobCommand::Output { id, follow } => {
            let id = client.resolve(IdKind::Job, &id).await?;
            loop {
                let o = shell
                    .job_output(v1::JobOutputRequest { job_id: id.clone() })
                    .await?
                    .into_inner();
                print_job_output(out, &id, &o, follow)?;
                if !follow || (!o.running && !o.more) {
                    return Ok(());
                }
                if !o.more && o.stdout.is_empty() && o.stderr.is_empty() {
                    // Nothing new yet: ask again shortly.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
        JobCommand::Kill { id } => {
            let id = client.resolve(IdKind::Job, &id).await?;
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

/// A job's state in a word or two: `running`, `exited 0`, `killed (SIGTERM)`.
fn state(j: &v1::JobInfo) -> String {
    if j.running {
        return "running".to_owned();
    }
    match (&j.signal, j.exit_code, j.killed) {
        (Some(signal), _, _) => format!("killed ({signal})"),
        (None, Some(code), true) => format!("killed (exited {code})"),
        (None, Some(code), false) => format!("exited {code}"),
        (None, None, _) => "ended".to_owned(),
    }
}

/// A command on one table line: its first line, marked when there is more.
fn one_line(command: &str) -> String {
    let mut lines = command.trim().lines();
    let first = lines.next().unwrap_or_default();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_owned()
    }
}

/// Prints one read of a job's output: the bytes as they are (stderr to stderr; on a terminal with
/// control characters escaped) and, unless following, a last line on stderr saying where the job
/// stands.
fn print_job_output(
    out: Output,
    id: &str,
    o: &v1::JobOutputResponse,
    follow: bool,
) -> anyhow::Result<()> {
    let end = o.outcome.clone().unwrap_or_default();
    let doc = json!({
        "job_id": id,
        "stdout": o.stdout,
        "stderr": o.stderr,
        "stdout_offset": o.stdout_offset,
        "stderr_offset": o.stderr_offset,
        "more": o.more,
        "note": (!o.note.is_empty()).then_some(&o.note),
        "running": o.running,
        "exit_code": end.exit_code,
        "signal": end.signal,
    });
    if out.json && follow && o.stdout.is_empty() && o.stderr.is_empty() && o.running {
        // Following: a read that brought nothing is not worth a line.
        return Ok(());
    }
    out.emit(&doc, |w| {
        w.write_all(o.stdout.as_bytes())?;
        let mut err = safe::stderr();
        err.write_all(o.stderr.as_bytes())?;
        if !o.note.is_empty() {
            writeln!(err, "dshctl: {}", o.note)?;
        }
        if follow && (o.running || o.more) {
            return Ok(());
        }
        if o.more {
            writeln!(
                err,
                "dshctl: more output of job {id} is waiting: run this again, or with --follow"
            )
        } else if o.running {
            writeln!(err, "dshctl: job {id} is still running")
        } else {
            writeln!(err, "dshctl: job {id} has ended")
        }
    })
}
