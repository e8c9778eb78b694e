//! Services whose methods later work implements. Each answers UNIMPLEMENTED naming the method, so a
//! client can tell "this daemon does not do that yet" from any other failure.

use std::pin::Pin;

use dsh_proto::v1::{
    self, agents_server, hooks_server, persistence_server, shell_env_server, shell_server,
    skills_server,
};
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
impl agents_server::Agents for Pending {
    type PromptStream = BoxStream<v1::TurnEvent>;
    async fn create(&self, _: Request<v1::CreateAgentRequest>) -> Reply<v1::AgentInfo> {
        pending("Agents/Create")
    }
    async fn resume(&self, _: Request<v1::ResumeAgentRequest>) -> Reply<v1::AgentInfo> {
        pending("Agents/Resume")
    }
    async fn fork(&self, _: Request<v1::ForkAgentRequest>) -> Reply<v1::AgentInfo> {
        pending("Agents/Fork")
    }
    async fn spawn(&self, _: Request<v1::SpawnAgentRequest>) -> Reply<v1::AgentInfo> {
        pending("Agents/Spawn")
    }
    async fn list(&self, _: Request<v1::ListAgentsRequest>) -> Reply<v1::ListAgentsResponse> {
        pending("Agents/List")
    }
    async fn get(&self, _: Request<v1::GetAgentRequest>) -> Reply<v1::AgentInfo> {
        pending("Agents/Get")
    }
    async fn prompt(&self, _: Request<v1::PromptRequest>) -> Reply<Self::PromptStream> {
        pending("Agents/Prompt")
    }
    async fn cancel(&self, _: Request<v1::CancelAgentRequest>) -> Reply<v1::CancelAgentResponse> {
        pending("Agents/Cancel")
    }
    async fn close(&self, _: Request<v1::CloseAgentRequest>) -> Reply<v1::CloseAgentResponse> {
        pending("Agents/Close")
    }
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
impl persistence_server::Persistence for Pending {
    type ReadEventsStream = BoxStream<v1::SessionEvent>;
    async fn describe(
        &self,
        _: Request<v1::DescribeBackendRequest>,
    ) -> Reply<v1::BackendDescription> {
        pending("Persistence/Describe")
    }
    async fn r#use(&self, _: Request<v1::UseBackendRequest>) -> Reply<v1::BackendDescription> {
        pending("Persistence/Use")
    }
    async fn locate(&self, _: Request<v1::LocateRequest>) -> Reply<v1::LocateResponse> {
        pending("Persistence/Locate")
    }
    async fn list_sessions(
        &self,
        _: Request<v1::ListSessionsRequest>,
    ) -> Reply<v1::ListSessionsResponse> {
        pending("Persistence/ListSessions")
    }
    async fn read_events(
        &self,
        _: Request<v1::ReadEventsRequest>,
    ) -> Reply<Self::ReadEventsStream> {
        pending("Persistence/ReadEvents")
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
