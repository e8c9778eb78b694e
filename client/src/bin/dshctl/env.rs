//! `dshctl env ...`: the managed `DSH_*` variables: what is declared, and a diagnostic snapshot.

use clap::Subcommand;
use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Every declared managed variable (built-ins included) with its contributor and meaning.
    List,
    /// The snapshot a bash call would get now, for an agent or for no agent.
    Show {
        /// Collect as a call of this agent (a unique id prefix will do).
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
    },
}

pub async fn run(client: &Client, out: Output, command: EnvCommand) -> anyhow::Result<()> {
    let mut shell_env = client.shell_env();
    match command {
        EnvCommand::List => {
            let variables = shell_env
                .list(v1::ListVariablesRequest {})
                .await?
                .into_inner()
                .variables;
            let doc = json!({
                "variables": variables.iter().map(|v| json!({
                    "key": v.key, "contributor": v.contributor, "description": v.description,
                })).collect::<Vec<_>>()
            });
            out.emit(&doc, |w| {
                let mut table = crate::output::table(&["KEY", "CONTRIBUTOR", "DESCRIPTION"]);
                for v in &variables {
                    table.add_row([v.key.clone(), v.contributor.clone(), v.description.clone()]);
                }
                writeln!(w, "{table}")
            })
        }
        EnvCommand::Show { agent } => {
            let agent_id = match &agent {
                Some(agent) => client.resolve(IdKind::Agent, agent).await?,
                None => String::new(),
            };
            let env = shell_env
                .collect(v1::CollectRequest { agent_id })
                .await?
                .into_inner()
                .env;
            let sorted: std::collections::BTreeMap<_, _> = env.into_iter().collect();
            out.emit(&json!({ "env": sorted }), |w| {
                for (key, value) in &sorted {
                    writeln!(w, "{key}={value}")?;
                }
                Ok(())
            })
        }
    }
}
