//! `dshctl session export` and `dshctl session import`: a session out of dsh as a file, and a
//! file into dsh as a new session. dshd does the work; export's file is written here, by the
//! client, so dshd writes nothing outside its store.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

/// What `--format` takes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// A ZIP of the session's log (and its child agents' with --descendants) and a manifest.
    Bundle,
    /// A transcript to read.
    Markdown,
    /// Claude Code's transcript JSONL, for tools written for Claude Code.
    ClaudeJsonl,
}

/// `dshctl session export`.
pub async fn export(
    client: &Client,
    out: Output,
    id: &str,
    format: Format,
    descendants: bool,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let id = client.resolve(IdKind::Session, id).await?;
    let format = match format {
        Format::Bundle => v1::ExportFormat::Bundle,
        Format::Markdown => v1::ExportFormat::Markdown,
        Format::ClaudeJsonl => v1::ExportFormat::ClaudeJsonl,
    };
    let mut stream = client
        .persistence()
        .export(v1::ExportRequest {
            session_id: id.clone(),
            format: format as i32,
            descendants,
        })
        .await?
        .into_inner();
    // The first chunk names the file and its sessions; the file is written as chunks come.
    let first = stream
        .message()
        .await?
        .context("dshd ended the export before its first chunk")?;
    let sessions = first.session_ids;
    if output.as_deref() == Some(Path::new("-")) {
        let mut stdout = std::io::stdout().lock();
        let mut chunk = first.data;
        loop {
            crate::output::finish(stdout.write_all(&chunk))?;
            match stream.message().await? {
                Some(next) => chunk = next.data,
                None => break,
            }
        }
        return crate::output::finish(stdout.flush());
    }
    let (path, replace) = match output {
        Some(path) => (path, true),
        None => (default_name(&first.file_name)?, false),
    };
    let bytes = save(&path, first.data, &mut stream, replace).await?;
    out.emit(
        &json!({
            "path": path.to_string_lossy(),
            "bytes": bytes,
            "sessions": sessions,
        }),
        |w| {
            writeln!(
                w,
                "wrote {} ({} bytes, {} session{})",
                path.display(),
                bytes,
                sessions.len(),
                if sessions.len() == 1 { "" } else { "s" }
            )
        },
    )
}

/// The file dshd named, in the current directory: one plain name, or a refusal (a name that could
/// reach another directory is not one dshd sends).
fn default_name(name: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(name);
    match path.file_name() {
        Some(plain) if plain == path.as_os_str() => Ok(path.to_owned()),
        _ => anyhow::bail!(
            "dshd named the export {name:?}, which is not a plain file name; name one with -o"
        ),
    }
}

/// Writes the export (`first`, then the rest of `stream`) to `path` whole or not at all (a
/// temporary file beside it, renamed once the stream has ended well and the bytes are on disk),
/// private to the user: a session holds everything its agent saw. Without `replace`, an existing
/// file is left alone and refused. How many bytes it wrote.
async fn save(
    path: &Path,
    first: impl AsRef<[u8]>,
    stream: &mut tonic::Streaming<v1::ExportChunk>,
    replace: bool,
) -> anyhow::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt as _;
    if !replace && path.exists() {
        anyhow::bail!("{} exists; name another file with -o", path.display());
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = path.file_name().context("-o names no file")?;
    let temp = dir.join(format!(
        ".{}.part-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let cannot = || format!("cannot write {}", path.display());
    let written = async {
        file.write_all(first.as_ref()).with_context(cannot)?;
        let mut bytes = first.as_ref().len() as u64;
        // A failed stream is dshd's error, said as it said it.
        while let Some(chunk) = stream.message().await? {
            file.write_all(&chunk.data).with_context(cannot)?;
            bytes += chunk.data.len() as u64;
        }
        file.sync_all().with_context(cannot)?;
        std::fs::rename(&temp, path).with_context(cannot)?;
        anyhow::Ok(bytes)
    };
    let written = written.await;
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// `dshctl session import`.
pub async fn import(client: &Client, out: Output, path: &Path) -> anyhow::Result<()> {
    let path = std::path::absolute(path)?;
    let cwd = std::env::current_dir()?;
    let imported = client
        .persistence()
        .import(v1::ImportRequest {
            path: path.to_string_lossy().into_owned(),
            cwd: cwd.to_string_lossy().into_owned(),
        })
        .await?
        .into_inner();
    out.emit(
        &json!({
            "sessionId": imported.session_id,
            "format": imported.format,
            "originalId": imported.original_id,
            "events": imported.events,
            "skipped": imported.skipped,
            "descendantIds": imported.descendant_ids,
        }),
        |w| {
            writeln!(
                w,
                "imported {} ({}, {} events{}) as session {}",
                path.display(),
                imported.format,
                imported.events,
                if imported.skipped > 0 {
                    format!(", {} records left out", imported.skipped)
                } else {
                    String::new()
                },
                imported.session_id
            )?;
            writeln!(
                w,
                "resume it with: dshctl agent resume {}",
                imported.session_id
            )
        },
    )
}
