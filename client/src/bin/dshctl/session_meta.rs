//! `dshctl session rename|archive|delete`: a session's title and archived flag, and deleting a
//! stored session.

use std::io::{BufRead, IsTerminal, Write};

use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

/// `dshctl session rename ID TITLE`.
pub async fn rename(client: &Client, out: Output, id: &str, title: String) -> anyhow::Result<()> {
    let id = client.resolve(IdKind::Session, id).await?;
    let meta = client
        .persistence()
        .set_title(v1::SetTitleRequest {
            session_id: id,
            title,
        })
        .await?
        .into_inner();
    print_meta(out, &meta)
}

/// `dshctl session archive ID [--undo]`.
pub async fn archive(client: &Client, out: Output, id: &str, undo: bool) -> anyhow::Result<()> {
    let id = client.resolve(IdKind::Session, id).await?;
    let meta = client
        .persistence()
        .set_archived(v1::SetArchivedRequest {
            session_id: id,
            archived: !undo,
        })
        .await?
        .into_inner();
    print_meta(out, &meta)
}

fn print_meta(out: Output, meta: &v1::SessionMetadata) -> anyhow::Result<()> {
    out.emit(
        &json!({
            "session_id": meta.session_id,
            "title": meta.title,
            "archived": meta.archived,
        }),
        |w| {
            let state = if meta.archived { " (archived)" } else { "" };
            writeln!(w, "{}: {:?}{state}", meta.session_id, meta.title)
        },
    )
}

/// `dshctl session delete ID [--yes]`: on a terminal, asks first unless `--yes`.
pub async fn delete(client: &Client, out: Output, id: &str, yes: bool) -> anyhow::Result<()> {
    let id = client.resolve(IdKind::Session, id).await?;
    if !yes && std::io::stdin().is_terminal() {
        let backend = client
            .persistence()
            .describe(v1::DescribeBackendRequest {})
            .await?
            .into_inner();
        let mut err = crate::safe::stderr();
        write!(
            err,
            "delete session {id} and its log from {} ({})? This cannot be undone. [y/N] ",
            backend.name, backend.path
        )?;
        err.flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            anyhow::bail!("not deleted");
        }
    }
    let deleted = client
        .persistence()
        .delete(v1::DeleteSessionRequest {
            session_id: id.clone(),
        })
        .await?
        .into_inner();
    let backend = deleted.backend.unwrap_or_default();
    out.emit(
        &json!({ "session_id": id, "deleted": true, "backend": backend.name }),
        |w| writeln!(w, "deleted {id} from {} ({})", backend.name, backend.path),
    )
}
