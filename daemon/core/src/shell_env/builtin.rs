//! The contributors the daemon ships (CONTRACTS §5.2). Each asks its source at call time, so a fact
//! that changes (a persistence backend swap) is seen by the very next call.

use std::path::PathBuf;
use std::sync::Arc;

use super::contributor::{Contributor, Resolver};
use super::error::RegisterError;
use super::registry::{Registration, ShellEnvRegistry};
use crate::persistence::{BackendKind, PersistenceHandle};

/// Contributor of [`DSH_SESSION_JSONL`].
pub(crate) const SESSION_PERSISTENCE: &str = "session-persistence";
/// Contributor of [`DSH_PARENT_SESSION_ID`], [`DSH_ROOT_SESSION_ID`] and [`DSH_AGENT_DEPTH`].
pub(crate) const LINEAGE: &str = "lineage";
/// Contributor of [`DSH_TOOL_CALL_ID`] and [`DSH_TURN`].
pub(crate) const TOOL_CALL: &str = "tool-call";
/// Contributor of [`DSH_SOCKET`].
pub(crate) const DAEMON: &str = "daemon";

/// The calling session's JSONL transcript path, when the active backend keeps one.
pub(crate) const DSH_SESSION_JSONL: &str = "DSH_SESSION_JSONL";
/// The session the calling agent's session was forked or spawned from.
pub(crate) const DSH_PARENT_SESSION_ID: &str = "DSH_PARENT_SESSION_ID";
/// The top-level session the calling agent descends from.
pub(crate) const DSH_ROOT_SESSION_ID: &str = "DSH_ROOT_SESSION_ID";
/// The calling agent's delegation depth.
pub(crate) const DSH_AGENT_DEPTH: &str = "DSH_AGENT_DEPTH";
/// The tool call's id.
pub(crate) const DSH_TOOL_CALL_ID: &str = "DSH_TOOL_CALL_ID";
/// The turn the call belongs to.
pub(crate) const DSH_TURN: &str = "DSH_TURN";
/// The socket of the daemon that started the command.
pub(crate) const DSH_SOCKET: &str = "DSH_SOCKET";

/// Registers the four shipped contributors. All or nothing: if one is refused, the ones already
/// registered are removed again before the error is returned. The daemon keeps the guards for its
/// whole life.
pub fn register_builtins(
    registry: &ShellEnvRegistry,
    persistence: Arc<PersistenceHandle>,
    socket: PathBuf,
) -> Result<Vec<Registration>, RegisterError> {
    let contributors = [
        session_persistence(persistence),
        lineage(),
        tool_call(),
        daemon(socket),
    ];
    let mut guards = Vec::with_capacity(contributors.len());
    for contributor in contributors {
        // On refusal, `?` drops the guards gathered so far, which unregisters them.
        guards.push(registry.register(contributor)?);
    }
    Ok(guards)
}

/// `session-persistence`: `DSH_SESSION_JSONL` = the located path, only for agent calls whose
/// active backend answers `kind == "jsonl"`. The path is passed through as the backend gives it;
/// one that is not UTF-8 fails the call rather than naming another file.
pub(crate) fn session_persistence(persistence: Arc<PersistenceHandle>) -> Contributor {
    Contributor::new(
        SESSION_PERSISTENCE,
        Resolver::filling(move |exec, answer| {
            let Some(agent) = &exec.agent else {
                return Ok(());
            };
            if let Some(location) = persistence.locate(&agent.header)
                && location.kind == BackendKind::Jsonl.as_str()
            {
                let path = location
                    .path
                    .into_os_string()
                    .into_string()
                    .map_err(|path| {
                        format!("the session transcript path {path:?} is not valid UTF-8")
                    })?;
                answer.set(DSH_SESSION_JSONL, path);
            }
            Ok(())
        }),
    )
    .variable(
        DSH_SESSION_JSONL,
        "Absolute path of the current session's JSONL transcript when the active persistence \
         backend keeps one (the file may not exist until the first checkpoint).",
    )
}

/// `lineage`: where the calling agent sits in its delegation tree; nothing for agentless calls.
pub(crate) fn lineage() -> Contributor {
    Contributor::new(
        LINEAGE,
        Resolver::filling(|exec, answer| {
            if let Some(agent) = &exec.agent {
                if let Some(parent) = &agent.header.parent_session {
                    answer.set(DSH_PARENT_SESSION_ID, parent.as_str().to_owned());
                }
                answer.set(DSH_ROOT_SESSION_ID, agent.root.as_str().to_owned());
                answer.set(DSH_AGENT_DEPTH, decimal(agent.header.delegation_depth));
            }
            Ok(())
        }),
    )
    .variable(
        DSH_PARENT_SESSION_ID,
        "Id of the session the calling agent's session was forked or spawned from, when it has one.",
    )
    .variable(
        DSH_ROOT_SESSION_ID,
        "Id of the top-level agent session the calling agent descends from (its own id at the top).",
    )
    .variable(
        DSH_AGENT_DEPTH,
        "Delegation depth of the calling agent: 0 for a top-level agent, parent + 1 for a child.",
    )
}

/// `tool-call`: the call's id always, and its turn inside a turn.
pub(crate) fn tool_call() -> Contributor {
    Contributor::new(
        TOOL_CALL,
        Resolver::filling(|exec, answer| {
            answer.set(DSH_TOOL_CALL_ID, exec.call_id.clone());
            if let Some(turn) = exec.turn {
                answer.set(DSH_TURN, decimal(turn));
            }
            Ok(())
        }),
    )
    .variable(
        DSH_TOOL_CALL_ID,
        "Id of the tool call that started this command.",
    )
    .variable(
        DSH_TURN,
        "Number of the agent turn the call belongs to, when it is made inside a turn.",
    )
}

/// `daemon`: the socket of the daemon that owns the command, so it can call back with `dshctl`.
/// A socket path that is not UTF-8 fails every call rather than pointing at another socket.
pub(crate) fn daemon(socket: PathBuf) -> Contributor {
    let socket = socket
        .into_os_string()
        .into_string()
        .map_err(|path| format!("the daemon socket path {path:?} is not valid UTF-8"));
    Contributor::new(
        DAEMON,
        Resolver::filling(move |_, answer| {
            answer.set(DSH_SOCKET, socket.clone()?);
            Ok(())
        }),
    )
    .variable(
        DSH_SOCKET,
        "Path of the dshd socket that owns this command, for calling back with dshctl.",
    )
}

/// `n` in decimal, without the formatting machinery `to_string` goes through (a few of these are
/// made for every bash call).
fn decimal(mut n: u32) -> String {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` is a single digit.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits[at..].iter().map(|&d| char::from(d)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_is_to_string() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, u32::MAX] {
            assert_eq!(super::decimal(n), n.to_string());
        }
    }
}
