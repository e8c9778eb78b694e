//! What every agent's loop needs from the daemon, shared by all agents.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::exec::Executor;
use crate::hooks::Hooks;
use crate::persistence::PersistenceHandle;
use crate::skills::Skills;
use crate::tools::ToolSet;

/// When the loop makes the session durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointPolicy {
    /// At the end of every step and every turn.
    #[default]
    Step,
    /// At the end of every turn only.
    Turn,
}

/// The base system prompt. It deliberately says nothing about `DSH_*` variables: the bash tool's
/// description teaches that convention, and nothing else should.
pub(crate) const BASE_SYSTEM_PROMPT: &str = "You are a coding agent hosted by dsh. You work in the \
session's working directory and act through the tools you are given: run commands with `bash`, \
read files with `read` and change them with `edit` (or `write` for new or rewritten files), and answer the user concisely when the task is done.";

/// Bounds on delegation, so a model that calls `spawn_agent` recursively cannot multiply without
/// end (Codex caps spawn depth and live threads the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// Deepest `delegationDepth` a spawned child may have; an agent at this depth is not offered
    /// `spawn_agent` at all.
    pub max_depth: u32,
    /// Live agents (top-level and children) the registry holds at most.
    pub max_live_agents: usize,
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
            max_live_agents: DEFAULT_MAX_LIVE_AGENTS,
        }
    }
}

/// Default for [`AgentLimits::max_depth`]: children and grandchildren, and one more level.
pub(super) const DEFAULT_MAX_DEPTH: u32 = 3;
/// Default for [`AgentLimits::max_live_agents`].
pub(super) const DEFAULT_MAX_LIVE_AGENTS: usize = 1024;

/// How approvals work when an agent does not choose (its policy) and how long a request waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalSettings {
    /// The policy of agents created without one (`approvals.policy`).
    pub policy: dsh_session::ApprovalPolicy,
    /// How long a request waits for an answer before it is denied (`approvals.timeout_ms`).
    pub timeout: Duration,
}

/// Default for [`ApprovalSettings::timeout`]: long enough to read a command and decide, short
/// enough that a turn nobody attends to does not hang for long.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for ApprovalSettings {
    fn default() -> Self {
        Self {
            policy: dsh_session::ApprovalPolicy::default(),
            timeout: DEFAULT_APPROVAL_TIMEOUT,
        }
    }
}

/// Default for [`AgentServices::watch_max_pending`]: entries one watcher may have waiting. A
/// turn of one agent takes a few entries however long it runs (consecutive events merge), so
/// this bounds interleavings (text between events, several agents), not events.
pub const DEFAULT_WATCH_MAX_PENDING: usize = 4096;

/// Services shared by every agent's loop.
#[derive(Debug)]
pub struct AgentServices {
    /// The swappable persistence backend.
    pub persistence: Arc<PersistenceHandle>,
    /// The executor, so a closed agent's background jobs can be killed.
    pub executor: Arc<Executor>,
    /// Claude Code and Codex hooks, run at the loop's interception points.
    pub hooks: Arc<Hooks>,
    /// Local skills, listed in the system prompt.
    pub skills: Arc<Skills>,
    /// When to checkpoint.
    pub checkpoint: CheckpointPolicy,
    /// Upper bound on steps in one turn, so a model that never stops calling tools cannot run
    /// forever.
    pub max_steps_per_turn: u32,
    /// Delegation bounds; [`Self::new`] sets the defaults.
    pub limits: AgentLimits,
    /// The tools every agent is offered (`spawn_agent` hidden beyond the depth limit). Given at
    /// construction: [`AgentRegistry::new`](super::AgentRegistry::new) hands the builder the
    /// registry as the tool's `ChildAgents`.
    pub tools: ToolSet,
    /// The default approval policy and the answer timeout; [`Self::new`] sets the defaults.
    pub approval: ApprovalSettings,
    /// Entries one watcher may have waiting before it is lagged (`watch.max_pending`).
    pub watch_max_pending: usize,
    /// Whether running commands' output is published as `tool/output` previews
    /// (`watch.tool_output`; [`Self::new`]: true). Off, a call's output reaches clients only in
    /// its `tool/result`.
    pub tool_output: bool,
    /// Which project instruction files an agent's first turn loads; [`Self::new`]: the
    /// defaults, without a home file.
    pub instructions: InstructionSettings,
    /// The configured MCP servers, started per agent (children: those configured for them);
    /// [`Self::new`]: none.
    pub mcp: Arc<crate::mcp::McpServers>,
    /// When agents compact their context on their own; [`Self::new`]: the defaults.
    pub compaction: CompactionSettings,
}

impl AgentServices {
    /// Services with the default [`AgentLimits`].
    pub fn new(
        persistence: Arc<PersistenceHandle>,
        executor: Arc<Executor>,
        hooks: Arc<Hooks>,
        skills: Arc<Skills>,
        checkpoint: CheckpointPolicy,
        max_steps_per_turn: u32,
        tools: ToolSet,
    ) -> Self {
        Self {
            persistence,
            executor,
            hooks,
            skills,
            checkpoint,
            max_steps_per_turn,
            limits: AgentLimits::default(),
            tools,
            approval: ApprovalSettings::default(),
            watch_max_pending: DEFAULT_WATCH_MAX_PENDING,
            tool_output: true,
            instructions: InstructionSettings::default(),
            mcp: Arc::new(crate::mcp::McpServers::none()),
            compaction: CompactionSettings::default(),
        }
    }

    /// The system prompt for the next model request: the base prompt and the skills found at the
    /// last discovery (names and descriptions only).
    pub fn system_prompt(&self) -> String {
        format!("{BASE_SYSTEM_PROMPT}{}", self.skills.prompt_section())
    }
}

/// Default budget for all instructions together: Codex's `project_doc_max_bytes`.
const DEFAULT_INSTRUCTIONS_MAX_BYTES: u64 = 32 * 1024;

/// Which instruction files are looked for, and how much of them is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionSettings {
    /// The harness home, whose file comes first; `None`: no home file.
    pub home: Option<PathBuf>,
    /// The names looked for in each directory, in preference order (a directory gives its first
    /// one that exists); empty: no instructions are loaded.
    pub files: Vec<String>,
    /// Bytes taken from all files together; the file that passes it is cut, the rest left out.
    pub max_bytes: u64,
}

impl Default for InstructionSettings {
    fn default() -> Self {
        Self {
            home: None,
            files: vec!["AGENTS.md".to_owned(), "CLAUDE.md".to_owned()],
            max_bytes: DEFAULT_INSTRUCTIONS_MAX_BYTES,
        }
    }
}

/// When an agent compacts on its own (`[compaction]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Whether a request that would pass the threshold, or that the provider refuses as too
    /// long, compacts first (`compaction.auto`). Off, such a turn ends in an error naming this.
    pub auto: bool,
    /// The share of the model's context window (percent) a request may fill before it is
    /// compacted (`compaction.threshold_percent`).
    pub threshold_percent: u8,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self {
            auto: true,
            threshold_percent: 80,
        }
    }
}
