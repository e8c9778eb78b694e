//! The composition of the daemon's core: one value that owns every long-lived part and that the
//! `rpc/` layer translates requests against.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, ValueSource};
use dsh_core::agent::openai::{OpenAiProvider, OpenAiSetupError};
use dsh_core::agent::{AgentRegistry, AgentServices, ProviderFactory, Unsaved};
use dsh_core::exec::{ExecConfig, ExecError, Executor};
use dsh_core::hooks::Hooks;
use dsh_core::persistence::choice::{self, BackendChoice, ChoiceError};
use dsh_core::persistence::{self, BackendKind, Persistence, PersistenceError, PersistenceHandle};
use dsh_core::session::SessionId;
use dsh_core::shell_env::{self, RegisterError, Registration, ShellEnvRegistry};
use dsh_core::skills::Skills;
use dsh_core::tools::ToolSet;

/// Why the daemon's core could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configured persistence backend is unusable.
    #[error("persistence: {0}")]
    Persistence(#[from] PersistenceError),
    /// The backend choice saved by `Persistence.Use` cannot be read.
    #[error("persistence: {0}")]
    SavedChoice(#[from] ChoiceError),
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
    /// The backend choice saved under the home (read at start, written by
    /// [`use_backend`](Self::use_backend)). Held for the whole of a `use_backend`, so concurrent
    /// swaps are serialised and the saved choice is always the one made last.
    saved_choice: tokio::sync::Mutex<Option<BackendChoice>>,
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
        let saved = choice::load(&home)?;
        let (start, source) = startup_backend(config, saved.as_ref());
        if let Some(saved) = saved.as_ref().filter(|saved| **saved != start) {
            tracing::info!(
                saved = saved.kind.as_str(),
                path = %saved.path.display(),
                because = source.describe(),
                "not using the backend saved by `dshctl persistence use`"
            );
        }
        tracing::info!(
            backend = start.kind.as_str(),
            path = %start.path.display(),
            from = source.describe(),
            "persistence backend"
        );
        let backend = persistence::open(start.kind, start.path)?;
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
        let stale = dsh_core::exec::remove_stale_spills(&config.exec.spill_dir);
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
        // The key is read once, here; the variable is scrubbed from every child (see config).
        let api_key = std::env::var(&config.openai.api_key_env).ok();
        let openai = OpenAiProvider::new(config.openai.clone(), api_key)?;
        let providers = ProviderFactory::new(
            config.default_provider.clone(),
            config.default_script.clone(),
            openai,
        );
        let agents = AgentRegistry::new(providers, |children| AgentServices {
            limits: config.agent_limits,
            ..AgentServices::new(
                persistence.clone(),
                executor.clone(),
                hooks.clone(),
                skills.clone(),
                config.checkpoint,
                config.max_steps_per_turn,
                ToolSet::standard(&executor, &shell_env, children),
            )
        });
        Ok(Self {
            config: config.clone(),
            home,
            socket,
            started_at_ms: now_ms(),
            shutdown,
            persistence,
            saved_choice: tokio::sync::Mutex::new(saved),
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

    /// Makes the backend of `kind` at `path` (the configured one when `None`) the active one, and
    /// saves the choice under the home so that the next start uses it too.
    ///
    /// Selecting the active backend again (the same location, however spelled) changes nothing:
    /// no new connection, no new generation, so running checkpoints carry on undisturbed. A new
    /// backend is checked first, reading only: a location that cannot hold it (a device, a
    /// directory where a database should be; for a `path` given, also a name in a missing
    /// directory), an unreadable root or a foreign database is refused, and so is a choice that
    /// cannot be saved; then nothing changes.
    pub async fn use_backend(
        &self,
        kind: BackendKind,
        path: Option<PathBuf>,
    ) -> Result<Selected, UseError> {
        // A location from the request must be usable as it is; the configured one may lie in a
        // directory dshd creates itself (the home, which need not exist yet), as at start.
        let explicit = path.is_some();
        let path = path.unwrap_or_else(|| backend_path(&self.config, kind));
        let mut saved = self.saved_choice.lock().await;
        let active = self.persistence.backend();
        let (backend, changed) = blocking(move || {
            if active.kind() == kind && persistence::same_location(&active.path(), &path) {
                return Ok((active, false));
            }
            if explicit && kind == BackendKind::Sqlite {
                persistence::sqlite::check_location(&path)?;
            }
            let backend = persistence::open(kind, path)?;
            // A first page reads the store (and builds the JSONL index the listings will use).
            backend.list_page(&persistence::PageQuery {
                after: None,
                limit: 1,
                order: persistence::Order::NewestFirst,
                cwd: None,
            })?;
            Ok((backend, true))
        })
        .await?;
        let chosen = BackendChoice {
            kind,
            path: backend.path(),
        };
        if saved.as_ref() != Some(&chosen) {
            let home = self.home.clone();
            let record = chosen.clone();
            tokio::task::spawn_blocking(move || choice::save(&home, &record))
                .await
                .map_err(|e| join_error(&e))??;
            *saved = Some(chosen);
        }
        if changed {
            self.persistence.swap(backend.clone());
        }
        Ok(Selected { backend, changed })
    }

    /// The configured backends other than the active one — `jsonl.root`, `sqlite.path` and the
    /// saved choice — each with how many of its sessions neither the active backend holds nor a
    /// live agent owns (`live`), so that sessions stored in a backend that is not active do not
    /// silently disappear from view. Reads only; a backend that cannot be read says why instead.
    /// Costs a read of every other backend's headers and one header lookup in the active backend
    /// per session found there.
    pub async fn other_backends(&self, live: HashSet<SessionId>) -> Vec<OtherBackend> {
        let mut candidates = vec![
            (BackendKind::Jsonl, self.config.jsonl_root.clone()),
            (BackendKind::Sqlite, self.config.sqlite_path.clone()),
        ];
        if let Some(saved) = self.saved_choice.lock().await.clone() {
            candidates.push((saved.kind, saved.path));
        }
        let active = self.persistence.backend();
        let counted = tokio::task::spawn_blocking(move || {
            let mut seen: Vec<(BackendKind, PathBuf)> = vec![(active.kind(), active.path())];
            let mut others = Vec::new();
            for (kind, path) in candidates {
                let known = seen
                    .iter()
                    .any(|(k, p)| *k == kind && persistence::same_location(p, &path));
                if known {
                    continue;
                }
                seen.push((kind, path.clone()));
                let unlisted = persistence::open(kind, path.clone())
                    .and_then(|backend| backend.list())
                    .and_then(|headers| {
                        let mut unlisted = 0;
                        for header in headers {
                            if !live.contains(&header.id) && active.header(&header.id)?.is_none() {
                                unlisted += 1;
                            }
                        }
                        Ok(unlisted)
                    });
                others.push(OtherBackend {
                    kind,
                    path,
                    unlisted,
                });
            }
            others
        })
        .await;
        counted.unwrap_or_else(|error| {
            tracing::error!(%error, "counting the sessions of other backends failed");
            Vec::new()
        })
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

/// What [`Daemon::use_backend`] made active.
#[derive(Debug)]
pub struct Selected {
    /// The active backend now.
    pub backend: Arc<dyn Persistence>,
    /// False when it was active already (nothing was swapped).
    pub changed: bool,
}

/// Why [`Daemon::use_backend`] refused; the active backend and the saved choice are unchanged.
#[derive(Debug, thiserror::Error)]
pub enum UseError {
    /// The backend asked for is unusable.
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    /// The choice could not be saved for the next start.
    #[error("the backend was not changed: {0}")]
    Choice(#[from] ChoiceError),
}

/// A configured backend that is not the active one.
#[derive(Debug)]
pub struct OtherBackend {
    /// Which backend.
    pub kind: BackendKind,
    /// Its root or database file.
    pub path: PathBuf,
    /// How many of its sessions the active listing lacks, or why it could not be read.
    pub unlisted: Result<usize, PersistenceError>,
}

/// Why the backend active at start was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartSource {
    /// `--persistence`.
    Flag,
    /// `persistence` in the config file.
    ConfigFile,
    /// The choice saved by the last `Persistence.Use`.
    Saved,
    /// Nothing said otherwise: JSONL.
    Default,
}

impl StartSource {
    /// For the log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Flag => "the --persistence flag",
            Self::ConfigFile => "`persistence` in the config file",
            Self::Saved => "the choice saved by `dshctl persistence use`",
            Self::Default => "the default",
        }
    }
}

/// The backend to start with. `--persistence` wins, then `persistence` in the config file, then
/// the choice the last `Persistence.Use` saved, then the default (JSONL). The flag and the file
/// are the operator's explicit word, so a runtime choice never overrides them; it replaces only
/// the built-in default. A flagged or configured backend is at its configured location; a saved
/// one where it was selected.
pub fn startup_backend(
    config: &Config,
    saved: Option<&BackendChoice>,
) -> (BackendChoice, StartSource) {
    let configured = BackendChoice {
        kind: config.persistence,
        path: backend_path(config, config.persistence),
    };
    match (config.persistence_source, saved) {
        (ValueSource::Flag, _) => (configured, StartSource::Flag),
        (ValueSource::File, _) => (configured, StartSource::ConfigFile),
        (ValueSource::Default, Some(saved)) => (saved.clone(), StartSource::Saved),
        (ValueSource::Default, None) => (configured, StartSource::Default),
    }
}

/// Runs blocking persistence work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PersistenceError> + Send + 'static,
) -> Result<T, PersistenceError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| join_error(&e))?
}

fn join_error(error: &tokio::task::JoinError) -> PersistenceError {
    PersistenceError::Task {
        what: "persistence",
        message: error.to_string(),
    }
}

/// The configured location of a backend of `kind`.
fn backend_path(config: &Config, kind: BackendKind) -> PathBuf {
    match kind {
        BackendKind::Jsonl => config.jsonl_root.clone(),
        BackendKind::Sqlite => config.sqlite_path.clone(),
    }
}

pub use dsh_core::session::now_ms;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{BackendName, Flags};
    use dsh_core::home::Ambient;

    fn ambient() -> Ambient {
        Ambient {
            dsh_home: None,
            user_home: Some(PathBuf::from("/nonexistent-user-home")),
            cwd: Some(PathBuf::from("/")),
            runtime_dir: None,
        }
    }

    /// A config for `home`; `file` is the text of a config file given with `--config`.
    fn config(home: &Path, flag: Option<BackendName>, file: Option<&str>) -> Config {
        let config_file = file.map(|text| {
            let path = home.with_extension("toml");
            std::fs::write(&path, text).unwrap();
            path
        });
        Config::load(
            &Flags {
                config: config_file,
                dsh_home: Some(home.as_os_str().to_owned()),
                persistence: flag,
                ..Flags::default()
            },
            &ambient(),
        )
        .unwrap()
    }

    #[test]
    fn the_flag_and_the_config_file_win_over_the_saved_choice() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let saved = BackendChoice {
            kind: BackendKind::Sqlite,
            path: PathBuf::from("/elsewhere/chosen.sqlite3"),
        };
        let default = config(&home, None, None);
        assert_eq!(
            startup_backend(&default, Some(&saved)),
            (saved.clone(), StartSource::Saved)
        );
        assert_eq!(
            startup_backend(&default, None),
            (
                BackendChoice {
                    kind: BackendKind::Jsonl,
                    path: home.join("sessions"),
                },
                StartSource::Default
            )
        );
        let flagged = config(&home, Some(BackendName::Jsonl), None);
        assert_eq!(
            startup_backend(&flagged, Some(&saved)),
            (
                BackendChoice {
                    kind: BackendKind::Jsonl,
                    path: home.join("sessions"),
                },
                StartSource::Flag
            )
        );
        // The file names the same kind as the saved choice: its own location still wins.
        let filed = config(&home, None, Some("persistence = \"sqlite\"\n"));
        assert_eq!(
            startup_backend(&filed, Some(&saved)),
            (
                BackendChoice {
                    kind: BackendKind::Sqlite,
                    path: home.join("sessions.sqlite3"),
                },
                StartSource::ConfigFile
            )
        );
    }

    fn daemon(home: &Path) -> Daemon {
        let config = config(home, None, None);
        Daemon::new(
            &config,
            home.join("run/dshd.sock"),
            CancellationToken::new(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn selecting_the_active_backend_again_changes_nothing_and_the_choice_survives_a_restart()
    {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let first = daemon(&home);
        let db = home.join("sessions.sqlite3");

        let selected = first.use_backend(BackendKind::Sqlite, None).await.unwrap();
        assert!(selected.changed);
        assert_eq!(selected.backend.path(), db);
        let (active, generation) = first.persistence.current();
        assert_eq!(generation, 1);

        // The same file under another spelling (a link to its directory): no swap at all.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        let again = first
            .use_backend(BackendKind::Sqlite, Some(link.join("sessions.sqlite3")))
            .await
            .unwrap();
        assert!(!again.changed);
        let (still, generation) = first.persistence.current();
        assert_eq!(generation, 1, "re-selecting swapped the backend");
        assert!(Arc::ptr_eq(&active, &still));

        // Refused: nothing changes, and the saved choice stays.
        let err = first
            .use_backend(BackendKind::Sqlite, Some(PathBuf::from("/dev/null")))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                UseError::Persistence(PersistenceError::BadLocation { .. })
            ),
            "{err:?}"
        );
        assert_eq!(first.persistence.current().1, 1);
        assert_eq!(
            choice::load(&home).unwrap(),
            Some(BackendChoice {
                kind: BackendKind::Sqlite,
                path: db.clone(),
            })
        );
        drop(first);

        // A restart without flag or config file starts where the last Use left off.
        let second = daemon(&home);
        assert_eq!(second.persistence.kind(), BackendKind::Sqlite);
        assert_eq!(second.persistence.backend().path(), db);
        let others = second.other_backends(HashSet::new()).await;
        assert_eq!(others.len(), 1, "{others:?}");
        assert_eq!(others[0].kind, BackendKind::Jsonl);
        assert_eq!(others[0].unlisted.as_ref().ok(), Some(&0));
    }
}
