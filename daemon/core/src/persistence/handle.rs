//! The swappable backend: one handle that every consumer asks at the time of use, so a swap is seen
//! by the very next checkpoint, bash call or hook.

use std::sync::{Arc, PoisonError, RwLock};

use super::{BackendKind, Persistence, PersistenceError, SessionLocation};
use crate::session::{SessionHeader, SessionLog};

/// The active backend, replaceable while the daemon runs (`Persistence.Use`).
#[derive(Debug)]
pub struct PersistenceHandle {
    current: RwLock<Current>,
}

#[derive(Debug, Clone)]
struct Current {
    backend: Arc<dyn Persistence>,
    /// Bumped on every swap, so a session can tell that its durable cursor belongs to another
    /// backend and must be recomputed against the new one.
    generation: u64,
}

impl PersistenceHandle {
    /// A handle starting with `backend`.
    pub fn new(backend: Arc<dyn Persistence>) -> Self {
        Self {
            current: RwLock::new(Current {
                backend,
                generation: 0,
            }),
        }
    }

    /// The active backend and its generation.
    pub fn current(&self) -> (Arc<dyn Persistence>, u64) {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        (current.backend.clone(), current.generation)
    }

    /// The active backend.
    pub fn backend(&self) -> Arc<dyn Persistence> {
        self.current().0
    }

    /// Which backend is active.
    pub fn kind(&self) -> BackendKind {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .backend
            .kind()
    }

    /// Makes `backend` the active one; returns the new generation.
    pub fn swap(&self, backend: Arc<dyn Persistence>) -> u64 {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        current.backend = backend;
        current.generation += 1;
        current.generation
    }

    /// The active backend's answer for `header`. No I/O.
    pub fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .backend
            .locate(header)
    }
}

/// How much of one session's log is durable, and in which backend generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableCursor {
    /// The generation the count belongs to; `None` before the first checkpoint.
    generation: Option<u64>,
    /// Events durable in that generation's backend.
    stored: u64,
}

impl DurableCursor {
    /// A cursor for a log whose first `stored` events are already durable in the active backend
    /// generation `generation` (e.g. a session just loaded from it).
    pub fn at(generation: u64, stored: u64) -> Self {
        Self {
            generation: Some(generation),
            stored,
        }
    }

    /// Events durable in the backend this cursor belongs to.
    pub fn stored(&self) -> u64 {
        self.stored
    }
}

/// Makes `log` durable in the active backend: appends what that backend lacks. After a swap the
/// new backend is asked what it holds, so the first checkpoint there writes the header and every
/// missing event: nothing is lost. Blocking: call it on the blocking pool.
pub fn checkpoint(
    handle: &PersistenceHandle,
    log: &SessionLog,
    cursor: &mut DurableCursor,
) -> Result<(), PersistenceError> {
    let (backend, generation) = handle.current();
    let stored = if cursor.generation == Some(generation) {
        cursor.stored
    } else {
        backend.stored_len(&log.header().id)?.unwrap_or(0)
    };
    let len = log.len();
    if stored > len {
        return Err(PersistenceError::SeqMismatch {
            id: log.header().id.clone(),
            expected: stored,
            got: len,
        });
    }
    if stored < len {
        let from = usize::try_from(stored).unwrap_or(usize::MAX);
        backend.append(log.header(), &log.events()[from..])?;
    }
    *cursor = DurableCursor::at(generation, len);
    Ok(())
}
