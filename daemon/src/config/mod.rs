//! The daemon's configuration: a TOML file plus command-line flags, folded into one validated
//! [`Config`]. Flags override the file; the file overrides built-in defaults. Every key is listed in
//! `docs/CONFIG.md`.
//!
//! Unknown keys and wrong types are refused with the file, the line and the dotted key, so a typo
//! never silently falls back to a default.

mod file;
mod mcp;
mod sandbox;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use file::BackendName;
use file::FileConfig;

use crate::connection;
use crate::socket;
use dsh_core::{
    AgentLimits, ApprovalSettings, BackendKind, CheckpointPolicy, CompactionSettings, ExecConfig,
    HookSettings, InstructionSettings, McpServerConfig, OPENAI_PROVIDER, OpenAiConfig,
    SCRIPTED_PROVIDER, SandboxPolicy, Script, compile_secret_pattern, home, home::Ambient,
    home::Explicit, home::HomeError, home::ResolvedHome,
};

/// The systemd credential holding the model key when `model.api_key_credential` is not set.
pub const DEFAULT_API_KEY_CREDENTIAL: &str = "dsh-model-api-key";

/// Name of the config file looked up in the harness home when `--config` is not given.
pub const DEFAULT_FILE_NAME: &str = "config.toml";

/// Default for [`Config::shutdown_timeout`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// Default for [`Config::max_steps_per_turn`].
pub const DEFAULT_MAX_STEPS_PER_TURN: u32 = 200;

/// Default for [`Config::resolve_timeout`].
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colour only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, for journald and log shippers.
    Json,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSource {
    /// A command-line flag.
    Flag,
    /// The config file.
    File,
    /// Neither: the built-in default.
    Default,
}

/// The command-line values that can override the file. `None` means "not given".
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--dsh-home DIR`.
    pub dsh_home: Option<OsString>,
    /// `--socket PATH`.
    pub socket: Option<OsString>,
    /// `--log-format text|json`.
    pub log_format: Option<LogFormat>,
    /// `--persistence jsonl|sqlite|postgres`.
    pub persistence: Option<BackendName>,
}

/// Where the PostgreSQL connection string comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostgresUrl {
    /// `postgres.url`.
    Inline(dsh_core::SecretUrl),
    /// `postgres.url_file`: a private file holding it (read when the backend is opened).
    File(PathBuf),
}

/// `[postgres]`.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// The connection string, if configured.
    pub url: Option<PostgresUrl>,
    /// `postgres.lease_ms`: how long a crashed daemon's sessions stay leased.
    pub lease: Duration,
    /// `postgres.timeout_ms`: the most any storage call waits for the database.
    pub timeout: Duration,
    /// `postgres.ca_file`: the CA certificates (PEM) that TLS to the database trusts.
    pub ca_file: Option<PathBuf>,
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The harness home: absolute, normalised, not necessarily existing yet.
    pub home: ResolvedHome,
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
    /// Where to listen when the socket is not handed over by systemd.
    pub socket: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// How long in-flight calls may run after shutdown starts before they are abandoned.
    pub shutdown_timeout: Duration,
    /// Most client connections open at once (`max_connections`); the server also caps it at half
    /// the open-file limit.
    pub max_connections: usize,
    /// Most connections at once from clients inside commands dshd started
    /// (`max_command_connections`); `None`: a quarter of the connection limit in use. At most half
    /// of `max_connections`, so the user's own clients always keep the other half.
    pub max_command_connections: Option<usize>,
    /// A connection with no open request and no traffic for this long is closed
    /// (`connection_idle_timeout_ms`).
    pub connection_idle_timeout: Duration,
    /// The configured backend (`--persistence`, else `persistence`, else JSONL).
    pub persistence: BackendKind,
    /// Where [`persistence`](Self::persistence) came from. Only a default gives way to the
    /// backend saved by `Persistence.Use` (see `Daemon::new`).
    pub persistence_source: ValueSource,
    /// JSONL sessions root (`jsonl.root`, default `<home>/sessions`).
    pub jsonl_root: PathBuf,
    /// SQLite database (`sqlite.path`, default `<home>/sessions.sqlite3`).
    pub sqlite_path: PathBuf,
    /// The PostgreSQL database (`[postgres]`).
    pub postgres: PostgresConfig,
    /// When agents checkpoint.
    pub checkpoint: CheckpointPolicy,
    /// Provider for agents created without one (`model.provider`, default `scripted`).
    pub default_provider: String,
    /// Script for scripted agents created without one (`model.script`).
    pub default_script: Option<Script>,
    /// Settings of the `openai` provider (`[model]` keys other than `provider` and `script`).
    pub openai: OpenAiConfig,
    /// `model.api_key_file`: a private file holding the API key (first in precedence).
    pub api_key_file: Option<PathBuf>,
    /// `model.api_key_credential`: the systemd credential holding the key, read from
    /// `$CREDENTIALS_DIRECTORY/<name>` when that exists (second in precedence).
    pub api_key_credential: String,
    /// Step limit per turn.
    pub max_steps_per_turn: u32,
    /// Delegation bounds (`agent.max_depth`, `agent.max_live_agents`).
    pub agent_limits: AgentLimits,
    /// The executor's settings (`[shell]`).
    pub exec: ExecConfig,
    /// Working directory of commands that belong to no agent and name none (`shell.cwd`).
    pub default_cwd: PathBuf,
    /// Bound on an external contributor's answer (`shell_env.resolve_timeout_ms`).
    pub resolve_timeout: Duration,
    /// Hook files and settings (`[hooks]`); relative file paths made absolute.
    pub hooks: HookSettings,
    /// The sandbox of agents created without one (`sandbox.mode`, `sandbox.network`); the rest
    /// of `[sandbox]` is in [`ExecConfig::sandbox`](dsh_core::ExecConfig::sandbox).
    pub sandbox: SandboxPolicy,
    /// The default approval policy and how long a request waits (`[approvals]`).
    pub approvals: ApprovalSettings,
    /// Entries one watcher may have waiting before it is lagged (`watch.max_pending`).
    pub watch_max_pending: usize,
    /// Running commands' output goes to Prompt and Watch clients as `tool/output` previews
    /// (`watch.tool_output`, default true).
    pub watch_tool_output: bool,
    /// Which project instruction files an agent's first turn loads (`[instructions]`); the home
    /// file's directory is filled in by the daemon.
    pub instructions: InstructionSettings,
    /// The enabled stdio MCP servers of top-level agents (`[mcp_servers.<name>]`).
    pub mcp_servers: Vec<McpServerConfig>,
    /// When agents compact their context on their own (`[compaction]`).
    pub compaction: CompactionSettings,
}

/// Why the configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key, or a value of the wrong type.
    #[error("{}:{line}: {}: {message}", path.display(), key_label(key))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text (0 when unknown).
        line: usize,
        /// Dotted key, e.g. `skills.local.dsh_home` ("" when the error is not about one key).
        key: String,
        /// What was wrong.
        message: String,
    },
    /// A value is well-typed but not acceptable.
    #[error("{origin}: {message}")]
    Value {
        /// Which flag or key.
        origin: String,
        /// What was wrong.
        message: String,
    },
    /// The harness home could not be resolved.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The default config file under the home names a different home.
    #[error(
        "{} sets dsh_home to {} but it was found in the home {}; remove the key, or pass the file with --config",
        file.display(),
        named.display(),
        home.display()
    )]
    HomeMismatch {
        /// The implicit config file.
        file: PathBuf,
        /// The home it names.
        named: PathBuf,
        /// The home it was found in.
        home: PathBuf,
    },
}

fn key_label(key: &str) -> String {
    if key.is_empty() {
        "invalid TOML".to_owned()
    } else {
        format!("key `{key}`")
    }
}

impl Config {
    /// Builds the configuration from flags, the config file and the ambient environment.
    ///
    /// The file is `--config` when given (it must exist), else `<home>/config.toml` when that
    /// exists. `dsh_home` in a file counts as an explicit home only when the file was given with
    /// `--config`: a file found inside a home cannot move that home elsewhere.
    pub fn load(flags: &Flags, ambient: &Ambient) -> Result<Self, ConfigError> {
        let explicit_file = flags
            .config
            .as_ref()
            .map(|p| {
                home::absolutize(p.as_os_str(), "--config", ambient).map_err(ConfigError::from)
            })
            .transpose()?;
        let (home, file, parsed) = match explicit_file {
            Some(path) => {
                let parsed = read_file(&path)?;
                let home = resolve_home(flags, &parsed, Some(&path), ambient)?;
                (home, Some(path), parsed)
            }
            None => {
                let home = resolve_home(flags, &FileConfig::default(), None, ambient)?;
                let candidate = home.path.join(DEFAULT_FILE_NAME);
                if candidate.is_file() {
                    let parsed = read_file(&candidate)?;
                    check_implicit_home(&candidate, &parsed, &home, ambient)?;
                    (home, Some(candidate), parsed)
                } else {
                    (home, None, FileConfig::default())
                }
            }
        };
        Builder {
            file: file.as_deref(),
            ambient,
            home: &home.path,
        }
        .build(flags, parsed, home.clone(), file.clone())
    }
}

/// Folds one parsed file and the flags into a [`Config`], naming the key of any bad value.
struct Builder<'a> {
    file: Option<&'a Path>,
    ambient: &'a Ambient,
    home: &'a Path,
}

impl Builder<'_> {
    fn origin(&self, key: &str) -> String {
        key_origin(self.file, key)
    }

    /// The refusal of `key`'s value, saying why.
    fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Value {
            origin: self.origin(key),
            message: message.into(),
        }
    }

    /// `value` of `key` made absolute.
    fn absolute(&self, value: &str, key: &str) -> Result<PathBuf, ConfigError> {
        Ok(home::absolutize(
            value.as_ref(),
            &self.origin(key),
            self.ambient,
        )?)
    }

    /// The path of `key`, made absolute, if it is set.
    fn path(&self, value: Option<&String>, key: &str) -> Result<Option<PathBuf>, ConfigError> {
        value.map(|v| self.absolute(v, key)).transpose()
    }

    /// `value` of `key`, refused when it is 0.
    fn at_least_one<T: PartialEq + From<u8>>(
        &self,
        value: Option<T>,
        key: &str,
    ) -> Result<Option<T>, ConfigError> {
        if value == Some(T::from(0)) {
            return Err(self.invalid(key, "must be at least 1"));
        }
        Ok(value)
    }

    /// `[postgres]`: one of `url` and `url_file` (neither is read here: the file is read each
    /// time the backend is opened, so a rotated password is picked up), required when
    /// `persistence` is `postgres`; `lease_ms`; `ca_file` (read when the backend is opened),
    /// required by an `sslmode` of `verify-ca` or `verify-full`.
    fn postgres(
        &self,
        section: &file::PostgresSection,
        persistence: BackendKind,
    ) -> Result<PostgresConfig, ConfigError> {
        let ca_file = self.path(section.ca_file.as_ref(), "postgres.ca_file")?;
        let url = match (&section.url, &section.url_file) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "postgres.url_file",
                    "give postgres.url or postgres.url_file, not both",
                ));
            }
            (Some(url), None) => {
                // Checked now, so a typo is reported at start; the error never repeats the URL.
                let target = dsh_core::PostgresTarget::parse(url)
                    .map_err(|e| self.invalid("postgres.url", e.to_string()))?;
                let tls = target.tls();
                if tls.verifies() && ca_file.is_none() {
                    return Err(self.invalid(
                        "postgres.ca_file",
                        format!(
                            "postgres.url has sslmode={}: set postgres.ca_file to the certificate of the CA that signed the server's",
                            tls.as_str()
                        ),
                    ));
                }
                Some(PostgresUrl::Inline(dsh_core::SecretUrl::new(url.clone())))
            }
            (None, Some(file)) => {
                Some(PostgresUrl::File(self.absolute(file, "postgres.url_file")?))
            }
            (None, None) => None,
        };
        if url.is_none() && persistence == BackendKind::Postgres {
            return Err(self.invalid(
                "postgres.url",
                "persistence is postgres: set postgres.url or postgres.url_file",
            ));
        }
        let lease = section
            .lease_ms
            .map_or(dsh_core::DEFAULT_POSTGRES_LEASE, |ms| {
                Duration::from_millis(ms.get())
            });
        if lease < dsh_core::MIN_POSTGRES_LEASE {
            return Err(self.invalid(
                "postgres.lease_ms",
                format!(
                    "must be at least {} (the lease is renewed every third of it)",
                    dsh_core::MIN_POSTGRES_LEASE.as_millis()
                ),
            ));
        }
        let timeout = section
            .timeout_ms
            .map_or(dsh_core::DEFAULT_POSTGRES_TIMEOUT, |ms| {
                Duration::from_millis(ms.get())
            });
        Ok(PostgresConfig {
            url,
            lease,
            timeout,
            ca_file,
        })
    }

    fn positive_ms(
        &self,
        value: Option<u64>,
        key: &str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        Ok(self
            .at_least_one(value, key)?
            .map_or(default, Duration::from_millis))
    }

    fn build(
        &self,
        flags: &Flags,
        parsed: FileConfig,
        home: ResolvedHome,
        file: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let socket = match (&flags.socket, &parsed.socket) {
            (Some(flag), _) => home::absolutize(flag, "--socket", self.ambient)?,
            (None, Some(value)) => self.absolute(value, "socket")?,
            (None, None) => socket::default_path(self.home, self.ambient.runtime_dir.as_deref()),
        };
        let persistence = match flags.persistence.or(parsed.persistence) {
            Some(BackendName::Sqlite) => BackendKind::Sqlite,
            Some(BackendName::Postgres) => BackendKind::Postgres,
            Some(BackendName::Jsonl) | None => BackendKind::Jsonl,
        };
        let persistence_source = match (flags.persistence, parsed.persistence) {
            (Some(_), _) => ValueSource::Flag,
            (None, Some(_)) => ValueSource::File,
            (None, None) => ValueSource::Default,
        };
        let postgres = self.postgres(&parsed.postgres, persistence)?;
        let default_script = parsed
            .model
            .script
            .as_ref()
            .map(|value| self.script(value))
            .transpose()?;
        let default_provider = parsed
            .model
            .provider
            .clone()
            .unwrap_or_else(|| SCRIPTED_PROVIDER.into());
        if ![SCRIPTED_PROVIDER, OPENAI_PROVIDER].contains(&default_provider.as_str()) {
            return Err(self.invalid(
                "model.provider",
                format!("unknown provider {default_provider:?}; known providers: scripted, openai"),
            ));
        }
        let openai_config = self.openai(&parsed.model)?;
        let max_steps_per_turn = self
            .at_least_one(parsed.agent.max_steps_per_turn, "agent.max_steps_per_turn")?
            .unwrap_or(DEFAULT_MAX_STEPS_PER_TURN);
        let defaults = AgentLimits::default();
        let max_live_agents = self
            .at_least_one(parsed.agent.max_live_agents, "agent.max_live_agents")?
            .map_or(defaults.max_live_agents, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            });
        let agent_limits = AgentLimits {
            max_depth: parsed.agent.max_depth.unwrap_or(defaults.max_depth),
            max_live_agents,
        };
        let default_cwd = self
            .path(parsed.shell.cwd.as_ref(), "shell.cwd")?
            .or_else(|| self.ambient.cwd.clone())
            .unwrap_or_else(|| self.home.to_owned());
        let (sandbox, sandbox_settings) = self.sandbox(&parsed.sandbox)?;
        let max_connections = parsed.max_connections.map_or(
            connection::DEFAULT_MAX_CONNECTIONS,
            std::num::NonZeroUsize::get,
        );
        let max_command_connections = match parsed.max_command_connections {
            Some(n) if n.get() > max_connections / 2 => {
                return Err(self.invalid(
                    "max_command_connections",
                    format!(
                        "{n} is more than half of max_connections ({max_connections}); the user's own clients must always keep at least half the slots"
                    ),
                ));
            }
            other => other.map(std::num::NonZeroUsize::get),
        };
        let mut config = Config {
            socket,
            log_format: flags.log_format.or(parsed.log_format).unwrap_or_default(),
            shutdown_timeout: self.positive_ms(
                parsed.shutdown_timeout_ms,
                "shutdown_timeout_ms",
                DEFAULT_SHUTDOWN_TIMEOUT,
            )?,
            max_connections,
            max_command_connections,
            connection_idle_timeout: parsed
                .connection_idle_timeout_ms
                .map_or(connection::DEFAULT_IDLE_TIMEOUT, |ms| {
                    Duration::from_millis(ms.get())
                }),
            persistence,
            persistence_source,
            jsonl_root: self
                .path(parsed.jsonl.root.as_ref(), "jsonl.root")?
                .unwrap_or_else(|| self.home.join("sessions")),
            sqlite_path: self
                .path(parsed.sqlite.path.as_ref(), "sqlite.path")?
                .unwrap_or_else(|| self.home.join("sessions.sqlite3")),
            postgres,
            checkpoint: parsed.checkpoint.unwrap_or_default(),
            default_provider,
            default_script,
            max_steps_per_turn,
            agent_limits,
            exec: ExecConfig {
                // The model key must never reach a child, whatever its name looks like.
                extra_scrub: vec![openai_config.api_key_env.clone()],
                sandbox: sandbox_settings,
                ..self.exec(&parsed.shell)?
            },
            openai: openai_config,
            api_key_file: self.path(parsed.model.api_key_file.as_ref(), "model.api_key_file")?,
            api_key_credential: parsed
                .model
                .api_key_credential
                .clone()
                .unwrap_or_else(|| DEFAULT_API_KEY_CREDENTIAL.to_owned()),
            default_cwd,
            resolve_timeout: self.positive_ms(
                parsed.shell_env.resolve_timeout_ms,
                "shell_env.resolve_timeout_ms",
                DEFAULT_RESOLVE_TIMEOUT,
            )?,
            hooks: self.hooks(parsed.hooks)?,
            approvals: parsed.approvals.settings(),
            watch_max_pending: parsed.watch.max_pending(),
            watch_tool_output: parsed.watch.tool_output.unwrap_or(true),
            instructions: self.instructions(&parsed.instructions)?,
            mcp_servers: self.mcp_servers(&parsed.mcp_servers)?,
            compaction: self.compaction(&parsed.compaction)?,
            home,
            file,
            sandbox,
        };
        sandbox::protect(&mut config);
        Ok(config)
    }

    fn instructions(
        &self,
        section: &file::InstructionsSection,
    ) -> Result<InstructionSettings, ConfigError> {
        let defaults = InstructionSettings::default();
        let files = section.files.clone().unwrap_or(defaults.files);
        for (index, name) in files.iter().enumerate() {
            // A name, not a path: it is looked for in each directory from the root to the cwd.
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(self.invalid(
                    &format!("instructions.files[{index}]"),
                    format!("{name:?} is not a file name (no '/', not empty, not . or ..)"),
                ));
            }
        }
        Ok(InstructionSettings {
            home: None,
            files,
            max_bytes: section.max_bytes.unwrap_or(defaults.max_bytes),
        })
    }

    fn compaction(
        &self,
        section: &file::CompactionSection,
    ) -> Result<CompactionSettings, ConfigError> {
        let defaults = CompactionSettings::default();
        let threshold_percent = section
            .threshold_percent
            .unwrap_or(defaults.threshold_percent);
        if !(10..=95).contains(&threshold_percent) {
            return Err(self.invalid(
                "compaction.threshold_percent",
                format!(
                    "{threshold_percent} is not a share of the context window between 10 and 95 (percent)"
                ),
            ));
        }
        Ok(CompactionSettings {
            auto: section.auto.unwrap_or(defaults.auto),
            threshold_percent,
        })
    }

    fn script(&self, value: &str) -> Result<Script, ConfigError> {
        let key = "model.script";
        let path = self.absolute(value, key)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| self.invalid(key, format!("cannot read {}: {e}", path.display())))?;
        Script::parse(&text).map_err(|e| self.invalid(key, format!("{}: {e}", path.display())))
    }

    fn hooks(&self, mut hooks: HookSettings) -> Result<HookSettings, ConfigError> {
        hooks
            .validate()
            .map_err(|e| self.invalid("hooks", e.to_string()))?;
        if let Some(cwd) = &self.ambient.cwd {
            hooks.resolve_relative(cwd);
        }
        Ok(hooks)
    }

    fn openai(&self, model: &file::ModelSection) -> Result<OpenAiConfig, ConfigError> {
        let defaults = OpenAiConfig::default();
        let config = OpenAiConfig {
            base_url: model.base_url.clone().unwrap_or(defaults.base_url),
            model: model.model.clone().unwrap_or(defaults.model),
            models: model.models.clone().unwrap_or(defaults.models),
            api_key_env: model.api_key_env.clone().unwrap_or(defaults.api_key_env),
            request_timeout: self.positive_ms(
                model.request_timeout_ms,
                "model.request_timeout_ms",
                defaults.request_timeout,
            )?,
            idle_timeout: self.positive_ms(
                model.idle_timeout_ms,
                "model.idle_timeout_ms",
                defaults.idle_timeout,
            )?,
            retries: model.retries.unwrap_or(defaults.retries),
            max_backoff: self.positive_ms(
                model.max_backoff_ms,
                "model.max_backoff_ms",
                defaults.max_backoff,
            )?,
            context_window: model.context_window.filter(|n| *n > 0),
            context_windows: model
                .context_windows
                .iter()
                .flatten()
                .map(|(name, tokens)| (name.clone(), tokens.get()))
                .collect(),
        };
        config
            .validate()
            .map_err(|e| self.invalid("model", e.to_string()))?;
        Ok(config)
    }

    fn exec(&self, shell: &file::ShellSection) -> Result<ExecConfig, ConfigError> {
        let defaults = ExecConfig::default();
        let secret_pattern = match &shell.secret_pattern {
            Some(pattern) => {
                compile_secret_pattern(pattern).map_err(|e| {
                    self.invalid("shell.secret_pattern", format!("not a valid regex: {e}"))
                })?;
                pattern.clone()
            }
            None => defaults.secret_pattern.clone(),
        };
        let default_timeout = self.positive_ms(
            shell.default_timeout_ms,
            "shell.default_timeout_ms",
            defaults.default_timeout,
        )?;
        let max_timeout = self.positive_ms(
            shell.max_timeout_ms,
            "shell.max_timeout_ms",
            defaults.max_timeout,
        )?;
        if default_timeout > max_timeout {
            return Err(self.invalid(
                "shell.default_timeout_ms",
                format!(
                    "{} ms is more than shell.max_timeout_ms ({} ms)",
                    default_timeout.as_millis(),
                    max_timeout.as_millis()
                ),
            ));
        }
        let output_cap_bytes = self
            .at_least_one(shell.output_cap_bytes, "shell.output_cap_bytes")?
            .unwrap_or(defaults.output_cap_bytes);
        Ok(ExecConfig {
            secret_pattern,
            default_timeout,
            max_timeout,
            kill_grace: self.positive_ms(
                shell.kill_grace_ms,
                "shell.kill_grace_ms",
                defaults.kill_grace,
            )?,
            output_cap_bytes,
            spill_cap_bytes: shell.spill_cap_bytes.unwrap_or(defaults.spill_cap_bytes),
            spill_total_cap_bytes: shell
                .spill_total_cap_bytes
                .unwrap_or(defaults.spill_total_cap_bytes),
            spill_dir: self
                .path(shell.spill_dir.as_ref(), "shell.spill_dir")?
                .unwrap_or_else(|| self.home.join("run/spill")),
            ..defaults
        })
    }
}

fn key_origin(file: Option<&Path>, key: &str) -> String {
    match file {
        Some(path) => format!("{key} in {}", path.display()),
        None => key.to_owned(),
    }
}

fn resolve_home(
    flags: &Flags,
    parsed: &FileConfig,
    file: Option<&Path>,
    ambient: &Ambient,
) -> Result<ResolvedHome, ConfigError> {
    let file_origin = key_origin(file, "dsh_home");
    let nested_origin = key_origin(file, "skills.local.dsh_home");
    let explicit = match (&flags.dsh_home, &parsed.dsh_home) {
        (Some(flag), _) => Some(Explicit {
            value: flag.as_os_str(),
            origin: "--dsh-home",
        }),
        (None, Some(value)) => Some(Explicit {
            value: value.as_ref(),
            origin: &file_origin,
        }),
        (None, None) => None,
    };
    let nested = parsed.nested_home().map(|value| Explicit {
        value: value.as_ref(),
        origin: &nested_origin,
    });
    Ok(home::resolve(explicit, nested, ambient)?)
}

fn check_implicit_home(
    file: &Path,
    parsed: &FileConfig,
    home: &ResolvedHome,
    ambient: &Ambient,
) -> Result<(), ConfigError> {
    let named = [
        parsed.dsh_home.as_ref().map(|v| (v, "dsh_home")),
        parsed.nested_home().map(|v| (v, "skills.local.dsh_home")),
    ];
    for (value, key) in named.into_iter().flatten() {
        let path = home::absolutize(value.as_ref(), &key_origin(Some(file), key), ambient)?;
        if path != home.path {
            return Err(ConfigError::HomeMismatch {
                file: file.to_owned(),
                named: path,
                home: home.path.clone(),
            });
        }
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        error: source,
    })?;
    file::parse(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        line: e.line,
        key: e.key,
        message: e.message,
    })
}

#[cfg(test)]
mod tests;
