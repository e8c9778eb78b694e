//! How a live agent tells the watch hub about what it logs and streams: the trait it publishes
//! through, and what an unlogged event is about.

use std::sync::Arc;

use tokio::sync::watch;

use super::live::Agent;
use crate::exec::OutputStream;

/// What an unlogged event a watcher is handed is about: a fragment of a step's model text or of
/// one stream of a call's output, or a retry of a model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Preview {
    /// The text the model streams in a step (`text/delta`).
    Text {
        /// The turn.
        turn: u32,
        /// The step.
        step: u32,
    },
    /// One stream of a tool call's output (`tool/output`).
    Output {
        /// The turn.
        turn: u32,
        /// The step.
        step: u32,
        /// The call.
        call_id: Arc<str>,
        /// Which stream.
        stream: OutputStream,
    },
    /// A model request of a step failed and is retried after a wait (`model/retry`); it carries
    /// no text.
    Retry {
        /// The turn.
        turn: u32,
        /// The step.
        step: u32,
        /// The attempt that failed.
        attempt: u32,
        /// The wait before the next attempt.
        delay_ms: u64,
        /// Why (`429`, `503`, `unreachable`).
        reason: String,
    },
}

/// Where a live agent publishes what happens to it: the watch hub (`watch/hub.rs`). A trait, so
/// this file does not name the watch module, which is built on agents.
pub(crate) trait Publish: Send + Sync + std::fmt::Debug {
    /// Event `seq` of `agent` was logged. Called under the agent's log lock.
    fn logged(&self, agent: &Arc<Agent>, seq: u64);
    /// `agent` streamed `text` at byte `offset` of `what` (its step's text, a call's output).
    fn preview(&self, agent: &Arc<Agent>, what: &Preview, offset: u64, text: &str);
    /// Whether any watcher follows `agent` now.
    fn watching(&self, agent: &Agent) -> bool;
    /// Changes whenever a watcher leaves.
    fn departures(&self) -> watch::Receiver<u64>;
}
