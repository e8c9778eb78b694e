//! The human form of the event streams (`prompt`, `watch`): one line per event worth a line,
//! streamed text as it comes, and the events of other agents (children) marked with their id.
//! Everything is written through [`crate::safe`]: the models', commands' and hooks' text shows
//! escaped on a terminal, and only dshctl's own dimming and erasing act on it.

use std::collections::HashMap;
use std::io::Write;

use dsh_client::events::{
    self, ApprovalClient, ApprovalScope, ApprovalSource, ApprovalVerdict, EventData, LiveEvent,
    MessageSource, OutputStream, Plan, PlanStatus, Streamed, TextDelta, ToolOutput, UPDATE_PLAN,
    Usage,
};
use dsh_proto::v1;
use serde::Deserialize;

use crate::safe::{self, Control, Terminal};

/// Lines of one call's live output shown at most; the rest is in its result.
const LIVE_LINES: usize = 20;
/// Bytes of one call's live output shown at most (long lines count too).
const LIVE_BYTES: usize = 4096;

/// What has been shown of one call's live output.
#[derive(Debug, Default)]
struct Shown {
    lines: usize,
    bytes: usize,
    /// The cap was reached: nothing more is shown.
    capped: bool,
    /// Per stream (stdout, stderr), the offset the next piece should start at.
    next: [u64; 2],
}

/// What has been printed of the streaming text, and whose lines are marked.
#[derive(Debug, Default)]
pub struct Screen {
    /// The agent whose events print unmarked (`None`: every line is marked).
    main: Option<String>,
    /// The last line is unfinished, and whose text it is.
    mid_line: Option<String>,
    /// Per session: the step whose text is on screen, and how many of its bytes were printed.
    printed: HashMap<String, ((u32, u32), u64)>,
    /// Per session and call: what was shown of its live output.
    outputs: HashMap<(String, String), Shown>,
    /// Live output is dimmed (a terminal, and `NO_COLOR` unset).
    dim: bool,
    /// A transient status line (see [`status`](Self::status)) is on screen.
    status_shown: bool,
    /// What the main agent waits on since its last event, for the status line.
    activity: Option<String>,
}

impl Screen {
    /// A screen on which `main`'s events print unmarked and other agents' with their id.
    pub fn new(main: Option<String>) -> Self {
        Self {
            main,
            dim: crate::output::color(),
            ..Self::default()
        }
    }

    /// Prints `event` in its human form.
    pub fn show(&mut self, event: &v1::Event) -> anyhow::Result<()> {
        let mut w = safe::stdout();
        let result = self.write(&mut w, event).and_then(|()| w.flush());
        crate::output::finish(result)
    }

    /// What the main agent is waiting on, for a status line, once nothing came for a while.
    pub fn activity(&self) -> Option<&str> {
        self.activity.as_deref()
    }

    /// Shows `text` on a transient status line, replacing the previous one, unless a line is
    /// being written (streamed text or output). Only for a terminal: it uses a carriage return
    /// and an erase; the next event clears it.
    pub fn status(&mut self, text: &str) -> anyhow::Result<()> {
        if self.mid_line.is_some() {
            return Ok(());
        }
        let mut w = safe::stdout();
        self.status_shown = true;
        let result = w
            .control(Control::EraseLine)
            .and_then(|()| dimmed(&mut w, self.dim, text))
            .and_then(|()| w.flush());
        crate::output::finish(result)
    }

    /// Erases the status line, if one is shown (before anything else is printed).
    pub fn clear_status(&mut self) -> anyhow::Result<()> {
        if !std::mem::take(&mut self.status_shown) {
            return Ok(());
        }
        let mut w = safe::stdout();
        crate::output::finish(w.control(Control::EraseLine).and_then(|()| w.flush()))
    }

    /// Notes what the main agent waits on after `e`.
    fn note_activity(&mut self, e: &v1::Event, event: &Streamed<'_>) {
        if self
            .main
            .as_deref()
            .is_some_and(|main| main != e.session_id)
        {
            return;
        }
        self.activity = match event {
            Streamed::Live(live) => match live {
                LiveEvent::ModelRetry(_) => Some("waiting to retry".to_owned()),
                LiveEvent::ThoughtDelta(_) => Some("thinking".to_owned()),
                LiveEvent::TextDelta(_) | LiveEvent::ToolOutput(_) => return,
                LiveEvent::Lagged(_) => None,
            },
            Streamed::Logged(data) => match data {
                EventData::StepStart { .. } | EventData::ToolResult { .. } => {
                    Some("waiting for the model".to_owned())
                }
                EventData::ToolCall { name, .. } => Some(format!("running {name}")),
                EventData::AssistantThought { .. } => Some("waiting for the model".to_owned()),
                EventData::ApprovalDecision { .. } => Some("running the call".to_owned()),
                EventData::CompactionStart { .. } => Some("compacting the context".to_owned()),
                EventData::TurnStart { .. }
                | EventData::TurnEnd { .. }
                | EventData::StepEnd { .. }
                | EventData::UserMessage { .. }
                | EventData::AssistantMessage { .. }
                | EventData::ToolRewritten { .. }
                | EventData::ToolFile { .. }
                | EventData::HookInvoked { .. }
                | EventData::HookResult { .. }
                | EventData::SessionTitle { .. }
                | EventData::SessionArchived { .. }
                | EventData::EndSeed {}
                | EventData::Imported { .. }
                | EventData::Settings { .. }
                | EventData::Instructions { .. }
                | EventData::ApprovalRuleRemoved { .. }
                | EventData::ApprovalRuleAdded { .. }
                | EventData::ApprovalRequest { .. }
                | EventData::CompactionEnd { .. }
                | EventData::Unknown(_) => None,
            },
        };
    }

    fn write(&mut self, w: &mut dyn Terminal, e: &v1::Event) -> std::io::Result<()> {
        if std::mem::take(&mut self.status_shown) {
            w.control(Control::EraseLine)?;
        }
        let event = match events::decode(e) {
            Ok(event) => event,
            // dshd's own bytes: never expected, but a line says so rather than nothing.
            Err(error) => return self.line(w, e, format!("⚠ {error}")),
        };
        self.note_activity(e, &event);
        match event {
            Streamed::Live(live) => self.live(w, e, live),
            Streamed::Logged(data) => self.logged(w, e, data),
        }
    }

    /// An unlogged event: streamed text and output, a retry, a lag marker.
    fn live(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        live: LiveEvent<'_>,
    ) -> std::io::Result<()> {
        match live {
            LiveEvent::TextDelta(delta) => self.delta(w, e, &delta),
            // Only the status line says the model is thinking; the step's `assistant/thought`
            // prints the reasoning whole.
            LiveEvent::ThoughtDelta(_) => Ok(()),
            LiveEvent::ToolOutput(output) => self.output(w, e, &output),
            LiveEvent::ModelRetry(retry) => {
                let delay = std::time::Duration::from_millis(retry.delay_ms);
                self.line(
                    w,
                    e,
                    format!("⟳ retrying in {} ({})", seconds(delay), retry.reason),
                )
            }
            LiveEvent::Lagged(lagged) => self.line(
                w,
                e,
                format!(
                    "… fell behind; streamed text was skipped, events from seq {} re-read from the log",
                    lagged.from_seq
                ),
            ),
        }
    }

    /// A logged event: one line for those worth one, nothing for the bookkeeping ones.
    fn logged(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        data: EventData,
    ) -> std::io::Result<()> {
        match data {
            EventData::TurnStart { turn } => self.line(w, e, format!("── turn {turn}")),
            EventData::UserMessage { message } => match message.source {
                // The prompt is the person's own: shown only when watching from elsewhere.
                MessageSource::User if self.main.is_none() => {
                    self.line(w, e, format!("› {}", indent(&message.text)))
                }
                MessageSource::Steer => {
                    self.line(w, e, format!("↪ steered: {}", indent(&message.text)))
                }
                MessageSource::User | MessageSource::Plugin { .. } => Ok(()),
            },
            EventData::AssistantMessage {
                turn,
                step,
                message,
                ..
            } => self.full(w, e, (turn, step), &message.text),
            EventData::AssistantThought { text, .. } => {
                self.line(w, e, format!("… thought: {}", indent(&text)))
            }
            EventData::ToolCall {
                name, arguments, ..
            } => match plan_lines(&name, &arguments) {
                Some(plan) => self.line(w, e, format!("▶ plan{plan}")),
                None => self.line(w, e, format!("▶ {name} {arguments}")),
            },
            EventData::ToolResult {
                content, is_error, ..
            } => {
                let marker = if is_error { "✗" } else { "◀" };
                self.line(w, e, format!("{marker} {}", indent(&content)))
            }
            // A change shows as its diff; a read's call line already names the file.
            EventData::ToolFile { path, diff, .. } => match diff {
                Some(diff) => self.diff(w, e, &path, &diff),
                None => Ok(()),
            },
            EventData::HookResult {
                dialect,
                event,
                decision,
                system_message,
                ..
            } => {
                self.line(w, e, format!("· {dialect} hook {event} → {decision}"))?;
                // A hook's systemMessage is for the user: shown on its own line, as both
                // harnesses show it as a warning.
                match system_message {
                    Some(message) => self.line(w, e, format!("⚠ {}", indent(&message))),
                    None => Ok(()),
                }
            }
            EventData::ApprovalRequest {
                tool,
                call_id,
                command,
                cwd,
                reason,
                change,
                ..
            } => {
                // A file change is shown as its diff, before the question about it.
                if let Some(change) = &change {
                    self.diff(w, e, &change.path, &change.diff)?;
                }
                self.line(
                    w,
                    e,
                    format!(
                        "? approval needed for {tool} call {call_id}: {}\n  in {cwd}\n  why: {}\n  answer: dshctl approve {} {call_id} --allow|--deny",
                        indent(&command),
                        indent(&reason),
                        e.session_id,
                    ),
                )
            }
            EventData::ApprovalDecision {
                call_id,
                decision,
                by,
                reason,
                scope,
                client,
                handlers,
                ..
            } => {
                let verdict = match decision {
                    ApprovalVerdict::Allow => "✓ allowed",
                    ApprovalVerdict::Deny => "✗ denied",
                };
                let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
                let until = match scope {
                    ApprovalScope::Session => ", and the same request for this session",
                    ApprovalScope::Once => "",
                };
                let by = answered_by(by, client.as_ref(), &handlers);
                self.line(w, e, format!("{verdict} call {call_id} ({by}{until}){why}"))
            }
            EventData::ApprovalRuleAdded {
                tool,
                command,
                cwd,
                handlers,
            } => self.line(
                w,
                e,
                format!(
                    "+ rule added by hook {}: {tool} {} in {cwd} is allowed without asking",
                    handlers.join(", "),
                    indent(&command)
                ),
            ),
            EventData::ApprovalRuleRemoved { tool, command, cwd } => self.line(
                w,
                e,
                format!(
                    "− rule removed: {tool} {} in {cwd} asks again",
                    indent(&command)
                ),
            ),
            EventData::TurnEnd {
                turn,
                reason,
                usage,
                ..
            } => {
                let detail = reason.message();
                let detail = if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                };
                let usage = usage.as_ref().map(usage_text).unwrap_or_default();
                self.line(
                    w,
                    e,
                    format!("── turn {turn} {}{detail}{usage}", reason.kind()),
                )
            }
            // Which instructions the session read: a person should know what steers the model.
            EventData::Instructions { files, .. } if !files.is_empty() => {
                let names: Vec<String> = files
                    .iter()
                    .map(|f| {
                        let cut = if f.cut { ", cut" } else { "" };
                        format!("{} ({} bytes{cut})", f.path, f.bytes)
                    })
                    .collect();
                self.line(w, e, format!("instructions: {}", names.join(", ")))
            }
            EventData::CompactionStart { trigger, .. } => self.line(
                w,
                e,
                format!("⋯ compacting the context ({})", trigger.as_str()),
            ),
            EventData::CompactionEnd {
                summary,
                pruned,
                tokens_before,
                tokens_after,
                error,
                ..
            } => self.line(
                w,
                e,
                match error {
                    Some(error) => format!("✗ compaction failed: {}", indent(&error)),
                    None => compacted_text(
                        summary.as_deref(),
                        pruned.len(),
                        tokens_before,
                        tokens_after,
                    ),
                },
            ),
            EventData::Instructions { .. }
            | EventData::StepStart { .. }
            | EventData::StepEnd { .. }
            | EventData::ToolRewritten { .. }
            | EventData::HookInvoked { .. }
            | EventData::SessionTitle { .. }
            | EventData::SessionArchived { .. }
            | EventData::EndSeed {}
            | EventData::Imported { .. }
            | EventData::Settings { .. }
            | EventData::Unknown(_) => Ok(()),
        }
    }

    /// A mark for lines of agents other than the main one: the last 8 characters of the id (the
    /// first ones of a UUIDv7 are its creation time, the same for agents created together).
    fn mark(&self, e: &v1::Event) -> String {
        if self.main.as_deref() == Some(e.session_id.as_str()) {
            return String::new();
        }
        format!("[{}] ", crate::output::short_id(&e.session_id))
    }

    /// Prints a file tool's change as its unified diff, indented; coloured when the output may
    /// be (a terminal, and `NO_COLOR` unset). The text goes through the same escaping as every
    /// other line: only the colours are dshctl's own.
    fn diff(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        path: &str,
        diff: &str,
    ) -> std::io::Result<()> {
        self.line(w, e, format!("✎ {path}"))?;
        let mark = self.mark(e);
        for line in diff.lines() {
            let colour = match line.as_bytes().first() {
                _ if line.starts_with("+++") || line.starts_with("---") => None,
                Some(b'+') => Some(Control::Green),
                Some(b'-') => Some(Control::Red),
                Some(b'@') => Some(Control::Cyan),
                _ => None,
            };
            write!(w, "{mark}  ")?;
            match colour.filter(|_| self.dim) {
                Some(colour) => {
                    w.control(colour)?;
                    write!(w, "{line}")?;
                    w.control(Control::Undim)?;
                }
                None => write!(w, "{line}")?,
            }
            writeln!(w)?;
        }
        Ok(())
    }

    fn line(&mut self, w: &mut dyn Terminal, e: &v1::Event, text: String) -> std::io::Result<()> {
        if self.mid_line.take().is_some() {
            writeln!(w)?;
        }
        writeln!(w, "{}{text}", self.mark(e))
    }

    /// Prints a streamed fragment. A fragment past what was printed means dshd skipped text while
    /// we were slow: nothing more of the step is printed until its full text arrives.
    fn delta(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        delta: &TextDelta<'_>,
    ) -> std::io::Result<()> {
        let step = (delta.turn, delta.step);
        let text = &*delta.text;
        let entry = self.printed.entry(e.session_id.clone()).or_default();
        if entry.0 != step {
            *entry = (step, 0);
        }
        if delta.offset != entry.1 || text.is_empty() {
            return Ok(());
        }
        entry.1 += text.len() as u64;
        self.text(w, e, text)
    }

    /// Prints a piece of a call's live output, dimmed and indented, up to [`LIVE_LINES`] lines
    /// and [`LIVE_BYTES`] bytes per call (its result follows with the whole output).
    fn output(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        output: &ToolOutput<'_>,
    ) -> std::io::Result<()> {
        let call = output.call_id.clone().into_owned();
        let stderr = usize::from(output.stream == OutputStream::Stderr);
        let offset = output.offset;
        let text = &*output.text;
        let key = format!("{}\u{0}{call}", e.session_id);
        let mark = self.mark(e);
        let dim = self.dim;
        let shown = self
            .outputs
            .entry((e.session_id.clone(), call))
            .or_default();
        if shown.capped || offset < shown.next[stderr] {
            return Ok(());
        }
        let gap = offset - shown.next[stderr];
        shown.next[stderr] = offset + text.len() as u64;
        let skipped = (gap > 0).then(|| format!("[… {gap} bytes not shown]\n"));
        for piece in skipped
            .iter()
            .map(String::as_str)
            .chain(text.split_inclusive('\n'))
        {
            if shown.lines >= LIVE_LINES || shown.bytes >= LIVE_BYTES {
                shown.capped = true;
                if self.mid_line.take().is_some() {
                    writeln!(w)?;
                }
                write!(w, "{mark}  ")?;
                dimmed(w, dim, "… (more output; the result shows it)")?;
                return writeln!(w);
            }
            if self.mid_line.as_deref() != Some(key.as_str()) {
                if self.mid_line.take().is_some() {
                    writeln!(w)?;
                }
                write!(w, "{mark}  ")?;
            }
            let line = piece.strip_suffix('\n');
            dimmed(w, dim, line.unwrap_or(piece))?;
            shown.bytes += piece.len();
            if line.is_some() {
                writeln!(w)?;
                shown.lines += 1;
                self.mid_line = None;
            } else {
                self.mid_line = Some(key.clone());
            }
        }
        Ok(())
    }

    /// The step's full text: prints whatever the deltas did not.
    fn full(
        &mut self,
        w: &mut dyn Terminal,
        e: &v1::Event,
        step: (u32, u32),
        full: &str,
    ) -> std::io::Result<()> {
        let entry = self.printed.entry(e.session_id.clone()).or_default();
        let printed = if entry.0 == step {
            usize::try_from(entry.1).unwrap_or(usize::MAX)
        } else {
            0
        };
        *entry = (step, full.len() as u64);
        let rest = full.get(printed..).unwrap_or_default();
        if rest.is_empty() {
            return Ok(());
        }
        self.text(w, e, rest)
    }

    /// Streams `text` of `e`'s agent, starting a marked line when another agent's text (or
    /// nothing) is on the current one.
    fn text(&mut self, w: &mut dyn Terminal, e: &v1::Event, text: &str) -> std::io::Result<()> {
        if self.mid_line.as_deref() != Some(e.session_id.as_str()) {
            if self.mid_line.is_some() {
                writeln!(w)?;
            }
            write!(w, "{}", self.mark(e))?;
        }
        write!(w, "{text}")?;
        self.mid_line = (!text.ends_with('\n')).then(|| e.session_id.clone());
        Ok(())
    }
}

/// Writes `text`, dimmed when `dim`.
fn dimmed(w: &mut dyn Terminal, dim: bool, text: &str) -> std::io::Result<()> {
    if dim {
        w.control(Control::Dim)?;
    }
    write!(w, "{text}")?;
    if dim {
        w.control(Control::Undim)?;
    }
    Ok(())
}

/// A wait in seconds as a person reads it: `3 s`, `0.5 s`.
fn seconds(wait: std::time::Duration) -> String {
    let ms = wait.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", wait.as_secs_f64())
    }
}

fn indent(text: &str) -> String {
    let text = text.trim_end();
    text.replace('\n', "\n  ")
}

/// Who decided an `approval/decision`: `by`, and for a client what dshd saw of it (pid, uid,
/// whether it had a terminal), e.g. `client pid 4242, uid 1000, at a terminal`.
fn answered_by(by: ApprovalSource, client: Option<&ApprovalClient>, handlers: &[String]) -> String {
    let by = by.as_str();
    // A PermissionRequest hook's answer names the hooks that gave it.
    if !handlers.is_empty() {
        return format!("{by} {}", handlers.join(", "));
    }
    let Some(client) = client else {
        return by.to_owned();
    };
    let mut parts = Vec::new();
    if let Some(pid) = client.pid {
        parts.push(format!("pid {pid}"));
    }
    parts.push(format!("uid {}", client.uid));
    match client.terminal {
        Some(true) => parts.push("at a terminal".to_owned()),
        Some(false) => parts.push("no terminal".to_owned()),
        None => {}
    }
    format!("{by} {}", parts.join(", "))
}

/// A turn's usage for its end line, e.g. ` · tokens: 1200 in (800 cached), 35 out` (the provider
/// reported it: a turn without usage has no such part, never a zero).
fn usage_text(usage: &Usage) -> String {
    let cached = usage.cache_read_tokens;
    let prompt = usage.input_tokens + cached.unwrap_or(0);
    let cached = cached.map(|c| format!(" ({c} cached)")).unwrap_or_default();
    format!(
        " · tokens: {prompt} in{cached}, {} out",
        usage.output_tokens
    )
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;

/// An `update_plan` call's arguments as a checklist, one line per step; `None` for any other
/// call, or a plan the tool will refuse (its raw arguments then show, as for any call).
fn plan_lines(name: &str, arguments: &serde_json::Value) -> Option<String> {
    if name != UPDATE_PLAN {
        return None;
    }
    let plan = Plan::deserialize(arguments).ok()?;
    let mut lines = String::new();
    for step in plan.plan {
        let mark = match step.status {
            PlanStatus::Completed => "✓",
            PlanStatus::InProgress => "▸",
            PlanStatus::Pending => "○",
        };
        lines.push_str(&format!("\n  {mark} {}", indent(&step.step)));
    }
    Some(lines)
}

/// The line of a compaction that succeeded: what it did and the estimated sizes before and after.
pub(crate) fn compacted_text(
    summary: Option<&str>,
    pruned: usize,
    before: u64,
    after: u64,
) -> String {
    let what = match (summary.is_some(), pruned) {
        (true, 0) => "summarised".to_owned(),
        (true, n) => format!("summarised, {n} old outputs shortened"),
        (false, n) => format!("{n} old outputs shortened"),
    };
    let mut line = format!("⋯ context compacted ({what}): about {before} → {after} tokens");
    if let Some(summary) = summary {
        line.push_str(&format!("\n  summary: {}", indent(summary)));
    }
    line
}
