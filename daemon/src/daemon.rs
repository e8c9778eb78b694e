//! The composition of the daemon's core: one value that owns every long-lived part and that the
//! `rpc/` layer translates requests against.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Everything the daemon is, shared behind an `Arc` by every request handler.
#[derive(Debug)]
pub struct Daemon {
    /// The resolved harness home; also what `DSH_HOME` says to every bash child.
    pub home: PathBuf,
    /// The socket this daemon serves on, for `Status` and for `DSH_SOCKET`.
    pub socket: PathBuf,
    /// Unix milliseconds at start, for `Status`.
    pub started_at_ms: i64,
    /// Cancelled when shutdown begins, whatever started it (signal or `Daemon.Shutdown`), so every
    /// long-running task and stream can wind down.
    shutdown: CancellationToken,
}

impl Daemon {
    /// Builds the daemon's core from a validated configuration.
    pub fn new(config: &Config, socket: PathBuf, shutdown: CancellationToken) -> Self {
        Self {
            home: config.home.path.clone(),
            socket,
            started_at_ms: now_ms(),
            shutdown,
        }
    }

    /// Starts shutdown (idempotent).
    pub fn request_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// A token cancelled when shutdown begins.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Name of the active persistence backend.
    pub fn persistence_name(&self) -> &'static str {
        "jsonl"
    }

    /// Number of live agents.
    pub fn live_agents(&self) -> usize {
        0
    }
}

/// Now, in Unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
