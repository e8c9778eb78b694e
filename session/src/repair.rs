//! Closing a turn left open by a crash (CONTRACTS §4.5). Backends call this on load; the result is
//! the same whatever stored the log.

use std::collections::BTreeSet;

use super::{Event, EventData, TurnEndReason};

/// Error code of the result synthesised for a tool call whose outcome was lost.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";

/// The events that close an open turn at the end of `events`: an error `tool/result` for each call
/// without a result, `step/end` if a step is open, then `turn/end {interrupted}`. Empty when no
/// turn is open. The closers are stamped with the last event's time, so repair never invents a
/// later moment.
pub fn close_open_turn(events: &[Event]) -> Vec<Event> {
    let Some(start) = events.iter().rposition(|e| {
        matches!(
            e.data,
            EventData::TurnStart { .. } | EventData::TurnEnd { .. }
        )
    }) else {
        return Vec::new();
    };
    let EventData::TurnStart { turn } = events[start].data else {
        return Vec::new();
    };
    let open = &events[start..];
    let time = events.last().map_or(0, |e| e.time);
    let mut next_seq = events.len() as u64;
    let mut closers = Vec::new();
    let mut push = |data: EventData| {
        closers.push(Event {
            seq: next_seq,
            time,
            data,
        });
        next_seq += 1;
    };

    let answered: BTreeSet<&str> = open
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    for event in open {
        if let EventData::ToolCall {
            turn,
            step,
            call_id,
            name,
            ..
        } = &event.data
            && !answered.contains(call_id.as_str())
        {
            push(EventData::ToolResult {
                turn: *turn,
                step: *step,
                call_id: call_id.clone(),
                content: format!(
                    "Error: the daemon stopped while {name} was running; its outcome is unknown"
                ),
                is_error: true,
                code: Some(TOOL_OUTCOME_UNKNOWN.to_owned()),
                exit_code: None,
            });
        }
    }

    let open_step = open.iter().rev().find_map(|e| match e.data {
        EventData::StepStart { turn, step } => Some(Some((turn, step))),
        EventData::StepEnd { .. } => Some(None),
        _ => None,
    });
    if let Some(Some((turn, step))) = open_step {
        push(EventData::StepEnd { turn, step });
    }
    push(EventData::TurnEnd {
        turn,
        reason: TurnEndReason::Interrupted,
        answer_seq: None,
        usage: super::Usage::of_turn(events, turn),
    });
    closers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log(data: Vec<EventData>) -> Vec<Event> {
        data.into_iter()
            .enumerate()
            .map(|(i, data)| Event {
                seq: i as u64,
                time: 10 + i as i64,
                data,
            })
            .collect()
    }

    #[test]
    fn closed_log_needs_nothing() {
        assert!(close_open_turn(&[]).is_empty());
        let events = log(vec![
            EventData::TurnStart { turn: 1 },
            EventData::TurnEnd {
                turn: 1,
                reason: TurnEndReason::Completed,
                answer_seq: None,
                usage: None,
            },
        ]);
        assert!(close_open_turn(&events).is_empty());
    }

    #[test]
    fn open_step_with_unanswered_call_is_closed() {
        let events = log(vec![
            EventData::TurnStart { turn: 2 },
            EventData::StepStart { turn: 2, step: 1 },
            EventData::ToolCall {
                turn: 2,
                step: 1,
                call_id: "a".into(),
                name: "bash".into(),
                arguments: json!({}),
            },
            EventData::ToolCall {
                turn: 2,
                step: 1,
                call_id: "b".into(),
                name: "bash".into(),
                arguments: json!({}),
            },
            EventData::ToolResult {
                turn: 2,
                step: 1,
                call_id: "a".into(),
                content: "ok".into(),
                is_error: false,
                code: None,
                exit_code: None,
            },
        ]);
        let closers = close_open_turn(&events);
        let kinds: Vec<_> = closers.iter().map(|e| e.data.type_name()).collect();
        assert_eq!(kinds, ["tool/result", "step/end", "turn/end"]);
        assert_eq!(closers[0].seq, 5);
        assert_eq!(closers[2].seq, 7);
        assert!(closers.iter().all(|e| e.time == 14));
        match &closers[0].data {
            EventData::ToolResult {
                call_id,
                is_error,
                code,
                ..
            } => {
                assert_eq!(call_id, "b");
                assert!(is_error);
                assert_eq!(code.as_deref(), Some(TOOL_OUTCOME_UNKNOWN));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            closers[2].data,
            EventData::TurnEnd {
                turn: 2,
                reason: TurnEndReason::Interrupted,
                answer_seq: None,
                usage: None,
            }
        );
    }

    #[test]
    fn open_turn_between_steps_gets_only_turn_end() {
        let events = log(vec![
            EventData::TurnStart { turn: 1 },
            EventData::StepStart { turn: 1, step: 1 },
            EventData::StepEnd { turn: 1, step: 1 },
        ]);
        let closers = close_open_turn(&events);
        assert_eq!(closers.len(), 1);
        assert_eq!(closers[0].data.type_name(), "turn/end");
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::check_contiguous;
        use crate::strategies::events;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Whatever a log holds, repair never panics, continues its seqs and times, closes the
            /// open turn (answering every call of it) and is idempotent.
            #[test]
            fn repair_closes_any_log_once(events in events(24)) {
                let closers = close_open_turn(&events);
                let mut repaired = events.clone();
                repaired.extend(closers.iter().cloned());
                prop_assert!(check_contiguous(&repaired).is_ok());
                let last_time = events.last().map_or(0, |e| e.time);
                prop_assert!(closers.iter().all(|e| e.time == last_time));
                prop_assert!(close_open_turn(&repaired).is_empty(), "repair is not idempotent");

                let last_boundary = events.iter().rposition(|e| matches!(
                    e.data,
                    EventData::TurnStart { .. } | EventData::TurnEnd { .. }
                ));
                let open = last_boundary
                    .is_some_and(|i| matches!(events[i].data, EventData::TurnStart { .. }));
                prop_assert_eq!(closers.is_empty(), !open);
                if open {
                    let interrupted = matches!(
                        closers.last().map(|e| &e.data),
                        Some(EventData::TurnEnd { reason: TurnEndReason::Interrupted, .. })
                    );
                    prop_assert!(interrupted, "the last closer is not turn/end interrupted");
                    let start = last_boundary.unwrap_or(0);
                    for event in &repaired[start..] {
                        if let EventData::ToolCall { call_id, .. } = &event.data {
                            let answered = repaired[start..].iter().any(|e| matches!(
                                &e.data,
                                EventData::ToolResult { call_id: answered, .. } if answered == call_id
                            ));
                            prop_assert!(answered, "call {} left without a result", call_id);
                        }
                    }
                }
            }
        }
    }
}
