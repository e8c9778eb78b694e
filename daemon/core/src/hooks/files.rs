//! Which hook files a session uses and how each fared: the configured files (loaded at start and
//! on reload), each session directory's project files (parsed again only when they change), and
//! the handlers of an event a session in a directory runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::config::{self, HookFile, HookSettings};
use super::{Dialect, EventName, HookEvent, Hooks};
use crate::locks::{lock, read_lock, write_lock};

/// How a hook file fared at its last load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    /// Parsed; its handlers are active.
    Loaded,
    /// Not found; nothing from it runs.
    Missing,
    /// Unreadable, not JSON, or with an invalid matcher; nothing from it runs.
    Rejected,
}

/// One active handler, as the list API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerInfo {
    /// Stable id used in records: `<file>#<Event>[<group>][<index>]`.
    pub id: String,
    /// The event.
    pub event: EventName,
    /// The matcher as written (`None` when it matches everything or is ignored).
    pub matcher: Option<String>,
    /// The command as written.
    pub command: String,
    /// The effective timeout (the file's value, or the default).
    pub timeout: Duration,
}

/// One hook file's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFileStatus {
    /// Its dialect.
    pub dialect: Dialect,
    /// The path as configured (project files: `<cwd>/.claude/settings.json` or
    /// `<cwd>/.codex/hooks.json`).
    pub path: PathBuf,
    /// A project file of some session's cwd (read at invocation time) rather than a configured one.
    pub project: bool,
    /// Loaded, missing or rejected.
    pub status: FileStatus,
    /// Why it was rejected (or could not be read).
    pub error: Option<String>,
    /// What was skipped while parsing (unsupported hook types, async hooks, unknown events, ...).
    pub warnings: Vec<String>,
    /// The active handlers, in file order.
    pub handlers: Vec<HandlerInfo>,
}

/// When a project file was last parsed, to reparse only after it changed.
pub(super) type Stamp = (Option<SystemTime>, u64);

impl Hooks {
    /// Rereads every configured file and forgets parsed project files; returns the new state.
    /// Runs already started keep the handlers they started with.
    pub fn reload(&self) -> Vec<HookFileStatus> {
        let files = load_configured(&self.settings);
        *write_lock(&self.files) = Arc::new(files);
        lock(&self.project).clear();
        self.list()
    }

    /// The configured files, then every project file read since the last reload (by path).
    pub fn list(&self) -> Vec<HookFileStatus> {
        let default = self.settings.default_timeout;
        let mut out: Vec<HookFileStatus> = self
            .configured()
            .iter()
            .map(|f| f.status(default))
            .collect();
        let project = lock(&self.project);
        let mut seen: Vec<&Arc<HookFile>> = project.values().map(|(_, f)| f).collect();
        seen.sort_by(|a, b| (a.dialect, &a.path).cmp(&(b.dialect, &b.path)));
        out.extend(seen.into_iter().map(|f| f.status(default)));
        out
    }

    /// Whether a loaded handler of `name` exists for a session in `cwd`, matchers aside: lets a
    /// caller skip building a payload that no hook would read (a Stop payload carries the turn's
    /// whole answer, a copy of a reply that may be tens of megabytes).
    pub async fn handles(&self, name: EventName, cwd: &Path) -> bool {
        !self.select(name, cwd, None).await.is_empty()
    }

    /// The handlers of `name` a session in `cwd` would run, as (file, index into its handlers):
    /// from every file it uses, in each dialect that has the event, and when `event` is given
    /// only those whose matcher takes its subjects in that dialect.
    pub(super) async fn select(
        &self,
        name: EventName,
        cwd: &Path,
        event: Option<&HookEvent>,
    ) -> Vec<(Arc<HookFile>, usize)> {
        let mut selected = Vec::new();
        for dialect in Dialect::ALL {
            if !name.supported_by(dialect) || event.is_some_and(|e| !e.fires_for(dialect)) {
                continue;
            }
            let subjects = event.map(|event| event.matcher_subjects(dialect));
            for file in self.files_for(dialect, cwd).await {
                for (i, h) in file.handlers.iter().enumerate() {
                    let matched = subjects.as_ref().is_none_or(|s| h.matcher.matches(s));
                    if h.event == name && matched {
                        selected.push((file.clone(), i));
                    }
                }
            }
        }
        selected
    }

    fn configured(&self) -> Arc<Vec<Arc<HookFile>>> {
        read_lock(&self.files).clone()
    }

    /// The dialect's configured files, then its project file when enabled (unless it is one of the
    /// configured files already, so nothing runs twice).
    async fn files_for(&self, dialect: Dialect, cwd: &Path) -> Vec<Arc<HookFile>> {
        let mut files: Vec<Arc<HookFile>> = self
            .configured()
            .iter()
            .filter(|f| f.dialect == dialect && f.status == FileStatus::Loaded)
            .cloned()
            .collect();
        if self.settings.project_hooks {
            let path = config::project_file(dialect, cwd);
            let configured = self.configured();
            if !configured.iter().any(|f| f.path == path)
                && let Some(file) = self.project_file(dialect, path).await
                && file.status == FileStatus::Loaded
            {
                files.push(file);
            }
        }
        files
    }

    /// A project file, parsed again only when its modification time or size changed; `None` when
    /// it does not exist (the normal case: no project hooks).
    async fn project_file(&self, dialect: Dialect, path: PathBuf) -> Option<Arc<HookFile>> {
        let Ok(meta) = tokio::fs::metadata(&path).await else {
            lock(&self.project).remove(&path);
            return None;
        };
        let stamp: Stamp = (meta.modified().ok(), meta.len());
        if let Some((seen, file)) = lock(&self.project).get(&path)
            && *seen == stamp
        {
            return Some(file.clone());
        }
        let text = match config::check_readable(&meta) {
            Ok(()) => tokio::fs::read(&path).await,
            Err(e) => Err(e),
        };
        let file = Arc::new(HookFile::from_read(dialect, path.clone(), true, text));
        file.log();
        lock(&self.project).insert(path, (stamp, file.clone()));
        Some(file)
    }
}

pub(super) fn load_configured(settings: &HookSettings) -> Vec<Arc<HookFile>> {
    let mut files = Vec::new();
    for (dialect, paths) in [
        (Dialect::ClaudeCode, &settings.claude_code),
        (Dialect::Codex, &settings.codex),
    ] {
        for path in paths {
            let file = HookFile::load(dialect, path.clone());
            file.log();
            files.push(Arc::new(file));
        }
    }
    files
}
