//! Hook tests: real hook files in temporary directories, real bash scripts, the real executor.
//!
//! Synchronisation is always on a condition (a file a hook writes, a process gone from `/proc`),
//! polled with a generous bound; nothing asserts on durations. Long-running hooks use distinctive
//! `sleep` arguments so `/proc/<pid>/cmdline` tells them apart from an unrelated process that
//! reused the pid.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod config;
mod decisions;
mod examples;
mod payload;
mod permissions;
mod process;
mod sandboxing;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use super::{HookContext, HookEvent, HookRun, HookSettings, Hooks};
use crate::call::{ToolDetail, ToolOutput};
use crate::exec::{ExecConfig, Executor};
use crate::persistence::{
    BackendKind, Persistence, PersistenceError, PersistenceHandle, SessionLocation, StoredSession,
};
use dsh_session::{Event, EventData, SessionHeader, SessionId};

/// A persistence double that only answers `kind`, `path` and `locate`: hooks must never need more.
#[derive(Debug)]
pub(super) struct Locator {
    root: PathBuf,
    /// Whether `locate` answers (a JSONL-like backend) or not (a backend without per-session files).
    answers: bool,
}

impl Locator {
    fn refuse<T>(&self) -> Result<T, PersistenceError> {
        Err(PersistenceError::Config(
            "test double: hooks may only call locate".into(),
        ))
    }
}

#[async_trait::async_trait]
impl Persistence for Locator {
    fn kind(&self) -> BackendKind {
        BackendKind::Jsonl
    }
    fn path(&self) -> PathBuf {
        self.root.clone()
    }
    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.answers.then(|| SessionLocation {
            kind: "jsonl",
            path: self.root.join(header.id.as_str()).join("session.jsonl"),
            database: None,
        })
    }
    async fn stored_len(&self, _: &SessionId) -> Result<Option<u64>, PersistenceError> {
        self.refuse()
    }
    async fn append(&self, _: &SessionHeader, _: &[Event]) -> Result<(), PersistenceError> {
        self.refuse()
    }
    async fn load(&self, _: &SessionId) -> Result<StoredSession, PersistenceError> {
        self.refuse()
    }
    async fn inspect(&self, _: &SessionId) -> Result<StoredSession, PersistenceError> {
        self.refuse()
    }
    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        self.refuse()
    }
    async fn delete(&self, _: &SessionId) -> Result<(), PersistenceError> {
        self.refuse()
    }
}

/// A temporary world: a session cwd, hook files, an executor with an injected daemon environment
/// (including an outer harness's `DSH_*` values and a secret), and the locate-only backend.
pub(super) struct Fx {
    pub tmp: TempDir,
    pub cwd: PathBuf,
    pub executor: Arc<Executor>,
    pub persistence: Arc<PersistenceHandle>,
    pub header: Arc<SessionHeader>,
}

impl Fx {
    pub(crate) fn new() -> Self {
        Self::with(true)
    }

    /// `locates`: whether the backend answers `locate` (JSONL-like) or not (SQLite-like).
    pub(crate) fn with(locates: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path().join("proj");
        std::fs::create_dir(&cwd).unwrap();
        let config = ExecConfig {
            kill_grace: Duration::from_millis(300),
            spill_dir: tmp.path().join("spill"),
            // Where a hook run in its agent's sandbox gets its temporary directory.
            sandbox: crate::sandbox::SandboxSettings {
                tmp_roots: vec![tmp.path().join("sandbox-tmp")],
                ..Default::default()
            },
            ..ExecConfig::default()
        };
        let executor = Arc::new(Executor::with_base_env(config, ambient(tmp.path())).unwrap());
        let persistence = Arc::new(PersistenceHandle::new(Arc::new(Locator {
            root: tmp.path().join("sessions"),
            answers: locates,
        })));
        let header = Arc::new(SessionHeader::new(
            SessionId::parse("s-1").unwrap(),
            cwd.clone(),
            1,
        ));
        Self {
            tmp,
            cwd,
            executor,
            persistence,
            header,
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Where the double locates `header`'s transcript.
    pub(crate) fn transcript_of(&self, header: &SessionHeader) -> PathBuf {
        self.path("sessions")
            .join(header.id.as_str())
            .join("session.jsonl")
    }

    /// Writes a hook file under the temporary directory.
    pub(crate) fn file(&self, name: &str, config: &Value) -> PathBuf {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
        path
    }

    pub(crate) fn hooks(&self, settings: HookSettings) -> Hooks {
        Hooks::new(settings, self.executor.clone(), self.persistence.clone())
    }

    /// Hooks with one Claude Code file.
    pub(crate) fn cc(&self, config: &Value) -> Hooks {
        let path = self.file("cc/settings.json", config);
        self.hooks(HookSettings {
            claude_code: vec![path],
            ..HookSettings::default()
        })
    }

    /// Hooks with one Codex file.
    pub(crate) fn codex(&self, config: &Value) -> Hooks {
        let path = self.file("codex/hooks.json", config);
        self.hooks(HookSettings {
            codex: vec![path],
            ..HookSettings::default()
        })
    }

    pub(crate) fn ctx(&self) -> HookContext {
        HookContext {
            header: self.header.clone(),
            subagent: None,
            turn: Some(3),
            model: "test-model".into(),
            effort: None,
            sandbox: crate::sandbox::SandboxPolicy::UNCONFINED,
            cancel: CancellationToken::new(),
            background: None,
            events: None,
        }
    }

    /// A file path quoted for a hook command.
    pub(crate) fn q(&self, name: &str) -> String {
        format!("'{}'", self.path(name).display())
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }
}

/// The daemon environment the executor is built with.
fn ambient(tmp: &Path) -> Vec<(OsString, OsString)> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let mut vars: Vec<(OsString, OsString)> = [
        ("HOME", tmp.to_str().unwrap()),
        ("PLAIN", "kept"),
        ("MY_API_KEY", "secret"),
        ("DSH_HOME", "/outer/home"),
        ("DSH_SESSION_JSONL", "/outer/session.jsonl"),
        ("dsh_lower", "outer"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    vars.push(("PATH".into(), path));
    vars
}

/// `{"hooks": {event: [{"matcher": m, "hooks": [{"type": "command", "command": c}, ...]}]}}`.
pub(super) fn config(event: &str, matcher: Option<&str>, commands: &[&str]) -> Value {
    let hooks: Vec<Value> = commands
        .iter()
        .map(|c| json!({"type": "command", "command": c}))
        .collect();
    let mut group = json!({ "hooks": hooks });
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({ "hooks": { event: [group] } })
}

pub(super) fn pre_tool(tool: &str, input: Value) -> HookEvent {
    HookEvent::PreToolUse {
        tool_name: tool.into(),
        tool_input: input,
        tool_use_id: "call-1".into(),
    }
}

/// What the bash tool returns for a command that printed `stdout` and `stderr` and exited `code`.
pub(super) fn bash_output(stdout: &str, stderr: &str, code: i32) -> ToolOutput {
    let rendered = format!("{stdout}{stderr}");
    let output = if code == 0 {
        ToolOutput::ok(rendered)
    } else {
        ToolOutput::error(rendered)
    };
    output.with_detail(ToolDetail::Command {
        stdout: stdout.into(),
        stderr: stderr.into(),
        exit_code: Some(code),
        interrupted: false,
    })
}

pub(super) fn post_tool(tool: &str, input: Value, response: ToolOutput) -> HookEvent {
    HookEvent::PostToolUse {
        tool_name: tool.into(),
        tool_input: input,
        tool_use_id: "call-1".into(),
        tool_response: response,
        duration_ms: 7,
    }
}

pub(super) fn prompt(text: &str) -> HookEvent {
    HookEvent::UserPromptSubmit {
        prompt: text.into(),
    }
}

/// The `hook/result` records' decisions, in order.
pub(super) fn decisions(run: &HookRun) -> Vec<String> {
    run.records
        .iter()
        .filter_map(|r| match r {
            EventData::HookResult { decision, .. } => Some(decision.clone()),
            _ => None,
        })
        .collect()
}

/// The `hook/result` records, in order.
pub(super) fn results(run: &HookRun) -> Vec<&EventData> {
    run.records
        .iter()
        .filter(|r| matches!(r, EventData::HookResult { .. }))
        .collect()
}

pub(super) use crate::test_support::keys;

pub(super) use crate::test_support::{alive, eventually, read_pid};
