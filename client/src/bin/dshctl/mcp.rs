//! `dshctl mcp list`: the MCP servers of live agents, where each stands.

use clap::Subcommand;
use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;
use crate::wire;

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Each live agent's servers: state, tools, starts and the last error. Servers start with
    /// an agent's first turn; a child agent gets only those configured with `children = true`.
    List {
        /// Only this agent (an id or a unique prefix).
        #[arg(long)]
        agent: Option<String>,
    },
}

pub async fn run(client: &Client, out: Output, command: McpCommand) -> anyhow::Result<()> {
    let McpCommand::List { agent } = command;
    let mut agents = client.agents();
    let list = match agent {
        Some(id) => {
            let agent_id = client.resolve(IdKind::Agent, &id).await?;
            vec![
                agents
                    .get(v1::GetAgentRequest { agent_id })
                    .await?
                    .into_inner(),
            ]
        }
        None => {
            agents
                .list(v1::ListAgentsRequest {})
                .await?
                .into_inner()
                .agents
        }
    };
    let doc = json!({
        "agents": list.iter().map(|a| json!({
            "agent_id": a.agent_id,
            "mcp_servers": a.mcp_servers.iter().map(wire::mcp_server).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    out.emit(&doc, |w| {
        let mut table =
            crate::output::table(&["AGENT", "SERVER", "STATE", "STARTS", "TOOLS", "LAST ERROR"]);
        let mut rows = 0;
        for a in &list {
            for s in &a.mcp_servers {
                rows += 1;
                table.add_row([
                    a.agent_id.clone(),
                    s.name.clone(),
                    wire::mcp_state_name(s.state).to_owned(),
                    s.starts.to_string(),
                    s.tools.join(" "),
                    s.last_error.clone().unwrap_or_default(),
                ]);
            }
        }
        if rows == 0 {
            return writeln!(
                w,
                "no MCP servers (none configured in [mcp_servers], or no live agent)"
            );
        }
        writeln!(w, "{table}")
    })
}
