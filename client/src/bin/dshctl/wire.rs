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
        "parent_agent_id": a.parent_agent_id,
        "turns": a.turns,
        "header": a.header.as_ref().map(header),
        "sandbox": a.sandbox.as_ref().map(|s| json!({"mode": s.mode, "network": s.network})),
    })
}

/// An agent state as a word.
pub fn state_name(state: i32) -> &'static str {
    match v1::AgentState::try_from(state) {
        Ok(v1::AgentState::Idle) => "idle",
        Ok(v1::AgentState::Running) => "running",
        _ => "unknown",
    }
}

/// A stored or live session event, with its data parsed back into JSON.
pub fn event(e: &v1::SessionEvent) -> Value {
    json!({
        "type": e.r#type,
        "seq": e.seq,
        "time": e.time_ms,
        "data": serde_json::from_str::<Value>(&e.data_json).unwrap_or(Value::String(e.data_json.clone())),
    })
}

/// A location, or `null`.
pub fn location(l: Option<&v1::SessionLocation>) -> Value {
    match l {
        Some(l) => json!({ "kind": l.kind, "path": l.path }),
        None => Value::Null,
    }
}
