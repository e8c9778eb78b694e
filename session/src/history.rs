//! The model's conversation history, derived from the session log (never stored separately).

use std::collections::HashMap;
use std::sync::Arc;

use crate::compaction::{SUMMARY_PLUGIN, SUMMARY_PREFIX};

use super::{Event, EventData, MessageSource, ToolCallRequest};

/// The plugin name project instructions are sent under, as a user message of their own.
pub const INSTRUCTIONS_PLUGIN: &str = "instructions";

/// One message of the history sent to a model.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryMessage {
    /// A user-role message: a prompt or plugin context.
    User {
        /// The text.
        text: String,
        /// Who wrote it.
        source: MessageSource,
    },
    /// What the model said and which tools it called.
    Assistant {
        /// The text.
        text: String,
        /// Tool calls, in the model's order.
        tool_calls: Vec<ToolCallRequest>,
    },
    /// A tool call's result.
    ToolResult {
        /// The call answered.
        call_id: String,
        /// The result text.
        content: String,
        /// True when the call failed.
        is_error: bool,
    },
}

/// A live session's history, kept up to date incrementally. Deriving the whole history for every
/// model request made each step cost in proportion to the turn so far; instead only the events
/// appended since the last request are projected, and each request shares the result (an `Arc`
/// that is extended in place once the previous request has been dropped). A compaction among
/// the new events derives the whole history again (it replaces what came before it).
#[derive(Debug, Default)]
pub struct HistoryCache {
    /// Events already projected (a prefix of the append-only log).
    derived: usize,
    messages: Arc<Vec<HistoryMessage>>,
}

impl HistoryCache {
    /// The history of `events`, which must extend the events seen before (a session's log only
    /// grows); a shorter log starts the cache afresh.
    pub fn update(&mut self, events: &[Event]) -> Arc<Vec<HistoryMessage>> {
        if events.len() < self.derived {
            *self = Self::default();
        }
        let new = &events[self.derived..];
        if new.iter().any(|e| compaction_of(e).is_some()) {
            self.messages = Arc::new(derive(events));
        } else {
            let new = project(new, &Pruned::new());
            if !new.is_empty() {
                Arc::make_mut(&mut self.messages).extend(new);
            }
        }
        self.derived = events.len();
        self.messages.clone()
    }
}

/// A successful compaction's terms, as [`derive`] applies them.
struct Compaction<'a> {
    summary: Option<&'a str>,
    replaces_through: Option<u64>,
    keeps: Option<u64>,
    pruned: &'a [String],
    keep_bytes: u64,
}

/// The terms of `event` when it is a compaction that succeeded.
fn compaction_of(event: &Event) -> Option<Compaction<'_>> {
    match &event.data {
        EventData::CompactionEnd {
            summary,
            replaces_through,
            keeps,
            pruned,
            keep_bytes,
            error: None,
            ..
        } => Some(Compaction {
            summary: summary.as_deref(),
            replaces_through: *replaces_through,
            keeps: *keeps,
            pruned,
            keep_bytes: *keep_bytes,
        }),
        _ => None,
    }
}

/// The history the model is sent after `events` (CONTRACTS §7.1): the log's user, assistant and
/// tool-result events in order, as the compactions in it say. The last compaction with a summary
/// replaces everything up to its span's end, except the project instructions and the prompt it
/// keeps; every compaction's pruned results are sent shrunk.
pub fn derive(events: &[Event]) -> Vec<HistoryMessage> {
    derive_with(events, None)
}

/// The history [`derive`] gives once `next` (a compaction being decided) is appended to
/// `events`, without copying the log to append it.
pub fn derive_with(events: &[Event], next: Option<&Event>) -> Vec<HistoryMessage> {
    let mut pruned = Pruned::new();
    let mut last_summary = None;
    for event in events.iter().chain(next) {
        if let Some(c) = compaction_of(event) {
            pruned.extend(c.pruned.iter().map(|id| (id.as_str(), c.keep_bytes)));
            if c.summary.is_some() {
                last_summary = Some(c);
            }
        }
    }
    let Some(summary) = last_summary else {
        return project(events, &pruned);
    };
    let through = summary.replaces_through.unwrap_or(0);
    let mut messages: Vec<HistoryMessage> = events
        .iter()
        .filter(|e| {
            e.seq <= through
                && (matches!(e.data, EventData::Instructions { .. })
                    || Some(e.seq) == summary.keeps)
        })
        .filter_map(|e| one(e, &pruned))
        .collect();
    messages.push(HistoryMessage::User {
        text: format!("{SUMMARY_PREFIX}{}", summary.summary.unwrap_or_default()),
        source: MessageSource::Plugin {
            plugin: SUMMARY_PLUGIN.to_owned(),
        },
    });
    let after = events.partition_point(|e| e.seq <= through);
    messages.extend(project(&events[after..], &pruned));
    messages
}

/// The tool results compactions pruned: call id → the bytes kept of it.
type Pruned<'a> = HashMap<&'a str, u64>;

/// Projects `events` to messages, in order, sending the results in `pruned` shrunk.
fn project(events: &[Event], pruned: &Pruned<'_>) -> Vec<HistoryMessage> {
    events.iter().filter_map(|e| one(e, pruned)).collect()
}

/// The message `event` contributes, if any.
fn one(event: &Event, pruned: &Pruned<'_>) -> Option<HistoryMessage> {
    match &event.data {
        EventData::UserMessage { message } => Some(HistoryMessage::User {
            text: message.text.clone(),
            source: message.source.clone(),
        }),
        EventData::AssistantMessage { message, .. } => Some(HistoryMessage::Assistant {
            text: message.text.clone(),
            tool_calls: message.tool_calls.clone(),
        }),
        EventData::Instructions { text, .. } if !text.is_empty() => Some(HistoryMessage::User {
            text: text.clone(),
            source: MessageSource::Plugin {
                plugin: INSTRUCTIONS_PLUGIN.to_owned(),
            },
        }),
        EventData::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => Some(HistoryMessage::ToolResult {
            call_id: call_id.clone(),
            content: match pruned.get(call_id.as_str()) {
                Some(keep) => crate::compaction::pruned(content, *keep),
                None => content.clone(),
            },
            is_error: *is_error,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AssistantMessage, CompactionTrigger, UserMessage};

    fn log(data: Vec<EventData>) -> Vec<Event> {
        data.into_iter()
            .enumerate()
            .map(|(seq, data)| Event {
                seq: seq as u64,
                time: 0,
                data,
            })
            .collect()
    }

    fn user(text: &str) -> EventData {
        EventData::UserMessage {
            message: UserMessage {
                text: text.into(),
                source: MessageSource::User,
            },
        }
    }

    fn call(id: &str) -> EventData {
        EventData::AssistantMessage {
            turn: 1,
            step: 1,
            message: AssistantMessage {
                text: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: id.into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({}),
                }],
            },
            usage: None,
        }
    }

    fn result(id: &str, content: &str) -> EventData {
        EventData::ToolResult {
            turn: 1,
            step: 1,
            call_id: id.into(),
            content: content.into(),
            is_error: false,
            code: None,
            exit_code: None,
        }
    }

    fn compaction(summary: Option<&str>, through: Option<u64>, pruned: &[&str]) -> EventData {
        EventData::CompactionEnd {
            trigger: CompactionTrigger::Auto,
            summary: summary.map(str::to_owned),
            replaces_through: through,
            keeps: Some(1),
            pruned: pruned.iter().map(|s| (*s).to_owned()).collect(),
            keep_bytes: 10,
            tokens_before: 100,
            tokens_after: 10,
            error: None,
        }
    }

    fn texts(messages: &[HistoryMessage]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m {
                HistoryMessage::User { text, .. } => format!("user:{text}"),
                HistoryMessage::Assistant { tool_calls, .. } => {
                    format!("calls:{}", tool_calls[0].id)
                }
                HistoryMessage::ToolResult { content, .. } => format!("result:{content}"),
            })
            .collect()
    }

    #[test]
    fn a_summary_replaces_its_span_but_the_instructions_and_the_kept_prompt() {
        let events = log(vec![
            EventData::Instructions {
                files: vec![],
                text: "rules".into(),
                problems: vec![],
            },
            user("task"),
            call("c1"),
            result("c1", &"x".repeat(50)),
            call("c2"),
            result("c2", "recent"),
            compaction(Some("did c1"), Some(3), &[]),
            call("c3"),
        ]);
        let texts = texts(&derive(&events));
        assert_eq!(texts[0], "user:rules");
        assert_eq!(texts[1], "user:task");
        assert!(texts[2].starts_with("user:The conversation so far was compacted"));
        assert!(texts[2].ends_with("did c1"));
        assert_eq!(&texts[3..], ["calls:c2", "result:recent", "calls:c3"]);
    }

    #[test]
    fn pruned_results_are_sent_shrunk_and_a_failed_compaction_changes_nothing() {
        let long = "y".repeat(100);
        let mut data = vec![user("task"), call("c1"), result("c1", &long)];
        let mut failed = compaction(Some("s"), Some(2), &["c1"]);
        if let EventData::CompactionEnd { error, .. } = &mut failed {
            *error = Some("no".into());
        }
        data.push(failed);
        assert_eq!(derive(&log(data.clone())), derive(&log(data[..3].to_vec())));
        data.push(compaction(None, None, &["c1"]));
        let texts = texts(&derive(&log(data)));
        assert_eq!(texts.len(), 3);
        assert!(
            texts[2].contains("90 bytes of this output were cut"),
            "{texts:?}"
        );
    }

    #[test]
    fn the_cache_derives_what_a_whole_derivation_does_across_a_compaction() {
        let events = log(vec![
            user("task"),
            call("c1"),
            result("c1", "one"),
            compaction(Some("s"), Some(2), &[]),
            call("c2"),
            result("c2", "two"),
        ]);
        let mut cache = HistoryCache::default();
        for end in 1..=events.len() {
            let cached = cache.update(&events[..end]);
            assert_eq!(*cached, derive(&events[..end]), "after {end} events");
        }
    }
}
