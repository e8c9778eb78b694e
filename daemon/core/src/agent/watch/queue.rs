//! One watcher's queue: what agents publish for it, bounded, never a reason for an agent to wait.
//!
//! - **Logged events are queued as seq marks**, not copies: the watcher reads each event from its
//!   agent's log when it gets to it. Consecutive marks of one agent merge, so an agent that only
//!   logs costs one entry however far the watcher falls behind.
//! - **Streamed text and live tool output are previews**: waiting fragments of one step's text (or
//!   of one stream of one call's output) merge, at most [`PENDING_TEXT_BUDGET`] bytes of them
//!   wait, and a fragment that does not fit is skipped (its offset shows the gap; the step's
//!   `assistant/message` carries the whole text, the call's `tool/result` its output).
//! - **Entries are bounded** by the watcher's `max_pending`. Interleaved agents and text keep
//!   marks from merging; when the bound would be passed the watcher is **lagged**: its entries
//!   are dropped, only which sessions it missed is kept (one entry per session), and when it reads
//!   again it is told so (`watch/lagged`) and catches up from the logs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use super::{Preview, WatchScope, WatchedBy};
use crate::agent::live::Agent;
use crate::locks::lock;
use dsh_session::SessionId;

/// Most bytes of streamed text (plus `ENTRY_COST` per waiting message) that wait for one slow
/// watcher. 1 MiB is minutes of reading for a person and far below gRPC's usual 4 MiB message
/// limit, so a merged delta always fits in one message.
pub const PENDING_TEXT_BUDGET: usize = 1024 * 1024;

/// What one waiting text message costs the budget beyond its text (its entry and allocation),
/// so a flood of one-byte fragments is bounded as well as a few large ones.
const ENTRY_COST: usize = 64;

/// A session a lagged watcher missed events of, and from where.
#[derive(Debug, Clone)]
pub(super) struct Missed {
    pub id: SessionId,
    /// The agent, while it is live (a closed one is read back from the store).
    pub agent: Weak<Agent>,
    /// The first seq the watcher was told of and did not get (it may have more of the session
    /// already: it resumes from its own cursor when it has one).
    pub from: u64,
}

/// What the watcher finds at the head of its queue.
pub(super) enum Next {
    /// An entry of the queue.
    Item(Item),
    /// The watcher fell behind by more than its bound: these sessions' events were dropped.
    Lagged(Vec<Missed>),
    /// Nothing yet.
    Wait,
    /// The hub is closed (daemon shutdown) and nothing is left.
    Closed,
}

/// An entry of the queue.
pub(super) enum Item {
    /// Events `from..until` of `agent` were logged.
    Logged {
        agent: Arc<Agent>,
        from: u64,
        until: u64,
    },
    /// Streamed text or live tool output.
    Preview {
        agent: Arc<Agent>,
        what: Preview,
        offset: u64,
        text: String,
        time: i64,
    },
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    /// Budget spent by the waiting text.
    pending_text: usize,
    /// Set while lagged: the sessions whose events were dropped.
    lagged: Option<Vec<Missed>>,
    /// Bytes of streamed text skipped because the budget was spent or the watcher lagged.
    skipped_text: u64,
    /// No more will come (the daemon is shutting down).
    closed: bool,
}

/// A watcher's queue and what it follows.
pub(super) struct Queue {
    pub scope: WatchScope,
    /// Whether the watcher wants streamed text at all.
    pub deltas: bool,
    /// Whether it counts as watching for approvals.
    pub by: WatchedBy,
    max_pending: usize,
    state: Mutex<State>,
    /// Wakes the watcher. `notify_one` keeps a permit when nobody waits, so a wake-up between the
    /// watcher's look at the queue and its wait is never lost.
    pub wake: Notify,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("scope", &self.scope)
            .field("max_pending", &self.max_pending)
            .finish_non_exhaustive()
    }
}

impl Queue {
    pub(super) fn new(scope: WatchScope, deltas: bool, by: WatchedBy, max_pending: usize) -> Self {
        Self {
            scope,
            deltas,
            by,
            max_pending: max_pending.max(1),
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        }
    }

    /// Event `seq` of `agent` was logged. Called under the agent's log lock, so one agent's
    /// notices arrive in seq order.
    pub(super) fn logged(&self, agent: &Arc<Agent>, seq: u64) {
        {
            let mut state = lock(&self.state);
            if let Some(missed) = state.lagged.as_mut() {
                note_missed(missed, agent, seq);
                return;
            }
            match state.items.back_mut() {
                Some(Item::Logged {
                    agent: last, until, ..
                }) if Arc::ptr_eq(last, agent) => *until = (*until).max(seq.saturating_add(1)),
                _ => {
                    state.items.push_back(Item::Logged {
                        agent: agent.clone(),
                        from: seq,
                        until: seq.saturating_add(1),
                    });
                    self.bound(&mut state);
                }
            }
        }
        self.wake.notify_one();
    }

    /// `agent` streamed `text` at byte `offset` of `what` (a step's text, a call's output).
    pub(super) fn preview(&self, agent: &Arc<Agent>, what: &Preview, offset: u64, text: &str) {
        let len = text.len();
        {
            let mut state = lock(&self.state);
            if state.lagged.is_some() {
                state.skipped_text = state.skipped_text.saturating_add(len as u64);
                return;
            }
            let room = PENDING_TEXT_BUDGET.saturating_sub(state.pending_text);
            // Merge into the last waiting message when it is the same step's text (or call's
            // stream) and ends where this fragment starts (a skip in between makes the offsets
            // disagree).
            if let Some(Item::Preview {
                agent: a,
                what: w,
                offset: o,
                text: waiting,
                ..
            }) = state.items.back_mut()
                && Arc::ptr_eq(a, agent)
                && w == what
                && o.saturating_add(waiting.len() as u64) == offset
                && len <= room
            {
                waiting.push_str(text);
                state.pending_text += len;
            } else if len.saturating_add(ENTRY_COST) <= room {
                state.items.push_back(Item::Preview {
                    agent: agent.clone(),
                    what: what.clone(),
                    offset,
                    text: text.to_owned(),
                    time: dsh_session::now_ms(),
                });
                state.pending_text += len + ENTRY_COST;
                self.bound(&mut state);
            } else {
                if state.skipped_text == 0 {
                    tracing::debug!(
                        session = %agent.id(),
                        ?what,
                        "a watcher is slow; skipping streamed text and output until it catches up"
                    );
                }
                state.skipped_text = state.skipped_text.saturating_add(len as u64);
                return;
            }
        }
        self.wake.notify_one();
    }

    /// Lags the watcher when its entries pass the bound: keeps only which sessions it missed.
    fn bound(&self, state: &mut State) {
        if state.items.len() <= self.max_pending {
            return;
        }
        let mut missed = Vec::new();
        for item in state.items.drain(..) {
            if let Item::Logged { agent, from, .. } = item {
                note_missed(&mut missed, &agent, from);
            }
        }
        state.pending_text = 0;
        tracing::info!(
            scope = ?self.scope,
            max_pending = self.max_pending,
            sessions = missed.len(),
            "a watcher fell behind; it will catch up from the logs"
        );
        state.lagged = Some(missed);
    }

    /// Nothing more will come: wakes the watcher so it can end once it has read everything.
    pub(super) fn close(&self) {
        lock(&self.state).closed = true;
        self.wake.notify_one();
    }

    /// Takes the head of the queue.
    pub(super) fn next(&self) -> Next {
        let mut state = lock(&self.state);
        if let Some(missed) = state.lagged.take() {
            return Next::Lagged(missed);
        }
        match state.items.pop_front() {
            Some(item) => {
                if let Item::Preview { text, .. } = &item {
                    state.pending_text = state.pending_text.saturating_sub(text.len() + ENTRY_COST);
                }
                Next::Item(item)
            }
            None if state.closed => Next::Closed,
            None => Next::Wait,
        }
    }
}

/// Records that `agent`'s event `seq` was missed (one entry per session, its lowest seq).
fn note_missed(missed: &mut Vec<Missed>, agent: &Arc<Agent>, seq: u64) {
    match missed.iter_mut().find(|m| m.id == *agent.id()) {
        Some(entry) => entry.from = entry.from.min(seq),
        None => missed.push(Missed {
            id: agent.id().clone(),
            agent: Arc::downgrade(agent),
            from: seq,
        }),
    }
}
