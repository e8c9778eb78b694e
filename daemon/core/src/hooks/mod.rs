//! Hooks: run the command hooks people already wrote for Claude Code and Codex, unchanged
//! (CONTRACTS §8).
//!
//! One dialect-neutral core — `matcher.rs`, `runner.rs`, `decode.rs`, `merge.rs` and the durable
//! `hook/invoked` / `hook/result` records — under two dialect bridges that only differ in what they
//! read (`config.rs`) and what they write on the hook's stdin (`claude_code.rs`, `codex.rs`).
//! `event.rs` holds the event vocabulary the loop fires with.
//!
//! Claude Code `type: "http"` hooks are the same jobs with a POST instead of a process
//! (`http.rs`); `transcript.rs` keeps the optional Claude-Code-format transcript projection. The
//! loop fires PermissionRequest and Notification from its approval path, PostToolUseFailure after
//! a failed call, and StopFailure when a turn ends in an error.
//!
//! Each dialect sees dsh through its own harness's eyes (`tools.rs`: the `bash` tool is `Bash`, with
//! that harness's `tool_input` and `tool_response`) and is decoded by its own harness's rules
//! (`decode.rs`), so a script written for Claude Code or for Codex does here what it does there.
//!
//! The agent loop owns the effects: it calls [`Hooks::run`] at each interception point, appends
//! [`HookRun::records`] to the session log, and applies [`HookRun::outcome`] (deny a tool, run it
//! with rewritten input, add feedback to or replace a result, end a turn `blocked` or `stopped`,
//! inject context, force one more step on Stop, ...). This module never touches the session log or
//! the session file: the transcript location comes from [`PersistenceHandle::locate`], which does
//! no I/O, at the moment each hook is invoked.
//!
//! Decisions worth knowing (details in each file):
//!
//! - **Concurrency**: the matching handlers of one event (both dialects) run at once, as upstream
//!   Claude Code and Codex do; their outputs are merged, and their records listed, in configured
//!   order (Claude Code files first, then Codex; files in configured order, then the project file;
//!   groups and hooks in file order), so the result does not depend on which process ended first.
//! - **Drop safety**: hooks run as tasks of a `JoinSet` owned by the `run` future; dropping that
//!   future aborts the tasks, which drops their executor calls, which kills their process groups.
//! - **Never fail the caller**: a hook that cannot start, times out, is cancelled, exits with
//!   anything but 0 or 2, or prints malformed JSON is a non-blocking `error`, logged and recorded.

#![warn(missing_docs)]

mod background;
mod claude_code;
mod codex;
mod config;
mod decode;
mod env_file;
mod event;
mod files;
mod http;
mod job;
mod matcher;
mod merge;
mod payload;
mod runner;
mod sandboxing;
mod tools;
mod transcript;
mod words;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub(crate) use background::{Background, BackgroundEnd};
pub use config::HookSettings;
pub(crate) use decode::SessionRule;
pub(crate) use env_file::Assignment;
pub(crate) use event::{
    Dialect, EventName, NotificationKind, SessionEndReason, SessionSource, StopFailureKind,
    SubagentOf,
};
pub use event::{HookContext, HookEvent};
use files::HandlerInfo;
pub use files::{FileStatus, HookFileStatus};
pub(crate) use sandboxing::HookSandbox;
pub(crate) use tools::from_claude_code;
pub(crate) use transcript::{
    SessionEvents, TranscriptMode, record as claude_record, timestamp as claude_timestamp,
};

use config::HookFile;
use decode::{HookOutput, Verdict};
use files::{Stamp, load_configured};
use job::Job;
use merge::Decoded;

use crate::exec::Executor;
use crate::persistence::PersistenceHandle;
use dsh_session::EventData;
use tracing::Instrument;

/// The merged permission decision, strictest first: `Deny` > `Ask` > `Allow` > `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// No hook decided anything.
    #[default]
    None,
    /// A hook allowed the call. It does not pre-approve anything; the call simply proceeds.
    Allow,
    /// A hook asked for approval. With no approver the loop must fail closed (deny).
    Ask,
    /// A hook blocked (exit 2, `decision: "block"`, `permissionDecision: "deny"`).
    Deny,
}

/// What the matching hooks of one event decided, merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergedOutcome {
    /// The strictest decision. Always `None` for events that cannot block.
    pub decision: Decision,
    /// For `Deny`/`Ask`: the winning hooks' reasons joined by a blank line, or a default such as
    /// `blocked by PreToolUse hook`. `None` otherwise.
    pub reason: Option<String>,
    /// Context to add to the next model request, each attributed to its dialect's plugin name.
    pub additional_context: Vec<(&'static str, String)>,
    /// A hook printed `continue: false` where its harness then stops the turn.
    pub stop: bool,
    /// The first such hook's `stopReason`.
    pub stop_reason: Option<String>,
    /// `systemMessage`s, for the user (never the model).
    pub system_messages: Vec<String>,
    /// PreToolUse, and PermissionRequest allowed: the arguments the call runs with instead of
    /// the model's (a hook's `updatedInput`, translated to dsh's arguments and checked).
    pub updated_input: Option<serde_json::Value>,
    /// PermissionRequest allowed: the session "allow always" rules the hooks added
    /// (`updatedPermissions`), each once.
    pub rules: Vec<SessionRule>,
    /// PermissionDenied: a hook said the model may retry the call.
    pub retry: bool,
    /// SessionStart: the title a Claude Code hook gave the session (`sessionTitle`).
    pub session_title: Option<String>,
    /// PostToolUse: feedback for the model next to the tool's output (Claude Code's block and
    /// exit 2), each attributed to its dialect's plugin name.
    pub feedback: Vec<(&'static str, String)>,
    /// PostToolUse: the text that replaces the tool's output for the model (Codex's block, exit 2
    /// and `continue: false`).
    pub replacement: Option<String>,
    /// The ids of the handlers whose answer is the decision (for Allow and Deny: who answered a
    /// PermissionRequest), in configured order; empty when nothing was decided.
    pub decided_by: Vec<String>,
}

/// The result of [`Hooks::run`].
#[derive(Debug, Default)]
pub struct HookRun {
    /// The merged decision and context.
    pub outcome: MergedOutcome,
    /// `hook/invoked` and `hook/result` pairs, one pair per handler, in configured order, for the
    /// loop to append to the session log.
    pub records: Vec<EventData>,
    /// The background (`async`) hooks of the call, not started: the caller runs them without
    /// waiting, bounded and killed with its agent ([`Background`]).
    pub background: Vec<Background>,
    /// What Claude Code SessionStart hooks wrote to `CLAUDE_ENV_FILE`, in configured order,
    /// names already checked: the agent's later commands get them (`Agent::add_env`).
    pub(crate) env: Vec<Assignment>,
}

/// The hook engine. Share it behind an `Arc`; every method takes `&self`.
pub struct Hooks {
    settings: HookSettings,
    executor: Arc<Executor>,
    persistence: Arc<PersistenceHandle>,
    files: RwLock<Arc<Vec<Arc<HookFile>>>>,
    project: Mutex<HashMap<PathBuf, (Stamp, Arc<HookFile>)>>,
    /// The Claude Code transcript projections, when `claude_code_transcript = "claude"`.
    transcripts: Option<transcript::Transcripts>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Hooks {
    /// Loads the configured files (blocking file reads: call at start-up or on the blocking pool).
    /// Missing and bad files are recorded and logged, never fatal. Out-of-range settings (zero
    /// timeout or summary length) fall back to their defaults with a warning.
    pub fn new(
        settings: HookSettings,
        executor: Arc<Executor>,
        persistence: Arc<PersistenceHandle>,
    ) -> Self {
        let settings = settings.sanitized();
        let files = load_configured(&settings);
        let transcripts = transcript::Transcripts::for_settings(
            settings.claude_code_transcript,
            settings.transcript_dir.as_deref(),
        );
        Self {
            settings,
            executor,
            persistence,
            files: RwLock::new(Arc::new(files)),
            project: Mutex::new(HashMap::new()),
            transcripts,
        }
    }

    /// How many Stop-forced continuations one turn may have (the loop enforces it).
    pub fn stop_continuation_cap(&self) -> u32 {
        self.settings.stop_continuation_cap
    }

    /// The Notification message of a call of `tool` (its name as hooks know it) waiting for a
    /// person: Claude Code's wording, with `hooks.notification_name`.
    pub fn permission_message(&self, tool: &str) -> String {
        format!(
            "{} needs your permission to use {tool}",
            self.settings.notification_name
        )
    }

    /// The Notification message of a top-level agent waiting for its next prompt: Claude Code's
    /// wording, with `hooks.notification_name`.
    pub fn idle_message(&self) -> String {
        format!(
            "{} is waiting for your input",
            self.settings.notification_name
        )
    }

    /// The settings in force (after sanitizing).
    pub fn settings(&self) -> &HookSettings {
        &self.settings
    }

    /// Runs every handler matching `event` (both dialects, concurrently), waits for all of them and
    /// merges their outputs. Never fails: broken hooks become `error` records.
    pub async fn run(&self, ctx: &HookContext, event: HookEvent) -> HookRun {
        let name = event.name();
        let selected = self.select(name, &ctx.header.cwd, Some(&event)).await;
        if selected.is_empty() {
            return HookRun::default();
        }
        // The ids the enclosing span already names (a `turn` names the session and turn, a
        // `tool_call` the call too) are left out: a line carries each id once.
        let within = tracing::Span::current().metadata().map(|m| m.name());
        let span = tracing::info_span!(
            "hook_run",
            event = name.as_str(),
            session = tracing::field::Empty,
            turn = tracing::field::Empty,
            call_id = tracing::field::Empty,
            handlers = selected.len(),
        );
        if !matches!(within, Some("turn" | "tool_call")) {
            span.record("session", tracing::field::display(&ctx.header.id));
            span.record("turn", ctx.turn);
        }
        if within != Some("tool_call")
            && let Some(call) = event.tool_use_id()
        {
            span.record("call_id", call);
        }
        self.run_selected(ctx, &event, &selected)
            .instrument(span)
            .await
    }

    /// Brings `header`'s Claude Code transcript projection up to date one last time (its agent
    /// is closing); the file stays while the session is stored.
    pub fn close_transcript(
        &self,
        header: &dsh_session::SessionHeader,
        model: &str,
        events: &dyn SessionEvents,
    ) {
        if let Some(transcripts) = &self.transcripts {
            transcripts.close(header, model, events);
        }
    }

    /// Brings a child agent's Claude Code transcript projection up to date before its parent's
    /// SubagentStop hooks name it (`agent_transcript_path`).
    pub fn project_child(
        &self,
        child: &dsh_session::SessionHeader,
        model: &str,
        events: &dyn SessionEvents,
    ) {
        if let Some(transcripts) = &self.transcripts {
            transcripts.sync(child, model, events);
        }
    }

    /// Removes `session`'s Claude Code transcript projection (the session was deleted).
    pub fn delete_transcript(&self, session: &dsh_session::SessionId) {
        if let Some(transcripts) = &self.transcripts {
            transcripts.delete(session);
        }
    }

    /// Brings the Claude Code transcript projection of the firing session up to date, when one
    /// is kept and a Claude Code handler is about to read it. Events fired inside a child agent
    /// name the parent's transcript (as Claude Code does), which is brought up to date by the
    /// parent's own hooks.
    fn sync_transcript(&self, ctx: &HookContext, selected: &[(Arc<HookFile>, usize)]) {
        let (Some(transcripts), Some(events), None) =
            (&self.transcripts, &ctx.events, &ctx.subagent)
        else {
            return;
        };
        if selected
            .iter()
            .any(|(f, _)| f.dialect == Dialect::ClaudeCode)
        {
            transcripts.sync(&ctx.header, &ctx.model, events.as_ref());
        }
    }

    /// Runs the `selected` handlers of `event` and merges what they said.
    async fn run_selected(
        &self,
        ctx: &HookContext,
        event: &HookEvent,
        selected: &[(Arc<HookFile>, usize)],
    ) -> HookRun {
        let name = event.name();
        self.sync_transcript(ctx, selected);
        let reach = sandboxing::Reach::of(
            ctx.sandbox,
            &ctx.header.cwd,
            &self.executor.config().sandbox,
            self.settings.sandbox,
        )
        .map(Arc::new);
        let mut payloads: HashMap<Dialect, Arc<Vec<u8>>> = HashMap::new();
        let mut jobs = Vec::with_capacity(selected.len());
        for (file, i) in selected {
            let Some(handler) = file.handlers.get(*i) else {
                continue;
            };
            let stdin = payloads
                .entry(file.dialect)
                .or_insert_with(|| Arc::new(self.payload(file.dialect, ctx, event)))
                .clone();
            let mut job = self.job(file, handler, name, ctx, stdin);
            job.reach = reach.clone();
            jobs.push(job);
        }
        let (background, jobs): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.background);
        let mut jobs = jobs;
        let mut env_files: Vec<Option<env_file::EnvFile>> = jobs
            .iter_mut()
            .map(|job| env_file::for_job(&self.executor, name, job))
            .collect();
        let background = background
            .into_iter()
            .map(|job| self.background(job, name, ctx, event))
            .collect();
        let finished = runner::run_all(&self.executor, jobs.clone()).await;

        let mut outputs: Vec<Decoded> = Vec::with_capacity(jobs.len());
        let mut records = Vec::with_capacity(jobs.len() * 2);
        let mut env = Vec::new();
        for ((job, end), file) in jobs.iter().zip(finished).zip(env_files.iter_mut()) {
            let mut output = decode::decode(&end, name, job.dialect);
            if let Some(file) = file.take() {
                env_file::read_into(file, &self.executor, &mut output, &mut env);
            }
            let arguments = decode::rewritten_arguments(job.dialect, event, &mut output);
            log_output(job, &output);
            tracing::info!(
                handler = %job.handler_id,
                dialect = job.dialect.as_str(),
                decision = output.record_decision(),
                exit_code = end.exit_code,
                duration_ms = end.duration.as_millis(),
                sandbox = end.sandbox.as_ref().map(|c| c.policy.to_string()),
                sandbox_reason = end.sandbox.as_ref().map(|c| c.reason.as_str()),
                "hook ran"
            );
            records.extend(records_of(
                job,
                &end,
                &output,
                ctx.turn,
                event,
                self.settings.stderr_summary_chars,
            ));
            outputs.push(Decoded {
                dialect: job.dialect,
                handler: job.handler_id.clone(),
                output,
                arguments,
            });
        }
        let outcome = merge::merge(name, &outputs);
        if outcome.decision != Decision::None || outcome.stop {
            tracing::info!(
                decision = ?outcome.decision,
                reason = outcome.reason.as_deref(),
                stop = outcome.stop,
                "hooks decided"
            );
        }
        HookRun {
            outcome,
            records,
            background,
            env,
        }
    }

    fn payload(&self, dialect: Dialect, ctx: &HookContext, event: &HookEvent) -> Vec<u8> {
        match dialect {
            Dialect::ClaudeCode => {
                claude_code::payload(&self.persistence, ctx, event, self.transcripts.as_ref())
            }
            Dialect::Codex => codex::payload(&self.persistence, ctx, event),
        }
    }

    fn job(
        &self,
        file: &HookFile,
        handler: &config::Handler,
        event: EventName,
        ctx: &HookContext,
        stdin: Arc<Vec<u8>>,
    ) -> Job {
        let (command, env) = match file.dialect {
            Dialect::ClaudeCode if handler.http.is_none() => (
                claude_code::expand_command(
                    &handler.command,
                    &ctx.header.cwd,
                    file.plugin_root.as_deref(),
                ),
                claude_code::env(&ctx.header.cwd, file.plugin_root.as_deref(), ctx.effort),
            ),
            // A Codex command, and an HTTP hook's URL, are used as written, with no environment.
            _ => (handler.command.clone(), Default::default()),
        };
        Job {
            dialect: file.dialect,
            handler_id: handler.id.clone(),
            command,
            cwd: ctx.header.cwd.clone(),
            env,
            stdin,
            timeout: timeout(
                file.dialect,
                event,
                handler.timeout,
                self.settings.default_timeout,
            ),
            cancel: ctx.cancel.clone(),
            http: handler.http.clone(),
            file: file.path.clone(),
            // Set by the caller, once for every job of a run.
            reach: None,
            background: handler.background,
        }
    }
}

/// Codex's SessionEnd hooks "use 1 second by default and support up to 3 seconds" (its hooks
/// reference, config notes), so a close is never held up for long; every other hook has its
/// file's timeout or `hooks.default_timeout_ms`.
fn timeout(
    dialect: Dialect,
    event: EventName,
    configured: Option<Duration>,
    default: Duration,
) -> Duration {
    if dialect == Dialect::Codex && event == EventName::SessionEnd {
        return configured
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(3));
    }
    configured.unwrap_or(default)
}

fn log_output(job: &Job, output: &HookOutput) {
    let plugin = job.dialect.plugin_name();
    if let Some(note) = output.error_note() {
        tracing::warn!(handler = %job.handler_id, "{plugin}: hook failed (non-blocking): {note}");
    }
    if let Some(message) = &output.system_message {
        tracing::info!(handler = %job.handler_id, "{plugin}: hook system message: {message}");
    }
    if let (Some(note), false) = (&output.note, output.verdict == Verdict::Error) {
        tracing::warn!(handler = %job.handler_id, "{plugin}: {note}");
    }
}

/// The `hook/invoked` and `hook/result` of `job`, which ended with `end` and said `output`.
fn records_of(
    job: &Job,
    end: &job::RunEnd,
    output: &decode::HookOutput,
    turn: Option<u32>,
    event: &HookEvent,
    stderr_chars: usize,
) -> [EventData; 2] {
    let summary = runner::summarize(end, output.note.as_deref(), stderr_chars);
    let name = event.name();
    [
        EventData::HookInvoked {
            dialect: job.dialect.as_str().to_owned(),
            event: name.as_str().to_owned(),
            handler: job.handler_id.clone(),
            turn,
            tool_call_id: event.tool_use_id().map(str::to_owned),
        },
        EventData::HookResult {
            dialect: job.dialect.as_str().to_owned(),
            event: name.as_str().to_owned(),
            handler: job.handler_id.clone(),
            decision: output.record_decision().to_owned(),
            exit_code: end.exit_code,
            stderr_summary: summary,
            duration_ms: u64::try_from(end.duration.as_millis()).unwrap_or(u64::MAX),
            system_message: output.system_message.clone(),
            sandbox: end.sandbox.as_ref().map(job::Confined::record),
        },
    ]
}
