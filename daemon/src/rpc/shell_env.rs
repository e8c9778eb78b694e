//! `dsh.v1.ShellEnv`: the managed-variable registry — its declarations, a diagnostic snapshot, and
//! external contributors on a bidirectional stream.

use std::pin::Pin;
use tracing::Instrument as _;

use dsh_proto::v1::{self, shell_env_server};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::callers::Callers;
use dsh_core::{
    Contributor, RegisterError, RemoteResolver, ResolveQuery, Resolver, ShellEnvRegistry,
};

/// The `ShellEnv` service.
pub struct ShellEnvService {
    /// The managed-variable registry.
    shell_env: ShellEnvRegistry,
    /// Turns a `Collect` request into the execution it stands for.
    callers: Callers,
}

impl ShellEnvService {
    /// A service over `shell_env`, collecting for `callers`.
    pub fn new(shell_env: ShellEnvRegistry, callers: Callers) -> Self {
        Self { shell_env, callers }
    }
}

fn register_status(error: RegisterError) -> Status {
    match error {
        e @ (RegisterError::DuplicateName { .. } | RegisterError::KeyOwned { .. }) => {
            Status::already_exists(e.to_string())
        }
        e => Status::invalid_argument(e.to_string()),
    }
}

fn query(q: ResolveQuery) -> v1::ContributeResponse {
    v1::ContributeResponse {
        message: Some(v1::contribute_response::Message::Resolve(
            v1::ResolveRequest {
                request_id: q.id,
                facts: Some(v1::ExecutionFacts {
                    session_id: q.facts.agent_id.clone().unwrap_or_default(),
                    agent_id: q.facts.agent_id.unwrap_or_default(),
                    cwd: q.facts.cwd,
                    tool_call_id: q.facts.tool_call_id,
                    tool_name: q.facts.tool_name,
                    turn: q.facts.turn.unwrap_or(0),
                }),
            },
        )),
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl shell_env_server::ShellEnv for ShellEnvService {
    type ContributeStream =
        Pin<Box<dyn Stream<Item = Result<v1::ContributeResponse, Status>> + Send>>;

    async fn list(
        &self,
        _request: Request<v1::ListVariablesRequest>,
    ) -> Reply<v1::ListVariablesResponse> {
        let variables = self
            .shell_env
            .list()
            .into_iter()
            .map(|v| v1::ManagedVariable {
                key: v.key.to_string(),
                contributor: v.contributor,
                description: v.description,
            })
            .collect();
        Ok(Response::new(v1::ListVariablesResponse { variables }))
    }

    async fn collect(&self, request: Request<v1::CollectRequest>) -> Reply<v1::CollectResponse> {
        let exec = self
            .callers
            .execution(request.into_inner().agent_id, String::new(), "bash")?;
        let env = self
            .shell_env
            .collect(&exec)
            .await
            .map_err(|e| Status::failed_precondition(format!("managed environment: {e}")))?;
        Ok(Response::new(v1::CollectResponse {
            env: env.into_inner().into_iter().collect(),
        }))
    }

    async fn contribute(
        &self,
        request: Request<Streaming<v1::ContributeRequest>>,
    ) -> Reply<Self::ContributeStream> {
        let mut inbound = request.into_inner();
        let declare = match inbound.next().await {
            Some(Ok(v1::ContributeRequest {
                message: Some(v1::contribute_request::Message::Declare(declare)),
            })) => declare,
            Some(Ok(_)) => {
                return Err(Status::invalid_argument(
                    "the first message must be `declare`",
                ));
            }
            Some(Err(status)) => return Err(status),
            None => {
                return Err(Status::invalid_argument(
                    "the stream ended before `declare`",
                ));
            }
        };
        let (remote, mut queries) = RemoteResolver::new();
        let mut contributor =
            Contributor::new(declare.name.clone(), Resolver::asynchronous(remote.clone()));
        for variable in declare.variables {
            contributor = contributor.variable(variable.key, variable.description);
        }
        let registration = self
            .shell_env
            .register(contributor)
            .map_err(register_status)?;
        tracing::info!(contributor = %declare.name, "external contributor registered");

        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let _ = tx
            .send(Ok(v1::ContributeResponse {
                message: Some(v1::contribute_response::Message::Registered(
                    v1::Registered {
                        name: declare.name.clone(),
                    },
                )),
            }))
            .await;
        let shutdown = self.callers.shutdown().clone();
        tokio::spawn(async move {
            // The registration lives exactly as long as this loop: the client's stream ending,
            // failing, or the daemon shutting down all end it.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    q = queries.recv() => match q {
                        Some(q) => if tx.send(Ok(query(q))).await.is_err() { break },
                        None => break,
                    },
                    message = inbound.next() => match message {
                        Some(Ok(v1::ContributeRequest { message: Some(v1::contribute_request::Message::Answer(a)) })) => {
                            let answer = if a.error.is_empty() { Ok(a.values_json) } else { Err(a.error) };
                            remote.answer(a.request_id, answer);
                        }
                        Some(Ok(_)) => {
                            let _ = tx.send(Err(Status::invalid_argument("only `answer` messages may follow `declare`"))).await;
                            break;
                        }
                        Some(Err(_)) | None => break,
                    },
                }
            }
            drop(registration);
            remote.close();
            tracing::info!(contributor = %declare.name, "external contributor gone");
        }.in_current_span());
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
