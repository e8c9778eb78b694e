//! What may change on a live agent in place: the settings [`super::live::Agent::configure`]
//! takes.

use std::sync::Arc;

use super::provider::ModelProvider;
use crate::sandbox::SandboxPolicy;
use dsh_session::ApprovalPolicy;

/// Settings to change on a live agent ([`Agent::configure`]); `None` keeps the current one.
#[derive(Debug, Default)]
pub(crate) struct Reconfigure {
    /// The model provider to run with.
    pub provider: Option<Arc<dyn ModelProvider>>,
    /// The approval policy.
    pub approval: Option<ApprovalPolicy>,
    /// The sandbox of its next bash calls.
    pub sandbox: Option<SandboxPolicy>,
}
