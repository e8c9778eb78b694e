//! Translation helpers shared by the services: domain values to protocol messages, protocol input to
//! validated domain values, and domain errors to gRPC status codes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dsh_proto::refusal::{self, metadata};
use dsh_proto::v1;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use dsh_core::{
    Agent, AgentError, AgentRegistry, AgentStatus, ApprovalPolicy, ApprovalRule, ChoiceError,
    Event, ExecError, MCP_DEFAULT_STARTUP_TIMEOUT, MCP_DEFAULT_TOOL_TIMEOUT, McpServerConfig,
    McpServerState, McpServerStatus, McpTransport, ModelChoice, PersistenceError, ReasoningEffort,
    SandboxError, SandboxPolicy, SessionHeader, SessionId, SessionLocation, StreamEvent,
    UnknownName, check_mcp_server_env, check_mcp_server_name, check_mcp_server_url,
};

/// Parses a session or agent id from the wire, naming the field on failure.
pub fn session_id(field: &str, value: String) -> Result<SessionId, Status> {
    SessionId::parse(value).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

/// A header for the wire.
pub fn header(h: &SessionHeader) -> v1::SessionHeader {
    v1::SessionHeader {
        version: h.version,
        id: h.id.to_string(),
        created_at_ms: h.created_at,
        cwd: h.cwd.to_string_lossy().into_owned(),
        parent_session: h.parent_session.as_ref().map(ToString::to_string),
        seed_length: h.seed_length,
        origin: h.origin.map(|_| "subagent".to_owned()),
        delegation_depth: h.delegation_depth,
    }
}

/// A location for the wire.
pub fn location(l: SessionLocation) -> v1::SessionLocation {
    v1::SessionLocation {
        kind: l.kind.to_owned(),
        path: l.path.to_string_lossy().into_owned(),
        database: l.database.unwrap_or_default(),
    }
}

/// A logged event of session `id` for the wire.
pub fn event(id: &SessionId, e: &Event) -> v1::Event {
    stream_event(StreamEvent::logged(id.clone(), e))
}

/// A streamed event for the wire: the same envelope, field for field.
pub fn stream_event(e: StreamEvent) -> v1::Event {
    v1::Event {
        session_id: e.session.to_string(),
        r#type: e.kind.into_owned(),
        seq: e.seq,
        time_ms: e.time,
        data_json: e.data_json,
    }
}

/// An approval policy from the wire (`None`: unspecified, the default applies).
pub fn approval_policy(value: i32) -> Result<Option<ApprovalPolicy>, Status> {
    match v1::ApprovalPolicy::try_from(value) {
        Ok(v1::ApprovalPolicy::Unspecified) => Ok(None),
        Ok(v1::ApprovalPolicy::Never) => Ok(Some(ApprovalPolicy::Never)),
        Ok(v1::ApprovalPolicy::OnRequest) => Ok(Some(ApprovalPolicy::OnRequest)),
        Ok(v1::ApprovalPolicy::Always) => Ok(Some(ApprovalPolicy::Always)),
        Err(_) => Err(Status::invalid_argument(format!(
            "approval: unknown approval policy {value}; known: APPROVAL_POLICY_NEVER, APPROVAL_POLICY_ON_REQUEST, APPROVAL_POLICY_ALWAYS"
        ))),
    }
}

/// An approval policy for the wire.
pub fn approval_wire(policy: ApprovalPolicy) -> v1::ApprovalPolicy {
    match policy {
        ApprovalPolicy::Never => v1::ApprovalPolicy::Never,
        ApprovalPolicy::OnRequest => v1::ApprovalPolicy::OnRequest,
        ApprovalPolicy::Always => v1::ApprovalPolicy::Always,
    }
}

/// A live agent for the wire, with its MCP servers as `registry` knows them.
pub fn agent_info(agent: &Agent, registry: &AgentRegistry) -> v1::AgentInfo {
    let (state, turns) = match agent.status() {
        AgentStatus::Idle => (v1::AgentState::Idle, agent.last_turn()),
        AgentStatus::Running { turn } => (v1::AgentState::Running, turn),
    };
    let settings = agent.settings();
    let (context_tokens, context_window) = agent.context_use();
    v1::AgentInfo {
        agent_id: agent.id().to_string(),
        session_id: agent.id().to_string(),
        header: Some(header(agent.header())),
        state: state as i32,
        provider: settings.provider,
        model: settings.model,
        reasoning_effort: settings
            .reasoning_effort
            .map_or_else(String::new, |e| e.as_str().to_owned()),
        parent_agent_id: agent.parent().map(ToString::to_string),
        turns,
        sandbox: Some(sandbox_wire(agent.sandbox())),
        approval: approval_wire(settings.approval) as i32,
        approval_rules: agent.approval_rules().into_iter().map(rule_wire).collect(),
        instruction_files: agent.instruction_files(),
        mcp_servers: registry
            .mcp_servers(agent.id())
            .into_iter()
            .map(mcp_server_wire)
            .collect(),
        context_tokens,
        context_window: context_window.unwrap_or(0),
    }
}

/// One MCP server's status for the wire.
fn mcp_server_wire(s: McpServerStatus) -> v1::McpServerInfo {
    let state = match s.state {
        McpServerState::NotStarted => v1::McpServerState::NotStarted,
        McpServerState::Starting => v1::McpServerState::Starting,
        McpServerState::Running => v1::McpServerState::Running,
        McpServerState::Failed => v1::McpServerState::Failed,
    };
    v1::McpServerInfo {
        name: s.name,
        state: state as i32,
        tools: s.tools,
        last_error: s.last_error,
        starts: s.starts,
    }
}

/// An "allow always" rule for the wire.
pub fn rule_wire(r: ApprovalRule) -> v1::ApprovalRule {
    v1::ApprovalRule {
        tool: r.tool,
        command: r.command,
        cwd: r.cwd,
    }
}

/// A client's MCP servers from the wire, checked: a usable name, a command or a URL (not both),
/// an absolute cwd; refusals name `mcp_servers[i]` and the field. A stdio server's environment is
/// checked when it starts, as a command's is.
pub fn mcp_servers(specs: Vec<v1::McpServerSpec>) -> Result<Vec<McpServerConfig>, Status> {
    let mut servers: Vec<McpServerConfig> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let bad = |field: &str, why: &str| {
            Status::invalid_argument(format!("mcp_servers[{i}].{field}: {why}"))
        };
        check_mcp_server_name(&spec.name).map_err(|why| bad("name", why))?;
        if servers.iter().any(|s| s.name == spec.name) {
            return Err(bad("name", "given twice"));
        }
        let transport = match (spec.command.is_empty(), spec.url.is_empty()) {
            (true, true) => {
                return Err(bad(
                    "command",
                    "required (the program to run), or `url` for a streamable HTTP server",
                ));
            }
            (false, false) => return Err(bad("url", "give `command` or `url`, not both")),
            (true, false) => {
                check_mcp_server_url(&spec.url).map_err(|why| bad("url", why))?;
                if !(spec.args.is_empty() && spec.env.is_empty() && spec.cwd.is_empty()) {
                    return Err(bad("url", "args, env and cwd are for stdio servers"));
                }
                McpTransport::Http {
                    url: spec.url,
                    headers: spec.headers.into_iter().collect(),
                    bearer_token: None,
                }
            }
            (false, true) => {
                let env = spec.env.into_iter().collect();
                check_mcp_server_env(&env).map_err(|why| bad("env", &why))?;
                if !spec.headers.is_empty() {
                    return Err(bad("headers", "are for streamable HTTP servers (`url`)"));
                }
                let cwd = match spec.cwd.as_str() {
                    "" => None,
                    dir if Path::new(dir).is_absolute() => Some(PathBuf::from(dir)),
                    _ => return Err(bad("cwd", "must be absolute")),
                };
                McpTransport::Stdio {
                    command: spec.command,
                    args: spec.args,
                    env,
                    cwd,
                }
            }
        };
        servers.push(McpServerConfig {
            name: spec.name,
            transport,
            startup_timeout: MCP_DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: MCP_DEFAULT_TOOL_TIMEOUT,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            // A client's servers are its agent's: its children do not get them.
            children: false,
        });
    }
    Ok(servers)
}

/// Most variables a client's environment may have.
const MAX_CLIENT_VARIABLES: usize = 4096;
/// Most bytes a client's environment may have, names and values together.
const MAX_CLIENT_ENV_BYTES: usize = 1 << 20;

/// A client's environment from the wire, checked (`None`: not sent, dshd's applies): names
/// non-empty without `=` or NUL, values without NUL, within the bounds. Refusals name
/// `environment.variables` and the variable.
pub fn client_environment(
    env: Option<v1::ClientEnvironment>,
) -> Result<Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>, Status> {
    let Some(env) = env else {
        return Ok(None);
    };
    let bad = |what: String| Status::invalid_argument(format!("environment.variables: {what}"));
    if env.variables.len() > MAX_CLIENT_VARIABLES {
        return Err(bad(format!(
            "{} variables, more than the {MAX_CLIENT_VARIABLES} allowed",
            env.variables.len()
        )));
    }
    let bytes: usize = env.variables.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_CLIENT_ENV_BYTES {
        return Err(bad(format!(
            "{bytes} bytes, more than the {MAX_CLIENT_ENV_BYTES} allowed"
        )));
    }
    let mut vars = Vec::with_capacity(env.variables.len());
    for (name, value) in env.variables {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(bad(format!(
                "{name:?}: a name must be non-empty, without '=' or NUL"
            )));
        }
        if value.contains('\0') {
            return Err(bad(format!("{name}: the value holds a NUL byte")));
        }
        vars.push((name.into(), value.into()));
    }
    Ok(Some(vars))
}

/// The model choice of a request (empty fields mean "the default").
pub fn model_choice(spec: Option<v1::ModelSpec>) -> Result<ModelChoice, Status> {
    let spec = spec.unwrap_or_default();
    let some = |s: String| (!s.is_empty()).then_some(s);
    let reasoning_effort = match spec.reasoning_effort.as_str() {
        "" => None,
        "default" => Some(None),
        name => Some(Some(ReasoningEffort::parse(name).ok_or_else(|| {
            Status::invalid_argument(format!(
                "model.reasoning_effort: {name:?} is not one of default, low, medium, high, max"
            ))
        })?)),
    };
    Ok(ModelChoice {
        provider: some(spec.provider),
        model: some(spec.model),
        reasoning_effort,
        script: some(spec.script_json),
    })
}

/// A persistence error as a status a client can act on. A location that cannot hold the backend
/// or cannot be written is the daemon's state (its configured or selected backend), not a fault:
/// FAILED_PRECONDITION. `Persistence.Use`, where the location is the request's own, maps
/// `BadLocation` to INVALID_ARGUMENT itself.
pub fn persistence_status(error: PersistenceError) -> Status {
    match error {
        PersistenceError::NotFound(id) => Status::not_found(format!("no session {id}")),
        e @ PersistenceError::Corrupt { .. } => Status::data_loss(e.to_string()),
        PersistenceError::Leased {
            ref id,
            ref host,
            pid,
            expires_in,
        } => refused(
            Code::FailedPrecondition,
            error.to_string(),
            refusal::SESSION_LEASED,
            &[
                (metadata::SESSION_ID, id.to_string()),
                (metadata::HOST, host.clone()),
                (metadata::PID, pid.to_string()),
                (metadata::EXPIRES_IN_MS, expires_in.as_millis().to_string()),
            ],
        ),
        e @ (PersistenceError::ForeignDatabase { .. }
        | PersistenceError::Config(_)
        | PersistenceError::BadLocation { .. }
        | PersistenceError::NotWritable { .. }
        | PersistenceError::NewerFormat { .. }) => Status::failed_precondition(e.to_string()),
        e @ PersistenceError::Unavailable { .. } => Status::unavailable(e.to_string()),
        e @ PersistenceError::NoSpace { .. } => Status::resource_exhausted(e.to_string()),
        e @ (PersistenceError::SeqMismatch { .. } | PersistenceError::Diverged { .. }) => {
            Status::aborted(e.to_string())
        }
        e @ (PersistenceError::Io { .. }
        | PersistenceError::Sqlite { .. }
        | PersistenceError::Postgres { .. }
        | PersistenceError::Task { .. }) => Status::internal(e.to_string()),
    }
}

/// A failure to read or save the backend choice. A home that cannot be written is its state:
/// FAILED_PRECONDITION, like a damaged state file; any other I/O failure is INTERNAL.
pub fn choice_status(error: ChoiceError) -> Status {
    match error {
        e @ (ChoiceError::NotWritable { .. } | ChoiceError::Invalid { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        e @ ChoiceError::Io { .. } => Status::internal(e.to_string()),
    }
}

/// `code` and `message` with an `ErrorInfo` in dsh's domain: the refusal's `reason` (one of
/// [`refusal`]'s) and its `metadata`, which clients act on instead of the message's words.
fn refused(code: Code, message: String, reason: &str, metadata: &[(&str, String)]) -> Status {
    let metadata: HashMap<String, String> = metadata
        .iter()
        .map(|(key, value)| ((*key).to_owned(), value.clone()))
        .collect();
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, refusal::DOMAIN, metadata),
    )
}

/// An agent error as a status a client can act on.
pub fn agent_status(error: AgentError) -> Status {
    match error {
        AgentError::NotFound(ref id) => refused(
            Code::NotFound,
            error.to_string(),
            refusal::AGENT_NOT_LIVE,
            &[(metadata::AGENT_ID, id.to_string())],
        ),
        e @ (AgentError::SessionNotFound(_) | AgentError::NoPendingApproval { .. }) => {
            Status::not_found(e.to_string())
        }
        e @ (AgentError::AlreadyLive(_) | AgentError::SessionExists(_)) => {
            Status::already_exists(e.to_string())
        }
        AgentError::Busy { ref id, turn } => refused(
            Code::FailedPrecondition,
            error.to_string(),
            refusal::AGENT_BUSY,
            &[
                (metadata::AGENT_ID, id.to_string()),
                (metadata::TURN, turn.to_string()),
            ],
        ),
        // A missing API key is the daemon's state, not the request's fault.
        AgentError::NoModelKey { ref variable } => refused(
            Code::FailedPrecondition,
            error.to_string(),
            refusal::NO_MODEL_KEY,
            &[(metadata::VARIABLE, variable.clone())],
        ),
        e @ (AgentError::Closed(_)
        | AgentError::Live(_)
        | AgentError::NotRunning(_)
        | AgentError::ChildSettings(_)) => Status::failed_precondition(e.to_string()),
        e @ (AgentError::InvalidCwd { .. }
        | AgentError::InvalidModel(_)
        | AgentError::InvalidTitle(_)
        | AgentError::InvalidForkPoint { .. }) => Status::invalid_argument(e.to_string()),
        e @ (AgentError::TooDeep { .. } | AgentError::TooMany { .. }) => {
            Status::resource_exhausted(e.to_string())
        }
        AgentError::Persistence(e) => persistence_status(e),
        e @ AgentError::ShuttingDown => Status::unavailable(e.to_string()),
        e @ AgentError::LooserSandbox(_) => Status::permission_denied(format!("sandbox: {e}")),
    }
}

/// The sandbox a request asks for: `spec`'s fields, each empty one (or all, when unset) taken from
/// `base`. An unknown name is INVALID_ARGUMENT naming the field.
pub fn sandbox_policy(
    spec: Option<v1::SandboxPolicy>,
    base: SandboxPolicy,
) -> Result<SandboxPolicy, Status> {
    let Some(spec) = spec else {
        return Ok(base);
    };
    let bad =
        |field: &str, e: UnknownName| Status::invalid_argument(format!("sandbox.{field}: {e}"));
    Ok(SandboxPolicy {
        mode: if spec.mode.is_empty() {
            base.mode
        } else {
            spec.mode.parse().map_err(|e| bad("mode", e))?
        },
        network: if spec.network.is_empty() {
            base.network
        } else {
            spec.network.parse().map_err(|e| bad("network", e))?
        },
    })
}

/// A policy for the wire.
pub fn sandbox_wire(policy: SandboxPolicy) -> v1::SandboxPolicy {
    v1::SandboxPolicy {
        mode: policy.mode.as_str().to_owned(),
        network: policy.network.as_str().to_owned(),
    }
}

/// An executor error as a status naming the request field it is about. Exhaustive on purpose: a
/// new variant must be given its code here.
pub fn exec_status(error: ExecError) -> Status {
    match error {
        e @ (ExecError::DshKeyInEnv { .. }
        | ExecError::ShellStartupKeyInEnv { .. }
        | ExecError::ReservedKeyInEnv { .. }
        | ExecError::BadEnvName { .. }
        | ExecError::NulInEnvValue { .. }
        | ExecError::UnmanagedKeyInSnapshot { .. }) => {
            Status::invalid_argument(format!("env: {e}"))
        }
        e @ ExecError::NulInCommand => Status::invalid_argument(format!("command: {e}")),
        ExecError::TooLong { ref part, .. } => {
            Status::invalid_argument(format!("{}: {error}", part.field()))
        }
        ExecError::TooLarge { ref largest, .. } => {
            Status::invalid_argument(format!("{}: {error}", largest.field()))
        }
        e @ ExecError::BadCwd { .. } => Status::invalid_argument(format!("cwd: {e}")),
        e @ ExecError::BadJobId(_) => Status::invalid_argument(format!("job_id: {e}")),
        e @ ExecError::UnknownJob(_) => Status::not_found(e.to_string()),
        e @ (ExecError::ShuttingDown | ExecError::Cancelled) => Status::unavailable(e.to_string()),
        // The size checks run first, so E2BIG here means a limit they do not model; it is still
        // the request that is too large, not the daemon that failed.
        ExecError::Spawn {
            error: ref source, ..
        } if source.raw_os_error() == Some(rustix::io::Errno::TOOBIG.raw_os_error()) => {
            Status::invalid_argument(format!("command and env: {error}"))
        }
        e @ (ExecError::Spawn { .. } | ExecError::InvalidConfig { .. } | ExecError::NoRuntime) => {
            Status::internal(e.to_string())
        }
        ExecError::Sandbox(e @ SandboxError::Tmp { .. }) => Status::internal(e.to_string()),
        // The request is fine; the kernel or the roots cannot carry it out.
        ExecError::Sandbox(
            e @ (SandboxError::Unsupported { .. }
            | SandboxError::Exposed { .. }
            | SandboxError::Workspace { .. }),
        ) => Status::failed_precondition(format!("sandbox: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use dsh_core::LaunchPart;

    /// The one mapping end-to-end tests cannot reach: an `E2BIG` the size checks did not predict.
    #[test]
    fn e2big_from_the_kernel_is_the_callers_error_other_spawn_failures_are_ours() {
        let spawn = |errno: rustix::io::Errno| ExecError::Spawn {
            shell: PathBuf::from("/bin/bash"),
            error: std::io::Error::from_raw_os_error(errno.raw_os_error()),
        };
        let status = exec_status(spawn(rustix::io::Errno::TOOBIG));
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let status = exec_status(spawn(rustix::io::Errno::NOENT));
        assert_eq!(status.code(), Code::Internal, "{status:?}");
    }

    #[test]
    fn size_errors_lead_with_their_field() {
        let status = exec_status(ExecError::TooLarge {
            bytes: 10,
            limit: 5,
            largest: LaunchPart::Managed("DSH_X".into()),
            largest_bytes: 8,
        });
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().starts_with("managed environment: "),
            "{status:?}"
        );
    }
}
