//! dshd's refusals that a client acts on, read from the `google.rpc.ErrorInfo` of their status
//! (reasons and metadata keys: [`dsh_proto::refusal`]) rather than from the words of the message,
//! which are for people and may change.

use dsh_proto::refusal::{self, metadata};
use tonic_types::StatusExt;

/// A refusal a client acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The agent runs a turn: wait for its `turn/end`, or cancel it.
    AgentBusy {
        /// The agent.
        agent_id: String,
        /// The running turn.
        turn: u32,
    },
    /// dshd has no API key for the provider.
    NoModelKey {
        /// The environment variable dshd reads the key from.
        variable: String,
    },
    /// No live agent has the id: a stored session must be resumed first.
    AgentNotLive {
        /// The id given.
        agent_id: String,
    },
    /// Another dshd has the session live and holds its lease.
    SessionLeased {
        /// The session.
        session_id: String,
        /// The holder's host.
        host: String,
        /// The holder's process id.
        pid: u32,
        /// Milliseconds until the lease expires unless renewed.
        expires_in_ms: u64,
    },
}

impl Refusal {
    /// The refusal `status` carries, if it is one of dshd's with a reason this client knows.
    pub fn of(status: &tonic::Status) -> Option<Self> {
        let info = status.get_details_error_info()?;
        if info.domain != refusal::DOMAIN {
            return None;
        }
        let text = |key: &str| info.metadata.get(key).cloned().unwrap_or_default();
        fn number<T: std::str::FromStr + Default>(
            metadata: &std::collections::HashMap<String, String>,
            key: &str,
        ) -> T {
            metadata
                .get(key)
                .and_then(|v| v.parse().ok())
                .unwrap_or_default()
        }
        let m = &info.metadata;
        Some(match info.reason.as_str() {
            refusal::AGENT_BUSY => Self::AgentBusy {
                agent_id: text(metadata::AGENT_ID),
                turn: number(m, metadata::TURN),
            },
            refusal::NO_MODEL_KEY => Self::NoModelKey {
                variable: text(metadata::VARIABLE),
            },
            refusal::AGENT_NOT_LIVE => Self::AgentNotLive {
                agent_id: text(metadata::AGENT_ID),
            },
            refusal::SESSION_LEASED => Self::SessionLeased {
                session_id: text(metadata::SESSION_ID),
                host: text(metadata::HOST),
                pid: number(m, metadata::PID),
                expires_in_ms: number(m, metadata::EXPIRES_IN_MS),
            },
            _ => return None,
        })
    }

    /// The request field an `INVALID_ARGUMENT` names as at fault (its `google.rpc.BadRequest`),
    /// where dshd gives one.
    pub fn bad_field(status: &tonic::Status) -> Option<String> {
        status
            .get_details_bad_request()?
            .field_violations
            .into_iter()
            .next()
            .map(|violation| violation.field)
    }

    /// The `reason` of `status`'s ErrorInfo when dshd gave one, known to this client or not.
    pub fn reason(status: &tonic::Status) -> Option<String> {
        status
            .get_details_error_info()
            .filter(|info| info.domain == refusal::DOMAIN)
            .map(|info| info.reason)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use tonic_types::ErrorDetails;

    use super::*;

    fn status(domain: &str, reason: &str, pairs: &[(&str, &str)]) -> tonic::Status {
        let metadata: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        tonic::Status::with_error_details(
            tonic::Code::FailedPrecondition,
            "words for people",
            ErrorDetails::with_error_info(reason, domain, metadata),
        )
    }

    #[test]
    fn reasons_and_metadata_are_read_not_messages() {
        assert_eq!(
            Refusal::of(&status(
                "dsh",
                "AGENT_BUSY",
                &[("agent_id", "a"), ("turn", "3")]
            )),
            Some(Refusal::AgentBusy {
                agent_id: "a".into(),
                turn: 3
            })
        );
        assert_eq!(
            Refusal::of(&status("dsh", "NO_MODEL_KEY", &[("variable", "K")])),
            Some(Refusal::NoModelKey {
                variable: "K".into()
            })
        );
        // Another domain's reason, a reason this client does not know, and no details at all.
        assert_eq!(Refusal::of(&status("other", "AGENT_BUSY", &[])), None);
        assert_eq!(Refusal::of(&status("dsh", "NEWER_THING", &[])), None);
        assert_eq!(
            Refusal::reason(&status("dsh", "NEWER_THING", &[])).as_deref(),
            Some("NEWER_THING")
        );
        let plain = tonic::Status::failed_precondition("agent x is busy with turn 1");
        assert_eq!(Refusal::of(&plain), None);
    }
}
