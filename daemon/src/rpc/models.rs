//! `dsh.v1.Models`: what agents can be given to run.

use std::sync::Arc;

use dsh_core::{AgentRegistry, ModelList};
use dsh_proto::v1::{self, models_server};
use tonic::{Request, Response, Status};

/// The `Models` service.
pub struct ModelsService {
    agents: Arc<AgentRegistry>,
}

impl ModelsService {
    /// A service listing the models of `agents`' providers.
    pub fn new(agents: Arc<AgentRegistry>) -> Self {
        Self { agents }
    }
}

fn wire(list: ModelList) -> v1::ListModelsResponse {
    v1::ListModelsResponse {
        models: list
            .models
            .into_iter()
            .map(|model| v1::Model {
                provider: dsh_core::OPENAI_PROVIDER.to_owned(),
                is_default: model == list.default,
                model,
            })
            .collect(),
        source: list.source.as_str().to_owned(),
        problem: list.problem.unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl models_server::Models for ModelsService {
    async fn list(
        &self,
        _request: Request<v1::ListModelsRequest>,
    ) -> Result<Response<v1::ListModelsResponse>, Status> {
        Ok(Response::new(wire(self.agents.models().await)))
    }
}
