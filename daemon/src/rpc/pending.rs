//! Services whose methods later work implements. Each answers UNIMPLEMENTED naming the method, so a
//! client can tell "this daemon does not do that yet" from any other failure.

use std::pin::Pin;

use dsh_proto::v1::{self, hooks_server, shell_env_server, shell_server, skills_server};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Placeholder implementation of every not-yet-built service.
pub struct Pending;

type Reply<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn pending<T>(method: &str) -> Reply<T> {
    Err(Status::unimplemented(format!(
        "dsh.v1.{method} is not implemented by this dshd version"
    )))
}

#[tonic::async_trait]
impl shell_server::Shell for Pending {
    async fn run(&self, _: Request<v1::RunRequest>) -> Reply<v1::RunResponse> {
        pending("Shell/Run")
    }
    async fn job_output(&self, _: Request<v1::JobOutputRequest>) -> Reply<v1::JobOutputResponse> {
        pending("Shell/JobOutput")
    }
    async fn job_kill(&self, _: Request<v1::JobKillRequest>) -> Reply<v1::JobKillResponse> {
        pending("Shell/JobKill")
    }
}

#[tonic::async_trait]
impl shell_env_server::ShellEnv for Pending {
    type ContributeStream = BoxStream<v1::ContributeResponse>;
    async fn list(&self, _: Request<v1::ListVariablesRequest>) -> Reply<v1::ListVariablesResponse> {
        pending("ShellEnv/List")
    }
    async fn collect(&self, _: Request<v1::CollectRequest>) -> Reply<v1::CollectResponse> {
        pending("ShellEnv/Collect")
    }
    async fn contribute(
        &self,
        _: Request<Streaming<v1::ContributeRequest>>,
    ) -> Reply<Self::ContributeStream> {
        pending("ShellEnv/Contribute")
    }
}

#[tonic::async_trait]
impl skills_server::Skills for Pending {
    async fn list(&self, _: Request<v1::ListSkillsRequest>) -> Reply<v1::ListSkillsResponse> {
        pending("Skills/List")
    }
    async fn reload(&self, _: Request<v1::ReloadSkillsRequest>) -> Reply<v1::ListSkillsResponse> {
        pending("Skills/Reload")
    }
}

#[tonic::async_trait]
impl hooks_server::Hooks for Pending {
    async fn list(&self, _: Request<v1::ListHooksRequest>) -> Reply<v1::ListHooksResponse> {
        pending("Hooks/List")
    }
    async fn reload(&self, _: Request<v1::ReloadHooksRequest>) -> Reply<v1::ListHooksResponse> {
        pending("Hooks/Reload")
    }
}
