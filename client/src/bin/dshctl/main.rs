//! `dshctl`: the command-line client and debug tool for dshd.
//!
//! Exit codes: 0 success; 1 the daemon could not be reached, refused the request, or (for `prompt`)
//! the turn did not complete; 2 bad usage.

mod agent;
mod daemon;
mod env;
mod hooks;
mod output;
mod persistence;
mod prompt;
mod render;
mod run;
mod session;
mod skills;
mod watch;
mod wire;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use dsh_client::{Client, ConnectError};
use dsh_paths::home::Ambient;
use output::Output;
use serde_json::json;

/// Command-line client for dshd, the dsh agent daemon.
const DSHCTL_AFTER_HELP: &str = "\
Examples:
  dshctl status
  AGENT=$(dshctl --json agent new --cwd . --script examples/scripts/facts.json | jq -r .agent_id)
  dshctl prompt --agent \"$AGENT\" \"which facts does your shell get?\"
  dshctl watch \"$AGENT\" --children          follow it and its child agents live
  dshctl approve \"$AGENT\" CALL --allow       answer an approval request
  dshctl session locate \"$AGENT\"          where the transcript is
  dshctl run -- 'echo $DSH_HOME'           a command through the daemon
  dshctl completions bash > ~/.local/share/bash-completion/completions/dshctl

Exit status:
  0    success (for prompt: the turn completed)
  1    an error (the daemon is not running, refused the request, or the turn did not complete)
  2    bad usage
  run  exits with the command's own status (124 on timeout, 128+N when killed by signal N)";

#[derive(Debug, Parser)]
#[command(
    name = "dshctl",
    version,
    about = "Drive and inspect dshd, the dsh agent daemon: agents, prompts, sessions, commands.",
    after_help = DSHCTL_AFTER_HELP
)]
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
    /// Create and manage live agents.
    Agent {
        #[command(subcommand)]
        command: agent::AgentCommand,
    },
    /// Send a prompt to an agent and follow its turn (exit 1 unless the turn completes).
    Prompt {
        /// The agent.
        #[arg(long, value_name = "ID")]
        agent: String,
        /// The prompt.
        text: String,
    },
    /// Follow agents live: one, one and its children (--children), or all of them.
    Watch(watch::WatchArgs),
    /// Answer a tool call's approval request (--allow or --deny).
    Approve(watch::ApproveArgs),
    /// Where sessions are, which exist, and what they hold.
    Session {
        #[command(subcommand)]
        command: session::SessionCommand,
    },
    /// The persistence backend: show it or swap it.
    Persistence {
        #[command(subcommand)]
        command: persistence::PersistenceCommand,
    },
    /// The managed DSH_* variables: declarations and a diagnostic snapshot.
    Env {
        #[command(subcommand)]
        command: env::EnvCommand,
    },
    /// Run a command through the daemon, with the managed environment of an agent (or none).
    Run(run::RunArgs),
    /// Background jobs: read their output or kill them.
    Job {
        #[command(subcommand)]
        command: run::JobCommand,
    },
    /// Claude Code and Codex hooks: list them or reload their files.
    Hooks {
        #[command(subcommand)]
        command: hooks::HooksCommand,
    },
    /// Local skills under the harness home.
    Skills {
        #[command(subcommand)]
        command: skills::SkillsCommand,
    },
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
        Err(e) => return fail(out, &e.into()),
    };
    match runtime.block_on(run(cli, out)) {
        Ok(code) => code,
        Err(error) => fail(out, &error),
    }
}

/// Reports a failure: the message on stderr, and with `--json` an error document on stdout.
fn fail(out: Output, error: &anyhow::Error) -> ExitCode {
    let (kind, message) = describe(error);
    eprintln!("dshctl: error: {message}");
    if out.json {
        let doc = json!({ "error": { "kind": kind, "message": message } });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    ExitCode::FAILURE
}

/// A machine-readable kind and a human message for an error.
fn describe(error: &anyhow::Error) -> (String, String) {
    if let Some(e) = error.downcast_ref::<ConnectError>() {
        let kind = match e {
            ConnectError::NotListening { .. } => "not_listening",
            ConnectError::PermissionDenied { .. } => "permission_denied",
            ConnectError::ForeignServer { .. } => "foreign_server",
            _ => "connect",
        };
        return (kind.to_owned(), e.to_string());
    }
    if let Some(status) = error.downcast_ref::<tonic::Status>() {
        let code = format!("{:?}", status.code());
        let kind = snake(&code);
        let message = if status.message().is_empty() {
            kind.replace('_', " ")
        } else {
            status.message().to_owned()
        };
        return (kind, message);
    }
    ("error".to_owned(), format!("{error:#}"))
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

async fn run(cli: Cli, out: Output) -> anyhow::Result<ExitCode> {
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "dshctl", &mut script);
        let script = String::from_utf8_lossy(&script).into_owned();
        out.emit(
            &json!({ "shell": shell.to_string(), "script": script }),
            |w| w.write_all(script.as_bytes()),
        )?;
        return Ok(ExitCode::SUCCESS);
    }

    let socket = dsh_client::resolve_socket(cli.socket.as_ref(), &Ambient::from_process())?;
    let client = Client::connect(&socket).await?;
    match cli.command {
        Command::Status => daemon::status(&client, out).await?,
        Command::Shutdown => daemon::shutdown(&client, out).await?,
        Command::Agent { command } => agent::run(&client, out, command).await?,
        Command::Prompt { agent, text } => {
            if !prompt::run(&client, out, agent, text).await? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Watch(args) => watch::watch(&client, out, args).await?,
        Command::Approve(args) => watch::approve(&client, out, args).await?,
        Command::Session { command } => session::run(&client, out, command).await?,
        Command::Persistence { command } => persistence::run(&client, out, command).await?,
        Command::Env { command } => env::run(&client, out, command).await?,
        Command::Run(args) => return run::run(&client, out, args).await,
        Command::Job { command } => run::job(&client, out, command).await?,
        Command::Hooks { command } => hooks::run(&client, out, command).await?,
        Command::Skills { command } => skills::run(&client, out, command).await?,
        Command::Completions { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}
