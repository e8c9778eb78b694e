//! `dsh.v1.Skills`: local skills under the harness home.

use std::sync::Arc;

use dsh_proto::v1::{self, skills_server};
use tonic::{Request, Response, Status};

use dsh_core::{Discovery, Skills};

/// The `Skills` service.
pub struct SkillsService {
    skills: Arc<Skills>,
}

impl SkillsService {
    /// A service over `skills`.
    pub fn new(skills: Arc<Skills>) -> Self {
        Self { skills }
    }
}

fn wire(found: Discovery) -> v1::ListSkillsResponse {
    v1::ListSkillsResponse {
        skills: found
            .skills
            .into_iter()
            .map(|s| v1::Skill {
                name: s.name,
                description: s.description,
                path: s.path.to_string_lossy().into_owned(),
            })
            .collect(),
        problems: found.problems,
    }
}

#[tonic::async_trait]
impl skills_server::Skills for SkillsService {
    async fn list(
        &self,
        _request: Request<v1::ListSkillsRequest>,
    ) -> Result<Response<v1::ListSkillsResponse>, Status> {
        Ok(Response::new(wire(self.skills.current())))
    }

    async fn reload(
        &self,
        _request: Request<v1::ReloadSkillsRequest>,
    ) -> Result<Response<v1::ListSkillsResponse>, Status> {
        let skills = self.skills.clone();
        let found = tokio::task::spawn_blocking(move || skills.reload())
            .await
            .map_err(|e| Status::internal(format!("reloading skills failed: {e}")))?;
        Ok(Response::new(wire(found)))
    }
}
