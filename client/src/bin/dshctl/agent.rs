//! `dshctl agent ...`: create, spawn, fork, resume, list, show, cancel and close agents.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use dsh_client::Client;
use dsh_client::ids::IdKind;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;
use crate::wire;

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Create an agent with a new session.
    New {
        /// Working directory of the session (default: the current directory).
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Create a child agent under a live parent (same working directory, depth + 1).
    Spawn {
        /// The parent agent (a unique id prefix will do).
        #[arg(long, value_name = "ID")]
        parent: String,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Fork a live or stored session: a new agent starting from its completed turns.
    Fork {
        /// The session to fork (a unique id prefix will do).
        session_id: String,
        /// Fork from the log up to and including this event: a `step/end` or `turn/end` seq
        /// (`dshctl session events` marks them); default: the last completed turn. Rolling back
        /// is forking at an earlier point: the original is never rewritten.
        #[arg(long = "at", value_name = "SEQ")]
        at_seq: Option<u64>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Resume a stored session as a live agent (same id, same transcript).
    Resume {
        /// The session to resume (a unique id prefix will do).
        session_id: String,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// List live agents.
    List,
    /// Show one live agent.
    Show {
        /// The agent (a unique id prefix will do).
        id: String,
    },
    /// Change a live agent's model, reasoning effort, approval policy or sandbox in place,
    /// between turns: it is not closed, its background jobs and "allow always" rules stay
    /// (logged as `session/settings`). Only the options given change.
    Set {
        /// The agent (a unique id prefix will do).
        id: String,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// List a live agent's "allow always" rules (numbered), or remove some or all of them: the
    /// same request then asks again. Rules belong to the session: they are kept when it is
    /// resumed, forked, or made live after a restart.
    Rules {
        /// The agent (a unique id prefix will do).
        id: String,
        /// Remove rule N (as listed, from 1); may be repeated.
        #[arg(long, value_name = "N")]
        remove: Vec<usize>,
        /// Remove every rule.
        #[arg(long, conflicts_with = "remove")]
        clear: bool,
    },
    /// Cancel the agent's running turn (it ends `aborted`; the agent is idle again).
    Cancel {
        /// The agent (a unique id prefix will do).
        id: String,
    },
    /// Close the agent (its session stays stored and can be resumed).
    Close {
        /// The agent (a unique id prefix will do).
        id: String,
    },
}

/// The script of `--demo`: what an editor's first prompt gets without any key or file.
const DEMO_SCRIPT: &str = include_str!("demo.json");

/// How the agent's model is chosen.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// Model provider: `scripted` (keyless) or `openai`. Default: the daemon's configured default;
    /// for fork and resume, the provider the session last ran with (a scripted session needs
    /// --script again: its script is not stored).
    #[arg(long = "model", value_name = "PROVIDER")]
    provider: Option<String>,
    /// Model name for providers that have one (e.g. deepseek-v4-pro; `dshctl models` lists them).
    #[arg(long, value_name = "NAME")]
    model_name: Option<String>,
    /// How hard a reasoning model thinks (`openai` provider): sent as the request's
    /// `reasoning_effort` (`max` is DeepSeek's); `default` sends none. Default: the provider's;
    /// for fork and resume, what the session last ran with.
    #[arg(long, value_name = "EFFORT", value_parser = ["default", "low", "medium", "high", "max"])]
    reasoning_effort: Option<String>,
    /// A script for the scripted model (JSON; see examples/). Implies --model scripted.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The keyless demo: the scripted model with a script built into dshctl (each turn runs one
    /// bash command and answers; eight turns). Needs no key and no file.
    #[arg(long, conflicts_with_all = ["script", "provider", "model_name", "reasoning_effort"])]
    demo: bool,
    /// When a person must approve tool calls: `never`, `on-request` (when a PreToolUse hook
    /// asks) or `always` (every bash call). Default: the daemon's `approvals.policy`; for spawn
    /// the parent's, for resume and fork what the session last ran with.
    #[arg(long, value_name = "POLICY", value_parser = ["never", "on-request", "always"])]
    approval: Option<String>,
}

/// How the agent's bash calls are confined (see docs/CONFIG.md, "Sandbox").
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Sandbox mode: off, workspace-write or read-only (default: the daemon's `sandbox.mode`;
    /// for spawn, the parent's: a child can only be made stricter).
    #[arg(long, value_name = "MODE", value_parser = ["off", "workspace-write", "read-only"])]
    sandbox: Option<String>,
    /// Network: on, or off to refuse TCP bind and connect (default as for --sandbox).
    #[arg(long, value_name = "ON_OFF", value_parser = ["on", "off"])]
    network: Option<String>,
}

impl SandboxArgs {
    /// The request's policy; `None` when neither flag was given (the default applies).
    pub fn spec(&self) -> Option<v1::SandboxPolicy> {
        (self.sandbox.is_some() || self.network.is_some()).then(|| v1::SandboxPolicy {
            mode: self.sandbox.clone().unwrap_or_default(),
            network: self.network.clone().unwrap_or_default(),
        })
    }
}

impl ModelArgs {
    /// The approval policy for the wire (unspecified when not given).
    pub(crate) fn approval(&self) -> i32 {
        let policy = match self.approval.as_deref() {
            Some("never") => v1::ApprovalPolicy::Never,
            Some("on-request") => v1::ApprovalPolicy::OnRequest,
            Some("always") => v1::ApprovalPolicy::Always,
            _ => v1::ApprovalPolicy::Unspecified,
        };
        policy as i32
    }

    /// The provider named on the command line: `--model`, or `scripted` for `--script`.
    pub(crate) fn provider_named(&self) -> Option<String> {
        match (&self.provider, &self.script) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(_)) => Some("scripted".to_owned()),
            (None, None) if self.demo => Some("scripted".to_owned()),
            (None, None) => None,
        }
    }

    /// The model spec for the wire (the script read now).
    pub(crate) fn spec(&self) -> anyhow::Result<v1::ModelSpec> {
        let script_json = match &self.script {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read script {}", path.display()))?,
            None if self.demo => DEMO_SCRIPT.to_owned(),
            None => String::new(),
        };
        Ok(v1::ModelSpec {
            provider: self.provider_named().unwrap_or_default(),
            model: self.model_name.clone().unwrap_or_default(),
            reasoning_effort: self.reasoning_effort.clone().unwrap_or_default(),
            script_json,
        })
    }
}

pub async fn run(client: &Client, out: Output, command: AgentCommand) -> anyhow::Result<()> {
    let mut agents = client.agents();
    let info = match command {
        AgentCommand::New {
            cwd,
            model,
            sandbox,
        } => {
            let cwd = match cwd {
                Some(dir) => std::path::absolute(&dir)
                    .with_context(|| format!("cannot make {} absolute", dir.display()))?,
                None => std::env::current_dir().context("cannot read the current directory")?,
            };
            agents
                .create(v1::CreateAgentRequest {
                    mcp_servers: Vec::new(),
                    cwd: cwd.to_string_lossy().into_owned(),
                    model: Some(model.spec()?),
                    sandbox: sandbox.spec(),
                    approval: model.approval(),
                    session_id: None,
                    environment: Some(dsh_client::client_environment()),
                })
                .await?
        }
        AgentCommand::Spawn {
            parent,
            model,
            sandbox,
        } => {
            let parent = client.resolve(IdKind::Agent, &parent).await?;
            agents
                .spawn(v1::SpawnAgentRequest {
                    parent_agent_id: parent,
                    model: Some(model.spec()?),
                    sandbox: sandbox.spec(),
                    approval: model.approval(),
                })
                .await?
        }
        AgentCommand::Fork {
            session_id,
            at_seq,
            model,
            sandbox,
        } => {
            let session_id = client.resolve(IdKind::Session, &session_id).await?;
            agents
                .fork(v1::ForkAgentRequest {
                    mcp_servers: Vec::new(),
                    session_id,
                    model: Some(model.spec()?),
                    sandbox: sandbox.spec(),
                    approval: model.approval(),
                    at_seq,
                    environment: Some(dsh_client::client_environment()),
                })
                .await?
        }
        AgentCommand::Resume {
            session_id,
            model,
            sandbox,
        } => {
            let session_id = client.resolve(IdKind::Session, &session_id).await?;
            agents
                .resume(v1::ResumeAgentRequest {
                    mcp_servers: Vec::new(),
                    session_id,
                    model: Some(model.spec()?),
                    sandbox: sandbox.spec(),
                    approval: model.approval(),
                    environment: Some(dsh_client::client_environment()),
                })
                .await?
        }
        AgentCommand::Show { id } => {
            let agent_id = client.resolve(IdKind::Agent, &id).await?;
            agents.get(v1::GetAgentRequest { agent_id }).await?
        }
        AgentCommand::Set { id, model, sandbox } => {
            let agent_id = client.resolve(IdKind::Agent, &id).await?;
            let spec = model.spec()?;
            let named = !spec.provider.is_empty()
                || !spec.model.is_empty()
                || !spec.reasoning_effort.is_empty();
            agents
                .configure(v1::ConfigureAgentRequest {
                    agent_id,
                    model: named.then_some(spec),
                    sandbox: sandbox.spec(),
                    approval: model.approval(),
                })
                .await?
        }
        AgentCommand::Rules { id, remove, clear } => {
            let agent_id = client.resolve(IdKind::Agent, &id).await?;
            return rules(client, out, agent_id, &remove, clear).await;
        }
        AgentCommand::List => {
            let list = agents
                .list(v1::ListAgentsRequest {})
                .await?
                .into_inner()
                .agents;
            let doc = json!({ "agents": list.iter().map(wire::agent).collect::<Vec<_>>() });
            return out.emit(&doc, |w| {
                if list.is_empty() {
                    return writeln!(w, "no live agents");
                }
                let mut table =
                    crate::output::table(&["AGENT", "STATE", "TURNS", "PROVIDER", "PARENT", "CWD"]);
                for a in &list {
                    table.add_row([
                        a.agent_id.clone(),
                        wire::state_name(a.state).to_owned(),
                        a.turns.to_string(),
                        a.provider.clone(),
                        crate::output::short_id(&a.parent_agent_id.clone().unwrap_or_default()),
                        a.header.as_ref().map(|h| h.cwd.clone()).unwrap_or_default(),
                    ]);
                }
                writeln!(w, "{table}")
            });
        }
        AgentCommand::Cancel { id } => {
            let id = client.resolve(IdKind::Agent, &id).await?;
            let cancelled = agents
                .cancel(v1::CancelAgentRequest {
                    agent_id: id.clone(),
                })
                .await?
                .into_inner()
                .cancelled;
            return out.emit(&json!({ "agent_id": id, "cancelled": cancelled }), |w| {
                if cancelled {
                    writeln!(w, "cancelled the running turn of {id}")
                } else {
                    writeln!(w, "{id} had no running turn")
                }
            });
        }
        AgentCommand::Close { id } => {
            let id = client.resolve(IdKind::Agent, &id).await?;
            agents
                .close(v1::CloseAgentRequest {
                    agent_id: id.clone(),
                })
                .await?;
            return out.emit(&json!({ "agent_id": id, "closed": true }), |w| {
                writeln!(w, "closed {id}")
            });
        }
    }
    .into_inner();
    out.emit(&wire::agent(&info), |w| describe(w, &info))
}

/// `agent rules`: lists the rules, or removes those numbered in `remove` (from 1) or all.
async fn rules(
    client: &Client,
    out: Output,
    agent_id: String,
    remove: &[usize],
    clear: bool,
) -> anyhow::Result<()> {
    let mut agents = client.agents();
    let info = agents
        .get(v1::GetAgentRequest {
            agent_id: agent_id.clone(),
        })
        .await?
        .into_inner();
    let mut removed = Vec::new();
    let info = if clear || !remove.is_empty() {
        let mut chosen = Vec::with_capacity(remove.len());
        for &n in remove {
            let rule = n
                .checked_sub(1)
                .and_then(|i| info.approval_rules.get(i))
                .with_context(|| {
                    format!(
                        "--remove: no rule {n}; {agent_id} has {} (dshctl agent rules {agent_id})",
                        info.approval_rules.len()
                    )
                })?;
            chosen.push(rule.clone());
        }
        let answer = agents
            .remove_rules(v1::RemoveRulesRequest {
                agent_id: agent_id.clone(),
                rules: chosen,
                all: clear,
            })
            .await?
            .into_inner();
        removed = answer.removed;
        answer.agent.unwrap_or(info)
    } else {
        info
    };
    let rule_json =
        |r: &v1::ApprovalRule| json!({"tool": r.tool, "command": r.command, "cwd": r.cwd});
    let doc = json!({
        "agent_id": agent_id,
        "rules": info.approval_rules.iter().map(rule_json).collect::<Vec<_>>(),
        "removed": removed.iter().map(rule_json).collect::<Vec<_>>(),
    });
    out.emit(&doc, |w| {
        for r in &removed {
            writeln!(w, "removed  {} `{}` in {}", r.tool, r.command, r.cwd)?;
        }
        if info.approval_rules.is_empty() {
            return writeln!(w, "{agent_id} has no \"allow always\" rules");
        }
        for (i, r) in info.approval_rules.iter().enumerate() {
            writeln!(w, "{:>3}  {} `{}` in {}", i + 1, r.tool, r.command, r.cwd)?;
        }
        Ok(())
    })
}

fn describe(w: &mut dyn Write, a: &v1::AgentInfo) -> std::io::Result<()> {
    writeln!(w, "agent    {}", a.agent_id)?;
    writeln!(
        w,
        "state    {} (turns: {})",
        wire::state_name(a.state),
        a.turns
    )?;
    if a.reasoning_effort.is_empty() {
        writeln!(w, "model    {} {}", a.provider, a.model)?;
    } else {
        let effort = &a.reasoning_effort;
        writeln!(
            w,
            "model    {} {} (reasoning effort {effort})",
            a.provider, a.model
        )?;
    }
    if let Some(s) = &a.sandbox {
        writeln!(w, "sandbox  {}, network {}", s.mode, s.network)?;
    }
    writeln!(w, "approval {}", wire::approval_name(a.approval))?;
    match a.context_window {
        0 => writeln!(
            w,
            "context  {} tokens used (window not known)",
            a.context_tokens
        )?,
        window => writeln!(
            w,
            "context  {} of {window} tokens used ({}%)",
            a.context_tokens,
            a.context_tokens * 100 / window
        )?,
    }
    for file in &a.instruction_files {
        writeln!(w, "instructions {file}")?;
    }
    for s in &a.mcp_servers {
        let error = s
            .last_error
            .as_ref()
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default();
        writeln!(
            w,
            "mcp      {} {} ({} tools, started {} times){error}",
            s.name,
            wire::mcp_state_name(s.state),
            s.tools.len(),
            s.starts
        )?;
    }
    for rule in &a.approval_rules {
        writeln!(
            w,
            "allowed  {} `{}` in {} (for this session; dshctl agent rules)",
            rule.tool, rule.command, rule.cwd
        )?;
    }
    if let Some(h) = &a.header {
        writeln!(w, "cwd      {}", h.cwd)?;
        if let Some(parent) = &h.parent_session {
            writeln!(w, "parent   {parent}")?;
        }
        if h.delegation_depth > 0 {
            writeln!(w, "depth    {}", h.delegation_depth)?;
        }
        if let Some(seed) = h.seed_length {
            writeln!(w, "seed     {seed} events")?;
        }
    }
    Ok(())
}
