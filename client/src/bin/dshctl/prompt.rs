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
    let mut screen = Screen::default();
    while let Some(message) = stream.next().await {
        let message = message?;
        let Some(event) = message.event else { continue };
        if let Event::TurnEnded(end) = &event {
            completed = end.reason.as_ref().is_some_and(|r| r.kind == "completed");
        }
        if out.json {
            out.line(&as_json(message.seq, &event))?;
        } else {
            human(&event, &mut screen)?;
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
        Event::TextDelta(e) => json!({
            "type": "text_delta", "turn": e.turn, "step": e.step, "offset": e.offset,
            "text": e.text,
        }),
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

/// What the human form has printed of the streaming text.
#[derive(Debug, Default)]
struct Screen {
    /// The last line is unfinished.
    mid_line: bool,
    /// The step whose text is on screen, and how many of its bytes were printed.
    step: (u32, u32),
    printed: u64,
}

impl Screen {
    /// Prints a streamed fragment. A fragment past what was printed means dshd skipped text while
    /// we were slow: nothing more of the step is printed until its full text arrives.
    fn delta(&mut self, w: &mut dyn Write, e: &v1::TextDelta) -> std::io::Result<()> {
        if self.step != (e.turn, e.step) {
            self.step = (e.turn, e.step);
            self.printed = 0;
        }
        if e.offset != self.printed || e.text.is_empty() {
            return Ok(());
        }
        self.printed += e.text.len() as u64;
        self.mid_line = !e.text.ends_with('\n');
        write!(w, "{}", e.text)
    }

    /// The step's full text: prints whatever the deltas did not.
    fn full(&mut self, w: &mut dyn Write, e: &v1::AssistantText) -> std::io::Result<()> {
        let printed = if self.step == (e.turn, e.step) {
            usize::try_from(self.printed).unwrap_or(usize::MAX)
        } else {
            0
        };
        let rest = e.text.get(printed..).unwrap_or_default();
        self.step = (e.turn, e.step);
        self.printed = e.text.len() as u64;
        if rest.is_empty() {
            return Ok(());
        }
        self.mid_line = !rest.ends_with('\n');
        write!(w, "{rest}")
    }
}

fn human(event: &Event, screen: &mut Screen) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let line = |w: &mut dyn Write, screen: &mut Screen, text: String| -> std::io::Result<()> {
        if screen.mid_line {
            writeln!(w)?;
            screen.mid_line = false;
        }
        writeln!(w, "{text}")
    };
    let result = match event {
        Event::TurnStarted(e) => line(&mut w, screen, format!("── turn {}", e.turn)),
        Event::TextDelta(e) => screen.delta(&mut w, e),
        Event::AssistantText(e) => screen.full(&mut w, e),
        Event::ToolCall(e) => line(&mut w, screen, format!("▶ {} {}", e.name, e.arguments_json)),
        Event::ToolResult(e) => {
            let marker = if e.is_error { "✗" } else { "◀" };
            line(&mut w, screen, format!("{marker} {}", indent(&e.content)))
        }
        Event::Hook(e) => {
            let ran = line(
                &mut w,
                screen,
                format!("· {} hook {} → {}", e.dialect, e.event, e.decision),
            );
            // A hook's systemMessage is for the user: shown on its own line, as both harnesses
            // show it as a warning.
            match (ran, &e.system_message) {
                (Ok(()), Some(message)) => line(&mut w, screen, format!("⚠ {}", indent(message))),
                (ran, _) => ran,
            }
        }
        Event::TurnEnded(e) => {
            let reason = e.reason.clone().unwrap_or_default();
            let detail = if reason.message.is_empty() {
                String::new()
            } else {
                format!(": {}", reason.message)
            };
            line(
                &mut w,
                screen,
                format!("── turn {} {}{detail}", e.turn, reason.kind),
            )
        }
        Event::StepStarted(_) | Event::StepEnded(_) => Ok(()),
    };
    crate::output::finish(result.and_then(|()| w.flush()))
}

fn indent(text: &str) -> String {
    let text = text.trim_end();
    text.replace('\n', "\n  ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn delta(step: u32, offset: u64, text: &str) -> v1::TextDelta {
        v1::TextDelta {
            turn: 1,
            step,
            text: text.to_owned(),
            offset,
        }
    }

    fn full(step: u32, text: &str) -> v1::AssistantText {
        v1::AssistantText {
            turn: 1,
            step,
            text: text.to_owned(),
        }
    }

    #[test]
    fn skipped_text_is_taken_from_the_full_text() {
        let mut screen = Screen::default();
        let mut out = Vec::new();
        screen.delta(&mut out, &delta(1, 0, "Hello, ")).unwrap();
        // dshd skipped "big " while we were slow: nothing after the gap is printed out of place.
        screen.delta(&mut out, &delta(1, 11, "world")).unwrap();
        screen.full(&mut out, &full(1, "Hello, big world")).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "Hello, big world");
    }

    #[test]
    fn a_step_streamed_whole_is_printed_once() {
        let mut screen = Screen::default();
        let mut out = Vec::new();
        screen.delta(&mut out, &delta(1, 0, "one")).unwrap();
        screen.full(&mut out, &full(1, "one")).unwrap();
        screen.delta(&mut out, &delta(2, 0, "two")).unwrap();
        screen.delta(&mut out, &delta(2, 3, "!")).unwrap();
        screen.full(&mut out, &full(2, "two!")).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "onetwo!");
        assert!(screen.mid_line);
    }
}
