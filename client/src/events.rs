//! Events as dshd streams them (`dsh.v1.Event`), decoded once into the session vocabulary:
//! [`EventData`] for a logged event, [`LiveEvent`] for an unlogged one. Every reader of events in
//! dshctl and the ACP bridge matches on these, without a catch-all arm, so an event type added to
//! the vocabulary is a compile error there rather than a line silently not shown.
//!
//! Decoding reads `data_json` and never writes it back: what `--json` prints is the daemon's own
//! bytes.

use dsh_proto::v1;
pub use dsh_session::{
    ApprovalClient, ApprovalScope, ApprovalSource, ApprovalVerdict, EventData, Lagged, LiveEvent,
    MessageSource, ModelRetry, OutputStream, Plan, PlanStatus, PlanStep, TextDelta, ToolOutput,
    TurnEndReason, UPDATE_PLAN, Usage,
};

/// What one event of a stream says.
#[derive(Debug, Clone, PartialEq)]
pub enum Streamed<'a> {
    /// A logged event, or one of a type this client does not know ([`EventData::Unknown`]: a
    /// newer dshd, or a user's tool, wrote it; skip it).
    Logged(EventData),
    /// An unlogged event (streamed text and output, a retry, a lag marker), its text borrowed
    /// from the message where it has no escapes.
    Live(LiveEvent<'a>),
}

/// An event whose data does not have the shape its type says.
#[derive(Debug, thiserror::Error)]
#[error("cannot read a {kind} event of session {session}: {error}")]
pub struct DecodeError {
    /// The event's type.
    pub kind: String,
    /// The session it belongs to.
    pub session: String,
    /// What serde said, naming the field at fault.
    pub error: String,
}

/// Decodes `event`'s `data_json` as the type its `type` names. A type this client does not know,
/// or a known one with members it does not know, is [`EventData::Unknown`], not an error.
pub fn decode(event: &v1::Event) -> Result<Streamed<'_>, DecodeError> {
    let failed = |error: serde_json::Error| DecodeError {
        kind: event.r#type.clone(),
        session: event.session_id.clone(),
        error: error.to_string(),
    };
    if let Some(live) = LiveEvent::from_data(&event.r#type, &event.data_json) {
        return live.map(Streamed::Live).map_err(failed);
    }
    dsh_session::Event::from_columns(
        event.seq.unwrap_or_default(),
        event.time_ms,
        &event.r#type,
        &event.data_json,
    )
    .map(|logged| Streamed::Logged(logged.data))
    .map_err(failed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn event(kind: &str, seq: Option<u64>, data: &str) -> v1::Event {
        v1::Event {
            session_id: "s".into(),
            r#type: kind.into(),
            seq,
            time_ms: 1,
            data_json: data.into(),
        }
    }

    #[test]
    fn logged_live_unknown_and_damaged_events() {
        let start = event("turn/start", Some(0), r#"{"turn":1}"#);
        assert_eq!(
            decode(&start).unwrap(),
            Streamed::Logged(EventData::TurnStart { turn: 1 })
        );
        let lagged = event("watch/lagged", None, r#"{"fromSeq":4}"#);
        assert_eq!(
            decode(&lagged).unwrap(),
            Streamed::Live(LiveEvent::Lagged(Lagged { from_seq: 4 }))
        );
        // A newer dshd's type, and a known type with a member this build does not know.
        for unknown in [
            event("plan/update", Some(3), r#"{"steps":[]}"#),
            event("turn/start", Some(3), r#"{"turn":1,"new":true}"#),
        ] {
            assert!(
                matches!(
                    decode(&unknown).unwrap(),
                    Streamed::Logged(EventData::Unknown(_))
                ),
                "{unknown:?}"
            );
        }
        let damaged = decode(&event("tool/result", Some(2), r#"{"turn":1}"#)).unwrap_err();
        assert!(
            damaged
                .to_string()
                .starts_with("cannot read a tool/result event of session s: ")
                && damaged.error.contains("missing field"),
            "{damaged}"
        );
        assert!(decode(&event("text/delta", None, "[]")).is_err());
    }
}
