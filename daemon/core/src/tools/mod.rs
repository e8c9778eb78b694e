//! Model-facing tools: `bash`, the file tools, the job tools, `spawn_agent` and `update_plan`,
//! and the [`ToolSet`] an agent is given. What a call is and what a tool returns live in [`crate::call`].

pub(crate) mod bash;
pub(crate) mod files;
pub(crate) mod jobs;
pub(crate) mod plan;
pub(crate) mod spawn_agent;
pub(crate) use spawn_agent::{ChildAgents, SpawnAgentTool};

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use serde_json::Value;

use crate::call::{Preview, Tool, ToolExecution, ToolOutput, ToolSchema};
use crate::shell::Shell;
use bash::BashTool;
use jobs::JobTool;

/// The tools an agent may call, by name.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tools dsh offers every agent: `bash`, the file tools `read`, `write` and `edit`,
    /// `job_output`, `job_kill`, `spawn_agent` and `update_plan`.
    pub fn standard(shell: &Shell, children: Weak<dyn ChildAgents>) -> Self {
        let executor = shell.executor();
        let files = files::FileAccess::new(executor.clone());
        Self::new()
            .with(Arc::new(BashTool::new(shell.clone())))
            .with(Arc::new(files::ReadTool::new(files.clone())))
            .with(Arc::new(files::Changing(files::WriteTool::new(
                files.clone(),
            ))))
            .with(Arc::new(files::Changing(files::EditTool::new(files))))
            .with(Arc::new(JobTool::output(executor.clone())))
            .with(Arc::new(JobTool::kill(executor.clone())))
            .with(Arc::new(SpawnAgentTool::new(children)))
            .with(Arc::new(plan::PlanTool))
    }

    /// Adds `tool` (replacing one of the same name).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.schema().name, tool);
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool's schema, sorted by name.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools.values().map(|t| t.schema()).collect()
    }

    /// Forgets what the tools keep for agent `owner` (call when it closes).
    pub fn release(&self, owner: &dsh_session::SessionId) {
        for tool in self.tools.values() {
            tool.release(owner);
        }
    }

    /// What a call would change, for a person approving it ([`Tool::preview`]).
    pub(crate) async fn preview(&self, exec: &ToolExecution, arguments: &Value) -> Option<Preview> {
        match self.tools.get(&exec.tool_name) {
            Some(tool) => tool.preview(exec, arguments).await,
            None => None,
        }
    }

    /// Runs a call by name (one whose preview a person `approved` makes only that change); an
    /// unknown tool is an error result naming the known ones.
    pub async fn dispatch(
        &self,
        exec: &ToolExecution,
        arguments: &Value,
        approved: Option<&Preview>,
    ) -> ToolOutput {
        match self.tools.get(&exec.tool_name) {
            Some(tool) => match approved {
                Some(change) => tool.call_approved(exec, arguments, change).await,
                None => tool.call(exec, arguments).await,
            },
            None => ToolOutput::refused(format!(
                "Error: unknown tool {:?}; available tools: {}",
                exec.tool_name,
                if self.tools.is_empty() {
                    "none".to_owned()
                } else {
                    self.tools.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )),
        }
    }
}
