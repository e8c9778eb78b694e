//! What a compaction prunes and which span it summarises, decided from the log alone (pure, so
//! it is tested without a model).

use dsh_session::{Event, EventData, MessageSource};

/// What a compaction will do to the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// Tool results (call ids) to send shrunk from now on.
    pub pruned: Vec<String>,
    /// The last seq of the span to summarise; `None`: nothing before the kept tail to summarise.
    pub through: Option<u64>,
    /// The newest prompt, when it falls inside the summarised span (it is kept verbatim).
    pub keeps: Option<u64>,
}

/// Bytes `event` adds to the history as it stands (results already pruned counted shrunk is not
/// worth the bookkeeping: an estimate that errs long compacts a little early).
fn event_bytes(event: &Event) -> u64 {
    match &event.data {
        EventData::UserMessage { message } => message.text.len() as u64 + 32,
        EventData::AssistantMessage { message, .. } => {
            super::super::gauge::assistant_bytes(&message.text, &message.tool_calls)
        }
        EventData::ToolResult {
            call_id, content, ..
        } => (call_id.len() + content.len() + 32) as u64,
        _ => 0,
    }
}

/// Whether the span kept verbatim may start at `event`: a message that no earlier call waits on
/// (every call's results are logged before the next user or assistant message).
fn boundary(event: &Event) -> bool {
    matches!(
        event.data,
        EventData::UserMessage { .. } | EventData::AssistantMessage { .. }
    )
}

/// A person's message: a prompt or a steer.
fn from_person(event: &Event) -> bool {
    matches!(
        &event.data,
        EventData::UserMessage { message }
            if matches!(message.source, MessageSource::User | MessageSource::Steer)
    )
}

/// Decides a compaction of `events`: results longer than `keep_bytes` are pruned (except the
/// newest step's, unless one alone passes `tail_bytes`), and the span before the newest messages
/// that fit in `tail_bytes` is summarised (the newest step is always kept).
pub(super) fn plan(events: &[Event], keep_bytes: u64, tail_bytes: u64) -> Plan {
    // What an earlier summary replaced is not looked at again.
    let mut start = 0;
    let mut done: Vec<&str> = Vec::new();
    for event in events {
        if let EventData::CompactionEnd {
            replaces_through,
            pruned,
            error: None,
            ..
        } = &event.data
        {
            done.extend(pruned.iter().map(String::as_str));
            if let Some(through) = replaces_through {
                start = start.max(events.partition_point(|e| e.seq <= *through));
            }
        }
    }
    let newest_step = events
        .iter()
        .rposition(|e| matches!(e.data, EventData::AssistantMessage { .. }))
        .unwrap_or(events.len());
    let pruned = events[start..]
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.data {
            EventData::ToolResult {
                call_id, content, ..
            } if content.len() as u64 > keep_bytes && !done.contains(&call_id.as_str()) => {
                let old = start + i < newest_step;
                (old || content.len() as u64 > tail_bytes).then(|| call_id.clone())
            }
            _ => None,
        })
        .collect::<Vec<_>>();
    let shrunk = |e: &Event| match &e.data {
        EventData::ToolResult { call_id, .. }
            if pruned.contains(call_id) || done.contains(&call_id.as_str()) =>
        {
            keep_bytes + 160
        }
        _ => event_bytes(e),
    };
    // The kept tail: the newest messages that fit, starting at a boundary; at least the newest
    // step.
    let mut cut = newest_step.max(start);
    let mut tail: u64 = events[cut..].iter().map(shrunk).sum();
    for i in (start..cut).rev() {
        tail += shrunk(&events[i]);
        if tail > tail_bytes {
            break;
        }
        if boundary(&events[i]) {
            cut = i;
        }
    }
    let summarisable = events[start..cut]
        .iter()
        .any(|e| event_bytes(e) > 0 && !matches!(e.data, EventData::Instructions { .. }));
    let through = summarisable
        .then(|| cut.checked_sub(1).map(|last| events[last].seq))
        .flatten();
    let keeps = through.and_then(|_| {
        if events[cut..].iter().any(from_person) {
            return None;
        }
        events[..cut]
            .iter()
            .rfind(|e| from_person(e))
            .map(|e| e.seq)
    });
    Plan {
        pruned,
        through,
        keeps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{AssistantMessage, ToolCallRequest, UserMessage};

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

    fn step(id: &str, output: usize) -> [EventData; 2] {
        [
            EventData::AssistantMessage {
                turn: 1,
                step: 1,
                message: AssistantMessage {
                    text: String::new(),
                    tool_calls: vec![ToolCallRequest {
                        id: id.into(),
                        name: "bash".into(),
                        arguments: serde_json::json!({"command": "x"}),
                    }],
                },
                usage: None,
            },
            EventData::ToolResult {
                turn: 1,
                step: 1,
                call_id: id.into(),
                content: "o".repeat(output),
                is_error: false,
                code: None,
                exit_code: None,
            },
        ]
    }

    #[test]
    fn old_long_results_are_pruned_and_the_span_before_the_tail_summarised() {
        let mut data = vec![user("task")];
        for i in 0..10 {
            data.extend(step(&format!("c{i}"), 5_000));
        }
        let events = log(data);
        let plan = plan(&events, 1_000, 6_000);
        // Every result but the newest step's is long and old.
        assert_eq!(plan.pruned.len(), 9, "{plan:?}");
        assert!(!plan.pruned.contains(&"c9".to_owned()));
        // The tail holds the newest steps that fit, starting at an assistant message.
        let through = plan.through.unwrap();
        let first_kept = &events[through as usize + 1];
        assert!(matches!(
            first_kept.data,
            EventData::AssistantMessage { .. }
        ));
        // The prompt is in the summarised span, so it is kept verbatim.
        assert_eq!(plan.keeps, Some(0));
    }

    #[test]
    fn a_newest_result_larger_than_the_tail_is_pruned_and_nothing_is_done_twice() {
        let mut data = vec![user("task")];
        for i in 0..10 {
            data.extend(step(&format!("c{i}"), 5_000));
        }
        data.extend(step("big", 50_000));
        let mut events = log(data);
        let first = plan(&events, 1_000, 3_000);
        assert!(first.pruned.contains(&"big".to_owned()), "{first:?}");
        assert!(first.through.is_some());
        events.push(Event {
            seq: events.len() as u64,
            time: 0,
            data: EventData::CompactionEnd {
                trigger: dsh_session::CompactionTrigger::Auto,
                summary: Some("s".into()),
                replaces_through: first.through,
                keeps: first.keeps,
                pruned: first.pruned,
                keep_bytes: 1_000,
                tokens_before: 1,
                tokens_after: 1,
                error: None,
            },
        });
        let again = plan(&events, 1_000, 3_000);
        assert!(again.pruned.is_empty(), "{again:?}");
        assert_eq!(again.through, None, "only the kept tail is left: {again:?}");
    }
}
