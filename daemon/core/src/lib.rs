//! dsh's core: everything the daemon does, with no server attached. Sessions and their logs,
//! swappable persistence, the managed `DSH_*` environment, the executor, the model's tools, agents
//! and their turns, hooks and skills.
//!
//! The crate depends on neither tonic nor the protocol crate, so a protocol type cannot reach it;
//! `dsh-daemon` translates at its `rpc/` edge. Inside the crate the modules form a layered graph
//! with no circle (checked by `layers::tests`); see `docs/ARCHITECTURE.md`.
//!
//! The modules are private: this file is the crate's whole public API (a façade), so the boundary
//! the compiler enforces is the one `docs/ARCHITECTURE.md` lists ("dsh-core's public API").
//! Everything else is `pub(crate)`; `unreachable_pub` keeps it that way.

#![warn(unreachable_pub, missing_docs)]
// Items named only by tests and benches are re-exported with `test-support` alone (below); built
// without it, they are `pub` items no other crate reaches. The lint is kept by the builds that see
// the whole API: the workspace's, where dsh-tests turns the feature on.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

mod agent;
mod call;
mod exec;
mod hooks;
mod layers;
mod locks;
mod mcp;
mod persistence;
mod sandbox;
mod shell;
mod shell_env;
mod skills;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
mod tools;
mod transfer;

// The harness home (resolution and normalization), from `dsh-paths`.
pub use dsh_paths::home;

// Sessions: ids, the header, the event vocabulary (the rest of `dsh-session` is named from there).
pub use dsh_session::{
    AssistantMessage, Event, EventData, MessageSource, SessionHeader, SessionId, SessionMeta,
    TurnEndReason, UserMessage, now_ms,
};

// Approvals: the policy, a person's answer, and how long an agent waits for one.
pub use agent::{ApprovalAnswer, ApprovalSettings, DEFAULT_APPROVAL_TIMEOUT};
pub use dsh_session::{
    ApprovalClient, ApprovalPolicy, ApprovalRule, ApprovalScope, ApprovalVerdict,
};

// Skills.
pub use skills::{Discovery, Skills};

// Persistence: the trait, the swappable handle and its checkpoint cursor, opening a backend.
pub use persistence::handle::checkpoint;
pub use persistence::{
    BackendKind, BlockingPersistence, Metas as SessionMetas, OnBlockingPool, Persistence,
    PersistenceError, PersistenceHandle, SessionLocation, StoredSession, open as open_backend,
    open_postgres, same_location,
};

// Listing in keyset pages.
pub use persistence::page::listed_before;
pub use persistence::{Creator as SessionCreator, ListKey, MAX_PAGE_SIZE, Order, Page, PageQuery};

// The three backends.
pub use persistence::jsonl::JsonlBackend;
pub use persistence::postgres::{
    DEFAULT_LEASE as DEFAULT_POSTGRES_LEASE, DEFAULT_TIMEOUT as DEFAULT_POSTGRES_TIMEOUT,
    Holder as LeaseHolder, MIN_LEASE as MIN_POSTGRES_LEASE, PostgresBackend, PostgresOptions,
    SecretUrl, Target as PostgresTarget, TlsMode as PostgresTlsMode,
};
pub use persistence::sqlite::{SqliteBackend, check_location as check_sqlite_location};

// The backend choice saved by `Persistence.Use`.
pub use persistence::choice::{
    BackendChoice, ChoiceError, STATE_DIR, load as load_backend_choice, save as save_backend_choice,
};

// The sandbox policy for model commands.
pub use sandbox::{
    KNOWN_ABI, Network, SandboxError, SandboxMode, SandboxPolicy, SandboxSettings, UnknownName,
};

// The executor: commands, their limits and outcome, spill files and orphans.
pub use exec::{
    ClientEnv, CommandOutcome, ExecConfig, ExecError, Executor, LaunchPart, Launcher,
    LauncherError, SealError, adopt_orphans, compile_secret_pattern, remove_stale_spills,
    signal_name,
};

// Background jobs and live output.
pub use exec::{JobId, JobInfo, JobState, OutputFeed, OutputStream};

// Where a process (a client of the socket) came from.
pub use exec::{CommandOrigin, Placement, Provenance, UnknownReason, place};

// One tool call, and the model's tools.
pub use call::ToolExecution;
pub use tools::ToolSet;

// The managed `DSH_*` environment.
pub use shell_env::remote::{RemoteResolver, ResolveQuery};
pub use shell_env::{
    Contributor, ManagedEnv, RegisterError, Registration, Resolver, ShellEnvRegistry,
    register_builtins,
};

// Running a command for a client.
pub use shell::{Command, Ran, RunError, Shell};

// MCP servers as agent tools.
pub use mcp::{
    DEFAULT_STARTUP_TIMEOUT as MCP_DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT as MCP_DEFAULT_TOOL_TIMEOUT, MCP_PREFIX, McpServerConfig, McpServerState,
    McpServerStatus, McpServers, McpTransport, SESSION_HEADER as MCP_SESSION_HEADER,
    check_server_env as check_mcp_server_env, check_server_name as check_mcp_server_name,
    check_server_url as check_mcp_server_url,
};

// Hooks.
pub use hooks::{FileStatus, HookFileStatus, HookSettings, Hooks};

// Agents and their turns.
pub use agent::{
    Agent, AgentError, AgentLimits, AgentRegistry, AgentServices, AgentStatus, CheckpointPolicy,
    ModelChoice, ModelList, ModelSource, ProviderFactory, SettingsChange, Unsaved,
};
pub use dsh_session::ReasoningEffort;
// Project instructions (AGENTS.md).
pub use agent::{CompactionSettings, InstructionSettings};

// Sessions leaving and entering dsh: export and import.
pub use transfer::{
    BUNDLE_VERSION, Chunks as ExportChunks, ExportFormat, Exported, Imported, TransferError,
    export as export_session, import as import_session,
};

// Watching agents.
pub use agent::{
    DEFAULT_WATCH_MAX_PENDING, EventFilter, PENDING_TEXT_BUDGET, StreamEvent, WatchScope,
    WatchedBy, Watcher,
};

// Model providers.
pub use agent::openai::{
    OpenAiConfig, OpenAiProvider, OpenAiSetupError, PROVIDER_NAME as OPENAI_PROVIDER,
};
pub use agent::scripted::{PROVIDER as SCRIPTED_PROVIDER, Script};

// Named only by tests and benches (dsh-tests, this crate's benches): the JSONL layout, the
// lease's host name, the output limits, a tool call's context, hooks run directly, the provider
// trait driven directly, the checkpoint cursor.
#[cfg(feature = "test-support")]
pub use {
    agent::provider::{FinishReason, ModelProvider, ModelRequest},
    call::AgentContext,
    exec::{RESERVE_BYTES, total_limit},
    hooks::{HookContext, HookEvent, HookRun},
    persistence::handle::DurableCursor,
    persistence::jsonl::{log_path as jsonl_log_path, project_dir_name, session_dir_name},
    persistence::postgres::lease::host_name,
};
