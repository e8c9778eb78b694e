//! `dsh.v1.Agents`: live agents and their turns.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dsh_proto::v1::{self, agents_server};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert::{
    agent_info, agent_status, model_choice, sandbox_policy, session_id, turn_event,
};
use dsh_core::agent::AgentRegistry;
use dsh_core::agent::{TurnFeed, TurnUpdate};
use dsh_core::sandbox::SandboxPolicy;
use dsh_core::session::EventData;

/// The `Agents` service.
pub struct AgentsService {
    /// The live agents.
    agents: Arc<AgentRegistry>,
    /// The sandbox policy of an agent whose request names none (`[sandbox]` in the config).
    default_sandbox: SandboxPolicy,
}

impl AgentsService {
    /// A service over `agents`, confining new agents by `default_sandbox` unless told otherwise.
    pub fn new(agents: Arc<AgentRegistry>, default_sandbox: SandboxPolicy) -> Self {
        Self {
            agents,
            default_sandbox,
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl agents_server::Agents for AgentsService {
    type PromptStream = Pin<Box<dyn Stream<Item = Result<v1::TurnEvent, Status>> + Send>>;

    async fn create(&self, request: Request<v1::CreateAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        if req.cwd.is_empty() {
            return Err(Status::invalid_argument(
                "cwd: required (an absolute directory)",
            ));
        }
        let sandbox = sandbox_policy(req.sandbox, self.default_sandbox)?;
        let agent = self
            .agents
            .create(&PathBuf::from(req.cwd), &model_choice(req.model), sandbox)
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn resume(&self, request: Request<v1::ResumeAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let sandbox = sandbox_policy(req.sandbox, self.default_sandbox)?;
        let agent = self
            .agents
            .resume(&id, &model_choice(req.model), sandbox)
            .await
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn fork(&self, request: Request<v1::ForkAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let sandbox = sandbox_policy(req.sandbox, self.default_sandbox)?;
        let agent = self
            .agents
            .fork(&id, &model_choice(req.model), sandbox)
            .await
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn spawn(&self, request: Request<v1::SpawnAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let parent = session_id("parent_agent_id", req.parent_agent_id)?;
        // Empty fields are the parent's; the registry refuses a looser result.
        let sandbox = match req.sandbox {
            None => None,
            Some(spec) => {
                let base = self.agents.get(&parent).map_err(agent_status)?;
                Some(sandbox_policy(Some(spec), base.context().sandbox)?)
            }
        };
        let agent = self
            .agents
            .spawn(&parent, &model_choice(req.model), sandbox)
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn list(
        &self,
        _request: Request<v1::ListAgentsRequest>,
    ) -> Reply<v1::ListAgentsResponse> {
        let agents = self.agents.list().iter().map(|a| agent_info(a)).collect();
        Ok(Response::new(v1::ListAgentsResponse { agents }))
    }

    async fn get(&self, request: Request<v1::GetAgentRequest>) -> Reply<v1::AgentInfo> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let agent = self.agents.get(&id).map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn prompt(&self, request: Request<v1::PromptRequest>) -> Reply<Self::PromptStream> {
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument("text: the prompt is empty"));
        }
        let handle = self
            .agents
            .prompt(&id, req.text, None)
            .map_err(agent_status)?;
        // The turn's outcome is not needed here: the feed hands out `turn/end` only once the
        // turn task is done. Dropping the handle lets the finished task free its result at once.
        drop(handle.outcome);
        Ok(Response::new(Box::pin(PromptStream::new(handle.updates))))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelAgentRequest>,
    ) -> Reply<v1::CancelAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let cancelled = self.agents.cancel(&id).map_err(agent_status)?;
        Ok(Response::new(v1::CancelAgentResponse { cancelled }))
    }

    async fn close(
        &self,
        request: Request<v1::CloseAgentRequest>,
    ) -> Reply<v1::CloseAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        self.agents.close(&id).await.map_err(agent_status)?;
        Ok(Response::new(v1::CloseAgentResponse {}))
    }
}

/// The Prompt stream. It takes the next update from the turn's feed only when tonic asks for the
/// next message, which hyper does only when the connection can send more: a client that stops
/// reading leaves the backlog in the feed, where it is bounded (no channel of ready messages in
/// between that would grow with the stream).
struct PromptStream {
    next: Option<NextMessage>,
}

/// [`next_message`], boxed so the stream can hold it between polls.
type NextMessage = Pin<Box<dyn Future<Output = Option<(v1::TurnEvent, TurnFeed)>> + Send>>;

impl PromptStream {
    fn new(feed: TurnFeed) -> Self {
        Self {
            next: Some(Box::pin(next_message(feed))),
        }
    }
}

impl Stream for PromptStream {
    type Item = Result<v1::TurnEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(next) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        match next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.next = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some((message, feed))) => {
                self.next = Some(Box::pin(next_message(feed)));
                Poll::Ready(Some(Ok(message)))
            }
        }
    }
}

/// The next wire message of the turn, and the feed to take the one after from; `None` at the end.
async fn next_message(mut feed: TurnFeed) -> Option<(v1::TurnEvent, TurnFeed)> {
    loop {
        let message = match feed.recv().await? {
            TurnUpdate::TextDelta {
                turn,
                step,
                offset,
                text,
            } => v1::TurnEvent {
                seq: 0,
                event: Some(v1::turn_event::Event::TextDelta(v1::TextDelta {
                    turn,
                    step,
                    text,
                    offset,
                })),
            },
            TurnUpdate::Logged(event) => {
                let seq = event.seq;
                let wire = match event.data {
                    EventData::TurnEnd { turn, reason } => {
                        Some(v1::turn_event::Event::TurnEnded(v1::TurnEnded {
                            turn,
                            reason: Some(v1::TurnEndReason {
                                kind: reason.kind().to_owned(),
                                message: reason.message(),
                            }),
                            text: feed.answer(turn),
                        }))
                    }
                    data => turn_event(data),
                };
                match wire {
                    Some(wire) => v1::TurnEvent {
                        seq,
                        event: Some(wire),
                    },
                    None => continue,
                }
            }
        };
        return Some((message, feed));
    }
}
