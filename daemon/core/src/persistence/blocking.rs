//! Backends whose I/O blocks (JSONL files, SQLite) behind the async [`Persistence`]: they implement
//! the synchronous [`BlockingPersistence`], and [`OnBlockingPool`] runs each of its calls on
//! tokio's blocking pool, so no caller has to.

use std::path::PathBuf;
use std::sync::Arc;

use super::{
    BackendKind, Creator, Metas, Page, PageQuery, Persistence, PersistenceError, RepairReport,
    SessionLocation, StoredSession, page,
};
use dsh_session::{Event, EventData, SessionHeader, SessionId, SessionMeta};

/// A session store whose operations block the calling thread (files, SQLite): the same
/// operations and contract as [`Persistence`], each a plain call. [`OnBlockingPool`] makes one a
/// [`Persistence`], running each call on the blocking pool.
pub trait BlockingPersistence: Send + Sync + std::fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// The root directory (JSONL) or database file (SQLite).
    fn path(&self) -> PathBuf;

    /// Where this backend keeps (or will keep) the session's transcript, or `None` when it has no
    /// honest per-session file. Synchronous and side-effect free: no I/O of any kind.
    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation>;

    /// How many events this backend already holds for the session (`None`: not stored here).
    fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError>;

    /// Durably appends `events` (non-empty, contiguous) to the session. When `events[0].seq` is 0
    /// and the session is not stored yet, this creates it with `header` first. Any other start must
    /// equal the stored length ([`PersistenceError::SeqMismatch`] otherwise).
    fn append(&self, header: &SessionHeader, events: &[Event]) -> Result<(), PersistenceError>;

    /// Loads a session for resuming, repairing it (and persisting the repair) if needed.
    fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError>;

    /// Reads a session as stored, without repairing or writing anything.
    fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError>;

    /// Headers of every stored session, oldest first. Reads every header: for a client-facing
    /// listing use [`list_page`](Self::list_page).
    fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError>;

    /// The header of the stored session `id` (`None`: not stored here), read without its events,
    /// so the cost does not grow with the length of the log (`Persistence.Locate` of a stored
    /// session). The default reads the whole session; both shipped backends read the header only.
    fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        match self.inspect(id) {
            Ok(stored) => Ok(Some(stored.header)),
            Err(PersistenceError::NotFound(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// [`header`](Self::header), if the backend can answer at once on the caller's thread: from
    /// a file system known to be local, with no lock that a long operation may hold, so an async
    /// caller may call it without going to the blocking pool (a trip that costs more than the
    /// read). `None`: it cannot promise that, and the caller reads the header on the blocking
    /// pool. The default is `None`.
    fn header_now(
        &self,
        id: &SessionId,
    ) -> Option<Result<Option<SessionHeader>, PersistenceError>> {
        let _ = id;
        None
    }

    /// One page of stored sessions' headers in `query.order`, strictly after `query.after`
    /// (see `page.rs` for why that never skips or repeats a session). The shipped backends answer
    /// from an index, so the cost does not grow with the number of sessions stored; the default
    /// lists everything and is meant for test doubles.
    fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        Ok(page::page_of(self.list()?, query))
    }

    /// Finds damage in the stored session `id` that [`load`](Self::load) refuses rather than
    /// guess at, and says what a repair would do; with `apply`, does it. A repair never deletes:
    /// what it takes out of the log is kept beside it. The caller guarantees that no agent has the
    /// session live. The default finds nothing: a backend whose writes are transactions leaves no
    /// damage behind (it still answers `NotFound` for a session it does not hold).
    fn repair(&self, id: &SessionId, apply: bool) -> Result<RepairReport, PersistenceError> {
        let _ = apply;
        match self.header(id)? {
            Some(_) => Ok(RepairReport {
                path: self.path(),
                ..RepairReport::default()
            }),
            None => Err(PersistenceError::NotFound(id.clone())),
        }
    }

    /// The title and archived flag of the stored session `id` (`None`: not stored here), derived
    /// from its events ([`SessionMeta::of`]). The default reads the whole session.
    fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, PersistenceError> {
        match self.inspect(id) {
            Ok(stored) => Ok(Some(SessionMeta::of(&stored.header, &stored.events))),
            Err(PersistenceError::NotFound(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Gets ready for the first calls ([`Persistence::warm`]). The default does nothing.
    fn warm(&self) {}

    /// Names the stored session `id`: appends a `session/title` event to its log, so the title
    /// travels with the session. The caller guarantees that no agent has the session live (a live
    /// agent logs the event itself) and has checked the title
    /// (`check_title`).
    fn set_title(&self, id: &SessionId, title: &str) -> Result<(), PersistenceError> {
        append_meta(
            self,
            id,
            EventData::SessionTitle {
                title: title.to_owned(),
            },
        )
    }

    /// Archives the stored session `id` (or takes it back): appends a `session/archived` event to
    /// its log. The caller guarantees that no agent has the session live.
    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<(), PersistenceError> {
        append_meta(self, id, EventData::SessionArchived { archived })
    }

    /// Removes the stored session `id` from this backend: its log and everything the backend
    /// derived from it (set-aside tails, index entries, rows), durably; afterwards the backend
    /// answers [`PersistenceError::NotFound`] for it. Files in the session's place that the backend
    /// did not write are left where they are. The caller guarantees that no agent has the session
    /// live.
    fn delete(&self, id: &SessionId) -> Result<(), PersistenceError>;

    /// Lets go of whatever the backend keeps for the session between calls (the JSONL backend's
    /// open file), because no agent writes it any more. The session stays stored; a later call
    /// reads it again. The caller guarantees that no append of this session is in flight.
    fn release(&self, _id: &SessionId) {}

    /// Why the backend's store cannot be reached right now, if it cannot (a database server that
    /// is down); `None` when it can, or when the backend has no server (files). No I/O: the
    /// answer of the last attempt.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Who this backend records as the creator of the sessions it stores first (see
    /// [`Page::creators`]); `None` for backends that record no creator.
    fn creator(&self) -> Option<Creator> {
        None
    }
}

/// Appends one metadata event to the stored session `id`, after its last event.
fn append_meta<P: BlockingPersistence + ?Sized>(
    backend: &P,
    id: &SessionId,
    data: EventData,
) -> Result<(), PersistenceError> {
    let header = backend
        .header(id)?
        .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
    let seq = backend
        .stored_len(id)?
        .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
    let event = Event {
        seq,
        time: dsh_session::now_ms(),
        data,
    };
    let appended = backend.append(&header, &[event]);
    // Nobody writes this session now: whatever the backend opened for it can go.
    backend.release(id);
    appended
}

/// A [`BlockingPersistence`] as a [`Persistence`]: every call that may touch the disk runs on
/// tokio's blocking pool, except a header the backend can read at once
/// ([`BlockingPersistence::header_now`]), which is read on the caller's thread because the trip
/// to the pool costs more than the read.
#[derive(Debug)]
pub struct OnBlockingPool<B>(Arc<B>);

impl<B: BlockingPersistence + 'static> OnBlockingPool<B> {
    /// Wraps `backend`.
    pub fn new(backend: B) -> Self {
        Self(Arc::new(backend))
    }

    /// The backend itself, for its blocking calls.
    pub fn blocking(&self) -> &B {
        &self.0
    }

    /// Runs `work` on the blocking pool with the backend.
    async fn run<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&B) -> Result<T, PersistenceError> + Send + 'static,
    ) -> Result<T, PersistenceError> {
        let backend = self.0.clone();
        tokio::task::spawn_blocking(move || work(&backend))
            .await
            .unwrap_or_else(|join| {
                Err(PersistenceError::Task {
                    what,
                    message: join.to_string(),
                })
            })
    }
}

#[async_trait::async_trait]
impl<B: BlockingPersistence + 'static> Persistence for OnBlockingPool<B> {
    fn kind(&self) -> BackendKind {
        self.0.kind()
    }

    fn path(&self) -> PathBuf {
        self.0.path()
    }

    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.0.locate(header)
    }

    async fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        let id = id.clone();
        self.run("stored_len", move |b| b.stored_len(&id)).await
    }

    async fn append(
        &self,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<(), PersistenceError> {
        if events.is_empty() {
            return Ok(());
        }
        if let Some(done) = self.append_in_place(header, events) {
            return done;
        }
        let header = header.clone();
        let events = events.to_vec();
        self.run("append", move |b| b.append(&header, &events))
            .await
    }

    // On dshd's multi-threaded runtime the write blocks this worker in place (tokio moves its
    // other tasks away) rather than copying the events to the blocking pool: a step's events can
    // hold a 50 MB reply, and a copy per checkpoint is that much more memory.
    fn append_in_place(
        &self,
        header: &SessionHeader,
        events: &[Event],
    ) -> Option<Result<(), PersistenceError>> {
        tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            .then(|| tokio::task::block_in_place(|| self.0.append(header, events)))
    }

    async fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let id = id.clone();
        self.run("load", move |b| b.load(&id)).await
    }

    async fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let id = id.clone();
        self.run("inspect", move |b| b.inspect(&id)).await
    }

    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        self.run("list", |b| b.list()).await
    }

    async fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        if let Some(now) = self.0.header_now(id) {
            return now;
        }
        let id = id.clone();
        self.run("header", move |b| b.header(&id)).await
    }

    async fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        let query = query.clone();
        self.run("list_page", move |b| b.list_page(&query)).await
    }

    async fn repair(&self, id: &SessionId, apply: bool) -> Result<RepairReport, PersistenceError> {
        let id = id.clone();
        self.run("repair", move |b| b.repair(&id, apply)).await
    }

    async fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, PersistenceError> {
        let id = id.clone();
        self.run("meta", move |b| b.meta(&id)).await
    }

    /// Every session's metadata in one trip to the blocking pool.
    async fn metas(&self, ids: &[SessionId]) -> Result<Metas, PersistenceError> {
        let ids = ids.to_vec();
        self.run("metas", move |b| {
            let mut out = Metas::new();
            for id in ids {
                match b.meta(&id) {
                    Ok(Some(meta)) => {
                        out.insert(id, Ok(meta));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        out.insert(id, Err(error));
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn warm(&self) {
        let _ = self
            .run("warm", |b| {
                b.warm();
                Ok(())
            })
            .await;
    }

    async fn set_title(&self, id: &SessionId, title: &str) -> Result<(), PersistenceError> {
        let id = id.clone();
        let title = title.to_owned();
        self.run("set_title", move |b| b.set_title(&id, &title))
            .await
    }

    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<(), PersistenceError> {
        let id = id.clone();
        self.run("set_archived", move |b| b.set_archived(&id, archived))
            .await
    }

    async fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        let id = id.clone();
        self.run("delete", move |b| b.delete(&id)).await
    }

    /// Lets go of the backend's state for `id` on the caller's thread: dropping an open file or
    /// nothing, never a write.
    async fn release(&self, id: &SessionId) {
        self.0.release(id);
    }

    fn unavailable(&self) -> Option<String> {
        self.0.unavailable()
    }

    fn creator(&self) -> Option<Creator> {
        self.0.creator()
    }
}
