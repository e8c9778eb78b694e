//! `dshctl skills list|reload`: local skills under the harness home.

use clap::Subcommand;
use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Skills found at start or at the last reload.
    List,
    /// Discover `<home>/skills/*/SKILL.md` again.
    Reload,
}

pub async fn run(client: &Client, out: Output, command: SkillsCommand) -> anyhow::Result<()> {
    let mut skills = client.skills();
    let found = match command {
        SkillsCommand::List => skills.list(v1::ListSkillsRequest {}).await?,
        SkillsCommand::Reload => skills.reload(v1::ReloadSkillsRequest {}).await?,
    }
    .into_inner();
    let doc = json!({
        "skills": found.skills.iter().map(|s| json!({
            "name": s.name, "description": s.description, "path": s.path,
        })).collect::<Vec<_>>(),
        "problems": found.problems,
    });
    out.emit(&doc, |w| {
        if found.skills.is_empty() {
            writeln!(w, "no skills (put them in <home>/skills/<name>/SKILL.md)")?;
        } else {
            let mut table = crate::output::table(&["NAME", "DESCRIPTION", "PATH"]);
            for s in &found.skills {
                table.add_row([s.name.clone(), s.description.clone(), s.path.clone()]);
            }
            writeln!(w, "{table}")?;
        }
        for problem in &found.problems {
            writeln!(w, "skipped: {problem}")?;
        }
        Ok(())
    })
}
