//! `dshctl prompt --agent ID TEXT`: run one turn and follow it as it happens. Ctrl-C cancels the
//! turn (`Agents.Cancel`), waits for it to end and exits 130.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use dsh_client::Client;
use dsh_proto::v1;
use dsh_proto::v1::turn_event::Event;
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::StreamExt;

use crate::output::Output;

/// Exit status after Ctrl-C cancelled the turn (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

pub const AFTER_HELP: &str = "\
Examples:
  dshctl prompt --agent 0199a2b3 \"what does this repository do?\"
  git diff | dshctl prompt --agent \"$AGENT\" -      the prompt from stdin
  dshctl --json prompt --agent \"$AGENT\" hi | jq -c 'select(.type == \"tool_call\")'

Ctrl-C cancels the running turn (as `dshctl agent cancel` does), waits until it has ended and
says \"turn cancelled\"; a second Ctrl-C stops waiting. With --json every event is one JSON object
per line; the last is `turn_ended`.

Exit status:
  0    the turn completed
  1    the turn ended otherwise (error, blocked, stopped, aborted by someone else), or the prompt
       was refused (e.g. the agent is busy: `dshctl agent cancel ID` stops its turn)
  2    bad usage
  130  interrupted by Ctrl-C: the turn was cancelled";

/// The prompt text: the argument, or stdin when it is `-` (without its final newlines, as `$(...)`
/// would take it).
pub fn text(arg: &str) -> anyhow::Result<String> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read the prompt from stdin")?;
    let mut text = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("the prompt read from stdin is not UTF-8 text ({e})"))?;
    text.truncate(text.trim_end_matches(['\n', '\r']).len());
    anyhow::ensure!(
        !text.trim().is_empty(),
        "the prompt read from stdin is empty; pipe some text in, e.g. `echo hi | dshctl prompt --agent ID -`"
    );
    Ok(text)
}

/// Runs the turn and follows it: exit 0 when it completed, 1 when it ended otherwise, 130 when
/// Ctrl-C cancelled it.
pub async fn run(
    client: &Client,
    out: Output,
    agent: String,
    text: String,
) -> anyhow::Result<ExitCode> {
    // Installed before the turn starts, so a Ctrl-C at any moment is ours to handle: the default
    // action would kill dshctl and leave the turn running.
    let mut interrupts = signal(SignalKind::interrupt()).context("cannot handle Ctrl-C")?;
    let mut agents = client.agents();
    let mut interrupted = false;
    let call = agents.prompt(v1::PromptRequest {
        agent_id: agent.clone(),
        text,
    });
    tokio::pin!(call);
    // The turn is started by the time the call answers, so a Ctrl-C before that waits for the
    // answer and then cancels: dropping the call could leave a turn that nobody cancels.
    let answer = loop {
        tokio::select! {
            answer = &mut call => break answer,
            _ = interrupts.recv() => {
                if interrupted {
                    return Ok(stop_waiting());
                }
                interrupted = true;
            }
        }
    };
    let mut stream = answer
        .map_err(|status| busy_hint(status, &agent))?
        .into_inner();
    let mut cancel_sent = false;
    if interrupted {
        cancel(client, &agent).await?;
        cancel_sent = true;
    }
    let mut ended = None;
    let mut screen = Screen::default();
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = interrupts.recv() => {
                if cancel_sent {
                    return Ok(stop_waiting());
                }
                cancel(client, &agent).await?;
                cancel_sent = true;
                continue;
            }
        };
        let Some(message) = message else { break };
        let message = message?;
        let Some(event) = message.event else { continue };
        if let Event::TurnEnded(end) = &event {
            ended = Some(end.reason.clone().unwrap_or_default().kind);
        }
        if out.json {
            out.line(&as_json(message.seq, &event))?;
        } else {
            human(&event, &mut screen)?;
        }
    }
    Ok(match ended.as_deref() {
        Some("completed") => ExitCode::SUCCESS,
        Some("aborted") if cancel_sent => {
            eprintln!("dshctl: turn cancelled");
            ExitCode::from(INTERRUPTED)
        }
        Some(_) => ExitCode::FAILURE,
        None => anyhow::bail!(
            "the stream ended without turn_ended; `dshctl session events {agent}` shows what was logged"
        ),
    })
}

/// Asks dshd to cancel the turn; the stream then ends with `turn_ended` `aborted`.
async fn cancel(client: &Client, agent: &str) -> anyhow::Result<()> {
    eprintln!("dshctl: cancelling the turn (Ctrl-C again to stop waiting)");
    client
        .agents()
        .cancel(v1::CancelAgentRequest {
            agent_id: agent.to_owned(),
        })
        .await?;
    Ok(())
}

/// A second Ctrl-C: leave without waiting for the turn to end.
fn stop_waiting() -> ExitCode {
    eprintln!("dshctl: stopped waiting; the turn is being cancelled");
    ExitCode::from(INTERRUPTED)
}

/// "busy" names the command that ends the running turn.
fn busy_hint(status: tonic::Status, agent: &str) -> tonic::Status {
    if status.code() == tonic::Code::FailedPrecondition && status.message().contains(" is busy ") {
        tonic::Status::new(
            status.code(),
            format!("{} (dshctl agent cancel {agent})", status.message()),
        )
    } else {
        status
    }
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
