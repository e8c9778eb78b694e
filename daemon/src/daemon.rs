//! The composition of the daemon's core: one value that owns every long-lived part and that the
//! `rpc/` layer translates requests against.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::openai::{OpenAiProvider, OpenAiSetupError};
use crate::agent::{AgentRegistry, AgentServices, ProviderFactory, Unsaved};
use crate::config::Config;
use crate::exec::{ExecConfig, ExecError, Executor};
use crate::hooks::Hooks;
use crate::persistence::{self, BackendKind, Persistence, PersistenceError, PersistenceHandle};
use crate::shell_env::{self, RegisterError, Registration, ShellEnvRegistry};
use crate::skills::Skills;
use crate::tools::ToolSet;
use crate::tools::bash::BashTool;
use crate::tools::jobs::JobTool;
use crate::tools::spawn_agent::SpawnAgentTool;

/// Why the daemon's core could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configured persistence backend is unusable.
    #[error("persistence: {0}")]
    Persistence(#[from] PersistenceError),
    /// The executor could not be set up.
    #[error("executor: {0}")]
    Exec(#[from] ExecError),
    /// The model provider's settings are unusable.
    #[error("model: {0}")]
    Model(#[from] OpenAiSetupError),
    /// A shipped contributor was refused (a bug, reported rather than panicking).
    #[error("managed environment: {0}")]
    ShellEnv(#[from] RegisterError),
}

/// Everything the daemon is, shared behind an `Arc` by every request handler.
#[derive(Debug)]
pub struct Daemon {
    /// The validated configuration.
    pub config: Config,
    /// The resolved harness home; also what `DSH_HOME` says to every bash child.
    pub home: PathBuf,
    /// The socket this daemon serves on, for `Status` and for `DSH_SOCKET`.
    pub socket: PathBuf,
    /// Unix milliseconds at start, for `Status`.
    pub started_at_ms: i64,
    /// Cancelled when shutdown begins, whatever started it (signal or `Daemon.Shutdown`), so every
    /// long-running task and stream can wind down.
    shutdown: CancellationToken,
    /// The swappable persistence backend every consumer asks at the time of use.
    pub persistence: Arc<PersistenceHandle>,
    /// Runs every child process: bash calls, background jobs, hooks.
    pub executor: Arc<Executor>,
    /// The managed `DSH_*` registry.
    pub shell_env: ShellEnvRegistry,
    /// Keeps the shipped contributors registered for the daemon's lifetime.
    _builtin_contributors: Vec<Registration>,
    /// The live agents.
    pub agents: Arc<AgentRegistry>,
    /// Claude Code and Codex hooks.
    pub hooks: Arc<Hooks>,
    /// Local skills under the home.
    pub skills: Arc<Skills>,
}

impl Daemon {
    /// Assembles the core from a validated configuration.
    pub fn new(
        config: &Config,
        socket: PathBuf,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        let home = config.home.path.clone();
        let backend =
            persistence::open(config.persistence, backend_path(config, config.persistence))?;
        let persistence = Arc::new(PersistenceHandle::new(backend));
        let executor = Arc::new(Executor::new(ExecConfig {
            owner_scope: home.to_string_lossy().into_owned(),
            ..config.exec.clone()
        })?);
        let leftovers = executor.kill_leftovers();
        if leftovers > 0 {
            tracing::warn!(
                processes = leftovers,
                "killed processes an earlier dshd of this home left running"
            );
        }
        let stale = crate::exec::remove_stale_spills(&config.exec.spill_dir);
        if stale > 0 {
            tracing::info!(files = stale, dir = %config.exec.spill_dir.display(), "removed spill files of earlier runs");
        }
        let shell_env = ShellEnvRegistry::new(home.clone(), config.resolve_timeout);
        let builtin =
            shell_env::register_builtins(&shell_env, persistence.clone(), socket.clone())?;
        let hooks = Arc::new(Hooks::new(
            config.hooks.clone(),
            executor.clone(),
            persistence.clone(),
        ));
        let skills = Arc::new(Skills::new(&home));
        let mut services = AgentServices::new(
            persistence.clone(),
            executor.clone(),
            hooks.clone(),
            skills.clone(),
            config.checkpoint,
            config.max_steps_per_turn,
        );
        services.limits = config.agent_limits;
        let services = Arc::new(services);
        // The key is read once, here; the variable is scrubbed from every child (see config).
        let api_key = std::env::var(&config.openai.api_key_env).ok();
        let openai = OpenAiProvider::new(config.openai.clone(), api_key)?;
        let providers = ProviderFactory::new(
            config.default_provider.clone(),
            config.default_script.clone(),
            openai,
        );
        let agents = Arc::new(AgentRegistry::new(services.clone(), providers));
        services.set_tools(
            ToolSet::new()
                .with(Arc::new(BashTool::new(executor.clone(), shell_env.clone())))
                .with(Arc::new(JobTool::output(executor.clone())))
                .with(Arc::new(JobTool::kill(executor.clone())))
                .with(Arc::new(SpawnAgentTool::new(&agents))),
        );
        Ok(Self {
            config: config.clone(),
            home,
            socket,
            started_at_ms: now_ms(),
            shutdown,
            persistence,
            executor,
            shell_env,
            _builtin_contributors: builtin,
            agents,
            hooks,
            skills,
        })
    }

    /// Starts shutdown (idempotent).
    pub fn request_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// A token cancelled when shutdown begins.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Name of the active persistence backend.
    pub fn persistence_name(&self) -> &'static str {
        self.persistence.kind().as_str()
    }

    /// Number of live agents.
    pub fn live_agents(&self) -> usize {
        self.agents.len()
    }

    /// Opens a backend of `kind` at `path` (the configured default when `None`) and makes sure it
    /// is usable, reading only: a foreign SQLite file or an unreadable root is refused here rather
    /// than at the next checkpoint.
    pub async fn open_backend(
        &self,
        kind: BackendKind,
        path: Option<PathBuf>,
    ) -> Result<Arc<dyn Persistence>, PersistenceError> {
        let path = path.unwrap_or_else(|| backend_path(&self.config, kind));
        let backend = persistence::open(kind, path)?;
        let probe = backend.clone();
        tokio::task::spawn_blocking(move || probe.list())
            .await
            .map_err(|e| PersistenceError::Config(format!("probing the backend failed: {e}")))??;
        Ok(backend)
    }

    /// Winds the core down: every turn cancelled and its session checkpointed, every child process
    /// killed and reaped. Returns the sessions that could not be saved (each with its rescue copy).
    pub async fn wind_down(&self) -> Vec<Unsaved> {
        let rescue_dirs = [
            self.home.join("rescue"),
            std::env::temp_dir().join(format!(
                "dsh-rescue-{}",
                rustix::process::geteuid().as_raw()
            )),
        ];
        let unsaved = self.agents.shutdown(&rescue_dirs).await;
        self.executor.shutdown().await;
        unsaved
    }
}

/// The configured location of a backend of `kind`.
fn backend_path(config: &Config, kind: BackendKind) -> PathBuf {
    match kind {
        BackendKind::Jsonl => config.jsonl_root.clone(),
        BackendKind::Sqlite => config.sqlite_path.clone(),
    }
}

/// Now, in Unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
