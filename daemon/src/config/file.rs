//! The config file's shape and parsing. `deny_unknown_fields` everywhere: a misspelt key is an
//! error, reported with its line and dotted key.

use serde::Deserialize;

use super::LogFormat;
use dsh_core::CheckpointPolicy;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub dsh_home: Option<String>,
    pub socket: Option<String>,
    pub log_format: Option<LogFormat>,
    pub shutdown_timeout_ms: Option<u64>,
    // NonZero: a 0 is refused while parsing, so the error names its line and key.
    pub max_connections: Option<std::num::NonZeroUsize>,
    pub max_command_connections: Option<std::num::NonZeroUsize>,
    pub connection_idle_timeout_ms: Option<std::num::NonZeroU64>,
    pub persistence: Option<BackendName>,
    pub checkpoint: Option<CheckpointPolicy>,
    #[serde(default)]
    pub jsonl: JsonlSection,
    #[serde(default)]
    pub sqlite: SqliteSection,
    #[serde(default)]
    pub postgres: PostgresSection,
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default)]
    pub shell: ShellSection,
    #[serde(default)]
    pub shell_env: ShellEnvSection,
    pub skills: Option<SkillsSection>,
    #[serde(default)]
    pub hooks: dsh_core::HookSettings,
    #[serde(default)]
    pub sandbox: super::sandbox::SandboxSection,
    #[serde(default)]
    pub approvals: ApprovalsSection,
    #[serde(default)]
    pub watch: WatchSection,
    #[serde(default)]
    pub instructions: InstructionsSection,
    #[serde(default)]
    pub compaction: CompactionSection,
    #[serde(default)]
    pub mcp_servers: std::collections::BTreeMap<String, super::mcp::McpServerSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsSection {
    pub policy: Option<dsh_core::ApprovalPolicy>,
    // NonZero: a 0 is refused while parsing, so the error names its line and key.
    pub timeout_ms: Option<std::num::NonZeroU64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WatchSection {
    pub max_pending: Option<std::num::NonZeroUsize>,
    pub tool_output: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CompactionSection {
    pub auto: Option<bool>,
    pub threshold_percent: Option<u8>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InstructionsSection {
    pub files: Option<Vec<String>>,
    pub max_bytes: Option<u64>,
}

impl ApprovalsSection {
    /// The settings, defaults filled in.
    pub fn settings(&self) -> dsh_core::ApprovalSettings {
        dsh_core::ApprovalSettings {
            policy: self.policy.unwrap_or_default(),
            timeout: self
                .timeout_ms
                .map_or(dsh_core::DEFAULT_APPROVAL_TIMEOUT, |ms| {
                    std::time::Duration::from_millis(ms.get())
                }),
        }
    }
}

impl WatchSection {
    /// `watch.max_pending`, default filled in.
    pub fn max_pending(&self) -> usize {
        self.max_pending.map_or(
            dsh_core::DEFAULT_WATCH_MAX_PENDING,
            std::num::NonZeroUsize::get,
        )
    }
}

/// `persistence = "jsonl" | "sqlite" | "postgres"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendName {
    /// One JSONL file per session.
    Jsonl,
    /// One SQLite database.
    Sqlite,
    /// One PostgreSQL database, shared by many machines.
    Postgres,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonlSection {
    pub root: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SqliteSection {
    pub path: Option<String>,
}

/// `[postgres]`. No `Debug` of the URL: it may hold a password.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PostgresSection {
    pub url: Option<String>,
    pub url_file: Option<String>,
    // NonZero: a 0 is refused while parsing, so the error names its line and key.
    pub lease_ms: Option<std::num::NonZeroU64>,
    pub timeout_ms: Option<std::num::NonZeroU64>,
    pub ca_file: Option<String>,
}

impl std::fmt::Debug for PostgresSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSection")
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("url_file", &self.url_file)
            .field("lease_ms", &self.lease_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelSection {
    pub provider: Option<String>,
    pub script: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub models: Option<Vec<String>>,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
    pub api_key_credential: Option<String>,
    pub request_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub retries: Option<u32>,
    pub max_backoff_ms: Option<u64>,
    pub context_window: Option<u64>,
    // NonZero: a 0 is refused while parsing, so the error names its line and key.
    pub context_windows: Option<std::collections::BTreeMap<String, std::num::NonZeroU64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentSection {
    pub max_steps_per_turn: Option<u32>,
    pub max_depth: Option<u32>,
    pub max_live_agents: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShellSection {
    pub secret_pattern: Option<String>,
    pub default_timeout_ms: Option<u64>,
    pub max_timeout_ms: Option<u64>,
    pub kill_grace_ms: Option<u64>,
    pub output_cap_bytes: Option<usize>,
    pub spill_cap_bytes: Option<u64>,
    pub spill_total_cap_bytes: Option<u64>,
    pub spill_dir: Option<String>,
    pub cwd: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShellEnvSection {
    pub resolve_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SkillsSection {
    pub local: Option<LocalSkillsSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LocalSkillsSection {
    pub dsh_home: Option<String>,
}

impl FileConfig {
    /// `skills.local.dsh_home`, if set.
    pub fn nested_home(&self) -> Option<&String> {
        self.skills
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .and_then(|l| l.dsh_home.as_ref())
    }
}

/// A parse failure located in the text.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ParseFailure {
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// Dotted key ("" when the text is not valid TOML).
    pub key: String,
    /// What was wrong.
    pub message: String,
}

/// Parses the file's text.
pub(super) fn parse(text: &str) -> Result<FileConfig, ParseFailure> {
    let line_of = |span: Option<std::ops::Range<usize>>| {
        span.map_or(0, |s| {
            text.get(..s.start)
                .map_or(0, |before| before.matches('\n').count() + 1)
        })
    };
    let de = toml::Deserializer::parse(text).map_err(|e| ParseFailure {
        line: line_of(e.span()),
        key: String::new(),
        message: e.message().to_owned(),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        ParseFailure {
            line: line_of(inner.span()),
            key: if key == "." { String::new() } else { key },
            message: inner.message().to_owned(),
        }
    })
}
