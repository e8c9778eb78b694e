//! Services whose methods later work implements. Each answers UNIMPLEMENTED naming the method, so a
//! client can tell "this daemon does not do that yet" from any other failure.

use dsh_proto::v1::{self, skills_server};
use tonic::{Request, Response, Status};

/// Placeholder implementation of every not-yet-built service.
pub struct Pending;

type Reply<T> = Result<Response<T>, Status>;

fn pending<T>(method: &str) -> Reply<T> {
    Err(Status::unimplemented(format!(
        "dsh.v1.{method} is not implemented by this dshd version"
    )))
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
