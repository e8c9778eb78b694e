//! The gRPC edge: one file per service, translating between `dsh_proto` types and the core. Nothing
//! here decides behaviour; domain errors are mapped to status codes explicitly.

mod agents;
mod callers;
mod convert;
mod daemon;
mod hooks;
mod models;
mod persistence;
mod session_list;
mod shell;
mod shell_env;
mod skills;
mod transfer;

use std::sync::Arc;

use dsh_proto::v1;
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic_health::server::HealthReporter;

pub use daemon::DaemonService;

use crate::connection::Occupancy;
use crate::daemon::Daemon;

/// Every dsh service, each holding only the parts of the daemon it serves.
pub struct Services {
    daemon: DaemonService,
    agents: agents::AgentsService,
    shell: shell::ShellService,
    shell_env: shell_env::ShellEnvService,
    persistence: persistence::PersistenceService,
    skills: skills::SkillsService,
    models: models::ModelsService,
    hooks: hooks::HooksService,
}

impl Services {
    /// The services of `daemon`, whose client connections `connections` counts.
    pub fn new(daemon: &Arc<Daemon>, connections: Occupancy) -> Self {
        let callers = callers::Callers::new(
            daemon.agents.clone(),
            daemon.config.default_cwd.clone(),
            daemon.shutdown_token(),
        );
        Self {
            daemon: DaemonService::new(daemon.clone(), connections),
            agents: agents::AgentsService::new(daemon.agents.clone(), daemon.config.sandbox),
            shell: shell::ShellService::new(daemon.shell.clone(), callers.clone()),
            shell_env: shell_env::ShellEnvService::new(daemon.shell_env.clone(), callers),
            persistence: persistence::PersistenceService::new(
                daemon.backends.clone(),
                daemon.agents.clone(),
            ),
            skills: skills::SkillsService::new(daemon.skills.clone()),
            models: models::ModelsService::new(daemon.agents.clone()),
            hooks: hooks::HooksService::new(daemon.hooks.clone()),
        }
    }

    /// Reports every service as SERVING to `grpc.health.v1`.
    pub async fn mark_serving(&self, health: &HealthReporter) {
        health
            .set_serving::<v1::daemon_server::DaemonServer<DaemonService>>()
            .await;
        for name in SERVICE_NAMES {
            health
                .set_service_status(*name, tonic_health::ServingStatus::Serving)
                .await;
        }
    }

    /// A router with the dsh services, health and reflection (v1 and v1alpha), on `server` (whose
    /// layers and settings the caller chose).
    pub fn router<L: Clone>(
        self,
        mut server: Server<L>,
        health: tonic_health::pb::health_server::HealthServer<
            impl tonic_health::pb::health_server::Health,
        >,
    ) -> std::io::Result<Router<L>> {
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(dsh_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1().map_err(std::io::Error::other)?;
        let reflection_v1alpha = reflection()
            .build_v1alpha()
            .map_err(std::io::Error::other)?;
        Ok(server
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(v1::daemon_server::DaemonServer::new(self.daemon))
            .add_service(v1::agents_server::AgentsServer::new(self.agents))
            .add_service(v1::shell_server::ShellServer::new(self.shell))
            .add_service(v1::shell_env_server::ShellEnvServer::new(self.shell_env))
            .add_service(v1::persistence_server::PersistenceServer::new(
                self.persistence,
            ))
            .add_service(v1::skills_server::SkillsServer::new(self.skills))
            .add_service(v1::models_server::ModelsServer::new(self.models))
            .add_service(v1::hooks_server::HooksServer::new(self.hooks)))
    }
}

/// Fully qualified names of the dsh services, as health and reflection report them.
pub const SERVICE_NAMES: &[&str] = &[
    "dsh.v1.Daemon",
    "dsh.v1.Agents",
    "dsh.v1.Shell",
    "dsh.v1.ShellEnv",
    "dsh.v1.Persistence",
    "dsh.v1.Skills",
    "dsh.v1.Hooks",
    "dsh.v1.Models",
];
