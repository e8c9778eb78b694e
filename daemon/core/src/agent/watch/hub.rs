//! The hub every agent publishes to: the registered watchers, each with its scope and its own
//! bounded queue. Publishing never waits on a watcher: it locks each matching queue briefly and
//! moves on.

use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::queue::Queue;
use super::{Preview, WatchScope, WatchedBy};
use crate::agent::live::{Agent, Publish};
use crate::locks::{read_lock, write_lock};

/// The registered watchers of one daemon's agents.
#[derive(Debug)]
pub(crate) struct WatchHub {
    watchers: RwLock<Vec<Arc<Queue>>>,
    /// Bumped whenever a watcher leaves, so an approval waiting for a person can notice that
    /// nobody is watching its agent any more.
    departures: watch::Sender<u64>,
    /// Entries one watcher may have waiting before it is lagged.
    max_pending: usize,
    /// Set at shutdown: watchers end once they have read what was published.
    closed: std::sync::atomic::AtomicBool,
}

impl WatchHub {
    /// A hub whose watchers may each have `max_pending` entries waiting.
    pub(crate) fn new(max_pending: usize) -> Self {
        Self {
            watchers: RwLock::new(Vec::new()),
            departures: watch::Sender::new(0),
            max_pending,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Registers a watcher's queue: it is told of everything published from now on.
    pub(super) fn register(&self, scope: WatchScope, deltas: bool, by: WatchedBy) -> Arc<Queue> {
        let queue = Arc::new(Queue::new(scope, deltas, by, self.max_pending));
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            queue.close();
        }
        write_lock(&self.watchers).push(queue.clone());
        queue
    }

    /// Removes a watcher (its stream ended or its client went away).
    pub(super) fn unregister(&self, queue: &Arc<Queue>) {
        write_lock(&self.watchers).retain(|q| !Arc::ptr_eq(q, queue));
        self.departures.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Event `seq` of `agent` was logged. Call under the agent's log lock (see [`Queue::logged`]).
    pub(crate) fn logged(&self, agent: &Arc<Agent>, seq: u64) {
        for queue in read_lock(&self.watchers).iter() {
            if queue.scope.covers(agent) {
                queue.logged(agent, seq);
            }
        }
    }

    /// `agent` streamed `text` at byte `offset` of `what` (its step's text, a call's output).
    pub(crate) fn preview(&self, agent: &Arc<Agent>, what: &Preview, offset: u64, text: &str) {
        for queue in read_lock(&self.watchers).iter() {
            if queue.deltas && queue.scope.covers(agent) {
                queue.preview(agent, what, offset, text);
            }
        }
    }

    /// Whether a person follows `agent` now (watchers inside dshd's commands do not count).
    pub(crate) fn watching(&self, agent: &Agent) -> bool {
        read_lock(&self.watchers)
            .iter()
            .any(|q| q.by == WatchedBy::Person && q.scope.covers(agent))
    }

    /// Changes whenever a watcher leaves.
    pub(crate) fn departures(&self) -> watch::Receiver<u64> {
        self.departures.subscribe()
    }

    /// Shutdown: every watcher ends once it has read what was published.
    pub(crate) fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        for queue in read_lock(&self.watchers).iter() {
            queue.close();
        }
    }
}

impl Publish for WatchHub {
    fn logged(&self, agent: &Arc<Agent>, seq: u64) {
        WatchHub::logged(self, agent, seq);
    }

    fn preview(&self, agent: &Arc<Agent>, what: &Preview, offset: u64, text: &str) {
        WatchHub::preview(self, agent, what, offset, text);
    }

    fn watching(&self, agent: &Agent) -> bool {
        WatchHub::watching(self, agent)
    }

    fn departures(&self) -> watch::Receiver<u64> {
        WatchHub::departures(self)
    }
}
