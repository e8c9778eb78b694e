//! `dshctl prompt --agent ID TEXT`: run one turn and follow it (and the child agents it spawns) as
//! it happens. On a terminal, an approval request is asked about (y/N) and answered. Ctrl-C
//! cancels the turn (`Agents.Cancel`), waits for it to end and exits 130.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use anyhow::Context;
use dsh_client::Client;
use dsh_client::events::{self, EventData, Streamed, TurnEndReason};
use dsh_client::ids::IdKind;
use dsh_client::refusal::Refusal;
use dsh_proto::v1;
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::StreamExt;

use crate::output::Output;
use crate::question::{Questions, Request};
use crate::render::Screen;
use crate::wire;

/// The frames of the status line's spinner.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Exit status after Ctrl-C cancelled the turn (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

pub const AFTER_HELP: &str = "\
Examples:
  dshctl prompt --agent 0199a2b3 \"what does this repository do?\"
  git diff | dshctl prompt --agent \"$AGENT\" -      the prompt from stdin
  dshctl --json prompt --agent \"$AGENT\" hi | jq -c 'select(.type == \"tool/call\")'

Ctrl-C cancels the running turn (as `dshctl agent cancel` does), waits until it has ended and
says \"turn cancelled\"; a second Ctrl-C stops waiting. With --json every event is one JSON object
per line (the same line `watch` and `session events` print); the last is the agent's `turn/end`.
On a terminal, an approval request is asked about (y/N); the question closes by itself when the
request is decided elsewhere (`dshctl approve`, the timeout) and Ctrl-C at it cancels the turn.

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

/// What a turn is asked for.
pub enum Ask {
    /// A prompt (`dshctl prompt`).
    Prompt(String),
    /// A compaction, with instructions for the summary (`dshctl compact`).
    Compact(Option<String>),
}

pub const COMPACT_AFTER_HELP: &str = "\
Examples:
  dshctl compact 0199a2b3
  dshctl compact \"$AGENT\" \"keep the failing test names and the plan\"

The agent's older messages are summarised by its model and old long outputs are shortened, so
later requests fit its context window; the session log keeps everything (`dshctl session events`
shows the originals and the `compaction/end` event). It runs as a turn of its own, shown as
`prompt` shows one, and is refused while a turn runs.

Exit status:
  0    compacted
  1    it failed (nothing to compact, the summary request failed or did not shrink the history),
       or it was refused
  2    bad usage
  130  interrupted by Ctrl-C: the compaction was cancelled";

/// Runs the turn and follows it: exit 0 when it completed, 1 when it ended otherwise, 130 when
/// Ctrl-C cancelled it.
pub async fn run(
    client: &Client,
    out: Output,
    agent: String,
    ask: Ask,
) -> anyhow::Result<ExitCode> {
    // Installed before the turn starts, so a Ctrl-C at any moment is ours to handle: the default
    // action would kill dshctl and leave the turn running.
    let mut interrupts = signal(SignalKind::interrupt()).context("cannot handle Ctrl-C")?;
    let mut agents = client.agents();
    let mut interrupted = false;
    let agent_id = agent.clone();
    let mut call = Box::pin(async move {
        match ask {
            Ask::Prompt(text) => agents.prompt(v1::PromptRequest { agent_id, text }).await,
            Ask::Compact(instructions) => {
                agents
                    .compact(v1::CompactRequest {
                        agent_id,
                        instructions,
                    })
                    .await
            }
        }
    });
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
    // Approval requests are asked about only when a person can answer at this terminal.
    let mut questions = if !out.json && crate::question::in_the_foreground() {
        Some(Questions::on_stdin()?)
    } else {
        None
    };
    // A status line with the time waited, only for a person watching a terminal.
    let spinner = !out.json && std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(250));
    let mut since = std::time::Instant::now();
    let mut screen: Option<Screen> = None;
    let mut last = None;
    loop {
        let asking = questions.as_ref().is_some_and(Questions::is_open);
        let event = tokio::select! {
            event = stream.next() => event,
            typed = typed_answer(&mut questions), if asking => {
                let (request, allow) = typed?;
                answer_request(client, request, allow).await?;
                if let Some(questions) = questions.as_mut() {
                    questions.next();
                }
                continue;
            }
            _ = ticks.tick(), if spinner && !asking => {
                let waited = since.elapsed();
                if let Some(screen) = screen.as_mut()
                    && waited >= std::time::Duration::from_secs(1)
                    && let Some(activity) = screen.activity().map(str::to_owned)
                {
                    let frame = SPINNER[usize::try_from(waited.as_millis() / 250).unwrap_or(0) % SPINNER.len()];
                    screen.status(&format!("{frame} {activity}… {} s", waited.as_secs()))?;
                }
                continue;
            }
            _ = interrupts.recv() => {
                if let Some(questions) = questions.as_mut() {
                    questions.close_all();
                }
                if cancel_sent {
                    return Ok(stop_waiting());
                }
                cancel(client, &agent).await?;
                cancel_sent = true;
                continue;
            }
        };
        let Some(event) = event else { break };
        let event = event?;
        since = std::time::Instant::now();
        if out.json {
            out.raw_line(&wire::event_line(&event))?;
        } else {
            // Decoded again by the screen below: only approvals matter here, and they are rare.
            let approval = match events::decode(&event) {
                Ok(Streamed::Logged(EventData::ApprovalRequest {
                    call_id, command, ..
                })) => Some((Request::new(&event.session_id, &call_id), Some(command))),
                Ok(Streamed::Logged(EventData::ApprovalDecision { call_id, .. })) => {
                    Some((Request::new(&event.session_id, &call_id), None))
                }
                _ => None,
            };
            if let Some(questions) = questions.as_mut() {
                // The question closes when its request is decided, whoever decided it; the
                // decision line printed next says by whom.
                if let Some((request, None)) = &approval {
                    questions.decided(request);
                }
                questions.hide();
            }
            // The first event is the prompted agent's own; children's lines are marked.
            screen
                .get_or_insert_with(|| Screen::new(Some(event.session_id.clone())))
                .show(&event)?;
            if let Some(questions) = questions.as_mut() {
                match approval {
                    Some((request, Some(command))) if !cancel_sent => {
                        questions.ask(request, command);
                    }
                    _ => questions.show(),
                }
            }
        }
        last = Some(event);
    }
    if let Some(screen) = screen.as_mut() {
        screen.clear_status()?;
    }
    // The stream's last event is the prompted agent's `turn/end`.
    let ended = last.as_ref().and_then(|e| match events::decode(e) {
        Ok(Streamed::Logged(EventData::TurnEnd { reason, .. })) => Some(reason),
        _ => None,
    });
    let Some(reason) = ended else {
        anyhow::bail!(
            "the stream ended without turn/end; `dshctl session events {agent}` shows what was logged"
        )
    };
    Ok(match reason {
        TurnEndReason::Completed => ExitCode::SUCCESS,
        TurnEndReason::Aborted { .. } if cancel_sent => {
            eprintln!("dshctl: turn cancelled");
            ExitCode::from(INTERRUPTED)
        }
        TurnEndReason::Aborted { .. }
        | TurnEndReason::Error { .. }
        | TurnEndReason::Blocked { .. }
        | TurnEndReason::Stopped { .. }
        | TurnEndReason::Interrupted
        | TurnEndReason::StepLimit { .. } => ExitCode::FAILURE,
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

/// A busy agent (dshd's `AGENT_BUSY`): the message names the command that ends the running turn.
fn busy_hint(status: tonic::Status, agent: &str) -> tonic::Status {
    match Refusal::of(&status) {
        Some(Refusal::AgentBusy { .. }) => tonic::Status::with_details(
            status.code(),
            format!("{} (dshctl agent cancel {agent})", status.message()),
            status.details().to_vec().into(),
        ),
        _ => status,
    }
}

/// The answer typed for the open question; pending when there is none.
async fn typed_answer(questions: &mut Option<Questions>) -> anyhow::Result<(Request, bool)> {
    match questions {
        Some(questions) => questions.answer().await,
        None => std::future::pending().await,
    }
}

/// Sends the answer typed at the terminal.
async fn answer_request(client: &Client, request: Request, allow: bool) -> anyhow::Result<()> {
    let (decision, reason) = if allow {
        (v1::ApprovalDecision::Allow, String::new())
    } else {
        (
            v1::ApprovalDecision::Deny,
            "denied at the terminal".to_owned(),
        )
    };
    let answered = client
        .agents()
        .approve(v1::ApproveRequest {
            agent_id: request.agent,
            call_id: request.call_id,
            decision: decision as i32,
            reason,
            scope: v1::ApprovalScope::Once as i32,
        })
        .await;
    match answered {
        Ok(_) => Ok(()),
        // Decided a moment before the answer went out: the stream shows by whom.
        Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
        Err(status) => Err(status.into()),
    }
}

/// `dshctl steer AGENT TEXT`: the message joins the running turn.
pub async fn steer(client: &Client, out: Output, agent: &str, text: String) -> anyhow::Result<()> {
    let agent = client.resolve(IdKind::Agent, agent).await?;
    let joined = client
        .agents()
        .steer(v1::SteerRequest {
            agent_id: agent.clone(),
            text,
        })
        .await?
        .into_inner();
    out.emit(
        &serde_json::json!({ "agent_id": agent, "turn": joined.turn }),
        |w| {
            writeln!(
                w,
                "sent into turn {} of {agent}; the model gets it at its next step",
                joined.turn
            )
        },
    )
}
