//! `dshctl session ...`: where a session's transcript is, which sessions exist, and their events.

use clap::Subcommand;
use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;
use tokio_stream::StreamExt;

use crate::output::Output;
use crate::wire;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Where the active backend keeps (or will keep) the session's transcript; touches nothing.
    Locate {
        /// The session (a live agent's or a stored one).
        id: String,
    },
    /// Sessions of the active backend and live agents.
    List,
    /// A session's events.
    Events {
        /// The session.
        id: String,
        /// First sequence number to show.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
}

pub async fn run(client: &Client, out: Output, command: SessionCommand) -> anyhow::Result<()> {
    let mut persistence = client.persistence();
    match command {
        SessionCommand::Locate { id } => {
            let location = persistence
                .locate(v1::LocateRequest {
                    session_id: id.clone(),
                })
                .await?
                .into_inner()
                .location;
            out.emit(
                &json!({ "location": wire::location(location.as_ref()) }),
                |w| match &location {
                    Some(l) => writeln!(w, "{} {}", l.kind, l.path),
                    None => writeln!(
                        w,
                        "no per-session file: the active backend does not keep one for {id}"
                    ),
                },
            )
        }
        SessionCommand::List => {
            let sessions = persistence
                .list_sessions(v1::ListSessionsRequest {})
                .await?
                .into_inner()
                .sessions;
            let doc = json!({
                "sessions": sessions.iter().map(|s| {
                    json!({ "live": s.live, "header": s.header.as_ref().map(wire::header) })
                }).collect::<Vec<_>>()
            });
            out.emit(&doc, |w| {
                if sessions.is_empty() {
                    return writeln!(w, "no sessions");
                }
                let mut table = crate::output::table(["SESSION", "LIVE", "PARENT", "CWD"]);
                for s in &sessions {
                    let h = s.header.clone().unwrap_or_default();
                    table.add_row([
                        h.id,
                        if s.live { "yes" } else { "" }.to_owned(),
                        h.parent_session.unwrap_or_default(),
                        h.cwd,
                    ]);
                }
                writeln!(w, "{table}")
            })
        }
        SessionCommand::Events { id, from } => {
            let mut stream = persistence
                .read_events(v1::ReadEventsRequest {
                    session_id: id,
                    from_seq: from,
                })
                .await?
                .into_inner();
            let mut events = Vec::new();
            while let Some(event) = stream.next().await {
                events.push(event?);
            }
            let doc = json!({ "events": events.iter().map(wire::event).collect::<Vec<_>>() });
            out.emit(&doc, |w| {
                for e in &events {
                    writeln!(w, "{:>5}  {:<18} {}", e.seq, e.r#type, e.data_json)?;
                }
                Ok(())
            })
        }
    }
}
