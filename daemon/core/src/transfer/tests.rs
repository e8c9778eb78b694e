//! The import's readers on arbitrary input (they read files from anywhere): never a panic, and
//! whatever they accept is a log dsh can resume: contiguous, every call answered, no turn left
//! open, the import's record last. A dsh log comes back with its events unchanged.

use std::path::Path;

use proptest::prelude::*;
use tokio::sync::mpsc;

use super::TransferError;
use super::builder::Builder;
use super::context::Context;
use super::jsonl::log_or_transcript;
use dsh_session::{Event, EventData, SessionHeader, SessionId};

/// What reading `bytes` as a JSON-lines source gives: the new log's events.
fn import_bytes(bytes: &[u8]) -> Result<Vec<Event>, TransferError> {
    let (tx, mut rx) = mpsc::channel(1 << 16);
    let id = SessionId::parse("imported").unwrap();
    let mut cx = Context {
        path: Path::new("/source.jsonl"),
        cwd: Path::new("/tmp"),
        id: &id,
        builder: Builder::new(tx),
        lineage: None,
    };
    log_or_transcript(bytes, "the file", &mut cx)?;
    let Context { builder, .. } = cx;
    builder.finish(EventData::Imported {
        format: "test".into(),
        source: "/source.jsonl".into(),
        original_id: None,
        events: 0,
        skipped: 0,
    })?;
    let mut events = Vec::new();
    while let Ok((header, batch)) = rx.try_recv() {
        assert_eq!(header.id, id);
        events.extend(batch);
    }
    Ok(events)
}

/// What dsh needs of a log to resume it.
fn assert_resumable(events: &[Event]) {
    dsh_session::check_contiguous(events).unwrap();
    assert!(matches!(
        events.last().map(|e| &e.data),
        Some(EventData::Imported { .. })
    ));
    assert!(
        dsh_session::repair::close_open_turn(events).is_empty(),
        "{events:?}"
    );
    for event in events {
        if let EventData::ToolCall { call_id, .. } = &event.data {
            assert!(
                events.iter().any(|e| matches!(&e.data,
                    EventData::ToolResult { call_id: c, .. } if c == call_id)),
                "call {call_id} has no result"
            );
        }
    }
}

fn dsh_log(events: &[Event]) -> Vec<u8> {
    let header = SessionHeader::new(SessionId::parse("src").unwrap(), "/tmp".into(), 1);
    let mut bytes = crate::persistence::jsonl::header_line(&header);
    crate::persistence::jsonl::write_event_lines(&mut bytes, events).unwrap();
    bytes
}

#[test]
fn the_upstream_fixture_becomes_a_turn_of_two_steps() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/transfer/upstream/session.jsonl");
    let events = import_bytes(&std::fs::read(path).unwrap()).unwrap();
    assert_resumable(&events);
    let types: Vec<_> = events.iter().map(|e| e.data.type_name()).collect();
    assert_eq!(
        types,
        [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/thought",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
            "session/imported"
        ]
    );
    let EventData::TurnEnd {
        answer_seq, usage, ..
    } = &events[11].data
    else {
        panic!("{:?}", events[11]);
    };
    assert_eq!(*answer_seq, Some(9));
    assert_eq!(usage.map(|u| u.output_tokens), Some(52));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_are_refused_or_make_a_resumable_log(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(events) = import_bytes(&bytes) {
            assert_resumable(&events);
        }
    }

    /// Lines that are JSON records of each source's shapes, in any order and with any members
    /// missing: refused, or a resumable log.
    #[test]
    fn shuffled_records_are_refused_or_make_a_resumable_log(
        session in any::<bool>(),
        records in proptest::collection::vec((0usize..16, 0u32..3, 0u32..3, 0usize..3), 0..24),
    ) {
        let mut text = if session {
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n".to_owned()
        } else {
            String::new()
        };
        let ids = ["a", "b", "c"];
        for (seq, (kind, turn, step, call)) in records.into_iter().enumerate() {
            let id = ids[call];
            let line = match kind {
                0 => format!(r#"{{"type":"turn/start","seq":{seq},"time":1,"data":{{"turn":{turn}}}}}"#),
                1 => format!(r#"{{"type":"turn/end","seq":{seq},"time":1,"data":{{"turn":{turn},"reason":{{"kind":"completed"}}}}}}"#),
                2 => format!(r#"{{"type":"step/start","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step}}}}}"#),
                3 => format!(r#"{{"type":"step/end","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step}}}}}"#),
                4 => format!(r#"{{"type":"tool/call","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step},"callId":"{id}","name":"bash","arguments":"{{}}"}}}}"#),
                5 => format!(r#"{{"type":"tool/result","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step},"message":{{"content":[{{"type":"tool-result","toolCallId":"{id}","content":[]}}]}}}}}}"#),
                6 => format!(r#"{{"type":"user/message","seq":{seq},"time":1,"data":{{"role":"user","content":[{{"type":"text","text":"hi"}}]}}}}"#),
                7 => format!(r#"{{"type":"assistant/message","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step},"message":{{"content":[{{"type":"tool-call","id":"{id}","name":"bash","arguments":"{{}}"}}]}}}}}}"#),
                8 => r#"{"type":"user","sessionId":"x","message":{"content":"prompt"}}"#.to_owned(),
                9 => format!(r#"{{"type":"assistant","sessionId":"x","message":{{"id":"m{call}","content":[{{"type":"tool_use","id":"{id}","name":"Bash","input":{{"command":"ls"}}}}]}}}}"#),
                10 => format!(r#"{{"type":"user","sessionId":"x","message":{{"content":[{{"type":"tool_result","tool_use_id":"{id}","content":"out"}}]}}}}"#),
                // Upstream's compactions, replacing whatever seqs the draw names.
                11 => format!(r#"{{"type":"compaction/start","seq":{seq},"time":1,"data":{{"turn":{turn}}}}}"#),
                12 => format!(r#"{{"type":"compaction/end","seq":{seq},"time":1,"data":{{"error":{{"message":"m"}}}}}}"#),
                13 => format!(r#"{{"type":"user/message","seq":{seq},"time":1,"data":{{"content":"s"}},"surfaceOp":{{"op":"replace","start":{step},"end":{call}}}}}"#),
                14 => format!(r#"{{"type":"tool/result","seq":{seq},"time":1,"data":{{"turn":{turn},"step":{step},"message":{{"content":[{{"type":"tool-result","toolCallId":"{id}","content":[]}}]}}}},"surfaceOp":{{"op":"replace","start":{call},"end":{call}}}}}"#),
                _ => r#"{"type":"summary","summary":"s","leafUuid":"x"}"#.to_owned(),
            };
            text.push_str(&line);
            text.push('\n');
        }
        if let Ok(events) = import_bytes(text.as_bytes()) {
            assert_resumable(&events);
        }
    }

    #[test]
    fn a_dsh_log_comes_back_with_its_events(events in dsh_session::strategies::events(24)) {
        let imported = import_bytes(&dsh_log(&events)).unwrap();
        prop_assert!(imported.len() > events.len());
        for (a, b) in events.iter().zip(&imported) {
            prop_assert_eq!(a, b);
        }
    }
}

/// A Claude Code transcript with a subagent's conversation written inline (`isSidechain`), as
/// Claude Code wrote Task subagents before giving them files of their own.
const INLINE_SIDECHAIN: &str = r#"{"type":"user","sessionId":"p","isSidechain":false,"cwd":"/tmp","message":{"role":"user","content":"count the files"}}
{"type":"assistant","sessionId":"p","isSidechain":false,"message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Task","input":{"description":"count","prompt":"count the files in /tmp"}}]}}
{"type":"user","sessionId":"p","isSidechain":true,"message":{"role":"user","content":"count the files in /tmp"}}
{"type":"assistant","sessionId":"p","isSidechain":true,"message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"there are 42 files"}]}}
{"type":"user","sessionId":"p","isSidechain":false,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"there are 42 files"}]}}
{"type":"assistant","sessionId":"p","isSidechain":false,"message":{"id":"m3","role":"assistant","content":[{"type":"text","text":"42 files"}]}}
"#;

#[test]
fn a_subagents_inline_records_stay_out_of_its_parents_conversation() {
    let events = import_bytes(INLINE_SIDECHAIN.as_bytes()).unwrap();
    assert_resumable(&events);
    let prompts: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::UserMessage { message } => Some(message.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(prompts, ["count the files"]);
    let turns = events
        .iter()
        .filter(|e| matches!(e.data, EventData::TurnStart { .. }))
        .count();
    assert_eq!(turns, 1, "{events:?}");
    let answers: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::AssistantMessage { message, .. } => Some(message.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["", "42 files"], "{events:?}");
}

#[test]
fn a_subagents_own_transcript_is_a_conversation_of_its_own() {
    let own: String = INLINE_SIDECHAIN
        .lines()
        .filter(|l| l.contains(r#""isSidechain":true"#))
        .map(|l| format!("{l}\n"))
        .collect();
    let events = import_bytes(own.as_bytes()).unwrap();
    assert_resumable(&events);
    assert!(events.iter().any(|e| matches!(&e.data,
        EventData::AssistantMessage { message, .. } if message.text == "there are 42 files")));
}

/// The messages a resumed agent sends its model after `events`.
fn history_texts(events: &[Event]) -> Vec<String> {
    dsh_session::history::derive(events)
        .into_iter()
        .map(|m| match m {
            dsh_session::history::HistoryMessage::User { text, .. }
            | dsh_session::history::HistoryMessage::Assistant { text, .. } => text,
            dsh_session::history::HistoryMessage::ToolResult { content, .. } => content,
        })
        .collect()
}

#[test]
fn upstreams_compactions_become_dshs_and_the_history_is_upstreams() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/transfer/upstream/session-compacted.jsonl");
    let events = import_bytes(&std::fs::read(path).unwrap()).unwrap();
    assert_resumable(&events);
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::CompactionEnd {
                summary,
                pruned,
                keep_bytes,
                replaces_through,
                error: None,
                ..
            } => Some((
                summary.clone(),
                pruned.clone(),
                *keep_bytes,
                *replaces_through,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2, "{events:?}");
    // The pruner's copy: 4,096 characters, the marker, 1,024 characters (ASCII here).
    assert_eq!(ends[0].1, ["call-1"]);
    assert_eq!(ends[0].2, 4096 + 39 + 1024);
    let answer = events
        .iter()
        .find(|e| matches!(&e.data, EventData::AssistantMessage { message, .. } if message.text == "big.log has 400 lines."))
        .unwrap();
    assert_eq!(
        ends[1].3,
        Some(answer.seq),
        "the summary replaces through turn 1's answer"
    );
    // What upstream's model was sent after the checkpoint: the summary, the prompt it kept, and
    // the answer; none of turn 1.
    let history = history_texts(&events);
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(
        history[0]
            .ends_with("The user asked how many lines big.log has: 400, each naming zebra-7.")
    );
    assert!(
        !history[0].contains("automatically generated checkpoint"),
        "{}",
        history[0]
    );
    assert_eq!(history[1], "Which word does every line repeat?");
    assert_eq!(history[2], "Every line repeats zebra-7.");
}

/// Upstream log lines: the header, then `events` (`type`, `data`, extra members) numbered from 0.
fn upstream_log(events: &[(&str, serde_json::Value, serde_json::Value)]) -> Vec<u8> {
    let mut text =
        r#"{"type":"session","version":0,"id":"u","createdAt":1,"cwd":"/tmp","delegationDepth":0}"#
            .to_owned();
    text.push('\n');
    for (seq, (kind, data, extra)) in events.iter().enumerate() {
        let mut line =
            serde_json::json!({"type": kind, "seq": seq, "time": 1000 + seq, "data": data});
        if let (Some(line), Some(extra)) = (line.as_object_mut(), extra.as_object()) {
            line.extend(extra.clone());
        }
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text.into_bytes()
}

fn one_turn(
    turn: u32,
    prompt: &str,
    answer: &str,
) -> Vec<(&'static str, serde_json::Value, serde_json::Value)> {
    use serde_json::json;
    let append = json!({"surfaceOp": "append"});
    vec![
        ("turn/start", json!({"turn": turn}), json!({})),
        (
            "user/message",
            json!({"role": "user", "content": [{"type": "text", "text": prompt}]}),
            append.clone(),
        ),
        ("step/start", json!({"turn": turn, "step": 1}), json!({})),
        (
            "assistant/message",
            json!({"turn": turn, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]}}),
            append,
        ),
        ("step/end", json!({"turn": turn, "step": 1}), json!({})),
        (
            "turn/end",
            json!({"turn": turn, "reason": {"kind": "completed"}}),
            json!({}),
        ),
    ]
}

#[test]
fn a_manual_upstream_compaction_between_turns_is_a_manual_one_between_turns() {
    use serde_json::json;
    let mut log = one_turn(1, "first question", "first answer");
    log.extend([
        ("compaction/start", json!({"compactionId": "c", "turn": null}), json!({})),
        ("compaction/summary", json!({"compactionId": "c", "summary": [{"type": "text", "text": "asked and answered once"}]}), json!({})),
        ("user/message", json!({"role": "user", "content": [{"type": "text", "text": "framed"}]}), json!({"surfaceOp": {"op": "replace", "start": 1, "end": 3}})),
        ("compaction/end", json!({"compactionId": "c", "turn": null}), json!({})),
    ]);
    log.extend(one_turn(2, "second question", "second answer"));
    let events = import_bytes(&upstream_log(&log)).unwrap();
    assert_resumable(&events);
    let types: Vec<_> = events.iter().map(|e| e.data.type_name()).collect();
    assert_eq!(
        types[6..8],
        ["compaction/start", "compaction/end"],
        "{types:?}"
    );
    assert!(matches!(
        &events[6].data,
        EventData::CompactionStart {
            trigger: dsh_session::CompactionTrigger::Manual,
            ..
        }
    ));
    let history = history_texts(&events);
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(
        history[0].ends_with("asked and answered once"),
        "{history:?}"
    );
    assert_eq!(history[1..], ["second question", "second answer"]);
}

#[test]
fn replacements_dshs_compactions_cannot_say_are_refused_by_name() {
    use serde_json::json;
    let mut middle = one_turn(1, "one", "two");
    middle.extend(one_turn(2, "three", "four"));
    // A summary of turn 2 alone: the conversation's beginning stays.
    middle.push((
        "user/message",
        json!({"role": "user", "content": "s"}),
        json!({"surfaceOp": {"op": "replace", "start": 7, "end": 9}}),
    ));
    let error = import_bytes(&upstream_log(&middle))
        .unwrap_err()
        .to_string();
    assert!(error.contains("seq 7 to 9 by a user/message"), "{error}");

    let mut unknown = one_turn(1, "one", "two");
    unknown.push((
        "user/message",
        json!({"role": "user", "content": "s"}),
        json!({"surfaceOp": {"op": "replace", "start": 1, "end": 40}}),
    ));
    let error = import_bytes(&upstream_log(&unknown))
        .unwrap_err()
        .to_string();
    assert!(error.contains("not both in the conversation"), "{error}");
}

/// A second summary over the first checkpoint and the turn after it: the history is the second
/// summary and what followed it, and its range ends at the dsh event of its last node.
#[test]
fn a_summary_of_a_summary_replaces_the_first_one() {
    use serde_json::json;
    let summary = |start: u64, end: u64, text: &str| {
        (
            "user/message",
            json!({"role": "user", "content": [{"type": "text", "text": text}]}),
            json!({"surfaceOp": {"op": "replace", "start": start, "end": end}}),
        )
    };
    let mut log = one_turn(1, "q1", "a1"); // seqs 0-5; nodes 1, 3
    log.push(summary(1, 3, "s1")); // seq 6
    log.extend(one_turn(2, "q2", "a2")); // seqs 7-12; nodes 8, 10
    log.push(summary(6, 10, "s2")); // seq 13
    log.extend(one_turn(3, "q3", "a3"));
    let events = import_bytes(&upstream_log(&log)).unwrap();
    assert_resumable(&events);
    let history = history_texts(&events);
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(history[0].ends_with("s2"), "{history:?}");
    assert_eq!(history[1..], ["q3", "a3"]);
    let a2 = events
        .iter()
        .find(|e| matches!(&e.data, EventData::AssistantMessage { message, .. } if message.text == "a2"))
        .unwrap();
    let last = events.iter().rev().find_map(|e| match &e.data {
        EventData::CompactionEnd {
            replaces_through, ..
        } => *replaces_through,
        _ => None,
    });
    assert_eq!(last, Some(a2.seq));
}
