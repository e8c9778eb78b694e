//! `dsh.v1.Daemon`: status and shutdown.

use std::sync::Arc;

use dsh_proto::v1::{self, daemon_server};
use tonic::{Request, Response, Status};

use crate::connection::Occupancy;
use crate::daemon::Daemon;

/// The `Daemon` service.
pub struct DaemonService {
    daemon: Arc<Daemon>,
    /// The server's connection slots, which live outside the core.
    connections: Occupancy,
}

impl DaemonService {
    /// Binds the service to `daemon`, whose client connections `connections` counts.
    pub fn new(daemon: Arc<Daemon>, connections: Occupancy) -> Self {
        Self {
            daemon,
            connections,
        }
    }
}

#[tonic::async_trait]
impl daemon_server::Daemon for DaemonService {
    async fn status(
        &self,
        _request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        let d = &self.daemon;
        let (key_env, has_key) = d.agents.model_key();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let usage = d.agents.usage_totals();
        Ok(Response::new(v1::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol_version: dsh_proto::PROTOCOL_VERSION,
            pid: std::process::id(),
            dsh_home: d.home.to_string_lossy().into_owned(),
            socket: d.socket.to_string_lossy().into_owned(),
            started_at_ms: d.started_at_ms,
            persistence: d.persistence_name().to_owned(),
            persistence_unavailable: d
                .backends
                .handle()
                .backend()
                .unavailable()
                .unwrap_or_default(),
            agents: count(d.live_agents()),
            running_turns: count(d.agents.running_turns()),
            jobs: count(d.running_jobs()),
            model_key_configured: has_key,
            model_key_env: key_env.to_owned(),
            config_file: d
                .config
                .file
                .as_ref()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            landlock_abi: d.executor.landlock().abi(),
            landlock: d.executor.landlock().to_string(),
            launcher: d
                .executor
                .config()
                .launcher
                .installed_path()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            connections: count(self.connections.open()),
            max_connections: count(self.connections.max()),
            default_provider: d.config.default_provider.clone(),
            default_script: d.config.default_script.is_some(),
            openai_model: d.config.openai.model.clone(),
            context_window: d
                .config
                .openai
                .context_window_of(&d.config.openai.model)
                .unwrap_or(0),
            mcp_servers: d
                .config
                .mcp_servers
                .iter()
                .map(|s| s.name.clone())
                .collect(),
            usage_input_tokens: usage.input_tokens,
            usage_output_tokens: usage.output_tokens,
            usage_cache_read_tokens: usage.cache_read_tokens.unwrap_or(0),
            usage_reasoning_tokens: usage.reasoning_tokens.unwrap_or(0),
        }))
    }

    async fn shutdown(
        &self,
        _request: Request<v1::ShutdownRequest>,
    ) -> Result<Response<v1::ShutdownResponse>, Status> {
        tracing::info!("shutdown requested over gRPC");
        self.daemon.request_shutdown();
        Ok(Response::new(v1::ShutdownResponse {}))
    }
}
