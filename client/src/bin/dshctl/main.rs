//! `dshctl`: the command-line client and debug tool for dshd.
//!
//! Exit codes: 0 success, 1 the daemon could not be reached or refused the request, 2 bad usage.

mod output;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use dsh_client::{Client, ConnectError};
use dsh_daemon::home::Ambient;
use dsh_proto::v1;
use output::Output;
use serde_json::json;

/// Command-line client for dshd, the dsh agent daemon.
#[derive(Debug, Parser)]
#[command(name = "dshctl", version, about)]
struct Cli {
    /// Socket of the daemon. Default: $DSH_SOCKET, else $XDG_RUNTIME_DIR/dsh/dshd.sock, else
    /// <home>/run/dshd.sock.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<OsString>,
    /// Print exactly one JSON document on stdout (streams: one JSON object per line).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show what the daemon is: version, pid, home, socket, persistence, live agents.
    Status,
    /// Ask the daemon to shut down gracefully and wait until it has exited.
    Shutdown,
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Output { json: cli.json };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(out, "runtime", &e.into()),
    };
    match runtime.block_on(run(cli, out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(out, kind_of(&error), &error),
    }
}

/// Reports a failure: the message on stderr, and with `--json` an error document on stdout.
fn fail(out: Output, kind: &str, error: &anyhow::Error) -> ExitCode {
    let message = format!("{error:#}");
    eprintln!("dshctl: error: {message}");
    if out.json {
        let doc = json!({ "error": { "kind": kind, "message": message } });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    ExitCode::FAILURE
}

fn kind_of(error: &anyhow::Error) -> &'static str {
    if let Some(e) = error.downcast_ref::<ConnectError>() {
        return match e {
            ConnectError::NotListening { .. } => "not_listening",
            ConnectError::PermissionDenied { .. } => "permission_denied",
            _ => "connect",
        };
    }
    if error.downcast_ref::<tonic::Status>().is_some() {
        return "rpc";
    }
    "error"
}

async fn run(cli: Cli, out: Output) -> anyhow::Result<()> {
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "dshctl", &mut script);
        let script = String::from_utf8_lossy(&script).into_owned();
        return out.emit(
            &json!({ "shell": shell.to_string(), "script": script }),
            |w| w.write_all(script.as_bytes()),
        );
    }

    let socket = dsh_client::resolve_socket(cli.socket.as_ref(), &Ambient::from_process())?;
    let client = Client::connect(&socket).await?;
    match cli.command {
        Command::Status => status(&client, out).await,
        Command::Shutdown => shutdown(&client, out).await,
        Command::Completions { .. } => Ok(()),
    }
}

async fn status(client: &Client, out: Output) -> anyhow::Result<()> {
    let s = client
        .daemon()
        .status(v1::StatusRequest {})
        .await?
        .into_inner();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let uptime = Duration::from_millis(u64::try_from(now - s.started_at_ms).unwrap_or(0));
    let doc = json!({
        "version": s.version,
        "protocol_version": s.protocol_version,
        "pid": s.pid,
        "dsh_home": s.dsh_home,
        "socket": s.socket,
        "started_at_ms": s.started_at_ms,
        "persistence": s.persistence,
        "agents": s.agents,
    });
    out.emit(&doc, |w| {
        writeln!(
            w,
            "dshd {} (protocol {}), pid {}",
            s.version, s.protocol_version, s.pid
        )?;
        writeln!(w, "home         {}", s.dsh_home)?;
        writeln!(w, "socket       {}", s.socket)?;
        writeln!(w, "uptime       {}", human_duration(uptime))?;
        writeln!(w, "persistence  {}", s.persistence)?;
        writeln!(w, "agents       {}", s.agents)
    })
}

async fn shutdown(client: &Client, out: Output) -> anyhow::Result<()> {
    let pid = client
        .daemon()
        .status(v1::StatusRequest {})
        .await?
        .into_inner()
        .pid;
    client.daemon().shutdown(v1::ShutdownRequest {}).await?;
    // Wait for the process itself to go (socket activation keeps the path, so it is no signal).
    let exited = wait_for_exit(pid, Duration::from_secs(30)).await;
    anyhow::ensure!(
        exited,
        "dshd (pid {pid}) accepted shutdown but is still running after 30 s"
    );
    let doc = json!({ "stopped": true, "pid": pid, "socket": PathBuf::from(client.socket()) });
    out.emit(&doc, |w| writeln!(w, "dshd (pid {pid}) has shut down"))
}

async fn wait_for_exit(pid: u32, limit: Duration) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if rustix::process::test_kill_process(pid).is_err() || is_zombie(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A process that has exited but not been reaped by its parent yet still answers `kill(pid, 0)`.
fn is_zombie(pid: rustix::process::Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(')')?.1;
            after_name
                .split_whitespace()
                .next()
                .map(|state| state == "Z")
        })
        .unwrap_or(false)
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m {:02}s", s / 3600, (s % 3600) / 60, s % 60),
    }
}
