//! The in-memory session log: an immutable header plus an append-only, contiguous list of events.
//! The model's history is derived from it ([`super::history`]); nothing is stored twice.

use std::sync::Arc;

use super::{Event, EventData, SessionHeader};

/// A session's header and events, as the agent that owns it sees them.
#[derive(Debug, Clone)]
pub struct SessionLog {
    header: Arc<SessionHeader>,
    events: Vec<Event>,
}

/// Why a log could not be built from stored parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// An event's seq is not its index.
    #[error("event at index {index} has seq {seq}; seqs must be contiguous from 0")]
    SeqGap {
        /// Index in the list.
        index: usize,
        /// The seq found.
        seq: u64,
    },
}

impl SessionLog {
    /// An empty log for a new session.
    pub fn new(header: SessionHeader) -> Self {
        Self {
            header: Arc::new(header),
            events: Vec::new(),
        }
    }

    /// A log from stored events, checking that seqs are contiguous from 0.
    pub fn from_parts(header: SessionHeader, events: Vec<Event>) -> Result<Self, LogError> {
        check_contiguous(&events)?;
        Ok(Self {
            header: Arc::new(header),
            events,
        })
    }

    /// The header (shared: tool executions carry it).
    pub fn header(&self) -> &Arc<SessionHeader> {
        &self.header
    }

    /// Every event, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Number of events.
    pub fn len(&self) -> u64 {
        self.events.len() as u64
    }

    /// True when no event has been appended.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Appends an event stamped with the next seq and `time`, and returns it.
    pub fn append_at(&mut self, data: EventData, time: i64) -> &Event {
        let seq = self.len();
        self.events.push(Event { seq, time, data });
        // Just pushed, so the list is not empty.
        &self.events[self.events.len() - 1]
    }

    /// Appends an event stamped with the next seq and the current time.
    pub fn append(&mut self, data: EventData) -> &Event {
        self.append_at(data, crate::now_ms())
    }

    /// Number of the last turn started (0 before the first).
    pub fn last_turn(&self) -> u32 {
        self.events
            .iter()
            .rev()
            .find_map(|e| match e.data {
                EventData::TurnStart { turn } => Some(turn),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The last non-empty assistant text of turn `turn` (the turn's answer), searched back from
    /// the end of the log to that turn's `turn/start`; empty when the turn has none.
    pub fn turn_answer(&self, turn: u32) -> &str {
        self.turn_answer_event(turn)
            .and_then(|e| match &e.data {
                EventData::AssistantMessage { message, .. } => Some(message.text.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The seq of the `assistant/message` holding turn `turn`'s answer (see
    /// [`turn_answer`](Self::turn_answer)); `None` when the turn has none.
    pub fn turn_answer_seq(&self, turn: u32) -> Option<u64> {
        self.turn_answer_event(turn).map(|e| e.seq)
    }

    fn turn_answer_event(&self, turn: u32) -> Option<&Event> {
        for event in self.events.iter().rev() {
            match &event.data {
                EventData::AssistantMessage {
                    turn: t, message, ..
                } if *t == turn && !message.text.is_empty() => return Some(event),
                EventData::TurnStart { turn: t } if *t == turn => break,
                _ => {}
            }
        }
        None
    }

    /// Length of the completed-turn prefix: every event up to and including the last `turn/end`
    /// (0 when no turn has ended). This is what a fork copies.
    pub fn completed_prefix_len(&self) -> u64 {
        completed_prefix_len(&self.events)
    }

    /// True when the log ends with a `session/end-seed` marker.
    pub fn ends_with_seed_marker(&self) -> bool {
        matches!(
            self.events.last(),
            Some(Event {
                data: EventData::EndSeed {},
                ..
            })
        )
    }
}

/// See [`SessionLog::completed_prefix_len`].
pub fn completed_prefix_len(events: &[Event]) -> u64 {
    events
        .iter()
        .rposition(|e| matches!(e.data, EventData::TurnEnd { .. }))
        .map_or(0, |i| i as u64 + 1)
}

/// The seqs a session may be forked at: every `step/end` and `turn/end`, ascending.
pub fn fork_points(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.data,
                EventData::StepEnd { .. } | EventData::TurnEnd { .. }
            )
        })
        .map(|e| e.seq)
        .collect()
}

/// The nearest of the ascending `points` below and above `seq` (one or two of them; none when
/// `points` is empty).
pub fn nearest(points: &[u64], seq: u64) -> Vec<u64> {
    let after = points.partition_point(|&p| p < seq);
    let mut out = Vec::with_capacity(2);
    if after > 0 {
        out.push(points[after - 1]);
    }
    if let Some(&next) = points.get(after) {
        out.push(next);
    }
    out
}

/// Checks that every event's seq equals its index.
pub fn check_contiguous(events: &[Event]) -> Result<(), LogError> {
    for (index, event) in events.iter().enumerate() {
        if event.seq != index as u64 {
            return Err(LogError::SeqGap {
                index,
                seq: event.seq,
            });
        }
    }
    Ok(())
}
