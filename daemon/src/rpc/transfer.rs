//! `Persistence.Export` and `Persistence.Import`: requests to the core's `transfer` and its
//! answers back; the core does the work.

use std::pin::Pin;
use std::task::{Context, Poll};

use dsh_proto::v1;
use tokio_stream::Stream;
use tonic::Status;

use super::convert::{agent_status, persistence_status, session_id};
use dsh_core::{AgentRegistry, ExportChunks, ExportFormat, PersistenceHandle, TransferError};

/// The stream of an export's chunks.
pub type ExportStream = Pin<Box<dyn Stream<Item = Result<v1::ExportChunk, Status>> + Send>>;

/// The export `request` asks for, as the core writes it.
pub async fn export(
    agents: &AgentRegistry,
    request: v1::ExportRequest,
) -> Result<ExportStream, Status> {
    let id = session_id("session_id", request.session_id)?;
    let format = match v1::ExportFormat::try_from(request.format) {
        Ok(v1::ExportFormat::Unspecified | v1::ExportFormat::Bundle) => ExportFormat::Bundle,
        Ok(v1::ExportFormat::Markdown) => ExportFormat::Markdown,
        Ok(v1::ExportFormat::ClaudeJsonl) => ExportFormat::ClaudeJsonl,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "format: {} is not an export format",
                request.format
            )));
        }
    };
    let exported = dsh_core::export_session(agents, &id, format, request.descendants)
        .await
        .map_err(transfer_status)?;
    let session_ids = exported.sessions.iter().map(|s| s.as_str().to_owned());
    Ok(Box::pin(Chunks {
        chunks: exported.chunks,
        first: Some((exported.file_name, session_ids.collect())),
    }))
}

/// An export's chunks as messages: the first names the file and its sessions.
struct Chunks {
    chunks: ExportChunks,
    first: Option<(String, Vec<String>)>,
}

impl Stream for Chunks {
    type Item = Result<v1::ExportChunk, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.chunks.poll_next(cx).map(|next| {
            next.map(|chunk| {
                let data = chunk.map_err(transfer_status)?;
                let (file_name, session_ids) = this.first.take().unwrap_or_default();
                Ok(v1::ExportChunk {
                    data: data.into(),
                    file_name,
                    session_ids,
                })
            })
        })
    }
}

/// The import `request` asks for.
pub async fn import(
    persistence: &PersistenceHandle,
    request: v1::ImportRequest,
) -> Result<dsh_core::Imported, Status> {
    let path = std::path::PathBuf::from(&request.path);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "path: {:?} is not an absolute path",
            request.path
        )));
    }
    let cwd = std::path::PathBuf::from(&request.cwd);
    if !cwd.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "cwd: {:?} is not an absolute path",
            request.cwd
        )));
    }
    dsh_core::import_session(persistence, &path, &cwd)
        .await
        .map_err(transfer_status)
}

/// The status of a failed export or import: bad input names `path`.
fn transfer_status(error: TransferError) -> Status {
    match error {
        e @ TransferError::NotFound(_) => Status::not_found(e.to_string()),
        TransferError::Persistence(e) => persistence_status(e),
        TransferError::Agent(e) => agent_status(e),
        e @ TransferError::Unreadable { .. } => Status::invalid_argument(format!("path: {e}")),
        e @ (TransferError::BadInput { .. } | TransferError::UnsupportedVersion { .. }) => {
            Status::invalid_argument(format!("path: {e}"))
        }
    }
}
