//! Persistence: the [`Persistence`] trait every backend implements, the [`SessionLocation`] it
//! answers, and the swappable [`PersistenceHandle`] that every consumer asks at the time of use
//! (CONTRACTS §4.3).
//!
//! The trait is async: the file backends do their blocking inside ([`OnBlockingPool`]), the
//! PostgreSQL backend runs on the caller's runtime. [`Persistence::locate`] stays synchronous and
//! does no I/O at all.

pub(crate) mod blocking;
pub(crate) mod choice;
#[cfg(test)]
mod contract_tests;
mod error;
pub(crate) mod handle;
pub(crate) mod jsonl;
pub(crate) mod page;
pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use blocking::{BlockingPersistence, OnBlockingPool};
pub use error::PersistenceError;
pub(crate) use error::{free_space, write_error};
pub use handle::PersistenceHandle;
pub use page::{Creator, ListKey, MAX_PAGE_SIZE, Order, Page, PageQuery};

use dsh_session::{Event, EventData, SessionHeader, SessionId, SessionMeta};

/// Where a backend keeps one session's transcript. A location hint, not a promise: the file may
/// not exist until the session's first checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLocation {
    /// The backend kind, e.g. `"jsonl"`.
    pub kind: &'static str,
    /// Absolute path; empty for a backend with no per-session file (`postgres`).
    pub path: PathBuf,
    /// The database holding the session, credentials removed (`postgres`); `None` for a file.
    pub database: Option<String>,
}

/// Which backend, as named in config and on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// One `.jsonl` file per session.
    Jsonl,
    /// One SQLite database for all sessions.
    Sqlite,
    /// One PostgreSQL database for the sessions of many machines.
    Postgres,
}

impl BackendKind {
    /// The name used in config, flags and `Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// A session as a backend holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The header.
    pub header: SessionHeader,
    /// Every event, contiguous from seq 0 (after repair, for `load`).
    pub events: Vec<Event>,
    /// What `load` repaired (always empty for `inspect`).
    pub repairs: Vec<Repair>,
}

/// A repair made while loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// A torn tail was cut: `lines` lines (or rows) dropped, starting at 1-based line `from_line`.
    TornTail {
        /// First dropped line.
        from_line: usize,
        /// Number of dropped lines.
        lines: usize,
    },
    /// An open turn was closed with `events` synthetic events ending in `turn/end {interrupted}`.
    ClosedOpenTurn {
        /// The turn.
        turn: u32,
        /// Number of events appended.
        events: usize,
    },
}

/// What [`Persistence::repair`] found in a stored session, and what it did or would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The file or database holding the session.
    pub path: PathBuf,
    /// What is wrong, one finding a line; empty when nothing is.
    pub findings: Vec<String>,
    /// What the repair does (or did, when `applied`); empty when there is nothing it can do.
    pub actions: Vec<String>,
    /// Whether the actions were carried out.
    pub applied: bool,
}

/// A session store (CONTRACTS §4.3). Implementations: [`jsonl::JsonlBackend`] and
/// [`sqlite::SqliteBackend`] (blocking, each behind [`OnBlockingPool`]), and
/// [`postgres::PostgresBackend`] (async on the caller's runtime).
///
/// Async and object safe (boxed futures, `async_trait`), so one `Arc<dyn Persistence>` serves
/// every caller on dshd's runtime: a backend that blocks does its blocking inside, never on the
/// caller's thread.
///
/// Contract (checked by one suite against every backend):
/// - creation is lazy: nothing is written for a session before its first [`append`](Self::append);
/// - `append` returns only once the events are durable, and leaves no partial write behind on error;
/// - [`locate`](Self::locate) is pure: no I/O at all, not even a `stat`;
/// - `load` repairs (drops a torn tail, closes an open turn) and writes the repair; `inspect` never
///   writes;
/// - ids never escape the backend's root, whatever bytes they contain;
/// - every call ends: a backend that waits on a server bounds the wait and answers
///   [`PersistenceError::Unavailable`] when it runs out.
#[async_trait::async_trait]
pub trait Persistence: Send + Sync + std::fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// The root directory (JSONL), database file (SQLite) or database as shown (PostgreSQL).
    fn path(&self) -> PathBuf;

    /// Where this backend keeps (or will keep) the session's transcript, or `None` when it has no
    /// honest per-session file. Synchronous and side-effect free: no I/O of any kind.
    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation>;

    /// How many events this backend already holds for the session (`None`: not stored here).
    async fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError>;

    /// Durably appends `events` (contiguous) to the session. When `events[0].seq` is 0 and the
    /// session is not stored yet, this creates it with `header` first. Any other start must equal
    /// the stored length ([`PersistenceError::SeqMismatch`] otherwise). An empty batch writes
    /// nothing.
    async fn append(
        &self,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<(), PersistenceError>;

    /// Appends as [`append`](Self::append) does, on the caller's thread, when the backend's
    /// writes block and the runtime lets a worker block in place (tokio's multi-threaded one);
    /// `None` when it cannot. A checkpoint writes a live log's tail through it while holding the
    /// log, so a step that holds a 50 MB reply is not copied to be written.
    fn append_in_place(
        &self,
        _header: &SessionHeader,
        _events: &[Event],
    ) -> Option<Result<(), PersistenceError>> {
        None
    }

    /// Loads a session for resuming, repairing it (and persisting the repair) if needed.
    async fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError>;

    /// Reads a session as stored, without repairing or writing anything.
    async fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError>;

    /// Headers of every stored session, oldest first. Reads every header: for a client-facing
    /// listing use [`list_page`](Self::list_page).
    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError>;

    /// The header of the stored session `id` (`None`: not stored here), read without its events,
    /// so the cost does not grow with the length of the log (`Persistence.Locate` of a stored
    /// session). The default reads the whole session; the shipped backends read the header only.
    async fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        match self.inspect(id).await {
            Ok(stored) => Ok(Some(stored.header)),
            Err(PersistenceError::NotFound(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// One page of stored sessions' headers in `query.order`, strictly after `query.after`
    /// (see `page.rs` for why that never skips or repeats a session). The shipped backends answer
    /// from an index, so the cost does not grow with the number of sessions stored; the default
    /// lists everything and is meant for test doubles.
    async fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        Ok(page::page_of(self.list().await?, query))
    }

    /// Finds damage in the stored session `id` that [`load`](Self::load) refuses rather than
    /// guess at, and says what a repair would do; with `apply`, does it. A repair never deletes:
    /// what it takes out of the log is kept beside it. The caller guarantees that no agent has the
    /// session live. The default finds nothing: a backend whose writes are transactions leaves no
    /// damage behind (it still answers `NotFound` for a session it does not hold).
    async fn repair(&self, id: &SessionId, apply: bool) -> Result<RepairReport, PersistenceError> {
        let _ = apply;
        match self.header(id).await? {
            Some(_) => Ok(RepairReport {
                path: self.path(),
                ..RepairReport::default()
            }),
            None => Err(PersistenceError::NotFound(id.clone())),
        }
    }

    /// The title and archived flag of the stored session `id` (`None`: not stored here), derived
    /// from its events ([`SessionMeta::of`]). The default reads the whole session.
    async fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, PersistenceError> {
        match self.inspect(id).await {
            Ok(stored) => Ok(Some(SessionMeta::of(&stored.header, &stored.events))),
            Err(PersistenceError::NotFound(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// The metadata ([`meta`](Self::meta)) of each of `ids`, by id: a session not stored here is
    /// left out, one whose metadata cannot be read maps to why. A listing asks this once per
    /// page. The default asks `meta` for each; a backend on a server answers all in one round
    /// trip. Fails as a whole only when the store cannot be asked at all.
    async fn metas(&self, ids: &[SessionId]) -> Result<Metas, PersistenceError> {
        let mut out = Metas::new();
        for id in ids {
            match self.meta(id).await {
                Ok(Some(meta)) => {
                    out.insert(id.clone(), Ok(meta));
                }
                Ok(None) => {}
                Err(error) => {
                    out.insert(id.clone(), Err(error));
                }
            }
        }
        Ok(out)
    }

    /// Gets ready for the first calls, so that the first one a client makes does not pay for it:
    /// a connection opened, what every read needs prepared. Writes nothing, creates nothing; a
    /// failure is left for the first real call to report. The default does nothing.
    async fn warm(&self) {}

    /// Names the stored session `id`: appends a `session/title` event to its log, so the title
    /// travels with the session. The caller guarantees that no agent has the session live (a live
    /// agent logs the event itself) and has checked the title (`check_title`).
    async fn set_title(&self, id: &SessionId, title: &str) -> Result<(), PersistenceError> {
        let data = EventData::SessionTitle {
            title: title.to_owned(),
        };
        append_meta(self, id, data).await
    }

    /// Archives the stored session `id` (or takes it back): appends a `session/archived` event to
    /// its log. The caller guarantees that no agent has the session live.
    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<(), PersistenceError> {
        append_meta(self, id, EventData::SessionArchived { archived }).await
    }

    /// Removes the stored session `id` from this backend: its log and everything the backend
    /// derived from it (set-aside tails, index entries, rows), durably; afterwards the backend
    /// answers [`PersistenceError::NotFound`] for it. Files in the session's place that the backend
    /// did not write are left where they are. The caller guarantees that no agent has the session
    /// live.
    async fn delete(&self, id: &SessionId) -> Result<(), PersistenceError>;

    /// Lets go of whatever the backend keeps for the session between calls (the JSONL backend's
    /// open file, the PostgreSQL backend's lease), because no agent writes it any more. The
    /// session stays stored; a later call reads it again. The caller guarantees that no append of
    /// this session is in flight. Never fails: what cannot be let go of now expires on its own.
    async fn release(&self, _id: &SessionId) {}

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

/// What [`Persistence::metas`] answers: each stored session's metadata, or why it cannot be read.
pub type Metas = std::collections::HashMap<SessionId, Result<SessionMeta, PersistenceError>>;

/// Appends one metadata event to the stored session `id`, after its last event.
async fn append_meta<P: Persistence + ?Sized>(
    backend: &P,
    id: &SessionId,
    data: EventData,
) -> Result<(), PersistenceError> {
    let header = backend
        .header(id)
        .await?
        .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
    let seq = backend
        .stored_len(id)
        .await?
        .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
    let event = Event {
        seq,
        time: dsh_session::now_ms(),
        data,
    };
    let appended = backend.append(&header, &[event]).await;
    // Nobody writes this session now: whatever the backend opened for it can go.
    backend.release(id).await;
    appended
}

/// Opens the backend of `kind` at `path` (the JSONL root, or the SQLite database file), behind
/// [`OnBlockingPool`]. Like the backends' own constructors, this touches nothing on disk.
/// PostgreSQL has no path: open it with [`open_postgres`].
pub fn open(kind: BackendKind, path: PathBuf) -> Result<Arc<dyn Persistence>, PersistenceError> {
    Ok(match kind {
        BackendKind::Jsonl => Arc::new(OnBlockingPool::new(jsonl::JsonlBackend::new(path)?)),
        BackendKind::Sqlite => Arc::new(OnBlockingPool::new(sqlite::SqliteBackend::open(path)?)),
        BackendKind::Postgres => {
            return Err(PersistenceError::Config(
                "the postgres backend is opened with a connection string, not a path".to_owned(),
            ));
        }
    })
}

/// Opens the PostgreSQL backend of `options`. Connects to nothing yet.
pub fn open_postgres(
    options: postgres::PostgresOptions,
) -> Result<Arc<dyn Persistence>, PersistenceError> {
    Ok(Arc::new(postgres::PostgresBackend::open(options)?))
}

/// Whether two backend locations name the same file or directory: equal once links, `.` and `..`
/// are resolved. A location that does not exist yet is compared by its resolved directory and
/// its name. Reads the file system (no writes).
pub fn same_location(a: &Path, b: &Path) -> bool {
    a == b || resolved(a) == resolved(b)
}

fn resolved(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map_or_else(|_| path.to_owned(), |parent| parent.join(name)),
        _ => path.to_owned(),
    }
}

/// Checks that an append batch is contiguous and returns its first seq (0 for an empty batch).
fn batch_start(id: &SessionId, events: &[Event]) -> Result<u64, PersistenceError> {
    let first = events.first().map_or(0, |e| e.seq);
    for (offset, event) in (0u64..).zip(events) {
        let expected = first.saturating_add(offset);
        if event.seq != expected {
            return Err(PersistenceError::SeqMismatch {
                id: id.clone(),
                expected,
                got: event.seq,
            });
        }
    }
    Ok(first)
}

/// The events that close the turn `events` leaves open (`close_open_turn`) and the repair that
/// appending them is, for `load`; `None` when no turn is open.
fn open_turn_closers(events: &[Event]) -> Option<(Vec<Event>, Repair)> {
    let closers = dsh_session::repair::close_open_turn(events);
    let EventData::TurnEnd { turn, .. } = closers.last()?.data else {
        return None;
    };
    let repair = Repair::ClosedOpenTurn {
        turn,
        events: closers.len(),
    };
    Some((closers, repair))
}

/// An event from a database row's columns (SQLite's and PostgreSQL's `events` tables), or what is
/// wrong with them, worded the same for both backends.
pub(crate) fn event_of_row(
    seq: u64,
    time: i64,
    type_name: &str,
    data: &str,
) -> Result<dsh_session::Event, String> {
    dsh_session::Event::from_columns(seq, time, type_name, data).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            format!("data is not JSON: {e}")
        } else {
            e.to_string()
        }
    })
}

/// Parses and checks a header stored in a database row (SQLite, PostgreSQL).
pub(crate) fn parse_header(text: &str) -> Result<SessionHeader, String> {
    let header: SessionHeader =
        serde_json::from_str(text).map_err(|e| format!("invalid session header: {e}"))?;
    header.validate().map_err(|e| e.to_string())?;
    Ok(header)
}

/// The header of a listed row, or `None` (logged) when it cannot be listed: unreadable, or naming
/// another id. Listings skip such rows rather than fail for every other session.
pub(crate) fn readable_header(id: &str, text: &str) -> Option<SessionHeader> {
    match parse_header(text) {
        Ok(header) if header.id.as_str() == id => Some(header),
        Ok(_) => {
            tracing::warn!(%id, "skipping a session row whose header names another id");
            None
        }
        Err(reason) => {
            tracing::warn!(%id, %reason, "skipping a session with an unreadable header");
            None
        }
    }
}
