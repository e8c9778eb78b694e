//! The swappable backend: one handle that every consumer asks at the time of use, so a swap is seen
//! by the very next checkpoint, bash call or hook.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::{BackendKind, Persistence, PersistenceError, SessionLocation};
use crate::locks::{lock, read_lock, write_lock};
use dsh_session::{Event, SessionHeader, SessionId, SessionLog};

/// How many stored sessions' headers [`PersistenceHandle::known_header`] keeps (a few hundred
/// kilobytes at most); when full it starts over.
pub(crate) const KNOWN_HEADERS: usize = 4096;

/// The active backend, replaceable while the daemon runs (`Persistence.Use`).
#[derive(Debug)]
pub struct PersistenceHandle {
    current: RwLock<Current>,
    /// Headers of stored sessions read from the active backend, by id. A header never changes,
    /// so one read is good until the backend is swapped (which empties this): `Locate` of a stored
    /// session asked again answers without a trip to the blocking pool.
    known: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    generation: u64,
    headers: HashMap<SessionId, Arc<SessionHeader>>,
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
            known: Mutex::new(Known::default()),
        }
    }

    /// The active backend and its generation.
    pub fn current(&self) -> (Arc<dyn Persistence>, u64) {
        let current = read_lock(&self.current);
        (current.backend.clone(), current.generation)
    }

    /// The active backend.
    pub fn backend(&self) -> Arc<dyn Persistence> {
        self.current().0
    }

    /// Which backend is active.
    pub fn kind(&self) -> BackendKind {
        read_lock(&self.current).backend.kind()
    }

    /// Makes `backend` the active one; returns the new generation.
    pub fn swap(&self, backend: Arc<dyn Persistence>) -> u64 {
        let mut current = write_lock(&self.current);
        current.backend = backend;
        current.generation += 1;
        lock(&self.known).headers = HashMap::new();
        current.generation
    }

    /// The header of the stored session `id` as [`remember_header`](Self::remember_header) was
    /// told it by the backend active now, if it was. No I/O.
    pub fn known_header(&self, id: &SessionId) -> Option<Arc<SessionHeader>> {
        let generation = self.current().1;
        let known = lock(&self.known);
        (known.generation == generation)
            .then(|| known.headers.get(id).cloned())
            .flatten()
    }

    /// Keeps `header`, read from the backend of `generation`, for
    /// [`known_header`](Self::known_header); ignored if the backend has been swapped since.
    pub fn remember_header(&self, generation: u64, header: SessionHeader) {
        if self.current().1 != generation {
            return;
        }
        let mut known = lock(&self.known);
        if known.generation != generation || known.headers.len() >= KNOWN_HEADERS {
            known.generation = generation;
            known.headers.clear();
        }
        known.headers.insert(header.id.clone(), Arc::new(header));
    }

    /// Forgets the header of `id` (the session was deleted). No I/O.
    pub fn forget_header(&self, id: &SessionId) {
        lock(&self.known).headers.remove(id);
    }

    /// The active backend's answer for `header`. No I/O.
    pub fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        read_lock(&self.current).backend.locate(header)
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
    /// Whether nothing of the session was ever stored by this dshd (a new session before its
    /// first checkpoint).
    pub fn nothing_stored(&self) -> bool {
        self.generation.is_none()
    }

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
/// missing event: nothing is lost.
pub async fn checkpoint(
    handle: &PersistenceHandle,
    log: &SessionLog,
    cursor: &mut DurableCursor,
) -> Result<(), PersistenceError> {
    let in_place = |backend: &dyn Persistence, from| write_in_place(backend, log, from);
    checkpoint_from(handle, &log.header().id, cursor, in_place, |from| {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let tail = log.events().get(from..).unwrap_or_default().to_vec();
        (log.header().clone(), tail, log.len())
    })
    .await
}

/// Appends `log`'s events from `from` on through [`Persistence::append_in_place`]: the log's
/// length once written, `None` where the backend cannot write in place.
pub(crate) fn write_in_place(
    backend: &dyn Persistence,
    log: &SessionLog,
    from: u64,
) -> Option<Result<u64, PersistenceError>> {
    let start = usize::try_from(from).unwrap_or(usize::MAX);
    let events = log.events().get(start..).unwrap_or_default();
    if events.is_empty() {
        return None;
    }
    backend
        .append_in_place(log.header(), events)
        .map(|written| written.map(|()| log.len()))
}

/// What a checkpoint writes: the session's header, the events from the first one the backend
/// lacks, and the log's length.
pub(crate) type Tail = (Arc<SessionHeader>, Vec<Event>, u64);

/// [`checkpoint`] of the session `id`, whose log the caller reads through `in_place` (given the
/// backend and how many events it holds, [`write_in_place`] with the log held) or, where the
/// backend cannot write in place, `tail` (the [`Tail`] from there, copied). Called with no lock
/// held, so a live agent's log is locked across the backend's I/O only where the backend writes
/// in place, on a worker tokio lets block.
pub(crate) async fn checkpoint_from(
    handle: &PersistenceHandle,
    id: &SessionId,
    cursor: &mut DurableCursor,
    in_place: impl FnOnce(&dyn Persistence, u64) -> Option<Result<u64, PersistenceError>>,
    tail: impl FnOnce(u64) -> Tail,
) -> Result<(), PersistenceError> {
    let (backend, generation) = handle.current();
    let stored = if cursor.generation == Some(generation) {
        cursor.stored
    } else {
        backend.stored_len(id).await?.unwrap_or(0)
    };
    // Where the backend can write in place, the tail is written borrowed, the log held meanwhile.
    if let Some(written) = in_place(&*backend, stored) {
        return settle(cursor, generation, written);
    }
    let (header, events, len) = tail(stored);
    if stored > len {
        return Err(PersistenceError::SeqMismatch {
            id: id.clone(),
            expected: stored,
            got: len,
        });
    }
    let appended = if events.is_empty() {
        Ok(())
    } else {
        backend.append(&header, &events).await
    };
    settle(cursor, generation, appended.map(|()| len))
}

/// The cursor after an append of the log up to `written`'s length, or after its failure.
fn settle(
    cursor: &mut DurableCursor,
    generation: u64,
    written: Result<u64, PersistenceError>,
) -> Result<(), PersistenceError> {
    match written {
        Ok(len) => {
            *cursor = DurableCursor::at(generation, len);
            Ok(())
        }
        Err(error) => {
            // A database's answer may be lost although the append landed (the deadline passed while
            // it committed): then the next checkpoint asks the backend rather than trust a count.
            // Any other failure is a definite no, and the count stands: asking a JSONL backend would
            // count another writer's lines as ours and write after them.
            if matches!(
                error,
                PersistenceError::Unavailable { .. } | PersistenceError::Postgres { .. }
            ) {
                *cursor = DurableCursor::default();
            }
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn backend(root: &str) -> Arc<dyn Persistence> {
        crate::persistence::open(crate::persistence::BackendKind::Jsonl, PathBuf::from(root))
            .unwrap()
    }

    #[test]
    fn known_headers_belong_to_the_backend_they_were_read_from() {
        let handle = PersistenceHandle::new(backend("/a"));
        let header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 1);
        assert!(handle.known_header(&header.id).is_none());
        handle.remember_header(0, header.clone());
        assert_eq!(handle.known_header(&header.id).as_deref(), Some(&header));
        // A swap forgets them, and a header read before the swap is not taken after it.
        let generation = handle.swap(backend("/b"));
        assert!(handle.known_header(&header.id).is_none());
        handle.remember_header(generation - 1, header.clone());
        assert!(handle.known_header(&header.id).is_none());
        handle.remember_header(generation, header.clone());
        assert!(handle.known_header(&header.id).is_some());
        // Bounded: when full it starts over.
        for n in 0..KNOWN_HEADERS {
            let id = SessionId::parse(format!("other-{n}")).unwrap();
            handle.remember_header(generation, SessionHeader::new(id, "/w".into(), 1));
        }
        assert!(handle.known_header(&header.id).is_none());
    }
}
