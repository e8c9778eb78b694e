//! An agent's background hooks (Claude Code's `"async": true`): run without the call waiting,
//! at most [`MAX_RUNNING`] at once, killed when the agent is closed; what they say for the model
//! waits here for its next turn.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use crate::hooks::{Background, BackgroundEnd};
use crate::locks::lock;

/// Background hooks one agent may have running; more are not started (and dshd's log says so):
/// a hook on every tool call of a fast loop must not pile up processes.
pub(crate) const MAX_RUNNING: usize = 16;

/// One agent's background hooks.
#[derive(Debug, Default)]
pub(crate) struct BackgroundHooks {
    /// Cancelled when the agent is closed: kills their processes.
    cancel: CancellationToken,
    /// How many run now.
    running: std::sync::Arc<AtomicUsize>,
    /// What finished ones said for the model, for its next turn.
    context: std::sync::Arc<Mutex<Vec<(&'static str, String)>>>,
}

impl BackgroundHooks {
    /// The token background hooks run under.
    pub(crate) fn token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Kills every running one; their records are not logged.
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }

    /// What finished hooks said for the model since the last call.
    pub(crate) fn take_context(&self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut *lock(&self.context))
    }

    /// Starts `hook` unless [`MAX_RUNNING`] run already; `records` gets its records when it ends
    /// (not when the agent was closed meanwhile).
    pub(crate) fn start(
        &self,
        hook: Background,
        records: impl FnOnce(BackgroundEnd) + Send + 'static,
    ) {
        if self.running.fetch_add(1, Ordering::SeqCst) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                limit = MAX_RUNNING,
                "an async hook was not started: the agent has as many running as it may"
            );
            return;
        }
        let (cancel, running, context) = (
            self.cancel.clone(),
            self.running.clone(),
            self.context.clone(),
        );
        tokio::spawn(async move {
            let mut end = hook.run().await;
            if !cancel.is_cancelled() {
                lock(&context).append(&mut end.context);
                records(end);
            }
            running.fetch_sub(1, Ordering::SeqCst);
        });
    }
}
