//! The updates of one running turn on their way to the client watching it: bounded in memory, and
//! never a reason for the turn to wait.
//!
//! A client may stop reading at any moment (a suspended editor, a `dshctl prompt | less` nobody
//! scrolls) while the model streams on. Two kinds of update need two answers:
//!
//! - **Logged events are never dropped, and never copied into a backlog.** They are in the session
//!   log, which the agent keeps in memory for its whole life anyway, so the feed queues only how far
//!   the log has grown (a seq mark) and the watcher reads each event from the log when it gets to
//!   it. However far behind a client falls, the backlog of logged events costs a few bytes.
//! - **Streamed text deltas are a preview**: not logged, and the step's full text follows in its
//!   `assistant/message`. While a client is slow, the waiting fragments of one step are merged into
//!   one, and at most [`PENDING_TEXT_BUDGET`] bytes of them wait at any time. A fragment that does
//!   not fit is skipped; every fragment carries its byte offset within the step's text, so the
//!   watcher sees the gap and can take the rest from `assistant/message`.
//!
//! So the turn never blocks on its watcher, memory is O(budget) however much the model streams or
//! the turn logs, and a slow watcher still gets every logged event, in seq order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::session::{Event, EventData};

/// Most bytes of streamed text (plus [`ENTRY_COST`] per waiting message) that wait for a slow
/// watcher. 1 MiB is minutes of reading for a person and far below gRPC's usual 4 MiB message
/// limit, so a merged delta always fits in one message.
pub const PENDING_TEXT_BUDGET: usize = 1024 * 1024;

/// What one waiting message costs the budget beyond its text (its queue entry and allocation), so
/// a flood of one-byte fragments is bounded as well as a few large ones.
const ENTRY_COST: usize = 64;

/// Something a client watching a turn is told.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnUpdate {
    /// An event was appended to the session log.
    Logged(Event),
    /// The model streamed some text (not logged; the full text follows in `assistant/message`).
    TextDelta {
        /// Turn number.
        turn: u32,
        /// Step number.
        step: u32,
        /// Byte offset of `text` within the text the model streamed in this step. A watcher that
        /// fell behind may find it past the end of what it has: the bytes between were skipped.
        offset: u64,
        /// The fragment (several merged while the watcher was slow).
        text: String,
    },
}

/// Where the watcher reads logged events, by seq, when it gets to them.
pub(crate) trait EventSource: Send + Sync {
    /// The event with this seq, if the log holds it.
    fn event(&self, seq: u64) -> Option<Event>;

    /// Turn `turn`'s answer: its last non-empty assistant text.
    fn answer(&self, turn: u32) -> String;
}

/// A new feed whose watcher starts at log seq `from_seq`, reading events from `source`.
pub(crate) fn channel(source: Arc<dyn EventSource>, from_seq: u64) -> (FeedSender, TurnFeed) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Notify::new(),
    });
    (
        FeedSender {
            shared: shared.clone(),
        },
        TurnFeed {
            shared,
            source,
            next_seq: from_seq,
        },
    )
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the watcher. `notify_one` keeps a permit when nobody waits, so a wake-up between the
    /// watcher's look at the queue and its wait is never lost.
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Item>,
    /// Budget spent by the waiting text messages.
    pending: usize,
    /// The step whose text streams now, and how many bytes of it have streamed so far.
    streaming: (u32, u32),
    streamed: u64,
    /// Bytes of streamed text skipped because the budget was spent.
    skipped: u64,
    /// The turn task has let go: nothing more will come.
    closed: bool,
    /// The watcher is gone: nothing needs keeping.
    abandoned: bool,
}

#[derive(Debug)]
enum Item {
    /// The log has grown to `until` events.
    Logged { until: u64 },
    /// Streamed text: one fragment or several merged.
    Text {
        turn: u32,
        step: u32,
        offset: u64,
        text: String,
    },
}

/// The turn's end of a feed. Never waits. Dropping it tells the watcher the turn is over for good.
#[derive(Debug)]
pub(crate) struct FeedSender {
    shared: Arc<Shared>,
}

impl FeedSender {
    /// The event with `seq` was appended to the log.
    pub(crate) fn logged(&self, seq: u64) {
        let until = seq.saturating_add(1);
        {
            let mut state = self.shared.lock();
            if state.abandoned {
                return;
            }
            // Consecutive events are one mark; an out-of-order notice from a concurrent append
            // only ever raises it, and the watcher reads the log in seq order regardless.
            match state.queue.back_mut() {
                Some(Item::Logged { until: last }) => *last = (*last).max(until),
                _ => state.queue.push_back(Item::Logged { until }),
            }
        }
        self.shared.wake.notify_one();
    }

    /// The model streamed `text` in step `step` of turn `turn`.
    pub(crate) fn text(&self, turn: u32, step: u32, text: &str) {
        if text.is_empty() {
            return;
        }
        let len = text.len();
        {
            let mut state = self.shared.lock();
            if state.streaming != (turn, step) {
                state.streaming = (turn, step);
                state.streamed = 0;
            }
            let offset = state.streamed;
            state.streamed = offset.saturating_add(len as u64);
            if state.abandoned {
                return;
            }
            let room = PENDING_TEXT_BUDGET.saturating_sub(state.pending);
            // Merge into the last waiting message when it is this step's and ends where this
            // fragment starts (a skip in between makes the offsets disagree).
            if let Some(Item::Text {
                turn: t,
                step: s,
                offset: o,
                text: waiting,
            }) = state.queue.back_mut()
                && (*t, *s) == (turn, step)
                && o.saturating_add(waiting.len() as u64) == offset
                && len <= room
            {
                waiting.push_str(text);
                state.pending += len;
            } else if len.saturating_add(ENTRY_COST) <= room {
                state.queue.push_back(Item::Text {
                    turn,
                    step,
                    offset,
                    text: text.to_owned(),
                });
                state.pending += len + ENTRY_COST;
            } else {
                if state.skipped == 0 {
                    tracing::debug!(
                        turn,
                        step,
                        "the turn's watcher is slow; skipping streamed text until it catches up"
                    );
                }
                state.skipped = state.skipped.saturating_add(len as u64);
                return;
            }
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for FeedSender {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// The watcher's end of a feed: the turn's updates in order, ending after `turn/end`.
pub struct TurnFeed {
    shared: Arc<Shared>,
    source: Arc<dyn EventSource>,
    /// The next logged event to hand out.
    next_seq: u64,
}

impl std::fmt::Debug for TurnFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnFeed")
            .field("next_seq", &self.next_seq)
            .finish_non_exhaustive()
    }
}

/// What the watcher found at the head of the queue.
enum Next {
    Event(u64),
    Text(TurnUpdate),
    Wait,
    End,
}

impl TurnFeed {
    /// The next update; `None` once the turn is over and everything was handed out.
    ///
    /// `turn/end` is handed out only once the turn task has let the agent go (its final checkpoint
    /// made, the agent idle), so a watcher that prompts again as soon as it reads it is never told
    /// "busy" for a turn it was told had ended.
    pub async fn recv(&mut self) -> Option<TurnUpdate> {
        loop {
            match self.next() {
                Next::Text(update) => return Some(update),
                Next::Event(seq) => {
                    // Read outside the feed's lock: the log has its own.
                    let Some(event) = self.source.event(seq) else {
                        continue;
                    };
                    if matches!(event.data, EventData::TurnEnd { .. }) {
                        self.closed().await;
                    }
                    return Some(TurnUpdate::Logged(event));
                }
                Next::End => return None,
                Next::Wait => self.shared.wake.notified().await,
            }
        }
    }

    /// Turn `turn`'s answer (its last non-empty assistant text), read from the log when asked so
    /// that nobody holds a copy of it meanwhile.
    pub fn answer(&self, turn: u32) -> String {
        self.source.answer(turn)
    }

    fn next(&mut self) -> Next {
        let mut state = self.shared.lock();
        loop {
            match state.queue.front() {
                Some(Item::Logged { until }) if self.next_seq < *until => {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    return Next::Event(seq);
                }
                Some(Item::Logged { .. }) => {
                    state.queue.pop_front();
                }
                Some(Item::Text { .. }) => {
                    if let Some(Item::Text {
                        turn,
                        step,
                        offset,
                        text,
                    }) = state.queue.pop_front()
                    {
                        state.pending = state.pending.saturating_sub(text.len() + ENTRY_COST);
                        return Next::Text(TurnUpdate::TextDelta {
                            turn,
                            step,
                            offset,
                            text,
                        });
                    }
                }
                None if state.closed => return Next::End,
                None => return Next::Wait,
            }
        }
    }

    /// Waits until the turn task has dropped its sender.
    async fn closed(&self) {
        while !self.shared.lock().closed {
            self.shared.wake.notified().await;
        }
    }
}

impl Drop for TurnFeed {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.abandoned = true;
        state.queue.clear();
        state.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{AssistantMessage, TurnEndReason};

    /// A log the tests append to by hand.
    #[derive(Default)]
    struct Log(Mutex<Vec<Event>>);

    impl EventSource for Log {
        fn event(&self, seq: u64) -> Option<Event> {
            let events = self.0.lock().unwrap();
            events.get(usize::try_from(seq).ok()?).cloned()
        }

        fn answer(&self, _turn: u32) -> String {
            String::new()
        }
    }

    impl Log {
        fn append(&self, feed: &FeedSender, data: EventData) {
            let seq = {
                let mut events = self.0.lock().unwrap();
                let seq = events.len() as u64;
                events.push(Event { seq, time: 0, data });
                seq
            };
            feed.logged(seq);
        }
    }

    fn message(text: &str) -> EventData {
        EventData::AssistantMessage {
            turn: 1,
            step: 1,
            message: AssistantMessage {
                text: text.to_owned(),
                tool_calls: Vec::new(),
            },
            usage: None,
        }
    }

    fn end() -> EventData {
        EventData::TurnEnd {
            turn: 1,
            reason: TurnEndReason::Completed,
        }
    }

    /// Everything the watcher gets once the sender is dropped.
    async fn drain(mut feed: TurnFeed) -> Vec<TurnUpdate> {
        let mut out = Vec::new();
        while let Some(update) = feed.recv().await {
            out.push(update);
        }
        out
    }

    fn kinds(updates: &[TurnUpdate]) -> Vec<String> {
        updates
            .iter()
            .map(|u| match u {
                TurnUpdate::Logged(e) => format!("{}#{}", e.data.type_name(), e.seq),
                TurnUpdate::TextDelta { offset, text, .. } => format!("text@{offset}:{text}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_slow_watcher_gets_every_event_in_order_and_merged_text() {
        let log = Arc::new(Log::default());
        let (tx, rx) = channel(log.clone(), 0);
        log.append(&tx, EventData::TurnStart { turn: 1 });
        log.append(&tx, EventData::StepStart { turn: 1, step: 1 });
        for piece in ["Hel", "lo", ", world"] {
            tx.text(1, 1, piece);
        }
        log.append(&tx, message("Hello, world"));
        log.append(&tx, EventData::StepEnd { turn: 1, step: 1 });
        tx.text(1, 2, "next");
        log.append(&tx, end());
        drop(tx);
        assert_eq!(
            kinds(&drain(rx).await),
            [
                "turn/start#0",
                "step/start#1",
                "text@0:Hello, world",
                "assistant/message#2",
                "step/end#3",
                "text@0:next",
                "turn/end#4",
            ]
        );
    }

    #[tokio::test]
    async fn streamed_text_beyond_the_budget_is_skipped_and_the_gap_is_visible() {
        let log = Arc::new(Log::default());
        let (tx, rx) = channel(log.clone(), 0);
        let piece = "x".repeat(1000);
        let pieces = 3 * PENDING_TEXT_BUDGET / piece.len();
        for _ in 0..pieces {
            tx.text(1, 1, &piece);
        }
        // Only the budget's worth waits, whatever streamed.
        assert!(tx.shared.lock().pending <= PENDING_TEXT_BUDGET);
        let mut rx = rx;
        let Some(TurnUpdate::TextDelta { offset, text, .. }) = rx.recv().await else {
            panic!("no text");
        };
        assert_eq!(offset, 0);
        assert!(text.len() <= PENDING_TEXT_BUDGET && text.len() >= PENDING_TEXT_BUDGET / 2);
        // Once the watcher caught up, new text flows again, at its true offset.
        tx.text(1, 1, "tail");
        let Some(TurnUpdate::TextDelta { offset, text, .. }) = rx.recv().await else {
            panic!("no text");
        };
        assert_eq!(offset, (pieces * piece.len()) as u64);
        assert_eq!(text, "tail");
    }

    #[tokio::test]
    async fn tiny_fragments_are_bounded_too() {
        let log = Arc::new(Log::default());
        let (tx, _rx) = channel(log.clone(), 0);
        // Interleaving events stops merging, so every fragment would be its own message.
        for _ in 0..100_000 {
            tx.text(1, 1, "a");
            log.append(&tx, EventData::StepStart { turn: 1, step: 1 });
        }
        let state = tx.shared.lock();
        assert!(state.pending <= PENDING_TEXT_BUDGET);
        let texts = state
            .queue
            .iter()
            .filter(|i| matches!(i, Item::Text { .. }))
            .count();
        assert!(texts <= PENDING_TEXT_BUDGET / ENTRY_COST, "{texts}");
        assert!(state.queue.len() <= 2 * texts + 1);
    }

    #[tokio::test]
    async fn turn_end_waits_for_the_turn_task_to_let_go() {
        let log = Arc::new(Log::default());
        let (tx, mut rx) = channel(log.clone(), 0);
        log.append(&tx, end());
        let waiting = tokio::spawn(async move { (rx.recv().await, rx.recv().await) });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(tx);
        let (first, second) = waiting.await.unwrap();
        assert!(matches!(first, Some(TurnUpdate::Logged(e)) if e.seq == 0));
        assert_eq!(second, None);
    }

    #[tokio::test]
    async fn a_gone_watcher_costs_nothing() {
        let log = Arc::new(Log::default());
        let (tx, rx) = channel(log.clone(), 0);
        drop(rx);
        log.append(&tx, EventData::TurnStart { turn: 1 });
        tx.text(1, 1, "unseen");
        let state = tx.shared.lock();
        assert!(state.queue.is_empty());
        assert_eq!(state.pending, 0);
    }

    #[tokio::test]
    async fn the_watcher_starts_at_its_seq_and_reads_concurrent_appends_in_order() {
        let log = Arc::new(Log::default());
        log.0.lock().unwrap().push(Event {
            seq: 0,
            time: 0,
            data: end(),
        });
        let (tx, rx) = channel(log.clone(), 1);
        // A stale notice from before the watcher's start is ignored.
        tx.logged(0);
        log.0.lock().unwrap().push(Event {
            seq: 1,
            time: 0,
            data: EventData::TurnStart { turn: 2 },
        });
        log.0.lock().unwrap().push(Event {
            seq: 2,
            time: 0,
            data: EventData::StepStart { turn: 2, step: 1 },
        });
        // Two appends whose notices arrive in the opposite order.
        tx.logged(2);
        tx.logged(1);
        drop(tx);
        assert_eq!(kinds(&drain(rx).await), ["turn/start#1", "step/start#2"]);
    }
}
