//! `dsh.v1.Agents`: live agents and their turns.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use dsh_proto::v1::{self, agents_server};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::async_stream;
use super::convert::{agent_info, agent_status, model_choice, session_id, turn_event};
use crate::agent::TurnUpdate;
use crate::daemon::Daemon;
use crate::session::EventData;

/// The `Agents` service.
pub struct AgentsService {
    daemon: Arc<Daemon>,
}

impl AgentsService {
    /// Binds the service to `daemon`.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
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
        let agent = self
            .daemon
            .agents
            .create(&PathBuf::from(req.cwd), &model_choice(req.model))
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn resume(&self, request: Request<v1::ResumeAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let agent = self
            .daemon
            .agents
            .resume(&id, &model_choice(req.model))
            .await
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn fork(&self, request: Request<v1::ForkAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let agent = self
            .daemon
            .agents
            .fork(&id, &model_choice(req.model))
            .await
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn spawn(&self, request: Request<v1::SpawnAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let parent = session_id("parent_agent_id", req.parent_agent_id)?;
        let agent = self
            .daemon
            .agents
            .spawn(&parent, &model_choice(req.model))
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn list(
        &self,
        _request: Request<v1::ListAgentsRequest>,
    ) -> Reply<v1::ListAgentsResponse> {
        let agents = self
            .daemon
            .agents
            .list()
            .iter()
            .map(|a| agent_info(a))
            .collect();
        Ok(Response::new(v1::ListAgentsResponse { agents }))
    }

    async fn get(&self, request: Request<v1::GetAgentRequest>) -> Reply<v1::AgentInfo> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let agent = self.daemon.agents.get(&id).map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent)))
    }

    async fn prompt(&self, request: Request<v1::PromptRequest>) -> Reply<Self::PromptStream> {
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument("text: the prompt is empty"));
        }
        let handle = self
            .daemon
            .agents
            .prompt(&id, req.text, None)
            .map_err(agent_status)?;
        let mut updates = handle.updates;
        let mut outcome = Some(handle.outcome);
        let stream = async_stream(move |tx| async move {
            let mut last_text = String::new();
            while let Some(update) = updates.recv().await {
                let message = match update {
                    TurnUpdate::TextDelta { turn, step, text } => v1::TurnEvent {
                        seq: 0,
                        event: Some(v1::turn_event::Event::TextDelta(v1::TextDelta {
                            turn,
                            step,
                            text,
                        })),
                    },
                    TurnUpdate::Logged(event) => {
                        if let EventData::AssistantMessage { message, .. } = &event.data
                            && !message.text.is_empty()
                        {
                            last_text.clone_from(&message.text);
                        }
                        let wire = match &event.data {
                            EventData::TurnEnd { turn, reason } => {
                                // Report the end only once the turn task is done: its final
                                // checkpoint made, the agent idle again. A client that prompts
                                // as soon as it reads turn_ended must not be told "busy".
                                if let Some(finished) = outcome.take() {
                                    let _ = finished.await;
                                }
                                Some(v1::turn_event::Event::TurnEnded(v1::TurnEnded {
                                    turn: *turn,
                                    reason: Some(v1::TurnEndReason {
                                        kind: reason.kind().to_owned(),
                                        message: reason.message(),
                                    }),
                                    text: last_text.clone(),
                                }))
                            }
                            _ => turn_event(&event),
                        };
                        match wire {
                            Some(wire) => v1::TurnEvent {
                                seq: event.seq,
                                event: Some(wire),
                            },
                            None => continue,
                        }
                    }
                };
                if tx.send(Ok(message)).await.is_err() {
                    // The client went away; the turn goes on without it.
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelAgentRequest>,
    ) -> Reply<v1::CancelAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let cancelled = self.daemon.agents.cancel(&id).map_err(agent_status)?;
        Ok(Response::new(v1::CancelAgentResponse { cancelled }))
    }

    async fn close(
        &self,
        request: Request<v1::CloseAgentRequest>,
    ) -> Reply<v1::CloseAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        self.daemon.agents.close(&id).await.map_err(agent_status)?;
        Ok(Response::new(v1::CloseAgentResponse {}))
    }
}
