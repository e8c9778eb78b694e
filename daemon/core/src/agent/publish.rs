//! What an unlogged event a live agent streams to its watchers is about.

use std::sync::Arc;

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
    /// The reasoning the model streams in a step (`thought/delta`).
    Thought {
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
