//! Proptest strategies for session events, shared by the property tests of everything that reads
//! them back (the JSONL reader, repair).

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

use super::{
    AbortCause, ApprovalClient, ApprovalPolicy, ApprovalScope, ApprovalSource, ApprovalVerdict,
    AssistantMessage, Event, EventData, HookConfinement, MessageSource, ReasoningEffort,
    ToolCallRequest, TurnEndReason, Usage, UserMessage,
};

/// Any short text: quotes, backslashes, newlines, control characters and non-ASCII included.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "(?s).{0,24}",
        Just(String::new()),
        "[\"\\\\\n\r\t\u{0}\u{7f}\u{2028}é😀]{1,8}",
    ]
}

/// Any JSON value without floats (a float may not survive a text round trip bit for bit, and
/// dsh never writes one).
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((text(), inner), 0..4).prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn reason() -> impl Strategy<Value = TurnEndReason> {
    let cause = prop_oneof![
        Just(AbortCause::User),
        Just(AbortCause::Parent),
        Just(AbortCause::Closed),
        Just(AbortCause::Shutdown),
    ];
    prop_oneof![
        Just(TurnEndReason::Completed),
        Just(TurnEndReason::Interrupted),
        cause.prop_map(|cause| TurnEndReason::Aborted { cause }),
        text().prop_map(|message| TurnEndReason::Error { message }),
        text().prop_map(|reason| TurnEndReason::Blocked { reason }),
        any::<u32>().prop_map(|limit| TurnEndReason::StepLimit { limit }),
    ]
}

fn usage() -> impl Strategy<Value = Usage> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
    )
        .prop_map(|(input, output, cache, reasoning)| Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache,
            reasoning_tokens: reasoning,
        })
}

/// Small turn and step numbers, so generated logs have turns that open, close and repeat.
fn small() -> impl Strategy<Value = u32> {
    prop_oneof![0..4_u32, any::<u32>()]
}

/// Call ids from a small set, so calls and results of generated logs meet.
fn call_id() -> impl Strategy<Value = String> {
    prop_oneof!["c[0-3]", text()]
}

/// Any event data of the vocabulary.
pub fn event_data() -> impl Strategy<Value = EventData> {
    prop_oneof![
        small().prop_map(|turn| EventData::TurnStart { turn }),
        (
            small(),
            reason(),
            prop::option::of(any::<u64>()),
            prop::option::of(usage())
        )
            .prop_map(|(turn, reason, answer_seq, usage)| EventData::TurnEnd {
                turn,
                reason,
                answer_seq,
                usage,
            }),
        (small(), small()).prop_map(|(turn, step)| EventData::StepStart { turn, step }),
        (small(), small()).prop_map(|(turn, step)| EventData::StepEnd { turn, step }),
        (text(), prop::option::of(text())).prop_map(|(text, plugin)| EventData::UserMessage {
            message: UserMessage {
                text,
                source: plugin.map_or(MessageSource::User, |plugin| MessageSource::Plugin {
                    plugin
                }),
            },
        }),
        (
            small(),
            small(),
            text(),
            vec((call_id(), text(), json()), 0..3),
            prop::option::of(usage()),
        )
            .prop_map(
                |(turn, step, text, calls, usage)| EventData::AssistantMessage {
                    turn,
                    step,
                    message: AssistantMessage {
                        text,
                        tool_calls: calls
                            .into_iter()
                            .map(|(id, name, arguments)| ToolCallRequest {
                                id,
                                name,
                                arguments,
                            })
                            .collect(),
                    },
                    usage,
                }
            ),
        (small(), small(), call_id(), text(), json()).prop_map(
            |(turn, step, call_id, name, arguments)| EventData::ToolCall {
                turn,
                step,
                call_id,
                name,
                arguments,
            }
        ),
        (
            small(),
            small(),
            call_id(),
            text(),
            any::<bool>(),
            prop::option::of(text()),
            prop::option::of(any::<i32>())
        )
            .prop_map(
                |(turn, step, call_id, content, is_error, code, exit_code)| {
                    EventData::ToolResult {
                        turn,
                        step,
                        call_id,
                        content,
                        is_error,
                        code,
                        exit_code,
                    }
                }
            ),
        (
            text(),
            text(),
            text(),
            prop::option::of(any::<u32>()),
            prop::option::of(text())
        )
            .prop_map(|(dialect, event, handler, turn, tool_call_id)| {
                EventData::HookInvoked {
                    dialect,
                    event,
                    handler,
                    turn,
                    tool_call_id,
                }
            }),
        (
            text(),
            text(),
            text(),
            text(),
            prop::option::of(any::<i32>()),
            prop::option::of(text()),
            prop::option::of(text()),
            any::<u64>(),
            prop::option::of(
                (text(), text(), text()).prop_map(|(mode, network, reason)| {
                    HookConfinement {
                        mode,
                        network,
                        reason,
                    }
                })
            ),
        )
            .prop_map(
                |(
                    dialect,
                    event,
                    handler,
                    decision,
                    exit_code,
                    stderr_summary,
                    system_message,
                    duration_ms,
                    sandbox,
                )| {
                    EventData::HookResult {
                        dialect,
                        event,
                        handler,
                        decision,
                        exit_code,
                        stderr_summary,
                        system_message,
                        duration_ms,
                        sandbox,
                    }
                }
            ),
        Just(EventData::EndSeed {}),
        (
            text(),
            text(),
            prop::option::of(text()),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(format, source, original_id, events, skipped)| {
                EventData::Imported {
                    format,
                    source,
                    original_id,
                    events,
                    skipped,
                }
            }),
        text().prop_map(|title| EventData::SessionTitle { title }),
        any::<bool>().prop_map(|archived| EventData::SessionArchived { archived }),
        (
            text(),
            text(),
            prop::option::of(prop::sample::select(ReasoningEffort::ALL.to_vec())),
            prop::sample::select(ApprovalPolicy::ALL.to_vec())
        )
            .prop_map(|(provider, model, reasoning_effort, approval)| {
                EventData::Settings {
                    provider,
                    model,
                    reasoning_effort,
                    approval,
                    sandbox: None,
                }
            }),
        (small(), small(), call_id(), text(), text(), any::<u64>()).prop_map(
            |(turn, step, call_id, command, reason, timeout_ms)| EventData::ApprovalRequest {
                turn,
                step,
                call_id,
                tool: "bash".into(),
                command,
                cwd: "/w".into(),
                reason,
                timeout_ms,
                change: None,
            }
        ),
        (
            small(),
            small(),
            call_id(),
            any::<bool>(),
            prop::sample::select(vec![
                ApprovalSource::Client,
                ApprovalSource::Timeout,
                ApprovalSource::Unwatched,
                ApprovalSource::Cancelled,
                ApprovalSource::Rule,
                ApprovalSource::Hook,
            ]),
            prop::option::of(text()),
            prop::sample::select(vec![ApprovalScope::Once, ApprovalScope::Session]),
        )
            .prop_map(|(turn, step, call_id, allow, by, reason, scope)| {
                EventData::ApprovalDecision {
                    turn,
                    step,
                    call_id,
                    decision: if allow {
                        ApprovalVerdict::Allow
                    } else {
                        ApprovalVerdict::Deny
                    },
                    by,
                    reason,
                    scope,
                    client: (by == ApprovalSource::Client).then_some(ApprovalClient {
                        pid: Some(i32::try_from(turn).unwrap_or(1)),
                        uid: step,
                        terminal: Some(allow),
                    }),
                    handlers: if by == ApprovalSource::Hook {
                        vec![format!("/h.json#PermissionRequest[0][{step}]")]
                    } else {
                        Vec::new()
                    },
                }
            }),
    ]
}

/// A log's events: any data, seq equal to the index, any time.
pub fn events(max: usize) -> impl Strategy<Value = Vec<Event>> {
    vec((event_data(), any::<i64>()), 0..max).prop_map(|items| {
        items
            .into_iter()
            .enumerate()
            .map(|(seq, (data, time))| Event {
                seq: seq as u64,
                time,
                data,
            })
            .collect()
    })
}
