//! `dsh.v1.Hooks`: the configured hook files, their state and handlers, and reloading them.

use std::sync::Arc;

use dsh_proto::v1::{self, hooks_server};
use tonic::{Request, Response, Status};

use dsh_core::{FileStatus, HookFileStatus, Hooks};

/// The `Hooks` service.
pub struct HooksService {
    hooks: Arc<Hooks>,
}

impl HooksService {
    /// A service over `hooks`.
    pub fn new(hooks: Arc<Hooks>) -> Self {
        Self { hooks }
    }
}

fn files(statuses: Vec<HookFileStatus>) -> v1::ListHooksResponse {
    let files = statuses
        .into_iter()
        .map(|f| v1::HookFile {
            dialect: f.dialect.as_str().to_owned(),
            path: f.path.to_string_lossy().into_owned(),
            status: match f.status {
                FileStatus::Loaded => "loaded",
                FileStatus::Missing => "missing",
                FileStatus::Rejected => "rejected",
            }
            .to_owned(),
            error: f.error.unwrap_or_default(),
            handlers: f
                .handlers
                .into_iter()
                .map(|h| v1::HookHandler {
                    event: h.event.as_str().to_owned(),
                    matcher: h.matcher.unwrap_or_default(),
                    command: h.command,
                    timeout_ms: u64::try_from(h.timeout.as_millis()).unwrap_or(u64::MAX),
                    id: h.id,
                })
                .collect(),
            project: f.project,
            warnings: f.warnings,
        })
        .collect();
    v1::ListHooksResponse { files }
}

#[tonic::async_trait]
impl hooks_server::Hooks for HooksService {
    async fn list(
        &self,
        _request: Request<v1::ListHooksRequest>,
    ) -> Result<Response<v1::ListHooksResponse>, Status> {
        Ok(Response::new(files(self.hooks.list())))
    }

    async fn reload(
        &self,
        _request: Request<v1::ReloadHooksRequest>,
    ) -> Result<Response<v1::ListHooksResponse>, Status> {
        let hooks = self.hooks.clone();
        let statuses = tokio::task::spawn_blocking(move || hooks.reload())
            .await
            .map_err(|e| Status::internal(format!("reloading hooks failed: {e}")))?;
        Ok(Response::new(files(statuses)))
    }
}
