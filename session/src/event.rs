//! Session events: the envelope `{type, seq, time, data}` and the closed vocabulary of CONTRACTS §4.1.

use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{
    ApprovalClient, ApprovalPolicy, ApprovalScope, ApprovalSource, ApprovalVerdict, SandboxPolicy,
};

/// One event of a session log. `seq` is its index in the log (contiguous from 0); `time` is Unix
/// milliseconds at append.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Index in the log.
    pub seq: u64,
    /// Unix milliseconds when appended.
    pub time: i64,
    /// What happened.
    pub data: EventData,
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnEndReason {
    /// The model answered without tool calls.
    Completed,
    /// Cancelled.
    Aborted {
        /// Who cancelled.
        cause: AbortCause,
    },
    /// A model or tool infrastructure failure ended the turn.
    Error {
        /// What a person can act on.
        message: String,
    },
    /// A hook refused the prompt.
    Blocked {
        /// The hook's reason.
        reason: String,
    },
    /// A hook said `continue: false`: the turn stopped where the hook's harness stops.
    Stopped {
        /// The hook's `stopReason` (for the user, never the model), or a default naming the
        /// event.
        reason: String,
    },
    /// Found open after a crash and closed on load.
    Interrupted,
    /// The turn reached `agent.max_steps_per_turn` steps and was ended before another. Logs
    /// written before this reason existed record such a turn as an `error` whose message names
    /// the setting; they read as that.
    StepLimit {
        /// The limit in force.
        limit: u32,
    },
}

impl TurnEndReason {
    /// The reason's kind as a word ("completed", "aborted", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Aborted { .. } => "aborted",
            Self::Error { .. } => "error",
            Self::Blocked { .. } => "blocked",
            Self::Stopped { .. } => "stopped",
            Self::Interrupted => "interrupted",
            Self::StepLimit { .. } => "step_limit",
        }
    }

    /// Human-readable detail ("" for completed and interrupted).
    pub fn message(&self) -> String {
        match self {
            Self::Completed | Self::Interrupted => String::new(),
            Self::Aborted { cause } => cause.as_str().to_owned(),
            Self::Error { message } => message.clone(),
            Self::Blocked { reason } | Self::Stopped { reason } => reason.clone(),
            Self::StepLimit { limit } => {
                format!("the turn reached the limit of {limit} steps (agent.max_steps_per_turn)")
            }
        }
    }
}

/// Who cancelled a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AbortCause {
    /// A client called `Agents.Cancel`.
    User,
    /// The parent agent's turn was cancelled.
    Parent,
    /// The agent was closed.
    Closed,
    /// The daemon is shutting down.
    Shutdown,
}

impl AbortCause {
    /// The cause as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Parent => "parent",
            Self::Closed => "closed",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Who wrote a user-role message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MessageSource {
    /// The user's prompt.
    User,
    /// A user's message sent into a running turn (`Agents.Steer`), delivered at a step boundary.
    Steer,
    /// Context injected by a plugin, e.g. a hook bridge (`hooks-claude-code`).
    Plugin {
        /// The plugin's name.
        plugin: String,
    },
}

/// A user-role message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    /// The text.
    pub text: String,
    /// Who wrote it.
    pub source: MessageSource,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// Call id, unique within the session.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model gave them (a JSON object, or a string when it was not valid JSON).
    pub arguments: Value,
}

/// The model's answer in one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssistantMessage {
    /// The text (may be empty when the model only called tools).
    pub text: String,
    /// Tool calls, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
}

/// Token usage reported by a provider for one model request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens not served from cache.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Reasoning tokens (part of the completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// The sandbox a hook ran in (`hook/result`'s `sandbox`): its agent's policy, and why the hook
/// ran under it rather than as the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookConfinement {
    /// The filesystem mode: `workspace-write`, `read-only` or `off`.
    pub mode: String,
    /// `on` or `off`.
    pub network: String,
    /// What put it there, e.g. the word of its command that names a file the agent can write.
    pub reason: String,
}

impl Usage {
    /// Adds `other`: counts summed, an optional count present when either has it.
    pub fn add(&mut self, other: &Usage) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        }
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = sum(self.cache_read_tokens, other.cache_read_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
    }

    /// The sum of the usage of turn `turn`'s `assistant/message`s in `events`; `None` when none
    /// of them carries any.
    pub fn of_turn(events: &[Event], turn: u32) -> Option<Usage> {
        let mut total: Option<Usage> = None;
        for event in events.iter().rev() {
            match &event.data {
                EventData::AssistantMessage {
                    turn: t,
                    usage: Some(usage),
                    ..
                } if *t == turn => total.get_or_insert_with(Usage::default).add(usage),
                EventData::TurnStart { turn: t } if *t == turn => break,
                _ => {}
            }
        }
        total
    }
}

macro_rules! event_vocabulary {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal { $( $(#[$fattr:meta])* $field:ident : $ty:ty ),* $(,)? } ),* $(,)?) => {
        /// What an event says, one variant per event type. Field attributes in the vocabulary below
        /// (documentation and serde options) apply to the serialised form.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventData {
            $( $(#[$doc])* $variant { $( #[allow(missing_docs)] $field: $ty ),* }, )*
            /// An event this dshd does not know: a type it has no name for, or a known type with
            /// members it does not know (a newer dsh wrote it, or a user's tool). Kept as it was
            /// read and never interpreted: the model's history skips it, streams and copies carry
            /// it unchanged.
            Unknown(UnknownEvent),
        }

        impl EventData {
            /// The event's type string, e.g. `turn/start`.
            pub fn type_name(&self) -> &str {
                match self {
                    $( Self::$variant { .. } => $name, )*
                    Self::Unknown(unknown) => &unknown.kind,
                }
            }

            /// The type string of a known event; `None` for [`EventData::Unknown`].
            pub fn known_type_name(&self) -> Option<&'static str> {
                match self {
                    $( Self::$variant { .. } => Some($name), )*
                    Self::Unknown(_) => None,
                }
            }

            /// Whether this dshd knows events of type `type_name`.
            pub fn is_known_type(type_name: &str) -> bool {
                matches!(type_name, $( $name )|*)
            }

            fn serialize_data<S: SerializeStruct>(&self, s: &mut S) -> Result<(), S::Error> {
                match self {
                    Self::Unknown(unknown) => s.serialize_field("data", &unknown.data),
                    $( Self::$variant { $($field),* } => {
                        #[derive(Serialize)]
                        #[serde(rename_all = "camelCase")]
                        struct Borrowed<'a> {
                            #[serde(skip)]
                            _borrow: std::marker::PhantomData<&'a ()>,
                            $( $(#[$fattr])* $field: &'a $ty ),*
                        }
                        s.serialize_field("data", &Borrowed { _borrow: std::marker::PhantomData, $($field),* })
                    } )*
                }
            }

            /// Deserializes the `data` member of an event of type `type_name` straight into its
            /// variant, with no `Value` tree in between (a resume reads every event of a log).
            pub(super) fn deserialize_data<'de, D: Deserializer<'de>>(
                type_name: &str,
                deserializer: D,
            ) -> Result<Self, D::Error> {
                match type_name {
                    $( $name => {
                        #[derive(Deserialize)]
                        #[serde(rename_all = "camelCase", deny_unknown_fields)]
                        struct Payload { $( $(#[$fattr])* $field: $ty ),* }
                        #[allow(unused_variables)]
                        let p = Payload::deserialize(deserializer)
                            .map_err(|e| D::Error::custom(format!("{}: {e}", $name)))?;
                        Ok(Self::$variant { $( $field: p.$field ),* })
                    } )*
                    other => Err(D::Error::custom(format!("unknown event type {other:?}"))),
                }
            }
        }
    };
}

event_vocabulary! {
    /// A turn began.
    TurnStart = "turn/start" { turn: u32 },
    /// A turn ended. Once it is streamed the agent takes the next prompt.
    TurnEnd = "turn/end" {
        turn: u32,
        reason: TurnEndReason,
        /// The seq of the `assistant/message` whose text is the turn's answer (its last
        /// non-empty assistant text); absent when the turn has none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer_seq: Option<u64>,
        /// The sum of the turn's `assistant/message` usage; absent when the provider reported
        /// none (never a zero it did not report).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A step (one model request and its tool calls) began.
    StepStart = "step/start" { turn: u32, step: u32 },
    /// A step ended.
    StepEnd = "step/end" { turn: u32, step: u32 },
    /// A user-role message: the prompt, or context from a plugin.
    UserMessage = "user/message" { message: UserMessage },
    /// The model's answer in a step.
    AssistantMessage = "assistant/message" {
        turn: u32,
        step: u32,
        message: AssistantMessage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The model's reasoning in a step, before its `assistant/message`, when the provider returns
    /// it (DeepSeek's reasoner). For people and transcripts: never part of the history sent back
    /// to the model.
    AssistantThought = "assistant/thought" { turn: u32, step: u32, text: String },
    /// A tool call, logged just before dispatch.
    ToolCall = "tool/call" { turn: u32, step: u32, call_id: String, name: String, arguments: Value },
    /// A PreToolUse hook rewrote a call's input (`updatedInput`): the call ran with these
    /// arguments instead of the ones in its `tool/call`.
    ToolRewritten = "tool/rewritten" { turn: u32, step: u32, call_id: String, arguments: Value },
    /// A tool call's result.
    ToolResult = "tool/result" {
        turn: u32,
        step: u32,
        call_id: String,
        content: String,
        is_error: bool,
        /// Machine-readable error code, e.g. `TOOL_OUTCOME_UNKNOWN`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// A command's exit status (`bash` calls that ran to an end); absent for other tools, a
        /// command killed by a signal, timed out or never started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// A file tool's call (`read`, `write`, `edit`) named a file: which (absolute, as the call
    /// named it), how, and for a change its unified diff and the content hashes
    /// (`sha256:<hex>`) before (absent for a new file) and after, and the texts before and after
    /// when they are small (editors show them as a diff). Logged right after the call's
    /// `tool/result`; a failed call has none of these.
    ToolFile = "tool/file" {
        turn: u32,
        step: u32,
        call_id: String,
        path: String,
        kind: crate::FileToolKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_hash: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_hash: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_text: Option<String>,
    },
    /// A hook handler is about to run.
    HookInvoked = "hook/invoked" {
        /// "claude-code" or "codex".
        dialect: String,
        /// Hook event name, e.g. "PreToolUse".
        event: String,
        /// Which handler: file, event and index, stable across runs.
        handler: String,
        /// The turn, for turn-scoped events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
        /// The tool call, for tool events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
    },
    /// A hook handler finished.
    HookResult = "hook/result" {
        /// "claude-code" or "codex".
        dialect: String,
        /// Hook event name.
        event: String,
        /// Which handler (as in `hook/invoked`).
        handler: String,
        /// "pass", "allow", "ask", "deny", "block", "stop" or "error".
        decision: String,
        /// Exit code, when the process exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// A bounded summary of stderr.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr_summary: Option<String>,
        /// Wall time of the run.
        duration_ms: u64,
        /// The hook's `systemMessage`, for the user (never the model).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_message: Option<String>,
        /// Set when the hook ran in its agent's sandbox: the policy, and why it ran there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<HookConfinement>,
    },
    /// A person named the session (`Persistence.SetTitle`); the last one counts.
    SessionTitle = "session/title" { title: String },
    /// A person archived the session (hidden from the default listing) or took it back.
    SessionArchived = "session/archived" { archived: bool },
    /// End of a fork or resume seed.
    EndSeed = "session/end-seed" {},
    /// The session was brought in from a file (`Persistence.Import`), logged after the source's
    /// events (renumbered; its counts are known only then): the source's `format` (`dsh-bundle`,
    /// `dsh-jsonl`, `upstream-jsonl`, `upstream-zstd`, `upstream-export`, `claude-jsonl`), the
    /// file as the importer named it, the id the session had there, how many of its records
    /// became events, and how many were left out because dsh keeps nothing of them (stream
    /// chunks, UI state).
    Imported = "session/imported" {
        format: String,
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        original_id: Option<String>,
        #[serde(default)]
        events: u64,
        #[serde(default)]
        skipped: u64,
    },
    /// The project instructions (`AGENTS.md` files) found for the session, logged once, before
    /// its first turn: `text` reaches every model request as the history's first message, and
    /// `files` says which were read, in order, how many bytes of each, and whether one was cut
    /// to the budget; `problems` names candidates that could not be read (the model never sees
    /// them).
    Instructions = "session/instructions" {
        files: Vec<crate::InstructionFile>,
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        problems: Vec<String>,
    },
    /// A compaction began: what started it, and a person's instructions for the summary.
    CompactionStart = "compaction/start" {
        trigger: crate::CompactionTrigger,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instructions: Option<String>,
    },
    /// A compaction ended. Nothing before it is rewritten: the history sent to the model from
    /// here on is derived from this event (docs/CONTRACTS.md §7.1). `pruned` names the tool
    /// results (by call id) sent from now on as their first and last `keep_bytes / 2` bytes;
    /// `summary` replaces every event up to `replaces_through` (a seq), except the project
    /// instructions and the user message at `keeps` (the newest prompt, kept verbatim). `tokens_*`
    /// are dshd's estimates of the request before and after. A failed compaction has `error`
    /// and changes nothing.
    CompactionEnd = "compaction/end" {
        trigger: crate::CompactionTrigger,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces_through: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keeps: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pruned: Vec<String>,
        #[serde(default)]
        keep_bytes: u64,
        tokens_before: u64,
        tokens_after: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The agent runs with other settings than the header (or the last such event) records:
    /// resumed or forked with another model or approval policy, or changed while live
    /// (`Agents.Configure`), or closed before its first turn (so that the session is stored).
    Settings = "session/settings" {
        provider: String,
        model: String,
        /// The reasoning effort asked of the model; absent: the provider's default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_effort: Option<crate::ReasoningEffort>,
        approval: ApprovalPolicy,
        /// The sandbox its commands run in from now on, when it was set with the settings
        /// (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<SandboxPolicy>,
    },
    /// A client removed an "allow always" rule of the session (`Agents.RemoveRules`): the same
    /// request asks again.
    ApprovalRuleRemoved = "approval/rule-removed" { tool: String, command: String, cwd: String },
    /// A PermissionRequest hook added an "allow always" rule for the session (Claude Code's
    /// `updatedPermissions`, an `addRules` entry with `destination: "session"`): the same tool
    /// with this exact command in this directory is allowed without asking, as a rule a client
    /// made is. `handlers` are the hooks that asked for it, by id.
    ApprovalRuleAdded = "approval/rule-added" {
        tool: String, command: String, cwd: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        handlers: Vec<String>,
    },
    /// A tool call waits for a person's approval (the agent's policy, or a PreToolUse hook's
    /// "ask"): its `tool`, the `command` (a bash command, or another tool's arguments as JSON),
    /// where it would run, why approval is needed, and how long it waits before it is denied;
    /// for a file change (`write`, `edit`), the change itself, so a person sees what they
    /// approve (absent when it could not be computed: the call then fails as it would have).
    ApprovalRequest = "approval/request" {
        turn: u32, step: u32, call_id: String, tool: String, command: String, cwd: String,
        reason: String, timeout_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        change: Option<crate::ProposedChange>,
    },
    /// The answer to an `approval/request`.
    ApprovalDecision = "approval/decision" {
        turn: u32,
        step: u32,
        call_id: String,
        decision: ApprovalVerdict,
        /// Who decided: a client, or the timeout, the absence of watchers, a cancellation, a
        /// rule a client made earlier, or a PermissionRequest hook (then no `approval/request`
        /// precedes it).
        by: ApprovalSource,
        /// The client's reason, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// `session` when the client's allow also made a rule for the rest of the live agent's
        /// life; absent (`once`) otherwise.
        #[serde(default, skip_serializing_if = "ApprovalScope::is_once")]
        scope: ApprovalScope,
        /// The client that answered (`by: client`), as dshd saw it; absent otherwise, and in logs
        /// written before dshd recorded it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<ApprovalClient>,
        /// The PermissionRequest hook handlers that answered (`by: hook`), by id; absent
        /// otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        handlers: Vec<String>,
    },
}

/// An event of a type (or with members) this dshd does not know, as it was read.
#[derive(Debug, Clone)]
pub struct UnknownEvent {
    /// The event's type, as the line names it.
    pub kind: String,
    /// The `data` member as written (`null` when the line has none).
    data: Box<RawValue>,
    /// The whole event as written, so that a copy (a fork, a backend swap) writes it unchanged,
    /// members this dshd does not know included.
    line: Box<RawValue>,
}

impl PartialEq for UnknownEvent {
    fn eq(&self, other: &Self) -> bool {
        self.line.get() == other.line.get()
    }
}

impl UnknownEvent {
    /// The event as written.
    pub fn line(&self) -> &str {
        self.line.get()
    }
}

/// The envelope of an event line, read without knowing its type: what an unknown event must have.
#[derive(Serialize, Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: String,
    seq: u64,
    time: i64,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let EventData::Unknown(unknown) = &self.data {
            return unknown.line.serialize(serializer);
        }
        let mut s = serializer.serialize_struct("Event", 4)?;
        s.serialize_field("type", self.data.type_name())?;
        s.serialize_field("seq", &self.seq)?;
        s.serialize_field("time", &self.time)?;
        self.data.serialize_data(&mut s)?;
        s.end()
    }
}

impl Event {
    /// Reads one event line (without its newline). A line this dshd understands becomes its typed
    /// event. A JSON object with the envelope (`type`, `seq`, `time`) whose type is unknown, or
    /// whose only fault is a member this dshd does not know, becomes [`EventData::Unknown`], kept
    /// as written. Anything else (not JSON, no envelope, a known type with data of the wrong
    /// shape) is an error: the line is damaged, not merely newer.
    pub fn from_line(line: &[u8]) -> Result<Self, String> {
        let strict = match serde_json::from_slice::<Self>(line) {
            Ok(event) => return Ok(event),
            Err(e) => e,
        };
        let why = strict.to_string();
        let Ok(envelope) = serde_json::from_slice::<Envelope<'_>>(line) else {
            return Err(format!("bad event line: {why}"));
        };
        if EventData::is_known_type(&envelope.kind) && !why.contains("unknown field") {
            return Err(format!("bad event line: {why}"));
        }
        let Ok(text) = std::str::from_utf8(line) else {
            return Err("bad event line: not UTF-8".to_owned());
        };
        let data = match envelope.data {
            Some(data) => data.to_owned(),
            None => RawValue::from_string("null".to_owned()).map_err(|e| e.to_string())?,
        };
        let line = RawValue::from_string(text.trim().to_owned()).map_err(|e| e.to_string())?;
        Ok(Self {
            seq: envelope.seq,
            time: envelope.time,
            data: EventData::Unknown(UnknownEvent {
                kind: envelope.kind,
                data,
                line,
            }),
        })
    }

    /// An event from its stored columns (the SQLite backend's rows): `data` is the JSON text of
    /// the `data` member, deserialized straight into the variant `type_name` names.
    pub fn from_columns(
        seq: u64,
        time: i64,
        type_name: &str,
        data: &str,
    ) -> Result<Self, serde_json::Error> {
        if EventData::is_known_type(type_name) {
            let mut deserializer = serde_json::Deserializer::from_str(data);
            let known = EventData::deserialize_data(type_name, &mut deserializer);
            match known {
                Ok(known) => {
                    deserializer.end()?;
                    return Ok(Self {
                        seq,
                        time,
                        data: known,
                    });
                }
                Err(e) if !e.to_string().contains("unknown field") => return Err(e),
                Err(_) => {}
            }
        }
        // Unknown here: rebuilt as the envelope a JSONL log would hold.
        let data = RawValue::from_string(data.to_owned())?;
        let line = serde_json::to_string(&Envelope {
            kind: type_name.to_owned(),
            seq,
            time,
            data: Some(&data),
        })?;
        Ok(Self {
            seq,
            time,
            data: EventData::Unknown(UnknownEvent {
                kind: type_name.to_owned(),
                line: RawValue::from_string(line)?,
                data,
            }),
        })
    }

    /// The event as one JSON line (no trailing newline).
    pub fn to_json(&self) -> String {
        // Serialising our own types into a String cannot fail: no maps with non-string keys.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The event's data object alone, as JSON text: exactly the `data` member of
    /// [`to_json`](Self::to_json), serialised directly (no `Value` tree in between; the SQLite
    /// backend calls this for every event it stores).
    pub fn data_json(&self) -> String {
        let mut data = DataOnly(Vec::new());
        match self.data.serialize_data(&mut data) {
            // serde_json writes UTF-8 only.
            Ok(()) => String::from_utf8(data.0).unwrap_or_else(|_| "null".to_owned()),
            Err(_) => "null".to_owned(),
        }
    }
}

/// Receives the one `data` field [`EventData::serialize_data`] writes and keeps its JSON.
struct DataOnly(Vec<u8>);

impl SerializeStruct for DataOnly {
    type Ok = ();
    type Error = serde_json::Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Self::Error> {
        self.0 = to_vec_sized(value)?;
        Ok(())
    }

    fn end(self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// JSON up to this size is kept from the first pass; a larger value is measured and written again.
const GROWN_AT_MOST: usize = 1024 * 1024;

/// `value` as JSON, in a buffer that never grows past [`GROWN_AT_MOST`]. A growing buffer moves by
/// copying (jemalloc does not remap in place as glibc did), so an event of tens of megabytes (a
/// long reply) would be held by its old and new buffer at once; it is serialised twice instead,
/// once to measure it and once into a buffer of exactly its size.
fn to_vec_sized<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut first = Capped {
        buf: Vec::new(),
        len: 0,
    };
    serde_json::to_writer(&mut first, value)?;
    if first.len <= GROWN_AT_MOST {
        return Ok(first.buf);
    }
    let mut buf = Vec::with_capacity(first.len);
    serde_json::to_writer(&mut buf, value)?;
    Ok(buf)
}

/// Keeps what is written while it stays within [`GROWN_AT_MOST`]; past that it only counts.
struct Capped {
    buf: Vec<u8>,
    len: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.len = self.len.saturating_add(bytes.len());
        if self.len <= GROWN_AT_MOST {
            self.buf.extend_from_slice(bytes);
        } else if self.buf.capacity() > 0 {
            self.buf = Vec::new();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(data: EventData) -> String {
        let event = Event {
            seq: 3,
            time: 1000,
            data,
        };
        let json = event.to_json();
        assert_eq!(
            serde_json::from_str::<Event>(&json).unwrap(),
            event,
            "{json}"
        );
        json
    }

    #[test]
    fn large_json_is_written_into_a_buffer_of_its_exact_size() {
        for len in [10, GROWN_AT_MOST - 2, GROWN_AT_MOST - 1, 3 * GROWN_AT_MOST] {
            let text = "\"".repeat(len / 2);
            let json = to_vec_sized(&text).unwrap();
            assert_eq!(json, serde_json::to_vec(&text).unwrap(), "{len}");
            if json.len() > GROWN_AT_MOST {
                assert_eq!(json.capacity(), json.len(), "{len}");
            }
        }
    }

    #[test]
    fn data_json_is_the_data_member_of_the_line() {
        for data in [
            EventData::EndSeed {},
            EventData::TurnEnd {
                turn: 2,
                reason: TurnEndReason::Aborted {
                    cause: AbortCause::User,
                },
                answer_seq: Some(5),
                usage: None,
            },
            EventData::ToolResult {
                turn: 1,
                step: 2,
                call_id: "c1".into(),
                content: "out \"quoted\"\n".into(),
                is_error: true,
                code: Some("TOOL_OUTCOME_UNKNOWN".into()),
                exit_code: None,
            },
        ] {
            let event = Event {
                seq: 7,
                time: 9,
                data,
            };
            let line = event.to_json();
            let prefix = format!(
                r#"{{"type":"{}","seq":7,"time":9,"data":"#,
                event.data.type_name()
            );
            assert_eq!(line, format!("{prefix}{}}}", event.data_json()));
        }
    }

    #[test]
    fn envelope_order_and_names() {
        assert_eq!(
            roundtrip(EventData::TurnStart { turn: 1 }),
            r#"{"type":"turn/start","seq":3,"time":1000,"data":{"turn":1}}"#
        );
        assert_eq!(
            roundtrip(EventData::EndSeed {}),
            r#"{"type":"session/end-seed","seq":3,"time":1000,"data":{}}"#
        );
        let json = roundtrip(EventData::ToolResult {
            turn: 1,
            step: 2,
            call_id: "c1".into(),
            content: "out".into(),
            is_error: true,
            code: Some("TOOL_OUTCOME_UNKNOWN".into()),
            exit_code: None,
        });
        assert_eq!(
            json,
            r#"{"type":"tool/result","seq":3,"time":1000,"data":{"turn":1,"step":2,"callId":"c1","content":"out","isError":true,"code":"TOOL_OUTCOME_UNKNOWN"}}"#
        );
    }

    #[test]
    fn every_variant_roundtrips() {
        roundtrip(EventData::TurnEnd {
            turn: 2,
            reason: TurnEndReason::Aborted {
                cause: AbortCause::User,
            },
            answer_seq: None,
            usage: None,
        });
        roundtrip(EventData::TurnEnd {
            turn: 2,
            reason: TurnEndReason::Error {
                message: "boom".into(),
            },
            answer_seq: Some(3),
            usage: None,
        });
        roundtrip(EventData::StepStart { turn: 1, step: 1 });
        roundtrip(EventData::StepEnd { turn: 1, step: 1 });
        roundtrip(EventData::UserMessage {
            message: UserMessage {
                text: "hi".into(),
                source: MessageSource::Plugin {
                    plugin: "hooks-codex".into(),
                },
            },
        });
        roundtrip(EventData::AssistantMessage {
            turn: 1,
            step: 1,
            message: AssistantMessage {
                text: "ok".into(),
                tool_calls: vec![ToolCallRequest {
                    id: "c".into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({"command": "ls"}),
                }],
            },
            usage: Some(Usage {
                input_tokens: 1,
                output_tokens: 2,
                ..Usage::default()
            }),
        });
        roundtrip(EventData::ToolCall {
            turn: 1,
            step: 1,
            call_id: "c".into(),
            name: "bash".into(),
            arguments: serde_json::json!({}),
        });
        let json = roundtrip(EventData::HookResult {
            dialect: "codex".into(),
            event: "Stop".into(),
            handler: "h".into(),
            decision: "block".into(),
            exit_code: Some(2),
            stderr_summary: None,
            duration_ms: 4,
            system_message: None,
            sandbox: None,
        });
        assert!(
            json.contains(r#""data":{"dialect":"codex","event":"Stop","handler":"h","decision":"block","exitCode":2,"durationMs":4}"#),
            "{json}"
        );
        let json = roundtrip(EventData::HookResult {
            dialect: "claude-code".into(),
            event: "Stop".into(),
            handler: "h".into(),
            decision: "stop".into(),
            exit_code: Some(0),
            stderr_summary: None,
            duration_ms: 4,
            system_message: Some("tests are red".into()),
            sandbox: Some(HookConfinement {
                mode: "workspace-write".into(),
                network: "off".into(),
                reason: "hooks.sandbox is \"always\"".into(),
            }),
        });
        assert!(
            json.contains(r#""systemMessage":"tests are red""#),
            "{json}"
        );
        assert!(
            json.contains(
                r#""sandbox":{"mode":"workspace-write","network":"off","reason":"hooks.sandbox is \"always\""}"#
            ),
            "{json}"
        );
        let json = roundtrip(EventData::ToolRewritten {
            turn: 1,
            step: 2,
            call_id: "c".into(),
            arguments: serde_json::json!({"command": "echo safe"}),
        });
        assert!(
            json.contains(r#""type":"tool/rewritten""#) && json.contains(r#""callId":"c""#),
            "{json}"
        );
        let json = roundtrip(EventData::TurnEnd {
            turn: 1,
            reason: TurnEndReason::Stopped {
                reason: "build is red".into(),
            },
            answer_seq: None,
            usage: None,
        });
        assert!(
            json.contains(r#""reason":{"kind":"stopped","reason":"build is red"}"#),
            "{json}"
        );
        roundtrip(EventData::HookInvoked {
            dialect: "claude-code".into(),
            event: "PreToolUse".into(),
            handler: "h".into(),
            turn: Some(1),
            tool_call_id: None,
        });
    }

    /// The step limit is a reason of its own; a log written before it existed recorded the same
    /// turn as an error naming the setting, and still reads as that error.
    #[test]
    fn the_step_limit_is_its_own_reason_and_old_logs_still_read() {
        let json = roundtrip(EventData::TurnEnd {
            turn: 3,
            reason: TurnEndReason::StepLimit { limit: 2 },
            answer_seq: None,
            usage: None,
        });
        assert!(
            json.contains(r#""reason":{"kind":"step_limit","limit":2}"#),
            "{json}"
        );
        let old = r#"{"type":"turn/end","seq":9,"time":1,"data":{"turn":3,"reason":{"kind":"error","message":"the turn reached the limit of 2 steps (agent.max_steps_per_turn)"}}}"#;
        let event = Event::from_line(old.as_bytes()).unwrap();
        let EventData::TurnEnd { reason, .. } = event.data else {
            panic!("{event:?}");
        };
        assert_eq!(reason.kind(), "error");
        assert_eq!(
            TurnEndReason::StepLimit { limit: 2 }.message(),
            "the turn reached the limit of 2 steps (agent.max_steps_per_turn)"
        );
    }

    #[test]
    fn unknown_type_and_fields_are_refused() {
        let err = serde_json::from_str::<Event>(r#"{"type":"x/y","seq":0,"time":0,"data":{}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown event type"), "{err}");
        assert!(
            serde_json::from_str::<Event>(
                r#"{"type":"turn/start","seq":0,"time":0,"data":{"turn":1,"x":2}}"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<Event>(
                r#"{"type":"turn/start","seq":0,"time":0,"data":{"turn":1},"extra":1}"#
            )
            .is_err()
        );
    }
}
