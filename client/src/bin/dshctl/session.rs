//! `dshctl session ...`: where a session's transcript is, which sessions exist, and their events.

use std::io::Write;

use clap::Subcommand;
use dsh_client::Client;
use dsh_client::events::{self, EventData, LiveEvent, Streamed};
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;
use tokio_stream::StreamExt;

use crate::output::Output;
use crate::wire;

const EVENTS_AFTER_HELP: &str = "\
Examples:
  dshctl session events 0199a2b3
  dshctl --json session events \"$AGENT\" | jq -c 'select(.type == \"tool/call\")'
  dshctl session events \"$AGENT\" --from 10 | head -5

Exit status: 0 success; 1 the daemon refused (e.g. no such session); 2 bad usage.";

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Where the active backend keeps (or will keep) the session's transcript; touches nothing.
    Locate {
        /// The session (a live agent's or a stored one; a unique id prefix will do).
        id: String,
    },
    /// Sessions of the active backend and live agents, a page at a time, newest first; the first
    /// line (or `backend` and `others` with --json) says which backend that is and how many
    /// sessions the other configured backends hold besides. The last line (`next_page_token` with
    /// --json) says how to get the next page.
    List {
        /// Sessions per page (1 to 1000; the daemon's default is 100).
        #[arg(long, value_name = "N")]
        page_size: Option<u32>,
        /// The page after the one that printed this token.
        #[arg(long, value_name = "TOKEN", conflicts_with = "all")]
        page_token: Option<String>,
        /// Follow the pages to the end and print every session.
        #[arg(long)]
        all: bool,
        /// Oldest first instead of newest first.
        #[arg(long)]
        oldest_first: bool,
        /// Only sessions whose working directory is exactly this one (relative to the current
        /// directory).
        #[arg(long, value_name = "DIR")]
        cwd: Option<std::path::PathBuf>,
        /// List archived sessions too.
        #[arg(long)]
        archived: bool,
        /// Only sessions created on this host (its host name); a shared PostgreSQL database
        /// holds the sessions of many machines.
        #[arg(long, value_name = "HOST")]
        host: Option<String>,
    },
    /// Names a session (live or stored); the name is kept in its own log. Without one, a
    /// session's title is its first prompt's first line.
    Rename {
        /// The session (a unique id prefix will do).
        id: String,
        /// The title: one line, 1 to 200 characters.
        title: String,
    },
    /// Archives a session: `session list` leaves it out unless given --archived.
    Archive {
        /// The session (a unique id prefix will do).
        id: String,
        /// Take it out of the archive instead.
        #[arg(long)]
        undo: bool,
    },
    /// Deletes a stored session and its log from the active backend (not a live one: close its
    /// agent first). On a terminal it asks first.
    Delete {
        /// The session (a unique id prefix will do).
        id: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// A session's events, oldest first (with --json: one JSON object per line).
    #[command(after_help = EVENTS_AFTER_HELP)]
    Events {
        /// The session (a unique id prefix will do).
        id: String,
        /// First sequence number to show.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Keep following the log as the session goes on (live now, or once resumed).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// What is damaged in a stored session that resuming refuses, and what a repair would do;
    /// with --apply, do it. Nothing is deleted: lines taken out of the log are kept in a file
    /// beside it. The session must not be live.
    #[command(after_help = REPAIR_AFTER_HELP)]
    Repair {
        /// The session (a unique id prefix will do).
        id: String,
        /// Carry the repair out (without it, only say what it would do).
        #[arg(long)]
        apply: bool,
    },
    /// Writes a session (live or stored) to a file: a ZIP bundle of its log (docs/LOG-FORMAT.md),
    /// a Markdown transcript, or a Claude Code transcript. A live session is checkpointed first.
    #[command(after_help = EXPORT_AFTER_HELP)]
    Export {
        /// The session (a unique id prefix will do).
        id: String,
        /// What to write.
        #[arg(long, value_enum, default_value = "bundle")]
        format: crate::transfer::Format,
        /// Include its child agents' sessions, however deep.
        #[arg(long)]
        descendants: bool,
        /// The file to write, whole or not at all; `-`: standard output, as it arrives (a failed
        /// export exits non-zero after what was written). Default `<id>.zip`, `.md` or `.jsonl`
        /// here, never replacing a file.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Brings a session in as a new one (new id; the file is only read): a dsh bundle or log,
    /// an upstream DeepSeek Harness `session.jsonl` or `session.jsonl.zstd`, or a Claude Code
    /// transcript. Resume it with `dshctl agent resume`.
    Import {
        /// The file.
        path: std::path::PathBuf,
    },
}

const EXPORT_AFTER_HELP: &str = "\
Examples:
  dshctl session export 0199a2b3 --descendants          # 0199a2b3….zip: session.jsonl, subagents/…
  dshctl session export 0199a2b3 --format markdown -o notes.md
  dshctl session export 0199a2b3 --format claude-jsonl -o - | jq -c .message.usage

Exit status: 0 written; 1 the daemon refused (e.g. no such session) or the file could not be
written; 2 bad usage.";

const REPAIR_AFTER_HELP: &str = "\
Examples:
  dshctl session repair 0199a2b3            # what is wrong, and what --apply would do
  dshctl session repair 0199a2b3 --apply

Exit status: 0 nothing to repair, or repaired; 1 damage found and not repaired (without --apply,
or nothing can be kept), or the daemon refused; 2 bad usage.";

pub async fn run(client: &Client, out: Output, command: SessionCommand) -> anyhow::Result<()> {
    let mut persistence = client.persistence();
    match command {
        // Answered by `repair`, which decides the exit status.
        SessionCommand::Repair { id, apply } => repair(client, out, &id, apply).await.map(drop),
        SessionCommand::Export {
            id,
            format,
            descendants,
            output,
        } => crate::transfer::export(client, out, &id, format, descendants, output).await,
        SessionCommand::Import { path } => crate::transfer::import(client, out, &path).await,
        SessionCommand::Rename { id, title } => {
            crate::session_meta::rename(client, out, &id, title).await
        }
        SessionCommand::Archive { id, undo } => {
            crate::session_meta::archive(client, out, &id, undo).await
        }
        SessionCommand::Delete { id, yes } => {
            crate::session_meta::delete(client, out, &id, yes).await
        }
        SessionCommand::Locate { id } => {
            let id = client.resolve(IdKind::Session, &id).await?;
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
                    Some(l) if !l.database.is_empty() => {
                        writeln!(w, "{} {} session {id}", l.kind, l.database)
                    }
                    Some(l) => writeln!(w, "{} {}", l.kind, l.path),
                    None => writeln!(
                        w,
                        "no per-session file: the active backend does not keep one for {id}"
                    ),
                },
            )
        }
        SessionCommand::List {
            page_size,
            page_token,
            all,
            oldest_first,
            cwd,
            archived,
            host,
        } => {
            let cwd = match cwd {
                Some(dir) => std::path::absolute(&dir)?.to_string_lossy().into_owned(),
                None => String::new(),
            };
            let order = if oldest_first {
                v1::SessionOrder::OldestFirst
            } else {
                v1::SessionOrder::NewestFirst
            };
            let mut request = v1::ListSessionsRequest {
                page_size,
                page_token: page_token.clone().unwrap_or_default(),
                order: order as i32,
                cwd,
                include_archived: archived,
                host: host.unwrap_or_default(),
            };
            let mut listed = persistence
                .list_sessions(request.clone())
                .await?
                .into_inner();
            while all && !listed.next_page_token.is_empty() {
                request.page_token = std::mem::take(&mut listed.next_page_token);
                let next = persistence
                    .list_sessions(request.clone())
                    .await?
                    .into_inner();
                listed.sessions.extend(next.sessions);
                listed.next_page_token = next.next_page_token;
            }
            let sessions = &listed.sessions;
            let backend = listed.backend.clone().unwrap_or_default();
            let doc = json!({
                "backend": { "name": backend.name, "path": backend.path },
                "sessions": sessions.iter().map(|s| {
                    json!({
                        "live": s.live,
                        "title": s.title,
                        "archived": s.archived,
                        "host": (!s.host.is_empty()).then_some(&s.host),
                        "daemon": (!s.daemon.is_empty()).then_some(&s.daemon),
                        "header": s.header.as_ref().map(wire::header),
                    })
                }).collect::<Vec<_>>(),
                "others": listed.others.iter().map(|o| {
                    let b = o.backend.clone().unwrap_or_default();
                    json!({
                        "name": b.name,
                        "path": b.path,
                        "unlisted_sessions": o.unlisted_sessions,
                        "error": (!o.error.is_empty()).then_some(&o.error),
                    })
                }).collect::<Vec<_>>(),
                "next_page_token": listed.next_page_token,
            });
            out.emit(&doc, |w| {
                writeln!(w, "{}", summary(&listed, page_token.is_some()))?;
                if !sessions.is_empty() {
                    // The creating machine, where the backend records it (postgres): sessions
                    // of many machines in one list.
                    let hosts = sessions.iter().any(|s| !s.host.is_empty());
                    let mut columns = vec!["SESSION", "CREATED", "LIVE", "PARENT", "CWD", "TITLE"];
                    if hosts {
                        columns.insert(2, "HOST");
                    }
                    let mut table = crate::output::table(&columns);
                    for s in sessions {
                        let h = s.header.clone().unwrap_or_default();
                        let title = if s.archived {
                            format!("[archived] {}", s.title)
                        } else {
                            s.title.clone()
                        };
                        let mut row = vec![
                            h.id,
                            crate::output::ago(h.created_at_ms),
                            if s.live { "yes" } else { "" }.to_owned(),
                            crate::output::short_id(&h.parent_session.unwrap_or_default()),
                            h.cwd,
                            title,
                        ];
                        if hosts {
                            row.insert(2, s.host.clone());
                        }
                        table.add_row(row);
                    }
                    writeln!(w, "{table}")?;
                }
                if !listed.next_page_token.is_empty() {
                    writeln!(
                        w,
                        "more: dshctl session list --page-token {} (with the same --cwd, \
                         --host and --oldest-first), or --all",
                        listed.next_page_token
                    )?;
                }
                Ok(())
            })
        }
        SessionCommand::Events { id, from, follow } => {
            let id = client.resolve(IdKind::Session, &id).await?;
            let mut stream = persistence
                .read_events(v1::ReadEventsRequest {
                    session_id: id.clone(),
                    from_seq: from,
                    follow,
                })
                .await?
                .into_inner();
            // A stream: one line per event as it arrives, JSON lines with --json (the same line
            // `prompt` and `watch` print for the same event).
            // The ends of steps and turns are where `agent fork --at` may start a fork.
            let mut fork_points = Vec::new();
            while let Some(event) = stream.next().await {
                let event = event?;
                if out.json {
                    out.raw_line(&wire::event_line(&event))?;
                } else {
                    let seq = event.seq.map_or_else(String::new, |s| s.to_string());
                    let point = fork_point(&event);
                    if point {
                        fork_points.extend(event.seq);
                    }
                    let mark = if point { "  [fork point]" } else { "" };
                    let line = format!("{seq:>5}  {:<18} {}{mark}", event.r#type, event.data_json);
                    crate::output::finish(writeln!(crate::safe::stdout(), "{line}"))?;
                }
            }
            if !out.json && !fork_points.is_empty() {
                let seqs: Vec<String> = fork_points.iter().map(u64::to_string).collect();
                crate::output::finish(writeln!(
                    crate::safe::stdout(),
                    "fork points (dshctl agent fork {id} --at SEQ): {}",
                    seqs.join(" ")
                ))?;
            }
            Ok(())
        }
    }
}

/// Whether `agent fork --at` may start a fork after `event`: the end of a step or a turn. An
/// event that cannot be read is shown as it is, and is no fork point.
fn fork_point(event: &v1::Event) -> bool {
    match events::decode(event) {
        Ok(Streamed::Logged(data)) => match data {
            EventData::StepEnd { .. } | EventData::TurnEnd { .. } => true,
            EventData::TurnStart { .. }
            | EventData::StepStart { .. }
            | EventData::UserMessage { .. }
            | EventData::AssistantMessage { .. }
            | EventData::AssistantThought { .. }
            | EventData::ToolCall { .. }
            | EventData::ToolRewritten { .. }
            | EventData::ToolResult { .. }
            | EventData::ToolFile { .. }
            | EventData::HookInvoked { .. }
            | EventData::HookResult { .. }
            | EventData::SessionTitle { .. }
            | EventData::SessionArchived { .. }
            | EventData::EndSeed {}
            | EventData::Imported { .. }
            | EventData::Settings { .. }
            | EventData::Instructions { .. }
            | EventData::ApprovalRuleRemoved { .. }
            | EventData::ApprovalRuleAdded { .. }
            | EventData::ApprovalRequest { .. }
            | EventData::ApprovalDecision { .. }
            | EventData::CompactionStart { .. }
            | EventData::CompactionEnd { .. }
            | EventData::Unknown(_) => false,
        },
        // A stored session's stream carries no unlogged event but a lag marker.
        Ok(Streamed::Live(live)) => match live {
            LiveEvent::TextDelta(_)
            | LiveEvent::ThoughtDelta(_)
            | LiveEvent::ToolOutput(_)
            | LiveEvent::ModelRetry(_)
            | LiveEvent::Lagged(_) => false,
        },
        Err(_) => false,
    }
}

/// The first line of `session list`: which backend was listed, and what the other configured
/// backends hold besides, e.g. `jsonl: 3 sessions; sqlite (not active) holds 5 more`. A backend
/// is named with its path when its name alone would be ambiguous. A listing with more pages, or
/// a later page, counts "on this page".
fn summary(listed: &v1::ListSessionsResponse, later_page: bool) -> String {
    let backend = listed.backend.clone().unwrap_or_default();
    let mut line = match listed.sessions.len() {
        0 => format!("{}: no sessions", backend.name),
        1 => format!("{}: 1 session", backend.name),
        n => format!("{}: {n} sessions", backend.name),
    };
    if later_page || !listed.next_page_token.is_empty() {
        line.push_str(" on this page");
    }
    for other in &listed.others {
        let b = other.backend.clone().unwrap_or_default();
        let ambiguous = b.name == backend.name
            || listed
                .others
                .iter()
                .filter(|o| o.backend.as_ref().is_some_and(|x| x.name == b.name))
                .count()
                > 1;
        let label = if ambiguous {
            format!("{} {}", b.name, b.path)
        } else {
            b.name
        };
        if !other.error.is_empty() {
            line.push_str(&format!(
                "; {label} (not active) cannot be read: {}",
                other.error
            ));
        } else if other.unlisted_sessions > 0 {
            line.push_str(&format!(
                "; {label} (not active) holds {} more",
                other.unlisted_sessions
            ));
        }
    }
    line
}

/// `dshctl session repair`: exit 1 when damage was found and not repaired.
pub async fn repair(
    client: &Client,
    out: Output,
    id: &str,
    apply: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let id = client.resolve(IdKind::Session, id).await?;
    let report = client
        .persistence()
        .repair(v1::RepairRequest {
            session_id: id.clone(),
            apply,
        })
        .await?
        .into_inner();
    out.emit(
        &json!({
            "path": report.path,
            "findings": report.findings,
            "actions": report.actions,
            "applied": report.applied,
        }),
        |w| {
            if report.findings.is_empty() {
                return writeln!(w, "{}: nothing to repair", report.path);
            }
            writeln!(w, "{}:", report.path)?;
            for finding in &report.findings {
                writeln!(w, "  found: {finding}")?;
            }
            for action in &report.actions {
                let verb = if report.applied { "done" } else { "would" };
                writeln!(w, "  {verb}: {action}")?;
            }
            if !report.applied && !report.actions.is_empty() {
                writeln!(w, "run again with --apply to repair")?;
            }
            Ok(())
        },
    )?;
    Ok(if report.findings.is_empty() || report.applied {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
