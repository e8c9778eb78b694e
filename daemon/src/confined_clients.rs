//! What dshd serves a client that runs inside a sandboxed command: reading only.
//!
//! Landlock cannot stop a confined command from connecting to the socket (pathname unix sockets
//! are out of its reach before ABI 9), and the socket is the user's, so anything the user may ask
//! dshd for, a confined command could ask too: `Shell.Run` with `--sandbox off`, an agent without
//! a sandbox, an answer to its own approval request, a contributor that puts values into every
//! other agent's environment, shutting the daemon down. Each would undo the sandbox. So every
//! connection is placed when it is accepted (`dsh_core::provenance`), and a client inside a
//! sandbox, or one that cannot be placed, gets the methods that only read: what a confined command
//! may already read on disk (sessions, events), the daemon's status, the agents, jobs and
//! variables. Everything else is PERMISSION_DENIED, naming the method and why.
//!
//! Clients outside every sandbox (the user's terminal, an editor, hooks, an unconfined agent's
//! commands) are served as before.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::connection::ConnectionInfo;

/// The methods a confined client may call: each only reads.
const READ_ONLY: &[&str] = &[
    "/dsh.v1.Daemon/Status",
    "/dsh.v1.Persistence/Describe",
    "/dsh.v1.Persistence/Locate",
    "/dsh.v1.Persistence/ListSessions",
    "/dsh.v1.Persistence/ReadEvents",
    "/dsh.v1.Agents/List",
    "/dsh.v1.Agents/Get",
    "/dsh.v1.Agents/Watch",
    "/dsh.v1.Shell/ListJobs",
    "/dsh.v1.Shell/JobOutput",
    "/dsh.v1.ShellEnv/List",
    "/dsh.v1.ShellEnv/Collect",
    "/dsh.v1.Skills/List",
    "/dsh.v1.Hooks/List",
];

/// Whole services that only read.
const READ_ONLY_SERVICES: &[&str] = &["/grpc.health.v1.Health/", "/grpc.reflection."];

/// Whether a confined client may call `path` (`/package.Service/Method`).
fn allowed(path: &str) -> bool {
    READ_ONLY.contains(&path) || READ_ONLY_SERVICES.iter().any(|s| path.starts_with(s))
}

/// `Service.Method` of a dsh path, for messages; other paths as they are.
fn method_name(path: &str) -> String {
    path.strip_prefix("/dsh.v1.")
        .map_or_else(|| path.to_owned(), |m| m.replacen('/', ".", 1))
}

/// The refusal a confined client gets for `path`.
fn refusal(path: &str, info: &ConnectionInfo) -> tonic::Status {
    let method = method_name(path);
    tonic::Status::permission_denied(format!(
        "{method} is refused: this client {}, and a client inside a sandbox may only read from dshd \
         (status, sessions and their events, agents, jobs, variables); run it from outside the sandbox",
        info.peer.provenance
    ))
}

/// A tower service that refuses confined clients everything but [`READ_ONLY`] (layered over
/// every gRPC service).
#[derive(Debug, Clone)]
pub struct ConfinedClients<S> {
    /// The service it wraps.
    pub(crate) inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for ConfinedClients<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path();
        // A connection that did not come through the accept loop (none in dshd) has no peer; the
        // accept loop places every real one.
        if let Some(info) = request.extensions().get::<ConnectionInfo>() {
            if let Some(reason) = &info.refused {
                let status = tonic::Status::resource_exhausted(reason.to_string());
                return Box::pin(async move { Ok(status.into_http()) });
            }
            if info.peer.provenance.is_confined() && !allowed(path) {
                let status = refusal(path, info);
                return Box::pin(async move { Ok(status.into_http()) });
            }
        }
        Box::pin(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_methods_are_allowed_and_acting_ones_are_not() {
        for path in [
            "/dsh.v1.Daemon/Status",
            "/dsh.v1.Persistence/Locate",
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            assert!(allowed(path), "{path}");
        }
        for path in [
            "/dsh.v1.Shell/Run",
            "/dsh.v1.Shell/RunStream",
            "/dsh.v1.Shell/JobKill",
            "/dsh.v1.Agents/Create",
            "/dsh.v1.Agents/Prompt",
            "/dsh.v1.Agents/Approve",
            "/dsh.v1.Agents/Configure",
            "/dsh.v1.Agents/RemoveRules",
            "/dsh.v1.ShellEnv/Contribute",
            "/dsh.v1.Persistence/Use",
            "/dsh.v1.Daemon/Shutdown",
            "/dsh.v1.Daemon/Status/",
            "/dsh.v1.Daemon/StatusX",
            "/unknown.Service/Method",
        ] {
            assert!(!allowed(path), "{path}");
        }
    }

    /// Every method of the protocol is either in [`READ_ONLY`] or here, so a new method cannot
    /// reach confined clients without someone deciding that it only reads.
    const ACTING: &[&str] = &[
        "/dsh.v1.Daemon/Shutdown",
        "/dsh.v1.Persistence/Use",
        "/dsh.v1.Agents/Create",
        "/dsh.v1.Agents/Resume",
        "/dsh.v1.Agents/Fork",
        "/dsh.v1.Agents/Spawn",
        "/dsh.v1.Agents/Prompt",
        "/dsh.v1.Agents/Approve",
        "/dsh.v1.Agents/Cancel",
        "/dsh.v1.Agents/Close",
        "/dsh.v1.Shell/Run",
        "/dsh.v1.Shell/RunStream",
        "/dsh.v1.Shell/JobKill",
        "/dsh.v1.ShellEnv/Contribute",
        "/dsh.v1.Skills/Reload",
        "/dsh.v1.Hooks/Reload",
        "/dsh.v1.Persistence/Repair",
        "/dsh.v1.Persistence/SetTitle",
        "/dsh.v1.Persistence/SetArchived",
        "/dsh.v1.Persistence/Delete",
        "/dsh.v1.Agents/Steer",
        // Runs a turn: a model request on the user's key.
        "/dsh.v1.Agents/Compact",
        // Could loosen the agent's own sandbox or approval policy.
        "/dsh.v1.Agents/Configure",
        // Would make its own commands ask again, or not.
        "/dsh.v1.Agents/RemoveRules",
        // Makes dshd use the model API key on the caller's behalf.
        "/dsh.v1.Models/List",
        // Checkpoints a live session, and could carry a session the sandbox hides to a file.
        "/dsh.v1.Persistence/Export",
        // Reads a file as the user, past the caller's sandbox, and writes a session.
        "/dsh.v1.Persistence/Import",
    ];

    #[test]
    fn every_method_of_the_protocol_is_placed() {
        use prost::Message as _;
        let set = prost_types::FileDescriptorSet::decode(dsh_proto::FILE_DESCRIPTOR_SET).unwrap();
        let mut seen = 0;
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    let read_only = READ_ONLY.contains(&path.as_str());
                    let acting = ACTING.contains(&path.as_str());
                    assert!(
                        read_only != acting,
                        "{path}: place it in READ_ONLY or ACTING"
                    );
                    assert_eq!(allowed(&path), read_only, "{path}");
                    seen += 1;
                }
            }
        }
        assert_eq!(
            seen,
            READ_ONLY.len() + ACTING.len(),
            "a listed method is not in the protocol"
        );
    }

    /// The layer itself: a confined client's acting call never reaches the service and comes back
    /// PERMISSION_DENIED; its reading calls and every call of an unconfined client go through.
    #[tokio::test]
    async fn confined_clients_reach_the_service_only_to_read() {
        use dsh_core::{CommandOrigin, Provenance, UnknownReason};
        use dsh_core::{Network, SandboxMode, SandboxPolicy};
        use tower::{Service, ServiceExt};
        let command = |sandbox| {
            Provenance::Command(CommandOrigin {
                sandbox,
                agent: None,
            })
        };
        let confined = command(SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            network: Network::On,
        });
        let cases = [
            (confined.clone(), "/dsh.v1.Shell/Run", false),
            (confined, "/dsh.v1.Daemon/Status", true),
            (
                Provenance::Unknown(UnknownReason::Orphan),
                "/dsh.v1.Agents/Create",
                false,
            ),
            (Provenance::Outside, "/dsh.v1.Shell/Run", true),
            (
                command(SandboxPolicy::UNCONFINED),
                "/dsh.v1.Shell/Run",
                true,
            ),
        ];
        for (peer, path, reaches) in cases {
            let mut service = ConfinedClients {
                inner: tower::service_fn(|_: http::Request<()>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        tonic::body::Body::empty(),
                    ))
                }),
            };
            let mut request = http::Request::builder().uri(path).body(()).unwrap();
            request
                .extensions_mut()
                .insert(ConnectionInfo::detached(crate::peer::Peer::at(
                    peer.clone(),
                )));
            let response = service.ready().await.unwrap().call(request).await.unwrap();
            let status = tonic::Status::from_header_map(response.headers());
            assert_eq!(status.is_none(), reaches, "{peer:?} {path}");
            if let Some(status) = status {
                assert_eq!(status.code(), tonic::Code::PermissionDenied);
                assert!(status.message().contains("is refused"), "{status:?}");
            }
        }
    }

    #[test]
    fn the_refusal_names_the_method() {
        assert_eq!(method_name("/dsh.v1.Shell/Run"), "Shell.Run");
    }
}
