//! dsh events as ACP `session/update`s. One [`Translator`] per stream (a prompt's turn, or a
//! session's replay); it holds only what it needs to turn deltas into chunks (how much text of
//! each step was shown), nothing about the session. Every event type is named in
//! [`Translator::translate`]'s match, those with nothing to show included, so a type added to the
//! vocabulary must be placed here before the bridge compiles.
//!
//! | dsh event | ACP update |
//! |---|---|
//! | `text/delta`, then the rest of `assistant/message` | `agent_message_chunk` |
//! | `user/message` (a person's; replay only) | `user_message_chunk` |
//! | `tool/call` | `tool_call` (`pending`; kind `execute` for `bash`, `read` for `read`, `edit` for `write` and `edit`), then `tool_call_update` `in_progress` |
//! | `tool/output` | `tool_call_update` whose content is the output so far (its last [`PREVIEW_BYTES`]) |
//! | `approval/request` | `session/request_permission` (see `turn.rs`) |
//! | `approval/decision` allow | `tool_call_update` `in_progress` |
//! | `tool/result` | `tool_call_update` `completed` / `failed`, the output as text content |
//! | `tool/file` of a change (with its texts) | `tool_call_update` whose content is the `diff` (`path`, `oldText`, `newText`) and whose `locations` name the file and its first changed line |
//! | a child agent's `tool/call` / `tool/result` | the same, on the parent's session, ids and titles marked with the child |
//! | `bash`'s `tool/call`, `tool/output`, `tool/result` for a client with `_meta.terminal_output` | a display-only terminal: `terminal` content and `_meta.terminal_info`, then `_meta.terminal_output` pieces, then `_meta.terminal_exit` with the exit code |
//! | the prompted agent's `turn/end` | the `session/prompt` response's `stopReason` |

use std::collections::HashMap;

use dsh_client::events::{
    self, ApprovalVerdict, EventData, LiveEvent, MessageSource, OutputStream, Plan, Streamed,
    ToolOutput, TurnEndReason, UPDATE_PLAN,
};
use dsh_proto::v1;
use serde::Deserialize;

use super::schema::{
    Content, PermissionInput, PermissionToolCall, PlanEntry, SessionUpdate, StopReason,
    TerminalMeta, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolKind,
};
use super::tool_calls::{
    call_id, finished, first_changed_line, marked, request_title, started, status, terminal_output,
};

/// How much of a running call's live output a `tool_call_update` carries: its tail. ACP replaces a
/// call's content with each update, so the whole output so far is sent every time; the tail keeps
/// that bounded (the call's `tool/result` then shows what the model got).
pub const PREVIEW_BYTES: usize = 16 * 1024;

/// What one dsh event asks of the bridge.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Send this `session/update` (the `update` member).
    Update(SessionUpdate),
    /// Ask the person: a tool call waits for approval.
    Ask(Ask),
    /// A tool call's approval was decided (by anyone: this editor, another client, a rule, the
    /// timeout, a cancellation): a request still open for it is withdrawn.
    Decided {
        /// The agent whose call it is.
        agent_id: String,
        /// The call id dsh knows it by.
        call_id: String,
    },
    /// The prompted agent's turn ended, for this reason.
    End(TurnEndReason),
}

/// An approval request, as the bridge asks for it.
#[derive(Debug, PartialEq)]
pub struct Ask {
    /// The agent whose call waits (the prompted one or one of its children).
    pub agent_id: String,
    /// The call id dsh knows it by.
    pub call_id: String,
    /// The ACP tool call it is about (`toolCall` of the request).
    pub tool_call: PermissionToolCall,
}

/// Turns one stream's events into updates.
#[derive(Debug)]
pub struct Translator {
    /// The ACP session (the prompted or loaded agent).
    root: String,
    /// Replaying a stored log: the person's own messages are shown, approvals are history.
    replay: bool,
    /// Bytes of each step's text already sent, by step.
    shown: HashMap<u32, usize>,
    /// The same for the reasoning each step streamed (`thought/delta`).
    thought: HashMap<u32, usize>,
    /// The live output of each running call, by ACP tool call id; dropped at its result.
    outputs: HashMap<String, Preview>,
    /// How many tokens the model's context holds, when dshd knows (`usage_update`).
    context_window: Option<u64>,
    /// The client shows a command's output in a display-only terminal (its
    /// `clientCapabilities._meta.terminal_output`).
    terminal_output: bool,
    /// The client takes `compaction_update` (`clientCapabilities.session.compaction`); others
    /// get a line of agent text when a compaction ends.
    compaction: bool,
    /// The id of the compaction that started last (its `compaction/start`'s seq).
    compaction_id: String,
    /// The calls shown as terminals, by ACP tool call id, and whether output reached each.
    terminals: HashMap<String, bool>,
    /// The plans of `update_plan` calls of the prompted agent, by call id, shown once the call
    /// is accepted (a refused plan is the model's to fix, not the editor's to show).
    plans: HashMap<String, Plan>,
}

/// A running call's output as shown so far.
#[derive(Debug, Default)]
struct Preview {
    /// The tail of the output, both streams in the order they came.
    text: String,
    /// Bytes of each stream (`stdout`, `stderr`) already taken, to skip repeats.
    taken: HashMap<OutputStream, usize>,
}

impl Preview {
    /// Takes one `tool/output` piece; what it added (empty: nothing).
    fn take<'a>(&mut self, output: &'a ToolOutput<'_>) -> &'a str {
        let taken = self.taken.entry(output.stream).or_insert(0);
        let new = unseen(taken, to_usize(output.offset), &output.text);
        if new.is_empty() {
            return new;
        }
        self.text.push_str(new);
        if self.text.len() > PREVIEW_BYTES {
            let mut cut = self.text.len() - PREVIEW_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
        new
    }
}

impl Translator {
    /// A translator for the events of session `root` (and its children's).
    pub fn new(root: &str, replay: bool) -> Self {
        Self {
            root: root.to_owned(),
            replay,
            shown: HashMap::new(),
            thought: HashMap::new(),
            outputs: HashMap::new(),
            context_window: None,
            terminal_output: false,
            compaction: false,
            compaction_id: String::new(),
            terminals: HashMap::new(),
            plans: HashMap::new(),
        }
    }

    /// Shows each `bash` call's output in a display-only terminal (`_meta.terminal_output`)
    /// instead of as text content, for clients that said they show one.
    pub fn with_terminal_output(mut self, terminal_output: bool) -> Self {
        self.terminal_output = terminal_output;
        self
    }

    /// Reports compactions as `compaction_update` (the client opted in) rather than as a line of
    /// agent text.
    pub fn with_compaction(mut self, compaction: bool) -> Self {
        self.compaction = compaction;
        self
    }

    /// Also reports how full the context is after each model reply that says (`usage_update`),
    /// against `size` tokens (dshd's `model.context_window`; 0 or `None`: never).
    pub fn with_context_window(mut self, size: Option<u64>) -> Self {
        self.context_window = size.filter(|n| *n > 0);
        self
    }

    /// What `event` asks for (often nothing). The prompted agent's text, prompt and turn end are
    /// its own; tool calls, their output, approvals and results are shown for its children too,
    /// marked with the child.
    pub fn translate(&mut self, event: &v1::Event) -> Vec<Output> {
        let decoded = match events::decode(event) {
            Ok(decoded) => decoded,
            Err(error) => {
                warn_unreadable(&error);
                return Vec::new();
            }
        };
        let agent = event.session_id.as_str();
        let own = agent == self.root;
        let child = (!own).then_some(agent);
        match decoded {
            Streamed::Live(live) => match live {
                LiveEvent::TextDelta(delta) if own => {
                    let shown = self.shown.entry(delta.step).or_insert(0);
                    agent_text(unseen(shown, to_usize(delta.offset), &delta.text))
                }
                // The model's reasoning as it streams, shown as the editor shows thinking.
                LiveEvent::ThoughtDelta(delta) if own => {
                    let shown = self.thought.entry(delta.step).or_insert(0);
                    let new = unseen(shown, to_usize(delta.offset), &delta.text);
                    text_update(new.to_owned(), |content| SessionUpdate::AgentThoughtChunk {
                        content,
                    })
                }
                LiveEvent::ToolOutput(output) => {
                    self.output(call_id(&output.call_id, child), &output)
                }
                LiveEvent::TextDelta(_)
                | LiveEvent::ThoughtDelta(_)
                | LiveEvent::ModelRetry(_)
                | LiveEvent::Lagged(_) => Vec::new(),
            },
            Streamed::Logged(data) => match data {
                EventData::AssistantMessage {
                    step,
                    message,
                    usage,
                    ..
                } if own => {
                    let shown = self.shown.remove(&step).unwrap_or(0);
                    let mut out = agent_text(message.text.get(shown..).unwrap_or_default());
                    if let (Some(size), Some(usage)) = (self.context_window, usage) {
                        let used = usage
                            .input_tokens
                            .saturating_add(usage.cache_read_tokens.unwrap_or(0))
                            .saturating_add(usage.output_tokens);
                        out.push(Output::Update(SessionUpdate::UsageUpdate { used, size }));
                    }
                    out
                }
                // The model's reasoning: what did not stream (all of it on a replay).
                EventData::AssistantThought { step, text, .. } if own => {
                    let shown = self.thought.remove(&step).unwrap_or(0);
                    let rest = text.get(shown..).unwrap_or_default().to_owned();
                    text_update(rest, |content| SessionUpdate::AgentThoughtChunk { content })
                }
                EventData::UserMessage { message }
                    if own && self.replay && message.source == MessageSource::User =>
                {
                    text_update(message.text, |content| SessionUpdate::UserMessageChunk {
                        content,
                    })
                }
                // The session's last activity is the end of its last turn.
                EventData::TurnEnd { reason, .. } if own => vec![
                    Output::Update(SessionUpdate::SessionInfoUpdate {
                        title: None,
                        updated_at: Some(iso_8601(event.time_ms)),
                    }),
                    Output::End(reason),
                ],
                EventData::SessionTitle { title } if own => {
                    vec![Output::Update(SessionUpdate::SessionInfoUpdate {
                        title: Some(title),
                        updated_at: None,
                    })]
                }
                EventData::ToolCall {
                    call_id: id,
                    name,
                    arguments,
                    ..
                } => {
                    // The agent's plan is the editor's plan view, not a tool call card.
                    if own
                        && name == UPDATE_PLAN
                        && let Ok(plan) = Plan::deserialize(&arguments)
                    {
                        self.plans.insert(id, plan);
                        return Vec::new();
                    }
                    let id = call_id(&id, child);
                    let terminal = self.terminal_output && name == "bash";
                    if terminal {
                        self.terminals.insert(id.clone(), false);
                    }
                    started(id, &name, arguments, child, terminal)
                }
                EventData::ApprovalRequest {
                    call_id: id,
                    tool,
                    command,
                    cwd,
                    reason,
                    change,
                    ..
                } if !self.replay => {
                    let (mut title, mut kind) = request_title(&tool, &command, child);
                    let (mut content, mut locations) = (Vec::new(), Vec::new());
                    if let Some(change) = change {
                        title = marked(format!("{tool} {}", change.path), child);
                        kind = ToolKind::Edit;
                        locations.push(ToolCallLocation {
                            path: change.path.clone(),
                            line: first_changed_line(&change.diff),
                        });
                        content.push(match change.new_text {
                            Some(new_text) => ToolCallContent::Diff {
                                path: change.path,
                                old_text: change.old_text,
                                new_text,
                            },
                            None => ToolCallContent::Content {
                                content: Content::Text { text: change.diff },
                            },
                        });
                    }
                    vec![Output::Ask(Ask {
                        agent_id: agent.to_owned(),
                        tool_call: PermissionToolCall {
                            tool_call_id: call_id(&id, child),
                            title,
                            kind,
                            status: ToolCallStatus::Pending,
                            raw_input: PermissionInput {
                                command,
                                cwd,
                                reason,
                            },
                            content,
                            locations,
                        },
                        call_id: id,
                    })]
                }
                EventData::ApprovalDecision {
                    call_id: id,
                    decision,
                    ..
                } if !self.replay => {
                    let shown = call_id(&id, child);
                    let mut out = vec![Output::Decided {
                        agent_id: agent.to_owned(),
                        call_id: id,
                    }];
                    if decision == ApprovalVerdict::Allow {
                        out.push(status(shown, ToolCallStatus::InProgress));
                    }
                    out
                }
                EventData::ToolResult {
                    call_id: id,
                    content,
                    is_error,
                    code,
                    exit_code,
                    ..
                } => {
                    if let Some(plan) = own.then(|| self.plans.remove(&id)).flatten() {
                        return if is_error {
                            Vec::new()
                        } else {
                            vec![Output::Update(plan_update(plan))]
                        };
                    }
                    let id = call_id(&id, child);
                    self.outputs.remove(&id);
                    let Some(streamed) = self.terminals.remove(&id) else {
                        return vec![finished(id, content, is_error, code, None)];
                    };
                    // Output that never streamed (a quick command, a replay) goes to the
                    // terminal whole, then the end.
                    let mut out = Vec::new();
                    if !streamed && !content.is_empty() {
                        out.push(terminal_output(id.clone(), content.clone()));
                    }
                    let exit = TerminalMeta::Exit {
                        terminal_id: id.clone(),
                        exit_code,
                        signal: None,
                    };
                    out.push(finished(id, content, is_error, code, Some(exit)));
                    out
                }
                EventData::ToolFile {
                    call_id: id,
                    path,
                    diff: Some(diff),
                    old_text,
                    new_text: Some(new_text),
                    ..
                } => vec![Output::Update(SessionUpdate::ToolCallChange {
                    tool_call_id: call_id(&id, child),
                    locations: vec![ToolCallLocation {
                        path: path.clone(),
                        line: first_changed_line(&diff),
                    }],
                    content: vec![ToolCallContent::Diff {
                        path,
                        old_text,
                        new_text,
                    }],
                })],
                EventData::CompactionStart { .. } if own => {
                    self.compaction_id = format!("compaction-{}", event.seq.unwrap_or_default());
                    // A replay shows a compaction as the one update of its end.
                    if !self.compaction || self.replay {
                        return Vec::new();
                    }
                    vec![Output::Update(SessionUpdate::CompactionUpdate {
                        compaction_id: self.compaction_id.clone(),
                        status: "in_progress",
                        summary: None,
                        error: None,
                    })]
                }
                EventData::CompactionEnd {
                    summary,
                    pruned,
                    tokens_before,
                    tokens_after,
                    error,
                    ..
                } if own => {
                    if self.compaction {
                        let (status, summary) = match &error {
                            Some(_) => ("failed", None),
                            None => (
                                "completed",
                                summary.map(|text| vec![Content::Text { text }]),
                            ),
                        };
                        return vec![Output::Update(SessionUpdate::CompactionUpdate {
                            compaction_id: self.compaction_id.clone(),
                            status,
                            summary,
                            error,
                        })];
                    }
                    let line = match error {
                        Some(error) => format!("\n\n*Context compaction failed: {error}*\n\n"),
                        None => {
                            let what = if summary.is_some() {
                                "older messages summarised"
                            } else {
                                "old outputs shortened"
                            };
                            let shortened = if pruned.is_empty() {
                                String::new()
                            } else {
                                format!(", {} outputs shortened", pruned.len())
                            };
                            format!(
                                "\n\n*Context compacted ({what}{shortened}): about {tokens_before} → {tokens_after} tokens.*\n\n"
                            )
                        }
                    };
                    agent_text(&line)
                }
                // Nothing to show: a child's text and turns (its calls show), the prompt the
                // client sent itself, history on a replay, and the log's bookkeeping.
                EventData::AssistantMessage { .. }
                | EventData::AssistantThought { .. }
                | EventData::UserMessage { .. }
                | EventData::TurnEnd { .. }
                | EventData::ApprovalRequest { .. }
                | EventData::ApprovalDecision { .. }
                | EventData::TurnStart { .. }
                | EventData::StepStart { .. }
                | EventData::StepEnd { .. }
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
                | EventData::CompactionStart { .. }
                | EventData::CompactionEnd { .. }
                | EventData::Unknown(_) => Vec::new(),
            },
        }
    }

    fn output(&mut self, id: String, output: &ToolOutput<'_>) -> Vec<Output> {
        let preview = self.outputs.entry(id.clone()).or_default();
        let new = preview.take(output);
        if new.is_empty() {
            return Vec::new();
        }
        if let Some(streamed) = self.terminals.get_mut(&id) {
            *streamed = true;
            return vec![terminal_output(id, new.to_owned())];
        }
        vec![Output::Update(SessionUpdate::ToolCallUpdate {
            tool_call_id: id,
            status: None,
            content: Some(vec![text_content(preview.text.clone())]),
            raw_output: None,
            meta: None,
        })]
    }
}

/// The event's data did not have its type's shape: dsh's own bytes, so this is a bug worth a
/// line on stderr (stdout carries protocol messages only).
fn warn_unreadable(error: &events::DecodeError) {
    crate::safe::eprintln(format_args!("dshctl acp: skipped an event: {error}"));
}

/// The part of `text` (at byte `offset` of its stream) past the `seen` bytes already taken, which
/// then counts as seen. A repeat is skipped; a gap (a slow reader's merged or thinned pieces)
/// cannot be filled, the rest goes on.
fn unseen<'a>(seen: &mut usize, offset: usize, text: &'a str) -> &'a str {
    let new = if offset >= *seen {
        text
    } else {
        text.get(*seen - offset..).unwrap_or_default()
    };
    *seen = (*seen).max(offset.saturating_add(text.len()));
    new
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

pub(super) fn text_content(text: String) -> ToolCallContent {
    ToolCallContent::Content {
        content: Content::Text { text },
    }
}

/// Model text as an `agent_message_chunk` (nothing for no text).
fn agent_text(text: &str) -> Vec<Output> {
    text_update(text.to_owned(), |content| {
        SessionUpdate::AgentMessageChunk { content }
    })
}

fn text_update(text: String, update: fn(Content) -> SessionUpdate) -> Vec<Output> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![Output::Update(update(Content::Text { text }))]
}

/// Unix milliseconds as ISO 8601 in UTC, to the millisecond (`2026-12-05T00:23:04.123Z`).
pub fn iso_8601(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, sec, milli) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}.{milli:03}Z")
}

/// The `stopReason` of a turn that ended for `reason`, or the error a failed turn is answered
/// with.
pub fn stop_reason(reason: &TurnEndReason) -> Result<StopReason, String> {
    match reason {
        TurnEndReason::Completed => Ok(StopReason::EndTurn),
        TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => Ok(StopReason::Cancelled),
        // A hook refused the prompt, or stopped the turn.
        TurnEndReason::Blocked { .. } | TurnEndReason::Stopped { .. } => Ok(StopReason::Refusal),
        TurnEndReason::StepLimit { .. } => Ok(StopReason::MaxTurnRequests),
        TurnEndReason::Error { message } => Err(message.clone()),
    }
}

/// The editor's plan view of an accepted `update_plan`.
fn plan_update(plan: Plan) -> SessionUpdate {
    SessionUpdate::Plan {
        entries: plan
            .plan
            .into_iter()
            .map(|step| PlanEntry {
                content: step.step,
                priority: "medium",
                status: step.status.as_str(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "updates_tests.rs"]
mod tests;
