//! The plan a model keeps with its `update_plan` tool (Codex's tool of that name): the call's
//! arguments, logged with the call, which clients show as a checklist.

use serde::{Deserialize, Serialize};

/// The plan tool's name.
pub const UPDATE_PLAN: &str = "update_plan";

/// `update_plan`'s arguments: the whole plan, each time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Why the plan changed, when the model says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The steps, in order.
    pub plan: Vec<PlanStep>,
}

/// One step of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// What the step does.
    pub step: String,
    /// Where it stands.
    pub status: PlanStatus,
}

/// Where a [`PlanStep`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one step).
    InProgress,
    /// Done.
    Completed,
}

impl PlanStatus {
    /// The name the arguments (and ACP's plan entries) use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }
}
