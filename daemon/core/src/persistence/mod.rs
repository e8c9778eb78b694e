//! Persistence: the [`Persistence`] trait every backend implements, the [`SessionLocation`] it
//! answers, and the swappable [`PersistenceHandle`] that every consumer asks at the time of use
//! (CONTRACTS §4.3).
//!
//! Backends are synchronous (callers run I/O on the blocking pool); only [`Persistence::locate`] is
//! called on async paths, and it does no I/O at all.

pub(crate) mod choice;
#[cfg(test)]
mod contract_tests;
pub(crate) mod handle;
pub(crate) mod jsonl;
pub(crate) mod page;
pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Why a persistence operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PersistenceError {
    /// The backend does not hold this session.
    #[error("session {0} not found")]
    NotFound(SessionId),
    /// Stored data is damaged before the last completed turn: nothing is changed.
    #[error("{}:{line}: corrupt session log: {message}", path.display())]
    Corrupt {
        /// The file (JSONL) or database (SQLite).
        path: PathBuf,
        /// 1-based line (JSONL) or event seq + 1 (SQLite); 0 when not line-shaped.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An append did not continue the stored log.
    #[error("session {id}: append starts at seq {got} but the backend holds {expected} events")]
    SeqMismatch {
        /// The session.
        id: SessionId,
        /// The seq the backend expected next.
        expected: u64,
        /// The first seq offered.
        got: u64,
    },
    /// The stored log changed behind this daemon's back (another process appended to it, replaced
    /// or removed it): nothing was written, so nothing of the other writer's is overwritten.
    #[error("{}: {reason}; refusing to append (is another dshd using this home?)", path.display())]
    Diverged {
        /// The log file.
        path: PathBuf,
        /// What changed.
        reason: String,
    },
    /// The log was written by a newer dsh: it is read as far as this dshd understands it, never
    /// written (resumed, appended to or repaired).
    #[error(
        "{} was written by a newer dsh (session format version {version}; this dshd writes version {}): it can be read, not resumed or written; use that dsh",
        path.display(),
        dsh_session::FORMAT_VERSION
    )]
    NewerFormat {
        /// The log file.
        path: PathBuf,
        /// The version its header names.
        version: u32,
    },
    /// The database file belongs to something else.
    #[error("{} is not a dsh session database: {reason}", path.display())]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// A file-system operation failed.
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// SQLite failed.
    #[error("sqlite {}: {error}", path.display())]
    Sqlite {
        /// The database.
        path: PathBuf,
        /// The error.
        error: rusqlite::Error,
    },
    /// PostgreSQL answered with an error (the statement failed; the connection is fine).
    #[error("postgres {database}: {message}")]
    Postgres {
        /// The database, credentials removed.
        database: String,
        /// What the server said.
        message: String,
    },
    /// The database cannot be reached (down, refusing connections, the connection lost): nothing
    /// was written; the same call may succeed later.
    #[error("the session database {database} is unavailable: {reason}")]
    Unavailable {
        /// The database, credentials removed.
        database: String,
        /// Why, as the client saw it.
        reason: String,
    },
    /// Another daemon has the session live and holds its lease: this one may not write it.
    #[error(
        "session {id} is live in another dshd (host {host}, pid {pid}), which holds its lease; close it there, or, if that dshd is gone, retry once its lease expires (in {}s at most)",
        expires_in.as_secs().max(1)
    )]
    Leased {
        /// The session.
        id: SessionId,
        /// The holder's host name.
        host: String,
        /// The holder's process id.
        pid: u32,
        /// How long until the lease expires unless renewed.
        expires_in: std::time::Duration,
    },
    /// The blocking task that did the work failed (it panicked or was cancelled): a bug or a
    /// runtime shutting down, never the caller's input.
    #[error("the {what} task failed: {message}")]
    Task {
        /// What the task was doing, e.g. "checkpoint".
        what: &'static str,
        /// The runtime's description of the failure.
        message: String,
    },
    /// The backend's configuration is unusable (e.g. a relative root).
    #[error("{0}")]
    Config(String),
    /// The location cannot hold the backend's data at all: a device, a FIFO, a directory or a
    /// pseudo-file where a database file should be, or a new name in a missing directory.
    #[error("{}: {reason}", path.display())]
    BadLocation {
        /// The location given.
        path: PathBuf,
        /// What it is, and what was expected.
        reason: String,
    },
    /// The file system holding the store is full (or the user's quota is): nothing was written,
    /// and an append that did not fit was cut back.
    #[error(
        "cannot {action} {}: no space left on its file system ({}); free some space and retry",
        path.display(),
        free_text(*free_bytes)
    )]
    NoSpace {
        /// What was being written, e.g. `append to`.
        action: &'static str,
        /// The file or directory written.
        path: PathBuf,
        /// The bytes available to this user there when it failed, if the file system said.
        free_bytes: Option<u64>,
    },
    /// The store can be read but not written: a read-only file system, or no write permission.
    #[error(
        "cannot {action} {}: {reason}; sessions stored there can still be read",
        path.display()
    )]
    NotWritable {
        /// What was refused, e.g. `open for writing`.
        action: &'static str,
        /// The file or directory that cannot be written.
        path: PathBuf,
        /// Why, as the system said it.
        reason: String,
    },
}

fn free_text(free: Option<u64>) -> String {
    match free {
        Some(bytes) if bytes >= 1 << 20 => format!("{} MiB free", bytes >> 20),
        Some(bytes) => format!("{bytes} bytes free"),
        None => "free space unknown".to_owned(),
    }
}

/// The bytes available to this user on the file system holding `path` (or its nearest existing
/// ancestor), if the file system says.
pub(crate) fn free_space(path: &Path) -> Option<u64> {
    path.ancestors().find_map(|dir| {
        let stat = rustix::fs::statvfs(dir).ok()?;
        Some(stat.f_bavail.saturating_mul(stat.f_frsize))
    })
}

/// The error of a write to `path`: a read-only file system or a missing write permission is
/// [`PersistenceError::NotWritable`] (the store's state, which the caller can act on), a full one
/// [`PersistenceError::NoSpace`], anything else [`PersistenceError::Io`].
pub(crate) fn write_error(
    action: &'static str,
    path: &Path,
    source: std::io::Error,
) -> PersistenceError {
    match source.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => PersistenceError::NoSpace {
            action,
            path: path.to_owned(),
            free_bytes: free_space(path),
        },
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
            PersistenceError::NotWritable {
                action,
                path: path.to_owned(),
                reason: source.to_string(),
            }
        }
        _ => PersistenceError::Io {
            action,
            path: path.to_owned(),
            error: source,
        },
    }
}

/// A session store (CONTRACTS §4.3). Implementations: [`jsonl::JsonlBackend`],
/// [`sqlite::SqliteBackend`], [`postgres::PostgresBackend`].
///
/// Contract (checked by one suite against every backend):
/// - creation is lazy: nothing is written for a session before its first [`append`](Self::append);
/// - `append` returns only once the events are durable, and leaves no partial write behind on error;
/// - [`locate`](Self::locate) is pure: no I/O at all, not even a `stat`;
/// - `load` repairs (drops a torn tail, closes an open turn) and writes the repair; `inspect` never
///   writes;
/// - ids never escape the backend's root, whatever bytes they contain.
pub trait Persistence: Send + Sync + std::fmt::Debug {
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
fn append_meta<P: Persistence + ?Sized>(
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

/// Opens the backend of `kind` at `path` (the JSONL root, or the SQLite database file). Like the
/// backends' own constructors, this touches nothing on disk. PostgreSQL has no path: open it
/// with [`open_postgres`].
pub fn open(kind: BackendKind, path: PathBuf) -> Result<Arc<dyn Persistence>, PersistenceError> {
    Ok(match kind {
        BackendKind::Jsonl => Arc::new(jsonl::JsonlBackend::new(path)?),
        BackendKind::Sqlite => Arc::new(sqlite::SqliteBackend::open(path)?),
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
