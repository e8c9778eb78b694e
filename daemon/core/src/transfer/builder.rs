//! The imported session's log, built event by event as a source is read: numbered from 0, each
//! turn's `turn/end` given its answer and usage when the source did not say, calls that never got
//! a result closed as a crash would be, and handed to the store in batches so that a long source
//! never sits in memory whole.

use tokio::sync::mpsc::Sender;

use super::TransferError;
use crate::persistence::PersistenceError;
use dsh_session::repair::TOOL_OUTCOME_UNKNOWN;
use dsh_session::{Event, EventData, SessionHeader, TurnEndReason, Usage};

/// A batch is handed to the store once its source lines reach this many bytes: large enough that
/// a checkpoint's cost (an fsync, a transaction) is paid rarely, small enough to bound memory.
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Events for the store under the new session's header, contiguous, the first batch starting at
/// seq 0.
pub(super) type Batch = (SessionHeader, Vec<Event>);

/// The turn being built.
#[derive(Debug)]
struct OpenTurn {
    turn: u32,
    /// The last non-empty assistant text's seq.
    answer_seq: Option<u64>,
    usage: Option<Usage>,
}

/// Builds the new session's events and sends them to the store in batches.
#[derive(Debug)]
pub(super) struct Builder {
    tx: Sender<Batch>,
    /// The new session's header, set once the source's header is read.
    pub(super) header: Option<SessionHeader>,
    pending: Vec<Event>,
    pending_bytes: usize,
    next_seq: u64,
    turn: Option<OpenTurn>,
    step: Option<(u32, u32)>,
    /// The last step number of the open turn (0 before its first).
    last_step: u32,
    /// Calls logged without a result yet, in order.
    open_calls: Vec<(u32, u32, String)>,
    last_turn: u32,
    last_time: i64,
    /// Source records read that became events.
    pub(super) read: u64,
    /// Source records left out (nothing dsh keeps).
    pub(super) skipped: u64,
}

impl Builder {
    pub(super) fn new(tx: Sender<Batch>) -> Self {
        Self {
            tx,
            header: None,
            pending: Vec::new(),
            pending_bytes: 0,
            next_seq: 0,
            turn: None,
            step: None,
            last_step: 0,
            open_calls: Vec::new(),
            last_turn: 0,
            last_time: 0,
            read: 0,
            skipped: 0,
        }
    }

    /// A builder of another session of the same import, handing its batches to the same store.
    pub(super) fn sibling(&self) -> Self {
        Self::new(self.tx.clone())
    }

    /// The turn being built, if one is open.
    pub(super) fn turn(&self) -> Option<u32> {
        self.turn.as_ref().map(|t| t.turn)
    }

    /// The step being built, if one is open.
    pub(super) fn step(&self) -> Option<(u32, u32)> {
        self.step
    }

    /// The last step number of the open turn (0 before its first).
    pub(super) fn last_step(&self) -> u32 {
        self.last_step
    }

    /// The seq of the last event logged, if any.
    pub(super) fn last_seq(&self) -> Option<u64> {
        self.next_seq.checked_sub(1)
    }

    /// The time of the last event (for a record that has none).
    pub(super) fn last_time(&self) -> i64 {
        self.last_time
    }

    /// The number the next turn a source does not number gets.
    pub(super) fn next_turn(&self) -> u32 {
        self.last_turn.saturating_add(1)
    }

    /// Counts `bytes` of source towards the next batch.
    pub(super) fn consumed(&mut self, bytes: usize) {
        self.pending_bytes = self.pending_bytes.saturating_add(bytes);
    }

    /// Appends `data` logged at `time`, keeping track of open turns, steps and calls.
    pub(super) fn push(&mut self, time: i64, data: EventData) -> Result<(), TransferError> {
        self.last_time = time;
        match &data {
            EventData::TurnStart { turn } => {
                self.turn = Some(OpenTurn {
                    turn: *turn,
                    answer_seq: None,
                    usage: None,
                });
                self.last_turn = self.last_turn.max(*turn);
                self.last_step = 0;
            }
            EventData::StepStart { turn, step } => {
                self.step = Some((*turn, *step));
                self.last_step = *step;
            }
            EventData::StepEnd { .. } => self.step = None,
            EventData::ToolCall {
                turn,
                step,
                call_id,
                ..
            } => self.open_calls.push((*turn, *step, call_id.clone())),
            EventData::ToolResult { call_id, .. } => self.open_calls.retain(|c| &c.2 != call_id),
            EventData::AssistantMessage { message, usage, .. } => {
                if let Some(turn) = &mut self.turn {
                    if !message.text.is_empty() {
                        turn.answer_seq = Some(self.next_seq);
                    }
                    if let Some(usage) = usage {
                        turn.usage.get_or_insert_with(Usage::default).add(usage);
                    }
                }
            }
            EventData::TurnEnd { .. } => {
                self.turn = None;
                self.step = None;
            }
            _ => {}
        }
        self.pending.push(Event {
            seq: self.next_seq,
            time,
            data,
        });
        self.next_seq += 1;
        if self.pending_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Opens a turn numbered after the last one (sources that do not number turns).
    pub(super) fn start_turn(&mut self, time: i64) -> Result<u32, TransferError> {
        let turn = self.next_turn();
        self.push(time, EventData::TurnStart { turn })?;
        Ok(turn)
    }

    /// Ends the open step, if any: calls without a result get one saying their outcome is
    /// unknown (as a crash's repair says), then `step/end`.
    pub(super) fn close_step(&mut self, time: i64) -> Result<(), TransferError> {
        for (turn, step, call_id) in std::mem::take(&mut self.open_calls) {
            self.push(
                time,
                EventData::ToolResult {
                    turn,
                    step,
                    call_id,
                    content: "the source has no result for this call".to_owned(),
                    is_error: true,
                    code: Some(TOOL_OUTCOME_UNKNOWN.to_owned()),
                    exit_code: None,
                },
            )?;
        }
        if let Some((turn, step)) = self.step {
            self.push(time, EventData::StepEnd { turn, step })?;
        }
        Ok(())
    }

    /// Ends the open turn, if any, for `reason`, with the answer and usage its events give.
    pub(super) fn end_turn(
        &mut self,
        time: i64,
        reason: TurnEndReason,
    ) -> Result<(), TransferError> {
        self.close_step(time)?;
        let open = self.turn.as_ref().map(|t| (t.turn, t.answer_seq, t.usage));
        if let Some((turn, answer_seq, usage)) = open {
            // `push` closes the turn.
            self.push(
                time,
                EventData::TurnEnd {
                    turn,
                    reason,
                    answer_seq,
                    usage,
                },
            )?;
        }
        Ok(())
    }

    /// Closes what the source left open (a turn it was still in is `interrupted`), appends
    /// `last` (the import's own record) and hands the rest to the store. Returns how many
    /// events the session has.
    pub(super) fn finish(mut self, last: EventData) -> Result<u64, TransferError> {
        let time = self.last_time;
        self.end_turn(time, TurnEndReason::Interrupted)?;
        self.push(dsh_session::now_ms(), last)?;
        self.flush()?;
        Ok(self.next_seq)
    }

    fn flush(&mut self) -> Result<(), TransferError> {
        self.pending_bytes = 0;
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let header = self.header.clone().ok_or_else(|| PersistenceError::Task {
            what: "import",
            message: "events before the session's header".to_owned(),
        })?;
        self.tx
            .blocking_send((header, batch))
            .map_err(|_| PersistenceError::Task {
                what: "import",
                message: "the store stopped taking the imported events".to_owned(),
            })?;
        Ok(())
    }
}
