//! `dshctl watch [AGENT]`: follow agents live — one, one and its children, or all of them — and
//! `dshctl approve AGENT CALL`: answer a tool call's approval request from any terminal.

use dsh_client::Client;
use dsh_client::events::{self, EventData, Streamed};
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;
use tokio_stream::StreamExt;

use crate::output::Output;
use crate::render::Screen;
use crate::wire;

/// `dshctl watch` arguments.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The agent to follow (default: every agent); a unique prefix will do, or the id's end as
    /// `watch` marks a child's lines (`…0000beef`).
    #[arg(value_name = "ID")]
    agent: Option<String>,
    /// Follow the agent's children too (the agents it spawns, theirs, ...).
    #[arg(long, requires = "agent")]
    children: bool,
    /// Replay the agent's log from this seq before following it live (0: its whole history).
    #[arg(long, value_name = "SEQ", requires = "agent")]
    from: Option<u64>,
    /// Only events of this type (`tool/result`) or family (`turn/*`); repeat for more.
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
}

/// Follows until interrupted (or the daemon shuts down).
pub async fn watch(client: &Client, out: Output, mut args: WatchArgs) -> anyhow::Result<()> {
    if let Some(agent) = &args.agent {
        args.agent = Some(client.resolve(IdKind::Agent, agent).await?);
    }
    let mut stream = client
        .agents()
        .watch(v1::WatchRequest {
            agent_id: args.agent.clone().unwrap_or_default(),
            descendants: args.children,
            from_seq: args.from,
            types: args.types.clone(),
        })
        .await?
        .into_inner();
    let mut screen = Screen::new(None);
    let mut main_known = args.agent.is_none();
    while let Some(event) = stream.next().await {
        let event = event?;
        if out.json {
            out.raw_line(&wire::event_line(&event))?;
            continue;
        }
        if !main_known && args.agent.as_deref() == Some(event.session_id.as_str()) {
            screen = Screen::new(Some(event.session_id.clone()));
            main_known = true;
        }
        screen.show(&event)?;
    }
    Ok(())
}

/// `dshctl approve` arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("decision").required(true).args(["allow", "deny"])))]
pub struct ApproveArgs {
    /// The agent whose call waits (as the approval request names it; a unique prefix will do).
    #[arg(value_name = "AGENT")]
    agent: String,
    /// The call id of the approval request (a unique prefix of a waiting call's id will do).
    #[arg(value_name = "CALL")]
    call: String,
    /// Let the call run.
    #[arg(long)]
    allow: bool,
    /// Refuse the call; the model is told, with the reason.
    #[arg(long)]
    deny: bool,
    /// With --allow: also allow every identical request (same tool, command and directory) of
    /// this agent from now on, without asking; `dshctl agent show` lists these rules.
    #[arg(long, conflicts_with = "deny")]
    always: bool,
    /// Why (the model sees it on a denial).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Wait until the call asks (its `approval/request`), then answer: for a script that answers
    /// a request it expects, started before the prompt (`dshctl approve --wait ... &`).
    #[arg(long)]
    wait: bool,
}

pub async fn approve(client: &Client, out: Output, mut args: ApproveArgs) -> anyhow::Result<()> {
    args.agent = client.resolve(IdKind::Agent, &args.agent).await?;
    args.call = if args.wait {
        asked(client, &args.agent, &args.call).await?
    } else {
        client.resolve_call(&args.agent, &args.call).await?
    };
    let decision = if args.allow {
        v1::ApprovalDecision::Allow
    } else {
        v1::ApprovalDecision::Deny
    };
    client
        .agents()
        .approve(v1::ApproveRequest {
            agent_id: args.agent.clone(),
            call_id: args.call.clone(),
            decision: decision as i32,
            reason: args.reason.clone().unwrap_or_default(),
            scope: if args.always {
                v1::ApprovalScope::Session
            } else {
                v1::ApprovalScope::Once
            } as i32,
        })
        .await?;
    let word = if args.allow { "allowed" } else { "denied" };
    let scope = if args.always { "session" } else { "once" };
    let until = if args.always {
        " (and the same request from now on)"
    } else {
        ""
    };
    out.emit(
        &json!({ "agent_id": args.agent, "call_id": args.call, "decision": if args.allow { "allow" } else { "deny" }, "scope": scope }),
        |w| writeln!(w, "{word} call {} of {}{until}", args.call, args.agent),
    )
}

/// Follows `agent` (its log from the start, then live) until a call whose id is `call`, or starts
/// with it, asks for approval; returns that call's id. A request found in the log may have been
/// decided already: answering it then is refused (`NOT_FOUND`), as it would be without `--wait`.
async fn asked(client: &Client, agent: &str, call: &str) -> anyhow::Result<String> {
    let mut stream = client
        .agents()
        .watch(v1::WatchRequest {
            agent_id: agent.to_owned(),
            descendants: false,
            from_seq: Some(0),
            types: vec!["approval/request".to_owned()],
        })
        .await?
        .into_inner();
    while let Some(event) = stream.next().await {
        let event = event?;
        if let Ok(Streamed::Logged(EventData::ApprovalRequest { call_id, .. })) =
            events::decode(&event)
            && call_id.starts_with(call)
        {
            return Ok(call_id);
        }
    }
    anyhow::bail!("the watch of {agent} ended before call {call} asked for approval")
}
