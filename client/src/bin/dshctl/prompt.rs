//! `dshctl prompt --agent ID TEXT`: run one turn and follow it (and the child agents it spawns) as
//! it happens. On a terminal, an approval request is asked about (y/N) and answered.

use std::io::IsTerminal;

use dsh_client::Client;
use dsh_proto::v1;
use tokio_stream::StreamExt;

use crate::output::Output;
use crate::render::Screen;
use crate::wire;

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
    let ask = !out.json && std::io::stdin().is_terminal();
    let mut screen: Option<Screen> = None;
    let mut last = None;
    while let Some(event) = stream.next().await {
        let event = event?;
        if out.json {
            out.raw_line(&wire::event_line(&event))?;
        } else {
            // The first event is the prompted agent's own; children's lines are marked.
            screen
                .get_or_insert_with(|| Screen::new(Some(event.session_id.clone())))
                .show(&event)?;
        }
        if ask && event.r#type == "approval/request" {
            answer_at_the_terminal(client, &event).await?;
        }
        last = Some(event);
    }
    // The stream's last event is the prompted agent's `turn/end`.
    Ok(last.is_some_and(|e| {
        e.r#type == "turn/end" && wire::event_data(&e)["reason"]["kind"] == "completed"
    }))
}

/// Asks the person at the terminal whether the call may run, and answers the request.
async fn answer_at_the_terminal(client: &Client, request: &v1::Event) -> anyhow::Result<()> {
    let call_id = wire::event_data(request)["callId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    eprint!("allow call {call_id}? [y/N] ");
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    let allow = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
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
            agent_id: request.session_id.clone(),
            call_id,
            decision: decision as i32,
            reason,
        })
        .await;
    match answered {
        Ok(_) => Ok(()),
        // It timed out, or someone else answered first: the stream shows what was decided.
        Err(status) if status.code() == tonic::Code::NotFound => {
            eprintln!("too late: {}", status.message());
            Ok(())
        }
        Err(status) => Err(status.into()),
    }
}
