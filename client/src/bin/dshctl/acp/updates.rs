//! dsh events as ACP `session/update`s. One [`Translator`] per stream (a prompt's turn, or a
//! session's replay); it holds only what it needs to turn deltas into chunks (how much text of
//! each step was shown), nothing about the session.
//!
//! | dsh event | ACP update |
//! |---|---|
//! | `text/delta`, then the rest of `assistant/message` | `agent_message_chunk` |
//! | `user/message` (a person's; replay only) | `user_message_chunk` |
//! | `tool/call` | `tool_call` (`pending`), then `tool_call_update` `in_progress` |
//! | `tool/output` | `tool_call_update` whose content is the output so far (its last [`PREVIEW_BYTES`]) |
//! | `approval/request` | `session/request_permission` (see `turn.rs`) |
//! | `approval/decision` allow | `tool_call_update` `in_progress` |
//! | `tool/result` | `tool_call_update` `completed` / `failed`, the output as text content |
//! | a child agent's `tool/call` / `tool/result` | the same, on the parent's session, ids and titles marked with the child |
//! | the prompted agent's `turn/end` | the `session/prompt` response's `stopReason` |

use std::collections::HashMap;

/// How much of a running call's live output a `tool_call_update` carries: its tail. ACP replaces a
/// call's content with each update, so the whole output so far is sent every time; the tail keeps
/// that bounded (the call's `tool/result` then shows what the model got).
pub const PREVIEW_BYTES: usize = 16 * 1024;

use dsh_proto::v1;
use serde_json::{Value, json};

/// What one dsh event asks of the bridge.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Send this `session/update` (the `update` member).
    Update(Value),
    /// Ask the person: a tool call waits for approval.
    Ask(Ask),
    /// The prompted agent's turn ended: its `turn/end` data.
    End(Value),
}

/// An approval request, as the bridge asks for it.
#[derive(Debug, PartialEq)]
pub struct Ask {
    /// The agent whose call waits (the prompted one or one of its children).
    pub agent_id: String,
    /// The call id dsh knows it by.
    pub call_id: String,
    /// The ACP tool call it is about (`toolCall` of the request).
    pub tool_call: Value,
}

/// Turns one stream's events into updates.
#[derive(Debug)]
pub struct Translator {
    /// The ACP session (the prompted or loaded agent).
    root: String,
    /// Replaying a stored log: the person's own messages are shown, approvals are history.
    replay: bool,
    /// Bytes of each step's text already sent, by step.
    shown: HashMap<u64, usize>,
    /// The live output of each running call, by ACP tool call id; dropped at its result.
    outputs: HashMap<String, Preview>,
}

/// A running call's output as shown so far.
#[derive(Debug, Default)]
struct Preview {
    /// The tail of the output, both streams in the order they came.
    text: String,
    /// Bytes of each stream (`stdout`, `stderr`) already taken, to skip repeats.
    taken: HashMap<String, usize>,
}

impl Preview {
    /// Takes one `tool/output` piece; whether it added anything.
    fn take(&mut self, data: &Value) -> bool {
        let stream = data["stream"].as_str().unwrap_or_default();
        let offset = usize_of(&data["offset"]);
        let text = data["text"].as_str().unwrap_or_default();
        let taken = self.taken.entry(stream.to_owned()).or_insert(0);
        let new = unseen(taken, offset, text);
        if new.is_empty() {
            return false;
        }
        self.text.push_str(new);
        if self.text.len() > PREVIEW_BYTES {
            let mut cut = self.text.len() - PREVIEW_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
        true
    }
}

impl Translator {
    /// A translator for the events of session `root` (and its children's).
    pub fn new(root: &str, replay: bool) -> Self {
        Self {
            root: root.to_owned(),
            replay,
            shown: HashMap::new(),
            outputs: HashMap::new(),
        }
    }

    /// What `event` asks for (often nothing).
    pub fn translate(&mut self, event: &v1::Event) -> Vec<Output> {
        let Ok(data) = serde_json::from_str::<Value>(&event.data_json) else {
            warn_unreadable(event);
            return Vec::new();
        };
        let (agent, kind) = (event.session_id.as_str(), event.r#type.as_str());
        if agent == self.root {
            self.own(agent, kind, &data)
        } else {
            self.call(agent, Some(agent), kind, &data)
        }
    }

    fn own(&mut self, agent: &str, kind: &str, data: &Value) -> Vec<Output> {
        match kind {
            "text/delta" => {
                let step = data["step"].as_u64().unwrap_or(0);
                let offset = usize_of(&data["offset"]);
                let text = data["text"].as_str().unwrap_or_default();
                let shown = self.shown.entry(step).or_insert(0);
                chunk("agent_message_chunk", unseen(shown, offset, text))
            }
            "assistant/message" => {
                let step = data["step"].as_u64().unwrap_or(0);
                let text = data["message"]["text"].as_str().unwrap_or_default();
                let shown = self.shown.remove(&step).unwrap_or(0);
                chunk("agent_message_chunk", text.get(shown..).unwrap_or_default())
            }
            "user/message" if self.replay && data["message"]["source"]["kind"] == "user" => chunk(
                "user_message_chunk",
                data["message"]["text"].as_str().unwrap_or_default(),
            ),
            "turn/end" => vec![Output::End(data.clone())],
            _ => self.call(agent, None, kind, data),
        }
    }

    /// The events of `agent`'s tool calls: the prompted agent's, or a child's (`marked` with its
    /// id).
    fn call(&mut self, agent: &str, marked: Option<&str>, kind: &str, data: &Value) -> Vec<Output> {
        match kind {
            "tool/call" => started(&call_id(data, marked), data, marked),
            "tool/output" => self.output(call_id(data, marked), data),
            "approval/request" if !self.replay => vec![Output::Ask(Ask {
                agent_id: agent.to_owned(),
                call_id: data["callId"].as_str().unwrap_or_default().to_owned(),
                tool_call: waiting(&call_id(data, marked), data, marked),
            })],
            "approval/decision" if !self.replay && data["decision"] == "allow" => {
                vec![status(&call_id(data, marked), "in_progress")]
            }
            "tool/result" => self.result(&call_id(data, marked), data),
            _ => Vec::new(),
        }
    }
}

impl Translator {
    fn output(&mut self, id: String, data: &Value) -> Vec<Output> {
        let preview = self.outputs.entry(id.clone()).or_default();
        if !preview.take(data) {
            return Vec::new();
        }
        vec![Output::Update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": id,
            "content": [{"type": "content", "content": {"type": "text", "text": preview.text}}],
        }))]
    }

    fn result(&mut self, id: &str, data: &Value) -> Vec<Output> {
        self.outputs.remove(id);
        vec![finished(id, data)]
    }
}

/// The event's data did not parse: dsh's own bytes, so this is a bug worth a line on stderr
/// (stdout carries protocol messages only).
fn warn_unreadable(event: &v1::Event) {
    crate::safe::eprintln(format_args!(
        "dshctl acp: skipped a {} event of {} whose data is not JSON",
        event.r#type, event.session_id
    ));
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

fn usize_of(value: &Value) -> usize {
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

fn chunk(kind: &str, text: &str) -> Vec<Output> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![Output::Update(json!({
        "sessionUpdate": kind,
        "content": {"type": "text", "text": text},
    }))]
}

/// The ACP tool call id of a dsh call: its call id, prefixed with the child's session id for a
/// child's call (call ids are unique per session only).
fn call_id(data: &Value, child: Option<&str>) -> String {
    let call = data["callId"].as_str().unwrap_or_default();
    match child {
        Some(child) => format!("{child}/{call}"),
        None => call.to_owned(),
    }
}

/// A call's title and kind: a bash command is shown as itself.
fn title_and_kind(data: &Value, child: Option<&str>) -> (String, &'static str) {
    let tool = data["name"]
        .as_str()
        .or_else(|| data["tool"].as_str())
        .unwrap_or_default();
    let arguments = &data["arguments"];
    let (title, kind) = match (tool, data["command"].as_str()) {
        (_, Some(command)) if tool == "bash" => (command.to_owned(), "execute"),
        ("bash", None) => (
            arguments["command"].as_str().unwrap_or("bash").to_owned(),
            "execute",
        ),
        ("spawn_agent", _) => (
            format!(
                "child agent: {}",
                arguments["prompt"].as_str().unwrap_or_default()
            ),
            "other",
        ),
        (_, Some(command)) => (format!("{tool} {command}"), "other"),
        _ => (format!("{tool} {arguments}"), "other"),
    };
    match child {
        Some(child) => (format!("[child {}] {title}", short(child)), kind),
        None => (title, kind),
    }
}

fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

fn started(id: &str, data: &Value, child: Option<&str>) -> Vec<Output> {
    let (title, kind) = title_and_kind(data, child);
    vec![
        Output::Update(json!({
            "sessionUpdate": "tool_call",
            "toolCallId": id,
            "title": title,
            "kind": kind,
            "status": "pending",
            "rawInput": data["arguments"],
        })),
        status(id, "in_progress"),
    ]
}

/// The `toolCall` of a permission request: the call, pending, with what the request shows.
fn waiting(id: &str, data: &Value, child: Option<&str>) -> Value {
    let (title, kind) = title_and_kind(data, child);
    json!({
        "toolCallId": id,
        "title": title,
        "kind": kind,
        "status": "pending",
        "rawInput": {"command": data["command"], "cwd": data["cwd"], "reason": data["reason"]},
    })
}

fn status(id: &str, status: &str) -> Output {
    Output::Update(json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": status,
    }))
}

fn finished(id: &str, data: &Value) -> Output {
    let failed = data["isError"].as_bool().unwrap_or(false);
    let text = data["content"].as_str().unwrap_or_default();
    Output::Update(json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": if failed { "failed" } else { "completed" },
        "content": [{"type": "content", "content": {"type": "text", "text": text}}],
        "rawOutput": {"content": text, "isError": failed, "code": data["code"]},
    }))
}

/// The `stopReason` of a turn that ended with `data` (its `turn/end`), or the error a failed turn
/// is answered with.
pub fn stop_reason(data: &Value) -> Result<&'static str, String> {
    let reason = &data["reason"];
    match reason["kind"].as_str().unwrap_or_default() {
        "completed" => Ok("end_turn"),
        "aborted" | "interrupted" => Ok("cancelled"),
        // A hook refused the prompt, or stopped the turn.
        "blocked" | "stopped" => Ok("refusal"),
        "error" => {
            let message = reason["message"].as_str().unwrap_or("the turn failed");
            // dsh's own wording for `agent.max_steps_per_turn`.
            if message.contains("agent.max_steps_per_turn") {
                Ok("max_turn_requests")
            } else {
                Err(message.to_owned())
            }
        }
        other => Err(format!("the turn ended with an unknown reason {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session: &str, kind: &str, data: Value) -> v1::Event {
        v1::Event {
            session_id: session.into(),
            r#type: kind.into(),
            seq: None,
            time_ms: 0,
            data_json: data.to_string(),
        }
    }

    fn texts(outputs: &[Output]) -> String {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Update(u) if u["sessionUpdate"] == "agent_message_chunk" => {
                    u["content"]["text"].as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn deltas_then_the_rest_of_the_message_give_the_text_once() {
        let mut t = Translator::new("s", false);
        let mut out = Vec::new();
        for (offset, text) in [(0, "Hel"), (3, "lo, "), (3, "lo, "), (5, ", wo")] {
            out.extend(t.translate(&event(
                "s",
                "text/delta",
                json!({"step": 1, "offset": offset, "text": text}),
            )));
        }
        out.extend(t.translate(&event(
            "s",
            "assistant/message",
            json!({"step": 1, "message": {"text": "Hello, world"}}),
        )));
        assert_eq!(texts(&out), "Hello, world");
        // Another step starts from nothing again.
        let next = t.translate(&event(
            "s",
            "assistant/message",
            json!({"step": 2, "message": {"text": "again"}}),
        ));
        assert_eq!(texts(&next), "again");
    }

    #[test]
    fn calls_results_and_approvals_of_the_agent_and_its_children() {
        let mut t = Translator::new("s", false);
        let call = json!({"callId": "c1", "name": "bash", "arguments": {"command": "ls"}});
        let out = t.translate(&event("s", "tool/call", call.clone()));
        let Output::Update(first) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(
            (&first["toolCallId"], &first["title"], &first["kind"]),
            (&json!("c1"), &json!("ls"), &json!("execute"))
        );
        let out = t.translate(&event("child1234567890", "tool/call", call));
        let Output::Update(first) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(first["toolCallId"], "child1234567890/c1");
        assert_eq!(first["title"], "[child 34567890] ls");
        let ask = t.translate(&event(
            "child1234567890",
            "approval/request",
            json!({"callId": "c1", "tool": "bash", "command": "ls", "cwd": "/w", "reason": "r"}),
        ));
        let [Output::Ask(ask)] = ask.as_slice() else {
            panic!("{ask:?}")
        };
        assert_eq!(
            (ask.agent_id.as_str(), ask.call_id.as_str()),
            ("child1234567890", "c1")
        );
        let out = t.translate(&event(
            "s",
            "tool/result",
            json!({"callId": "c1", "content": "boom", "isError": true}),
        ));
        let [Output::Update(done)] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(done["status"], "failed");
        assert_eq!(done["content"][0]["content"]["text"], "boom");
        // The prompt itself is the client's: shown on replay only.
        let prompt = json!({"message": {"text": "hi", "source": {"kind": "user"}}});
        assert!(
            t.translate(&event("s", "user/message", prompt.clone()))
                .is_empty()
        );
        let mut replay = Translator::new("s", true);
        assert_eq!(
            replay.translate(&event("s", "user/message", prompt)).len(),
            1
        );
    }

    fn content_text(outputs: &[Output]) -> Vec<String> {
        outputs
            .iter()
            .map(|o| match o {
                Output::Update(u) => u["content"][0]["content"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn live_output_is_the_calls_content_so_far_until_its_result() {
        let mut t = Translator::new("s", false);
        let piece = |stream: &str, offset: usize, text: &str| json!({"callId": "c1", "stream": stream, "offset": offset, "text": text});
        let mut shown = Vec::new();
        for (session, data) in [
            ("s", piece("stdout", 0, "1\n")),
            ("s", piece("stderr", 0, "warn\n")),
            ("s", piece("stdout", 0, "1\n")), // a repeat: nothing new
            ("s", piece("stdout", 2, "2\n")),
            ("kid", piece("stdout", 0, "child\n")),
        ] {
            shown.extend(content_text(&t.translate(&event(
                session,
                "tool/output",
                data,
            ))));
        }
        assert_eq!(shown, ["1\n", "1\nwarn\n", "1\nwarn\n2\n", "child\n"]);
        let done = t.translate(&event(
            "s",
            "tool/result",
            json!({"callId": "c1", "content": "1\n2\nwarn\n", "isError": false}),
        ));
        assert_eq!(content_text(&done), ["1\n2\nwarn\n"]);
        assert!(
            !t.outputs.contains_key("c1"),
            "a finished call's output is dropped"
        );

        // Only the tail of a long output is carried, cut at a character boundary.
        let long = "é".repeat(PREVIEW_BYTES);
        let out = t.translate(&event("s", "tool/output", piece("stdout", 0, &long)));
        let text = &content_text(&out)[0];
        assert!(text.len() <= PREVIEW_BYTES && text.len() > PREVIEW_BYTES - 2);
        assert!(text.chars().all(|c| c == 'é'));
    }

    #[test]
    fn turn_ends_map_to_stop_reasons_or_errors() {
        let end = |reason: Value| stop_reason(&json!({"reason": reason}));
        assert_eq!(end(json!({"kind": "completed"})), Ok("end_turn"));
        assert_eq!(
            end(json!({"kind": "aborted", "cause": "user"})),
            Ok("cancelled")
        );
        assert_eq!(
            end(json!({"kind": "blocked", "reason": "no"})),
            Ok("refusal")
        );
        assert_eq!(
            end(
                json!({"kind": "error", "message": "the turn reached the limit of 2 steps (agent.max_steps_per_turn)"})
            ),
            Ok("max_turn_requests")
        );
        assert_eq!(
            end(json!({"kind": "error", "message": "model down"})),
            Err("model down".to_owned())
        );
    }
}
