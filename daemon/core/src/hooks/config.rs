//! Settings (the daemon config's `[hooks]` table) and hook files in both dialects' JSON shape.
//!
//! Parse rules, shared by both dialects unless noted (they follow the upstream harness):
//!
//! - the root is a settings file (`{"hooks": {...}, ...other settings}`) or the bare event map; a
//!   root that is not an object holds no hooks;
//! - only the dialect's events are read; other keys are ignored (with a warning) **before** their
//!   groups are looked at, so a junk matcher on an unsupported event is harmless;
//! - malformed pieces (an event that is not an array, a group without a `hooks` array, a hook that
//!   is not an object or has no string command) are skipped with a warning, keeping their siblings;
//! - a missing `type` means `command`; Claude Code files may also have `type: "http"` hooks (a
//!   `url`, optional `headers` and `allowedEnvVars`); other types, and `async: true`, are skipped
//!   with a warning;
//! - `timeout` is in seconds (a positive number); Codex also reads the alias `timeoutSec`;
//! - matchers on UserPromptSubmit and Stop are discarded before validation; every other matcher is
//!   compiled, and one invalid regex rejects the **whole file**: a half-loaded policy is worse than
//!   none, and the error is shown by the list API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::matcher::Matcher;
use super::{Dialect, EventName, FileStatus, HandlerInfo, HookFileStatus};

/// The `[hooks]` table of the daemon's config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HookSettings {
    /// Claude Code hook files (settings files or bare hooks files), read at load and reload.
    pub claude_code: Vec<PathBuf>,
    /// Codex `hooks.json` files.
    pub codex: Vec<PathBuf>,
    /// Also read `<cwd>/.claude/settings.json` and `<cwd>/.codex/hooks.json` of the session's cwd,
    /// at invocation time. Off by default: a checked-out repository must not run code by itself.
    pub project_hooks: bool,
    /// Timeout for a hook whose file gives none (`default_timeout_ms`). The executor's maximum
    /// still caps every hook.
    #[serde(rename = "default_timeout_ms", deserialize_with = "positive_ms")]
    pub default_timeout: Duration,
    /// How many times Stop hooks may force another step in one turn.
    pub stop_continuation_cap: u32,
    /// Characters of stderr kept in `hook/result` records (then `…`).
    #[serde(deserialize_with = "positive_usize")]
    pub stderr_summary_chars: usize,
    /// What Claude Code hooks get as `transcript_path`: the session's own file (`session`) or a
    /// Claude-Code-format projection (`claude`).
    pub claude_code_transcript: super::TranscriptMode,
    /// Which command hooks of a confined agent run in its sandbox: those that name, or come
    /// from a file, the agent can write (`auto`), or all (`always`).
    pub sandbox: super::HookSandbox,
    /// The harness named in Notification messages (`{name} needs your permission to use Bash`):
    /// Claude Code's own wording by default, which scripts written for it match.
    pub notification_name: String,
    /// How long a top-level agent waits for its next prompt before Notification `idle_prompt`
    /// fires (once per wait; Claude Code's is 60 s).
    #[serde(rename = "idle_prompt_ms", deserialize_with = "positive_ms")]
    pub idle_prompt: Duration,
    /// Where the projections are written (not a config key: dshd sets it under its home's run
    /// directory). `None`: a directory under the system's temporary directory.
    #[serde(skip)]
    pub transcript_dir: Option<PathBuf>,
}

/// Default for [`HookSettings::default_timeout`].
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Default for [`HookSettings::stop_continuation_cap`].
pub(super) const DEFAULT_STOP_CONTINUATION_CAP: u32 = 8;
/// Default for [`HookSettings::notification_name`]: Claude Code's message names Claude.
pub(super) const DEFAULT_NOTIFICATION_NAME: &str = "Claude";
/// Default for [`HookSettings::idle_prompt`]: Claude Code's.
pub(super) const DEFAULT_IDLE_PROMPT: Duration = Duration::from_secs(60);
/// Default for [`HookSettings::stderr_summary_chars`].
pub(super) const DEFAULT_STDERR_SUMMARY_CHARS: usize = 500;

impl Default for HookSettings {
    fn default() -> Self {
        Self {
            claude_code: Vec::new(),
            codex: Vec::new(),
            project_hooks: false,
            claude_code_transcript: super::TranscriptMode::Session,
            sandbox: super::HookSandbox::Auto,
            notification_name: DEFAULT_NOTIFICATION_NAME.to_owned(),
            transcript_dir: None,
            default_timeout: DEFAULT_TIMEOUT,
            idle_prompt: DEFAULT_IDLE_PROMPT,
            stop_continuation_cap: DEFAULT_STOP_CONTINUATION_CAP,
            stderr_summary_chars: DEFAULT_STDERR_SUMMARY_CHARS,
        }
    }
}

/// A settings value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookSettingsError {
    /// The field must be positive.
    #[error("hooks.{0} must be at least 1")]
    NotPositive(&'static str),
}

impl HookSettings {
    /// Checks what serde cannot (for settings built in code rather than parsed).
    pub fn validate(&self) -> Result<(), HookSettingsError> {
        if self.default_timeout.is_zero() {
            return Err(HookSettingsError::NotPositive("default_timeout_ms"));
        }
        if self.stderr_summary_chars == 0 {
            return Err(HookSettingsError::NotPositive("stderr_summary_chars"));
        }
        Ok(())
    }

    /// Makes relative file paths absolute against `base` (e.g. the config file's directory).
    pub fn resolve_relative(&mut self, base: &Path) {
        for path in self.claude_code.iter_mut().chain(self.codex.iter_mut()) {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    /// The settings with out-of-range values replaced by defaults (logged), so the engine never
    /// has to handle them.
    pub(super) fn sanitized(mut self) -> Self {
        if let Err(e) = self.validate() {
            tracing::warn!("{e}; using the default");
        }
        if self.default_timeout.is_zero() {
            self.default_timeout = DEFAULT_TIMEOUT;
        }
        if self.stderr_summary_chars == 0 {
            self.stderr_summary_chars = DEFAULT_STDERR_SUMMARY_CHARS;
        }
        self
    }
}

fn positive_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        ms => Ok(Duration::from_millis(ms)),
    }
}

fn positive_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        n => Ok(n),
    }
}

/// Why a hook file was rejected as a whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HookConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{} is not valid JSON: {error}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        error: serde_json::Error,
    },
    /// A matcher is neither a literal nor a valid regex.
    #[error("invalid {dialect} regex matcher {pattern:?} on event {event:?}: {message}")]
    Matcher {
        /// `claude-code` or `codex`.
        dialect: &'static str,
        /// The matcher as written.
        pattern: String,
        /// The event it is on.
        event: &'static str,
        /// The regex engine's complaint.
        message: String,
    },
}

/// One command hook from a file.
#[derive(Debug, Clone)]
pub(super) struct Handler {
    /// `<file>#<Event>[<group>][<index>]`, indices as in the file, so ids survive the skipping
    /// of malformed siblings.
    pub id: String,
    pub event: EventName,
    /// The matcher as written, when it is honoured.
    pub matcher_text: Option<String>,
    pub matcher: Matcher,
    /// The command as written; for an HTTP hook, its URL.
    pub command: String,
    /// Set for a Claude Code `type: "http"` hook: the payload is POSTed to `command`.
    pub http: Option<HttpHook>,
    /// The file's timeout, when it gives a valid one.
    pub timeout: Option<Duration>,
    /// Claude Code's `"async": true` on a command hook: it runs in the background, the call goes
    /// on, and what it says reaches the model at the next turn.
    pub background: bool,
}

/// A Claude Code `type: "http"` hook's request settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HttpHook {
    /// Extra request headers, values as written (`$VAR`/`${VAR}` expanded at run time from the
    /// variables in `allowed_env` only).
    pub headers: Vec<(String, String)>,
    /// `allowedEnvVars`: the daemon environment variables header values may name.
    pub allowed_env: Vec<String>,
}

/// One hook file and what loading it gave.
#[derive(Debug)]
pub(super) struct HookFile {
    pub dialect: Dialect,
    pub path: PathBuf,
    pub project: bool,
    pub status: FileStatus,
    pub error: Option<String>,
    pub warnings: Vec<String>,
    pub handlers: Vec<Handler>,
    /// What `${CLAUDE_PLUGIN_ROOT}` stands for: the plugin directory of a file in the plugin layout
    /// `<plugin>/hooks/hooks.json`; `None` for any other file (Claude Code sets the variable only
    /// for plugin hooks).
    pub plugin_root: Option<PathBuf>,
}

/// The project file of `dialect` in `cwd`.
pub(super) fn project_file(dialect: Dialect, cwd: &Path) -> PathBuf {
    match dialect {
        Dialect::ClaudeCode => cwd.join(".claude").join("settings.json"),
        Dialect::Codex => cwd.join(".codex").join("hooks.json"),
    }
}

fn plugin_root(path: &Path) -> Option<PathBuf> {
    let dir = path.parent()?;
    if path.file_name().is_some_and(|n| n == "hooks.json")
        && dir.file_name().is_some_and(|n| n == "hooks")
    {
        return dir.parent().map(Path::to_path_buf);
    }
    None
}

/// Hook files are small; anything larger is not one (and is not read into memory).
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Refuses what is not a plausible hook file before reading it: reading a FIFO would block the
/// caller forever, and a huge file would only be read to be rejected.
pub(super) fn check_readable(meta: &std::fs::Metadata) -> std::io::Result<()> {
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok(())
}

impl HookFile {
    /// Reads and parses a configured file (blocking).
    pub(super) fn load(dialect: Dialect, path: PathBuf) -> Self {
        let text = std::fs::metadata(&path)
            .and_then(|meta| check_readable(&meta))
            .and_then(|()| std::fs::read(&path));
        Self::from_read(dialect, path, false, text)
    }

    /// Builds the file's state from the result of reading it.
    pub(super) fn from_read(
        dialect: Dialect,
        path: PathBuf,
        project: bool,
        read: std::io::Result<Vec<u8>>,
    ) -> Self {
        let mut file = Self {
            dialect,
            plugin_root: plugin_root(&path),
            path,
            project,
            status: FileStatus::Loaded,
            error: None,
            warnings: Vec::new(),
            handlers: Vec::new(),
        };
        let parsed = match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                file.status = FileStatus::Missing;
                return file;
            }
            Err(source) => Err(HookConfigError::Read {
                path: file.path.clone(),
                error: source,
            }),
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .map_err(|source| HookConfigError::Json {
                    path: file.path.clone(),
                    error: source,
                })
                .and_then(|root| parse(dialect, &file.path, &root)),
        };
        match parsed {
            Ok(parsed) => {
                file.handlers = parsed.handlers;
                file.warnings = parsed.warnings;
            }
            Err(e) => {
                file.status = FileStatus::Rejected;
                file.error = Some(e.to_string());
            }
        }
        file
    }

    /// Logs the load: warnings, and why nothing from the file runs.
    pub(super) fn log(&self) {
        let plugin = self.dialect.plugin_name();
        let path = self.path.display();
        for warning in &self.warnings {
            tracing::warn!("{plugin}: {path}: {warning}");
        }
        match self.status {
            FileStatus::Loaded => {
                tracing::info!(handlers = self.handlers.len(), "{plugin}: loaded {path}");
            }
            FileStatus::Missing => {
                tracing::warn!("{plugin}: hook config {path} not found; no hooks from it");
            }
            FileStatus::Rejected => tracing::warn!(
                "{plugin}: could not load hook config {path}: {} — no hooks registered from it",
                self.error.as_deref().unwrap_or("unknown error")
            ),
        }
    }

    /// The list API's view.
    pub(super) fn status(&self, default_timeout: Duration) -> HookFileStatus {
        HookFileStatus {
            dialect: self.dialect,
            path: self.path.clone(),
            project: self.project,
            status: self.status,
            error: self.error.clone(),
            warnings: self.warnings.clone(),
            handlers: self
                .handlers
                .iter()
                .map(|h| HandlerInfo {
                    id: h.id.clone(),
                    event: h.event,
                    matcher: h.matcher_text.clone(),
                    command: h.command.clone(),
                    timeout: h.timeout.unwrap_or(default_timeout),
                })
                .collect(),
        }
    }
}

/// What a file gave: its handlers in file order, and what was skipped.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub handlers: Vec<Handler>,
    pub warnings: Vec<String>,
}

/// Parses a file's JSON root. Only an invalid matcher is an error; everything else malformed is
/// skipped with a warning.
pub(super) fn parse(
    dialect: Dialect,
    path: &Path,
    root: &Value,
) -> Result<Parsed, HookConfigError> {
    let mut out = Parsed::default();
    let Some(root) = root.as_object() else {
        out.warnings
            .push("the file is not a JSON object; no hooks".to_owned());
        return Ok(out);
    };
    let events: &Map<String, Value> = match root.get("hooks") {
        Some(Value::Object(map)) => map,
        Some(_) => {
            out.warnings
                .push("\"hooks\" is not an object; no hooks".to_owned());
            return Ok(out);
        }
        None => root,
    };
    for key in events.keys() {
        if !EventName::ALL
            .iter()
            .any(|e| e.as_str() == key && e.supported_by(dialect))
        {
            out.warnings.push(format!(
                "ignoring event {key:?} (not supported by dsh's {} hooks)",
                dialect.as_str()
            ));
        }
    }
    let label = path.display().to_string();
    for event in EventName::ALL
        .into_iter()
        .filter(|e| e.supported_by(dialect))
    {
        let Some(groups) = events.get(event.as_str()) else {
            continue;
        };
        let Some(groups) = groups.as_array() else {
            out.warnings
                .push(format!("{}: not an array; skipped", event.as_str()));
            continue;
        };
        for (g, group) in groups.iter().enumerate() {
            parse_group(dialect, &label, event, g, group, &mut out)?;
        }
    }
    Ok(out)
}

fn parse_group(
    dialect: Dialect,
    label: &str,
    event: EventName,
    g: usize,
    group: &Value,
    out: &mut Parsed,
) -> Result<(), HookConfigError> {
    let name = event.as_str();
    let Some(group) = group.as_object() else {
        out.warnings
            .push(format!("{name}[{g}]: not an object; skipped"));
        return Ok(());
    };
    let matcher_text = if event.takes_matcher() {
        match group.get("matcher") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                out.warnings.push(format!(
                    "{name}[{g}]: matcher is not a string; the group matches everything"
                ));
                None
            }
        }
    } else {
        None
    };
    let matcher =
        Matcher::compile(matcher_text.as_deref()).map_err(|e| HookConfigError::Matcher {
            dialect: dialect.as_str(),
            pattern: matcher_text.clone().unwrap_or_default(),
            event: name,
            message: regex_message(&e),
        })?;
    let matcher_text = matcher_text.filter(|_| !matcher.is_all());
    let Some(hooks) = group.get("hooks").and_then(Value::as_array) else {
        out.warnings
            .push(format!("{name}[{g}]: no \"hooks\" array; skipped"));
        return Ok(());
    };
    for (i, hook) in hooks.iter().enumerate() {
        let at = format!("{name}[{g}][{i}]");
        let Some(hook) = hook.as_object() else {
            out.warnings.push(format!("{at}: not an object; skipped"));
            continue;
        };
        let mut http = None;
        match hook.get("type") {
            None => {}
            Some(Value::String(t)) if t == "command" => {}
            Some(Value::String(t)) if t == "http" && dialect == Dialect::ClaudeCode => {
                match http_hook(hook, &at) {
                    Ok(spec) => http = Some(spec),
                    Err(warning) => {
                        out.warnings.push(warning);
                        continue;
                    }
                }
            }
            Some(other) => {
                let t = other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned);
                let only = match dialect {
                    Dialect::ClaudeCode => "only command and http hooks run",
                    Dialect::Codex => "only sync command hooks run",
                };
                out.warnings.push(format!(
                    "skipping unsupported {t:?} hook on {name} ({only}) at {at}"
                ));
                continue;
            }
        }
        let background = hook.get("async").and_then(Value::as_bool) == Some(true);
        if background && (dialect != Dialect::ClaudeCode || http.is_some()) {
            out.warnings.push(format!(
                "skipping async hook on {name} (only Claude Code's command hooks run in the background) at {at}"
            ));
            continue;
        }
        let key = if http.is_some() { "url" } else { "command" };
        let Some(command) = hook.get(key).and_then(Value::as_str) else {
            out.warnings
                .push(format!("{at}: no string \"{key}\"; skipped"));
            continue;
        };
        if command.trim().is_empty() {
            out.warnings.push(format!("{at}: empty command; skipped"));
            continue;
        }
        out.handlers.push(Handler {
            id: format!("{label}#{at}"),
            event,
            matcher_text: matcher_text.clone(),
            matcher: matcher.clone(),
            command: command.to_owned(),
            http,
            timeout: timeout(dialect, hook, &at, &mut out.warnings),
            background,
        });
    }
    Ok(())
}

/// A Claude Code `type: "http"` hook's `url` (http or https), `headers` (an object of strings)
/// and `allowedEnvVars` (strings); `Err` is the warning that skips it.
fn http_hook(hook: &Map<String, Value>, at: &str) -> Result<HttpHook, String> {
    let url = hook
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}: http hook without a string \"url\"; skipped"))?;
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => {
            return Err(format!(
                "{at}: http hook url scheme {:?} is not http or https; skipped",
                u.scheme()
            ));
        }
        Err(e) => {
            return Err(format!(
                "{at}: http hook url {url:?} is invalid ({e}); skipped"
            ));
        }
    }
    let headers = match hook.get("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(v) => Ok((k.clone(), v.to_owned())),
                None => Err(format!("{at}: header {k:?} is not a string; skipped")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("{at}: \"headers\" is not an object; skipped")),
    };
    let allowed_env = match hook.get("allowedEnvVars") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{at}: \"allowedEnvVars\" holds a non-string; skipped"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("{at}: \"allowedEnvVars\" is not an array; skipped")),
    };
    Ok(HttpHook {
        headers,
        allowed_env,
    })
}

/// The hook's timeout in seconds: `timeout`, and for Codex the alias `timeoutSec`.
fn timeout(
    dialect: Dialect,
    hook: &Map<String, Value>,
    at: &str,
    warnings: &mut Vec<String>,
) -> Option<Duration> {
    let (key, value) = std::iter::once("timeout")
        .chain((dialect == Dialect::Codex).then_some("timeoutSec"))
        .find_map(|k| hook.get(k).map(|v| (k, v)))?;
    let parsed = value
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok());
    if parsed.is_none() {
        warnings.push(format!(
            "{at}: {key} {value} is not a positive number of seconds; using the default"
        ));
    }
    parsed
}

/// The regex crate's message without its multi-line caret diagram: the last line says what is
/// wrong, and it keeps the list API and logs on one line.
fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or_default().trim();
    last.strip_prefix("error: ").unwrap_or(last).to_owned()
}
