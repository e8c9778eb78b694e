//! `dshctl acp`: an Agent Client Protocol agent on stdio, for editors (Zed, JetBrains IDEs,
//! Neovim, Emacs). It is a client of the running dshd like any other: every ACP session is a dsh
//! agent (the ACP `sessionId` is the dsh session id, the `DSH_SESSION_ID` of its bash calls), and
//! the bridge keeps no session state of its own: loads replay the daemon's log, approvals and
//! "allow always" rules live in the daemon. What it remembers is which agents it made live, so
//! that it can close them when its input ends (their sessions stay stored), and how it created
//! them, so that a session dshd lost before its first turn comes back under its id.
//!
//! Speaks ACP protocol version 1 (JSON-RPC 2.0, one message per line). See docs/ACP.md.

mod jsonrpc;
mod lines;
mod models;
mod outgoing;
mod revive;
mod schema;
mod sessions;
mod stdio;
mod surface;
mod tool_calls;
mod turn;
mod updates;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_client::Client;
use dsh_client::refusal::Refusal;
use dsh_proto::v1;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::io::BufReader;

use crate::agent::{ModelArgs, SandboxArgs};
use jsonrpc::{ErrorData, Incoming, Peer, Raw, RpcError, code, to_raw};
use schema::{
    AgentCapabilities, AuthMethod, CancelNotification, DaemonMeta, Empty, Implementation,
    InitializeRequest, InitializeResponse, McpCapabilities, Meta, PromptCapabilities,
    SessionCapabilities,
};

/// `dshctl acp --help`'s closing words.
pub const AFTER_HELP: &str = "\
Speaks ACP version 1 (JSON-RPC 2.0, one message per line) on stdin and stdout; logs go to stderr.
The agent options apply to the sessions it creates (session/new) and, where given, to those it
makes live again (session/load, session/resume). dshd must be running: initialize fails with the
reason otherwise. Editor settings: README.md, \"Use from your editor\", and docs/ACP.md.

Zed (settings.json), asking before commands a hook flags, confined to the project, no network;
with a key for dshd, add \"--model\", \"openai\"; without one, \"--demo\" tries the keyless demo:
  \"agent_servers\": { \"dsh\": { \"type\": \"custom\", \"command\": \"dshctl\",
    \"args\": [\"acp\", \"--approval\", \"on-request\", \"--sandbox\", \"workspace-write\", \"--network\", \"off\"] } }";

/// The ACP protocol version this bridge speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// `dshctl acp` arguments: the agents it creates are made as `dshctl agent new` would.
#[derive(Debug, clap::Args)]
pub struct AcpArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Serves ACP on stdin/stdout until stdin ends; then closes the agents it made live and exits 0.
/// `socket` is where dshd is expected (or why that could not be worked out, which `initialize`
/// reports).
pub async fn run(
    socket: Result<PathBuf, String>,
    explicit: Option<std::ffi::OsString>,
    args: AcpArgs,
) -> anyhow::Result<ExitCode> {
    let (input, output, _restore) = stdio::open();
    let (peer, outgoing) = Peer::new();
    let writer = tokio::spawn(jsonrpc::write_out(outgoing, output));
    let bridge = Arc::new(Bridge {
        socket,
        explicit,
        client: tokio::sync::Mutex::new(None),
        peer: peer.clone(),
        model: args.model.spec()?,
        approval: args.model.approval(),
        provider: args.model.provider_named(),
        sandbox: args.sandbox.spec(),
        made_live: Mutex::default(),
        prompting: Mutex::default(),
        known: Mutex::default(),
        context_window: Mutex::default(),
        terminal_output: AtomicBool::new(false),
        compaction: AtomicBool::new(false),
        models: tokio::sync::OnceCell::new(),
    });
    let mut messages = lines::Reader::new(BufReader::new(input));
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(message) = messages.next().await {
        match message {
            Incoming::Request { id, method, params } => {
                let bridge = bridge.clone();
                tasks.spawn(async move {
                    let result = bridge.handle(&method, params).await;
                    // A session the answer hands the editor gets its commands right after it.
                    let made = match (&result, method.as_str()) {
                        (
                            Ok(answer),
                            "session/new" | "session/load" | "session/resume" | "session/fork",
                        ) => serde_json::from_str::<schema::SessionId>(answer.get()).ok(),
                        _ => None,
                    };
                    bridge.peer.respond(id, result).await;
                    if let Some(made) = made {
                        bridge.announce_commands(&made.session_id).await;
                    }
                });
            }
            Incoming::Notification { method, params } => {
                let bridge = bridge.clone();
                tasks.spawn(async move { bridge.notified(&method, params).await });
            }
            Incoming::Response { id, result } => {
                if !peer.answered(&id, result) {
                    crate::safe::eprintln(format_args!(
                        "dshctl acp: an answer to no request of ours (id {id})"
                    ));
                }
            }
            Incoming::Invalid { id, error } => peer.respond(id, Err(error)).await,
        }
        // Reap what finished, so a long session does not keep every handled request.
        while tasks.try_join_next().is_some() {}
    }
    // The editor is gone: nobody can answer a permission request any more (dsh denies those
    // calls). Its turns are cancelled and the agents it made live closed, so the requests still
    // running end and are answered (into a pipe that may well be closed); agents that requests
    // made live meanwhile are closed after them.
    peer.abandon();
    bridge.cancel_prompts().await;
    bridge.close_made_live().await;
    while tasks.join_next().await.is_some() {}
    bridge.close_made_live().await;
    drop(bridge);
    drop(peer);
    // Whatever was queued still goes out; a closed stdout is no failure of ours.
    let _ = writer.await;
    Ok(ExitCode::SUCCESS)
}

/// The bridge's connection to dshd and what it was started with.
struct Bridge {
    socket: Result<PathBuf, String>,
    /// `--socket` as given, for the places looked at when nothing listens.
    explicit: Option<std::ffi::OsString>,
    /// Connected at the first request that needs the daemon (normally `initialize`).
    client: tokio::sync::Mutex<Option<Client>>,
    peer: Peer,
    model: v1::ModelSpec,
    approval: i32,
    /// The provider named on the command line (`--model`, or `scripted` for `--script`).
    provider: Option<String>,
    sandbox: Option<v1::SandboxPolicy>,
    /// Agents this bridge created or made live again, closed when its input ends.
    made_live: Mutex<HashSet<String>>,
    /// Sessions with a `session/prompt` of this bridge in flight, cancelled when its input ends.
    prompting: Mutex<HashSet<String>>,
    /// What this bridge gave the sessions it created or changed, to make them live again as
    /// they ran when dshd lost them (see `revive.rs`).
    known: Mutex<HashMap<String, revive::Known>>,
    /// How many tokens the model's context holds (dshd's `model.context_window`, read at
    /// `initialize`), for `usage_update`s.
    context_window: Mutex<Option<u64>>,
    /// The `openai` models to offer in the model picker (`Models.List`), asked once per bridge:
    /// dshd asks the provider each time, and an editor asks for options at every session.
    models: tokio::sync::OnceCell<Vec<String>>,
    /// The client shows commands in display-only terminals (`initialize`'s
    /// `clientCapabilities._meta.terminal_output`).
    terminal_output: AtomicBool,
    /// The client takes `compaction_update` (`clientCapabilities.session.compaction`).
    compaction: AtomicBool,
}

impl Bridge {
    /// Answers one request: its params read as the method's own type, its answer written from
    /// the method's own type.
    async fn handle(self: &Arc<Self>, method: &str, params: Option<Raw>) -> Result<Raw, RpcError> {
        let params = params.as_deref();
        match method {
            "initialize" => to_raw(&self.initialize(parse_params(method, params)?).await?),
            "authenticate" => Err(self.authenticate().await),
            "session/new" => to_raw(&self.new_session(parse_params(method, params)?).await?),
            "session/load" => to_raw(
                &self
                    .load_session(method, parse_params(method, params)?, true)
                    .await?,
            ),
            "session/resume" => to_raw(
                &self
                    .load_session(method, parse_params(method, params)?, false)
                    .await?,
            ),
            "session/fork" => to_raw(&self.fork_session(parse_params(method, params)?).await?),
            "session/list" => to_raw(&self.list_sessions(parse_params(method, params)?).await?),
            "session/close" => to_raw(&self.close_session(parse_params(method, params)?).await?),
            "session/delete" => to_raw(&self.delete_session(parse_params(method, params)?).await?),
            "session/set_mode" => to_raw(&self.set_mode(parse_params(method, params)?).await?),
            "session/set_config_option" => to_raw(
                &self
                    .set_config_option(parse_params(method, params)?)
                    .await?,
            ),
            "session/prompt" => to_raw(&self.prompt(parse_params(method, params)?).await?),
            _ => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    /// Notifications get no answer; unknown ones are ignored, as JSON-RPC asks.
    async fn notified(&self, method: &str, params: Option<Raw>) {
        if method != "session/cancel" {
            return;
        }
        let cancelled = match parse_params::<CancelNotification>(method, params.as_deref()) {
            Ok(p) => self.cancel(p.session_id).await,
            Err(e) => Err(e),
        };
        if let Err(e) = cancelled {
            crate::safe::eprintln(format_args!("dshctl acp: session/cancel: {}", e.message));
        }
    }

    /// The daemon connection, made now if there is none yet.
    async fn client(&self) -> Result<Client, RpcError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let socket = self
            .socket
            .as_ref()
            .map_err(|e| RpcError::internal(e.clone()))?;
        let ambient = dsh_paths::home::Ambient::from_process();
        let client = dsh_client::connect_resolved(socket, self.explicit.as_ref(), &ambient)
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    async fn initialize(&self, asked: InitializeRequest) -> Result<InitializeResponse, RpcError> {
        if asked.protocol_version != PROTOCOL_VERSION {
            crate::safe::eprintln(format_args!(
                "dshctl acp: the client asked for ACP version {}; this bridge speaks {PROTOCOL_VERSION}",
                asked.protocol_version
            ));
        }
        let status = self
            .client()
            .await?
            .daemon()
            .status(v1::StatusRequest {})
            .await?
            .into_inner();
        *lock(&self.context_window) = Some(status.context_window).filter(|n| *n > 0);
        self.terminal_output.store(
            asked.client_capabilities.terminal_output(),
            Ordering::Relaxed,
        );
        self.compaction
            .store(asked.client_capabilities.compaction(), Ordering::Relaxed);
        // Auth methods only when this bridge's agents need a key dshd does not have.
        let auth_methods = if self.provider.as_deref() == Some("openai")
            && !status.model_key_configured
        {
            vec![AuthMethod {
                id: "dshd-model-key".to_owned(),
                name: format!("Set {} for dshd", status.model_key_env),
                description: format!(
                    "dshd reads the model API key from {} in its own environment: set it there and restart dshd",
                    status.model_key_env
                ),
            }]
        } else {
            Vec::new()
        };
        Ok(InitializeResponse {
            // We speak version 1 only: the answer to any other is 1, and the client decides.
            protocol_version: PROTOCOL_VERSION,
            agent_capabilities: AgentCapabilities {
                load_session: true,
                prompt_capabilities: PromptCapabilities {
                    image: false,
                    audio: false,
                    embedded_context: true,
                },
                mcp_capabilities: McpCapabilities {
                    http: true,
                    sse: false,
                },
                session_capabilities: SessionCapabilities {
                    list: Empty {},
                    resume: Empty {},
                    close: Empty {},
                    fork: Empty {},
                    delete: Empty {},
                },
            },
            auth_methods,
            agent_info: Implementation {
                name: "dsh".to_owned(),
                title: "dsh".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            meta: Meta {
                dsh: DaemonMeta {
                    daemon_version: status.version,
                    daemon_protocol_version: status.protocol_version,
                    socket: status.socket,
                },
            },
        })
    }

    async fn authenticate(&self) -> RpcError {
        let variable = match self.client().await {
            Ok(client) => client
                .daemon()
                .status(v1::StatusRequest {})
                .await
                .map(|s| s.into_inner().model_key_env)
                .unwrap_or_default(),
            Err(e) => return e,
        };
        RpcError::new(
            code::AUTH_REQUIRED,
            format!(
                "dsh cannot log in for you: dshd reads the model API key from {variable} in its own environment; set it there and restart dshd ('dshctl doctor' checks it)"
            ),
        )
    }

    /// Closes the agents this bridge made live (each cancels its running turn and checkpoints).
    async fn close_made_live(&self) {
        let ids: Vec<String> = self.live_set().drain().collect();
        let Ok(client) = self.client().await else {
            return;
        };
        for agent_id in ids {
            if let Err(status) = client
                .agents()
                .close(v1::CloseAgentRequest {
                    agent_id: agent_id.clone(),
                })
                .await
                && status.code() != tonic::Code::NotFound
            {
                crate::safe::eprintln(format_args!(
                    "dshctl acp: closing {agent_id}: {}",
                    status.message()
                ));
            }
        }
    }

    /// Cancels the turns this bridge's prompts are waiting for.
    async fn cancel_prompts(&self) {
        let ids: Vec<String> = lock(&self.prompting).iter().cloned().collect();
        for session_id in ids {
            if let Err(e) = self.cancel(session_id.clone()).await {
                crate::safe::eprintln(format_args!(
                    "dshctl acp: cancelling the turn of {session_id}: {}",
                    e.message
                ));
            }
        }
    }

    fn live_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        lock(&self.made_live)
    }
}

/// A lock that a panicked holder did not poison for good (the sets stay usable).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `params` as `T` (absent params read as `null`), or an invalid-params error naming the method
/// and the field.
fn parse_params<T: DeserializeOwned>(
    method: &str,
    params: Option<&RawValue>,
) -> Result<T, RpcError> {
    serde_json::from_str(params.map_or("null", RawValue::get))
        .map_err(|e| RpcError::params(format!("{method}: {e}")))
}

/// A refusal of the daemon as an ACP error: bad input is invalid params, an unknown session
/// "resource not found", a missing model key (dshd's `NO_MODEL_KEY`) "auth required"; the
/// daemon's message is kept, and `data` names the gRPC code and dshd's reason.
impl From<tonic::Status> for RpcError {
    fn from(status: tonic::Status) -> Self {
        use tonic::Code;
        let code = match (status.code(), Refusal::of(&status)) {
            (_, Some(Refusal::NoModelKey { .. })) => code::AUTH_REQUIRED,
            (Code::InvalidArgument, _) => code::INVALID_PARAMS,
            (Code::NotFound, _) => code::RESOURCE_NOT_FOUND,
            _ => code::INTERNAL_ERROR,
        };
        let message = if status.message().is_empty() {
            format!("dshd: {:?}", status.code())
        } else {
            status.message().to_owned()
        };
        RpcError {
            code,
            message,
            data: Some(ErrorData {
                grpc_code: format!("{:?}", status.code()),
                reason: Refusal::reason(&status),
            }),
        }
    }
}
