//! `dshctl prompt --agent ID TEXT`: run one turn and follow it as it happens.

use std::io::Write;

use dsh_client::Client;
use dsh_proto::v1;
use dsh_proto::v1::turn_event::Event;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use crate::output::Output;

/// Runs the turn; returns whether it completed.
pub async fn run(
    client: &Client,
    out: Output,
    agent: String,
    text: String,
) -> anyhow::Result<bool> {
    let mut stream = client
        .agents()
        .prompt(v1::PromptRequest {
            agent_id: agent,
            text,
        })
        .await?
        .into_inner();
    let mut completed = false;
    let mut mid_line = false;
    while let Some(message) = stream.next().await {
        let message = message?;
        let Some(event) = message.event else { continue };
        if let Event::TurnEnded(end) = &event {
            completed = end.reason.as_ref().is_some_and(|r| r.kind == "completed");
        }
        if out.json {
            out.line(&as_json(message.seq, &event))?;
        } else {
            human(&event, &mut mid_line)?;
        }
    }
    Ok(completed)
}

fn as_json(seq: u64, event: &Event) -> Value {
    match event {
        Event::TurnStarted(e) => json!({"type": "turn_started", "seq": seq, "turn": e.turn}),
        Event::StepStarted(e) => {
            json!({"type": "step_started", "seq": seq, "turn": e.turn, "step": e.step})
        }
        Event::TextDelta(e) => {
            json!({"type": "text_delta", "turn": e.turn, "step": e.step, "text": e.text})
        }
        Event::AssistantText(e) => {
            json!({"type": "assistant_text", "seq": seq, "turn": e.turn, "step": e.step, "text": e.text})
        }
        Event::ToolCall(e) => json!({
            "type": "tool_call", "seq": seq, "turn": e.turn, "step": e.step, "call_id": e.call_id,
            "name": e.name,
            "arguments": serde_json::from_str::<Value>(&e.arguments_json).unwrap_or(Value::String(e.arguments_json.clone())),
        }),
        Event::ToolResult(e) => json!({
            "type": "tool_result", "seq": seq, "turn": e.turn, "step": e.step, "call_id": e.call_id,
            "content": e.content, "is_error": e.is_error,
        }),
        Event::StepEnded(e) => {
            json!({"type": "step_ended", "seq": seq, "turn": e.turn, "step": e.step})
        }
        Event::Hook(e) => json!({
            "type": "hook", "seq": seq, "dialect": e.dialect, "event": e.event, "handler": e.handler,
            "decision": e.decision, "exit_code": e.exit_code, "system_message": e.system_message,
        }),
        Event::TurnEnded(e) => {
            let reason = e.reason.clone().unwrap_or_default();
            json!({
                "type": "turn_ended", "seq": seq, "turn": e.turn,
                "reason": {"kind": reason.kind, "message": reason.message},
                "text": e.text,
            })
        }
    }
}

fn human(event: &Event, mid_line: &mut bool) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let mut line = |w: &mut dyn Write, text: String| -> std::io::Result<()> {
        if *mid_line {
            writeln!(w)?;
            *mid_line = false;
        }
        writeln!(w, "{text}")
    };
    let result = match event {
        Event::TurnStarted(e) => line(&mut w, format!("── turn {}", e.turn)),
        Event::TextDelta(e) => {
            *mid_line = !e.text.ends_with('\n');
            write!(w, "{}", e.text)
        }
        Event::ToolCall(e) => line(&mut w, format!("▶ {} {}", e.name, e.arguments_json)),
        Event::ToolResult(e) => {
            let marker = if e.is_error { "✗" } else { "◀" };
            line(&mut w, format!("{marker} {}", indent(&e.content)))
        }
        Event::Hook(e) => line(
            &mut w,
            format!("· {} hook {} → {}", e.dialect, e.event, e.decision),
        )
        .and_then(|()| match &e.system_message {
            // A hook's systemMessage is for the user: shown on its own line, as both harnesses
            // show it as a warning.
            Some(message) => line(&mut w, format!("⚠ {}", indent(message))),
            None => Ok(()),
        }),
        Event::TurnEnded(e) => {
            let reason = e.reason.clone().unwrap_or_default();
            let detail = if reason.message.is_empty() {
                String::new()
            } else {
                format!(": {}", reason.message)
            };
            line(
                &mut w,
                format!("── turn {} {}{detail}", e.turn, reason.kind),
            )
        }
        Event::StepStarted(_) | Event::StepEnded(_) | Event::AssistantText(_) => Ok(()),
    };
    crate::output::finish(result.and_then(|()| w.flush()))
}

fn indent(text: &str) -> String {
    let text = text.trim_end();
    text.replace('\n', "\n  ")
}
