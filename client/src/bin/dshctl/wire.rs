//! JSON forms of protocol messages, shared by every command's `--json` output.

use dsh_proto::v1;
use serde_json::{Value, json};

/// A session header.
pub fn header(h: &v1::SessionHeader) -> Value {
    json!({
        "version": h.version,
        "id": h.id,
        "created_at_ms": h.created_at_ms,
        "cwd": h.cwd,
        "parent_session": h.parent_session,
        "seed_length": h.seed_length,
        "origin": h.origin,
        "delegation_depth": h.delegation_depth,
    })
}

/// A live agent.
pub fn agent(a: &v1::AgentInfo) -> Value {
    json!({
        "agent_id": a.agent_id,
        "session_id": a.session_id,
        "state": state_name(a.state),
        "provider": a.provider,
        "model": a.model,
        "reasoning_effort": (!a.reasoning_effort.is_empty()).then_some(&a.reasoning_effort),
        "parent_agent_id": a.parent_agent_id,
        "turns": a.turns,
        "approval": approval_name(a.approval),
        "approval_rules": a.approval_rules.iter().map(|r| json!({"tool": r.tool, "command": r.command, "cwd": r.cwd})).collect::<Vec<_>>(),
        "instruction_files": a.instruction_files,
        "context_tokens": a.context_tokens,
        "context_window": (a.context_window > 0).then_some(a.context_window),
        "mcp_servers": a.mcp_servers.iter().map(mcp_server).collect::<Vec<_>>(),
        "header": a.header.as_ref().map(header),
        "sandbox": a.sandbox.as_ref().map(|s| json!({"mode": s.mode, "network": s.network})),
    })
}

/// One MCP server of an agent.
pub fn mcp_server(s: &v1::McpServerInfo) -> Value {
    json!({
        "name": s.name,
        "state": mcp_state_name(s.state),
        "tools": s.tools,
        "last_error": s.last_error,
        "starts": s.starts,
    })
}

/// An MCP server state as words.
pub fn mcp_state_name(state: i32) -> &'static str {
    match v1::McpServerState::try_from(state) {
        Ok(v1::McpServerState::NotStarted) => "not started",
        Ok(v1::McpServerState::Starting) => "starting",
        Ok(v1::McpServerState::Running) => "running",
        Ok(v1::McpServerState::Failed) => "failed",
        _ => "unknown",
    }
}

/// An agent state as a word.
pub fn state_name(state: i32) -> &'static str {
    match v1::AgentState::try_from(state) {
        Ok(v1::AgentState::Idle) => "idle",
        Ok(v1::AgentState::Running) => "running",
        _ => "unknown",
    }
}

/// An event of any stream (Prompt, Watch, `session events`) as one JSON line: the session log's
/// line plus `sessionId` — `{"type", "sessionId", "seq" (logged events only), "time", "data"}` —
/// with `data` exactly as the daemon sent it, so the same event prints the same bytes whichever
/// stream carried it.
pub fn event_line(e: &v1::Event) -> String {
    let data = if serde_json::from_str::<serde::de::IgnoredAny>(&e.data_json).is_ok() {
        e.data_json.clone()
    } else {
        // Never expected from dshd; still print valid JSON.
        Value::String(e.data_json.clone()).to_string()
    };
    let mut line = format!(
        "{{\"type\":{},\"sessionId\":{}",
        Value::String(e.r#type.clone()),
        Value::String(e.session_id.clone())
    );
    if let Some(seq) = e.seq {
        line.push_str(&format!(",\"seq\":{seq}"));
    }
    line.push_str(&format!(",\"time\":{},\"data\":{data}}}", e.time_ms));
    line
}

/// An approval policy as its word.
pub fn approval_name(policy: i32) -> &'static str {
    match v1::ApprovalPolicy::try_from(policy) {
        Ok(v1::ApprovalPolicy::Never) => "never",
        Ok(v1::ApprovalPolicy::OnRequest) => "on-request",
        Ok(v1::ApprovalPolicy::Always) => "always",
        _ => "unknown",
    }
}

/// A location, or `null`.
pub fn location(l: Option<&v1::SessionLocation>) -> Value {
    match l {
        Some(l) if !l.database.is_empty() => json!({ "kind": l.kind, "database": l.database }),
        Some(l) => json!({ "kind": l.kind, "path": l.path }),
        None => Value::Null,
    }
}
