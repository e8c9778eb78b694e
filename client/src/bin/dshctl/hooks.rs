//! `dshctl hooks list|reload`: the configured Claude Code and Codex hook files and their handlers.

use clap::Subcommand;
use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Hook files, whether they loaded, and their handlers per event.
    List,
    /// Read the configured hook files again.
    Reload,
}

pub async fn run(client: &Client, out: Output, command: HooksCommand) -> anyhow::Result<()> {
    let mut hooks = client.hooks();
    let files = match command {
        HooksCommand::List => hooks.list(v1::ListHooksRequest {}).await?,
        HooksCommand::Reload => hooks.reload(v1::ReloadHooksRequest {}).await?,
    }
    .into_inner()
    .files;
    let doc = json!({
        "files": files.iter().map(|f| json!({
            "dialect": f.dialect,
            "path": f.path,
            "status": f.status,
            "error": (!f.error.is_empty()).then_some(&f.error),
            "project": f.project,
            "warnings": f.warnings,
            "handlers": f.handlers.iter().map(|h| json!({
                "id": h.id, "event": h.event, "matcher": h.matcher, "command": h.command,
                "timeout_ms": h.timeout_ms,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>()
    });
    out.emit(&doc, |w| {
        if files.is_empty() {
            return writeln!(w, "no hook files configured ([hooks] in the config)");
        }
        for f in &files {
            let project = if f.project { " (project)" } else { "" };
            writeln!(w, "{} {}{project}: {}", f.dialect, f.path, f.status)?;
            if !f.error.is_empty() {
                writeln!(w, "  error: {}", f.error)?;
            }
            for warning in &f.warnings {
                writeln!(w, "  warning: {warning}")?;
            }
            for h in &f.handlers {
                let matcher = if h.matcher.is_empty() {
                    "*"
                } else {
                    &h.matcher
                };
                writeln!(w, "  {:<17} {:<12} {}", h.event, matcher, h.command)?;
            }
        }
        Ok(())
    })
}
