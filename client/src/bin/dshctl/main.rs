//! `dshctl`: the command-line client and debug tool for dshd.
//!
//! Exit codes: 0 success; 1 the daemon could not be reached, refused the request, or (for `prompt`)
//! the turn did not complete; 2 bad usage; 130 `prompt` interrupted by Ctrl-C (the turn was
//! cancelled); `run` exits with the command's own status.

mod acp;
mod agent;
mod daemon;
mod doctor;
mod env;
mod hooks;
mod mcp;
mod models;
mod output;
mod persistence;
mod prompt;
mod question;
mod render;
mod run;
mod safe;
mod session;
mod session_meta;
mod skills;
mod transfer;
mod watch;
mod wire;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use dsh_client::ConnectError;
use dsh_client::ids::{IdKind, ResolveError};
use dsh_paths::home::Ambient;
use output::Output;
use serde_json::json;

/// Command-line client for dshd, the dsh agent daemon.
const DSHCTL_AFTER_HELP: &str = "\
Examples:
  dshctl doctor                            is everything in place?
  dshctl status
  AGENT=$(dshctl --json agent new --cwd . --script examples/scripts/facts.json | jq -r .agent_id)
  dshctl prompt --agent \"$AGENT\" \"which facts does your shell get?\"
  dshctl watch \"$AGENT\" --children          follow it and its child agents live
  dshctl approve \"$AGENT\" CALL --allow       answer an approval request
  dshctl session locate 0199a2b3           where the transcript is (a unique id prefix will do)
  dshctl run -- 'echo $DSH_HOME'           a command through the daemon
  dshctl --json session events \"$AGENT\" | jq -c .type
  dshctl completions bash > ~/.local/share/bash-completion/completions/dshctl

Ids: wherever an agent, session, job or call id is asked for, a unique prefix of it will do, and so
will the end of an id as `watch` marks a child's lines (…0000beef); an ambiguous one is refused
with the candidates.

Exit status:
  0    success (for prompt: the turn completed; for doctor: every check passed)
  1    an error (the daemon is not running, refused the request, the turn did not complete, or a
       doctor check failed)
  2    bad usage (with --json, a JSON error object on stderr)
  130  prompt was interrupted by Ctrl-C: the turn was cancelled
  run  exits with the command's own status (124 on timeout, 128+N when killed by signal N)";

#[derive(Debug, Parser)]
#[command(
    name = "dshctl",
    version,
    about = "Drive and inspect dshd, the dsh agent daemon: agents, prompts, sessions, commands.",
    after_help = DSHCTL_AFTER_HELP
)]
struct Cli {
    /// Socket of the daemon. Default: $DSH_SOCKET, else the first that exists of
    /// <runtime dir>/dsh/dshd.sock ($XDG_RUNTIME_DIR, else /run/user/<uid>) and
    /// <home>/run/dshd.sock.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<OsString>,
    /// Print exactly one JSON document on stdout; streams (prompt, watch, session events) print
    /// one JSON object per line. Errors are a JSON document too: `{"error": {"kind", "message"}}`.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show what the daemon is: version, pid, home, socket, persistence, live agents.
    Status,
    /// Check that dsh is ready to use: socket, daemon, home, persistence, model key, config and hook
    /// files. One line per check, with the fix when it fails.
    #[command(after_help = doctor::AFTER_HELP)]
    Doctor,
    /// Ask the daemon to shut down gracefully and wait until it has exited (exit 0, saying so,
    /// when none is running: what was asked for is already the case).
    Shutdown,
    /// Create and manage live agents.
    Agent {
        #[command(subcommand)]
        command: agent::AgentCommand,
    },
    /// Send a prompt to an agent and follow its turn (exit 1 unless the turn completes).
    #[command(after_help = prompt::AFTER_HELP)]
    Prompt {
        /// The agent (a unique id prefix will do).
        #[arg(long, value_name = "ID")]
        agent: String,
        /// The prompt; `-` reads it from stdin.
        text: String,
    },
    /// Compact an agent's context: its model summarises the older messages (exit 1 unless it
    /// succeeds).
    #[command(after_help = prompt::COMPACT_AFTER_HELP)]
    Compact {
        /// The agent (a unique id prefix will do).
        agent: String,
        /// What the summary should keep or stress.
        instructions: Option<String>,
    },
    /// Send a message into an agent's running turn; the model gets it at the next step
    /// boundary (after the commands running now finish). Without a running turn, use prompt.
    Steer {
        /// The agent (a unique id prefix will do).
        agent: String,
        /// The message.
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
    /// Background jobs: list them, read their output or kill them.
    #[command(after_help = run::JOB_AFTER_HELP)]
    Job {
        #[command(subcommand)]
        command: run::JobCommand,
    },
    /// Claude Code and Codex hooks: list them or reload their files.
    Hooks {
        #[command(subcommand)]
        command: hooks::HooksCommand,
    },
    /// The models an agent can be given (`--model openai --model-name NAME`, an editor's model
    /// picker): `[model] models` from the config, else the provider's own list.
    Models,
    /// MCP servers of live agents (`[mcp_servers]` in dshd's config).
    Mcp {
        #[command(subcommand)]
        command: mcp::McpCommand,
    },
    /// Local skills under the harness home.
    Skills {
        #[command(subcommand)]
        command: skills::SkillsCommand,
    },
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim,
    /// Emacs): each ACP session is a dsh agent of the running dshd. Logs go to stderr.
    #[command(after_help = acp::AFTER_HELP)]
    Acp(acp::AcpArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
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

/// Reports a command line clap refused (exit 2), or prints the help or version it was asked for
/// (exit 0). With `--json` anywhere before `--`, the refusal is a JSON object on stderr:
/// `{"error": {"kind": "usage", "message": ..., "usage": ...}}`.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    let json = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    if informational || !json {
        // clap prints to stdout or stderr as fits; a closed pipe is not worth a panic.
        let _ = error.print();
        return ExitCode::from(if informational { 0 } else { 2 });
    }
    // clap's text: "error: <what>\n  <details>\n\nUsage: <usage>\n\nFor more information, ...".
    let rendered = error.render().to_string();
    let (what, rest) = rendered
        .split_once("\nUsage: ")
        .unwrap_or((rendered.as_str(), "dshctl [OPTIONS] <COMMAND>"));
    let message = if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // The "error" is the whole help text of the command that needs a subcommand.
        "a subcommand is required; --help lists them".to_owned()
    } else {
        what.replace("For more information, try '--help'.", "")
            .trim_start_matches("error: ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let usage = rest.lines().next().unwrap_or_default().trim().to_owned();
    let doc = json!({ "error": { "kind": "usage", "message": message, "usage": usage } });
    let _ = writeln!(std::io::stderr(), "{doc}");
    ExitCode::from(2)
}

/// Reports a failure: the message on stderr, and with `--json` an error document on stdout.
fn fail(out: Output, error: &anyhow::Error) -> ExitCode {
    let (kind, message) = describe(error);
    // The message may carry dshd's, which may quote a model's or a command's text.
    safe::eprintln(format_args!("dshctl: error: {message}"));
    if out.json {
        let doc = json!({ "error": { "kind": kind, "message": message } });
        let _ = output::json_line(&doc.to_string());
    }
    ExitCode::FAILURE
}

/// A machine-readable kind and a human message for an error.
fn describe(error: &anyhow::Error) -> (String, String) {
    if let Some(e) = error.downcast_ref::<ResolveError>() {
        return match e {
            ResolveError::Ambiguous { .. } => ("ambiguous_id".to_owned(), e.to_string()),
            ResolveError::NoMatch { .. } => ("not_found".to_owned(), e.to_string()),
            ResolveError::Rpc(status) => status_kind(status),
        };
    }
    if let Some(e) = error.downcast_ref::<ConnectError>() {
        let kind = match e {
            ConnectError::NotListening { .. } => "not_listening",
            ConnectError::PermissionDenied { .. } => "permission_denied",
            ConnectError::SandboxRefused { .. } => "sandbox_refused",
            ConnectError::ForeignServer { .. } => "foreign_server",
            _ => "connect",
        };
        // The chain: `NoSocket` keeps its cause as its source.
        return (kind.to_owned(), format!("{error:#}"));
    }
    if let Some(status) = error.downcast_ref::<tonic::Status>() {
        return status_kind(status);
    }
    ("error".to_owned(), format!("{error:#}"))
}

/// The kind (the gRPC code in snake case) and message of a refusal.
fn status_kind(status: &tonic::Status) -> (String, String) {
    let code = format!("{:?}", status.code());
    let kind = snake(&code);
    let message = if status.message().is_empty() {
        kind.replace('_', " ")
    } else {
        status.message().to_owned()
    };
    (kind, message)
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

    if let Command::Acp(args) = cli.command {
        // Serves even without a daemon: `initialize` reports why it cannot go on.
        let socket = dsh_client::resolve_socket(cli.socket.as_ref(), &Ambient::from_process())
            .map_err(|e| format!("cannot find the dshd socket: {e}"));
        return acp::run(socket, cli.socket, args).await;
    }
    let ambient = Ambient::from_process();
    let socket = dsh_client::resolve_socket(cli.socket.as_ref(), &ambient)?;
    let looked = || dsh_client::places_looked(&socket, cli.socket.as_ref(), &ambient);
    if let Command::Doctor = cli.command {
        return doctor::run(&socket, &looked().await, out).await;
    }
    // Read before connecting: a prompt piped in is not held up by, or lost to, a refused connection.
    let prompt_text = match &cli.command {
        Command::Prompt { text, .. } => Some(prompt::text(text)?),
        _ => None,
    };
    let client = match dsh_client::connect_resolved(&socket, cli.socket.as_ref(), &ambient).await {
        Ok(client) => client,
        // Nothing to stop: the daemon is down, as asked.
        Err(ConnectError::NotListening { path, looked })
            if matches!(cli.command, Command::Shutdown) =>
        {
            return daemon::not_running(out, &path, &looked).map(|()| ExitCode::SUCCESS);
        }
        Err(error) => return Err(error.into()),
    };
    match cli.command {
        Command::Status => daemon::status(&client, out).await?,
        Command::Shutdown => daemon::shutdown(&client, out).await?,
        Command::Agent { command } => agent::run(&client, out, command).await?,
        Command::Prompt { agent, .. } => {
            let agent = client.resolve(IdKind::Agent, &agent).await?;
            let text = prompt_text.unwrap_or_default();
            return prompt::run(&client, out, agent, prompt::Ask::Prompt(text)).await;
        }
        Command::Compact {
            agent,
            instructions,
        } => {
            let agent = client.resolve(IdKind::Agent, &agent).await?;
            return prompt::run(&client, out, agent, prompt::Ask::Compact(instructions)).await;
        }
        Command::Steer { agent, text } => prompt::steer(&client, out, &agent, text).await?,
        Command::Watch(args) => watch::watch(&client, out, args).await?,
        Command::Approve(args) => watch::approve(&client, out, args).await?,
        Command::Session {
            command: session::SessionCommand::Repair { id, apply },
        } => return session::repair(&client, out, &id, apply).await,
        Command::Session { command } => session::run(&client, out, command).await?,
        Command::Persistence { command } => persistence::run(&client, out, command).await?,
        Command::Env { command } => env::run(&client, out, command).await?,
        Command::Run(args) => return run::run(&client, out, args).await,
        Command::Job { command } => run::job(&client, out, command).await?,
        Command::Hooks { command } => hooks::run(&client, out, command).await?,
        Command::Skills { command } => skills::run(&client, out, command).await?,
        Command::Models => models::run(&client, out).await?,
        Command::Mcp { command } => mcp::run(&client, out, command).await?,
        Command::Completions { .. } | Command::Doctor | Command::Acp(_) => {}
    }
    Ok(ExitCode::SUCCESS)
}
