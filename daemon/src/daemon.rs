//! The composition root: one value that builds and owns every long-lived part of the core. The
//! `rpc/` services are each handed only the parts they serve (see `rpc::Services::new`).

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::backends::{Backends, startup_backend};
use crate::config::Config;
use dsh_core::{
    AgentRegistry, AgentServices, ChoiceError, ExecConfig, ExecError, Executor, Hooks, Launcher,
    LauncherError, McpServers, OpenAiProvider, OpenAiSetupError, PersistenceError,
    PersistenceHandle, ProviderFactory, RegisterError, Registration, Shell, ShellEnvRegistry,
    Skills, ToolSet, Unsaved, load_backend_choice, register_builtins,
};

/// Why the daemon's core could not be assembled. Each variant says which part failed and keeps
/// the part's error as its `source()` (printed once, by the chain).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configured persistence backend is unusable.
    #[error("persistence")]
    Persistence(#[from] PersistenceError),
    /// The backend choice saved by `Persistence.Use` cannot be read.
    #[error("persistence")]
    SavedChoice(#[from] ChoiceError),
    /// The executor could not be set up.
    #[error("executor")]
    Exec(#[from] ExecError),
    /// The model provider's settings are unusable.
    #[error("model")]
    Model(#[from] OpenAiSetupError),
    /// The model's API key could not be read from its file or credential.
    #[error(transparent)]
    ModelKey(#[from] crate::model_key::KeyError),
    /// A shipped contributor was refused (a bug, reported rather than panicking).
    #[error("managed environment")]
    ShellEnv(#[from] RegisterError),
}

/// Everything the daemon is. Its parts are crate-private: request handlers get narrow handles.
#[derive(Debug)]
pub struct Daemon {
    /// The validated configuration.
    pub(crate) config: Config,
    /// The resolved harness home; also what `DSH_HOME` says to every bash child.
    pub(crate) home: PathBuf,
    /// The socket this daemon serves on, for `Status` and for `DSH_SOCKET`.
    pub(crate) socket: PathBuf,
    /// Unix milliseconds at start, for `Status`.
    pub(crate) started_at_ms: i64,
    /// Cancelled when shutdown begins, whatever started it (signal or `Daemon.Shutdown`), so every
    /// long-running task and stream can wind down.
    shutdown: CancellationToken,
    /// The active persistence backend, switching it, and the configured ones not active.
    pub(crate) backends: Arc<Backends>,
    /// Runs every child process: bash calls, background jobs, hooks.
    pub(crate) executor: Arc<Executor>,
    /// The managed `DSH_*` registry.
    pub(crate) shell_env: ShellEnvRegistry,
    /// Runs commands on someone's behalf (the `bash` tool and `Shell.Run`).
    pub(crate) shell: Shell,
    /// Keeps the shipped contributors registered for the daemon's lifetime.
    _builtin_contributors: Vec<Registration>,
    /// The live agents.
    pub(crate) agents: Arc<AgentRegistry>,
    /// Claude Code and Codex hooks.
    pub(crate) hooks: Arc<Hooks>,
    /// Local skills under the home.
    pub(crate) skills: Arc<Skills>,
}

impl Daemon {
    /// Assembles the core from a validated configuration.
    pub fn new(
        config: &Config,
        socket: PathBuf,
        shutdown: CancellationToken,
    ) -> Result<Self, StartError> {
        let home = config.home.path.clone();
        let saved = load_backend_choice(&home)?;
        let (start, source) = startup_backend(config, saved.as_ref());
        if let Some(saved) = saved.as_ref().filter(|saved| **saved != start) {
            tracing::info!(
                saved = saved.kind.as_str(),
                path = %saved.path.display(),
                because = source.describe(),
                "not using the backend saved by `dshctl persistence use`"
            );
        }
        // Opened first, so the log names the location as the backend shows it (a database without
        // its credentials).
        let backend = crate::backends::open_choice(config, &start)?;
        tracing::info!(
            backend = start.kind.as_str(),
            path = %backend.path().display(),
            from = source.describe(),
            "persistence backend"
        );
        // Readied in the background, so the first call a client makes does not open the
        // database; a database that does not answer delays nothing.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let warming = backend.clone();
            runtime.spawn(async move { warming.warm().await });
        }
        let persistence = Arc::new(PersistenceHandle::new(backend));
        let executor = Arc::new(Executor::new(ExecConfig {
            owner_scope: home.to_string_lossy().into_owned(),
            launcher: choose_launcher(),
            ..config.exec.clone()
        })?);
        let leftovers = executor.kill_leftovers();
        if leftovers > 0 {
            tracing::warn!(
                processes = leftovers,
                "killed processes an earlier dshd of this home left running"
            );
        }
        let stale = dsh_core::remove_stale_spills(&config.exec.spill_dir);
        if stale > 0 {
            tracing::info!(files = stale, dir = %config.exec.spill_dir.display(), "removed spill files of earlier runs");
        }
        let shell_env = ShellEnvRegistry::new(home.clone(), config.resolve_timeout);
        let builtin = register_builtins(&shell_env, persistence.clone(), socket.clone())?;
        // Claude Code transcript projections live as long as their sessions, as Claude Code's
        // transcripts do: under the home, which confined commands cannot write.
        let hook_settings = dsh_core::HookSettings {
            transcript_dir: Some(config.home.path.join("transcripts/claude")),
            ..config.hooks.clone()
        };
        let hooks = Arc::new(Hooks::new(
            hook_settings,
            executor.clone(),
            persistence.clone(),
        ));
        let skills = Arc::new(Skills::new(&home));
        // The key is read once, here; the variable is scrubbed from every child (see config).
        let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
        let (api_key, key_source) = crate::model_key::read(config, credentials.as_deref())?;
        tracing::info!(source = %key_source, "model API key");
        let openai = OpenAiProvider::new(config.openai.clone(), api_key)?;
        let providers = ProviderFactory::new(
            config.default_provider.clone(),
            config.default_script.clone(),
            openai,
        );
        let shell = Shell::new(executor.clone(), shell_env.clone());
        let agents = AgentRegistry::new(providers, |children| AgentServices {
            limits: config.agent_limits,
            approval: config.approvals,
            watch_max_pending: config.watch_max_pending,
            tool_output: config.watch_tool_output,
            instructions: dsh_core::InstructionSettings {
                home: Some(home.clone()),
                ..config.instructions.clone()
            },
            mcp: Arc::new(McpServers::new(shell.clone(), config.mcp_servers.clone())),
            compaction: config.compaction,
            ..AgentServices::new(
                persistence.clone(),
                executor.clone(),
                hooks.clone(),
                skills.clone(),
                config.checkpoint,
                config.max_steps_per_turn,
                ToolSet::standard(&shell, children),
            )
        });
        Ok(Self {
            config: config.clone(),
            home,
            socket,
            started_at_ms: now_ms(),
            shutdown,
            backends: Arc::new(Backends::new(config, persistence, saved)),
            executor,
            shell_env,
            shell,
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
        self.backends.handle().kind().as_str()
    }

    /// Number of live agents.
    pub fn live_agents(&self) -> usize {
        self.agents.len()
    }

    /// One line on what the daemon is doing, for systemd's `STATUS=`.
    pub fn status_line(&self) -> String {
        let agents = self.agents.len();
        let running = self.agents.running_turns();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "serving {}: {}, {}",
            self.socket.display(),
            plural(agents, "agent", "agents"),
            plural(running, "running turn", "running turns"),
        )
    }

    /// Number of background jobs still running.
    pub fn running_jobs(&self) -> usize {
        self.executor
            .list_jobs(None)
            .iter()
            .filter(|j| matches!(j.state, dsh_core::JobState::Running))
            .count()
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

/// The `dsh-launch` installed beside dshd when there is one dshd may run, else dshd's own binary;
/// logged either way, since it decides how fast every command starts. Whichever it is, a sealed
/// copy of it is what runs (`Launcher::sealed`), so nothing done to the file on disk from now on
/// can stop or change how commands start.
fn choose_launcher() -> Launcher {
    let launcher = pick_launcher();
    match launcher.sealed() {
        Ok(sealed) => {
            tracing::info!(
                bytes = sealed.sealed_size().unwrap_or_default(),
                "commands start through a sealed copy of the launcher made at start"
            );
            sealed
        }
        Err(why) => {
            tracing::warn!(
                error = %why,
                "commands start through the launcher's file on disk: changing its mode or \
                 contents affects every later command"
            );
            launcher
        }
    }
}

fn pick_launcher() -> Launcher {
    match Launcher::beside_this_executable() {
        Ok(launcher) => {
            tracing::info!(path = %launcher.path().display(), "commands start through the installed launcher");
            launcher
        }
        Err(LauncherError::Missing(path)) => {
            tracing::info!(
                missing = %path.display(),
                "commands start through dshd's own binary; installing dsh-launch beside dshd \
                 starts each about a millisecond sooner"
            );
            Launcher::this_executable()
        }
        Err(why) => {
            tracing::warn!(
                error = format!("{:#}", anyhow::Error::new(why)),
                "not using the installed launcher: commands start through dshd's own binary"
            );
            Launcher::this_executable()
        }
    }
}

pub use dsh_core::now_ms;
