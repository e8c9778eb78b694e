//! SQLite backend (CONTRACTS §4.6): one database for every session; `locate` answers `None` because
//! there is no honest per-session file to point a bash child or a hook at.
//!
//! Every append, and every repair, is one `BEGIN IMMEDIATE` transaction that checks the stored
//! tail first, so a torn tail cannot exist here: a crash leaves a transaction either committed or
//! absent. What a crash *can* leave is an open turn, which `load` closes like the JSONL backend.
//!
//! Several connections may use one file at once (a backend swapped out while its last checkpoints
//! finish, another dshd, `sqlite3` in a terminal): each waits up to [`BUSY_TIMEOUT`] for another's
//! write lock instead of failing. That wait only happens for a transaction that asks for the write
//! lock when it begins; SQLite never waits for a read transaction that later tries to write (it
//! could deadlock), which is why every writing transaction here is `IMMEDIATE`.
//!
//! Reading needs only read access. A database this process cannot write (a read-only home) is
//! read through a connection opened read-only for that one call, and, when SQLite cannot create
//! the WAL index next to it and no write-ahead log exists, as `immutable`; appends and repairs
//! there fail with [`PersistenceError::NotWritable`].

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::{
    BackendKind, BlockingPersistence, Page, PageQuery, PersistenceError, SessionLocation,
    StoredSession, batch_start, open_turn_closers,
};
use crate::locks::lock;
use dsh_session::{Event, SessionHeader, SessionId};
use schema::Identity;

mod files;
mod read;
mod schema;

pub use files::check_location;
use files::check_regular_file;

/// `PRAGMA application_id` of a dsh session database: "DSH1".
pub(crate) const APPLICATION_ID: i32 = 0x4453_4831;

/// `PRAGMA user_version` of the schema this build writes and reads. Version 1 (no indexes on
/// `sessions`) is read too, and migrated by the first connection that may write it.
pub(crate) const SCHEMA_VERSION: i32 = 2;

/// How long a connection waits for another connection's lock on the same file before an operation
/// fails with "database is locked". Appends hold the write lock for one short transaction, so
/// this is only reached when something else holds the database for seconds.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite backend. The database file is created (0600, in a 0700 directory if that is
/// missing) by the first append; until then nothing on disk is touched.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    /// Opened on first use; `None` until the database exists.
    conn: Mutex<Option<Connection>>,
}

/// What a caller is about to do with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Only read. A missing or empty database holds no sessions (and is left alone); one this
    /// process cannot write is opened read-only.
    Read,
    /// Write to an existing database (the repair of `load`).
    Write,
    /// Write, creating and initialising the database if it is missing (`append`).
    Create,
}

/// The connection one call uses: the backend's shared read-write connection, or a read-only one
/// opened for this call alone (never kept: an `immutable` connection would not see later writes).
enum Conn<'a> {
    Shared(&'a mut Connection),
    ReadOnly(Connection),
}

impl Deref for Conn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match self {
            Self::Shared(conn) => conn,
            Self::ReadOnly(conn) => conn,
        }
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        match self {
            Self::Shared(conn) => conn,
            Self::ReadOnly(conn) => conn,
        }
    }
}

impl SqliteBackend {
    /// A backend over the database at `path`, which must be absolute. Touches nothing on disk.
    pub fn open(path: PathBuf) -> Result<Self, PersistenceError> {
        if !path.is_absolute() {
            return Err(PersistenceError::Config(format!(
                "sqlite path {} is not an absolute path",
                path.display()
            )));
        }
        Ok(Self {
            path,
            conn: Mutex::new(None),
        })
    }

    /// Maps an SQLite error. A write refused because the database is read-only (its file system
    /// was remounted read-only, or its mode changed, after the connection was opened) is
    /// [`PersistenceError::NotWritable`].
    fn sqlite(&self) -> impl Fn(rusqlite::Error) -> PersistenceError + '_ {
        |source| match source.sqlite_error_code() {
            Some(ErrorCode::ReadOnly) => PersistenceError::NotWritable {
                action: "write",
                path: self.path.clone(),
                reason: source.to_string(),
            },
            Some(ErrorCode::DiskFull) => PersistenceError::NoSpace {
                action: "write",
                path: self.path.clone(),
                free_bytes: super::free_space(&self.path),
            },
            _ => PersistenceError::Sqlite {
                path: self.path.clone(),
                error: source,
            },
        }
    }

    fn corrupt(&self, line: usize, message: String) -> PersistenceError {
        PersistenceError::Corrupt {
            path: self.path.clone(),
            line,
            message,
        }
    }

    /// The connection for a call that will `access` the database, opening the shared one on
    /// first use. `None` when the database is missing or still empty and `access` does not
    /// create it: reads never create anything.
    fn connection<'a>(
        &self,
        slot: &'a mut Option<Connection>,
        access: Access,
    ) -> Result<Option<Conn<'a>>, PersistenceError> {
        if slot.is_none() {
            if access == Access::Create {
                self.create_file()?;
            } else if !self.exists()? {
                return Ok(None);
            }
            check_regular_file(&self.path)?;
            if let Some((path, reason)) = self.unwritable() {
                return match access {
                    Access::Read => Ok(self.open_read_only()?.map(Conn::ReadOnly)),
                    Access::Write | Access::Create => Err(PersistenceError::NotWritable {
                        action: "write",
                        path,
                        reason,
                    }),
                };
            }
            let conn = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(self.sqlite())?;
            conn.busy_timeout(BUSY_TIMEOUT).map_err(self.sqlite())?;
            // Identify before changing anything: even switching to WAL writes the file header.
            let identity = self.identify(&conn)?;
            match &identity {
                Identity::Foreign(reason) => {
                    return Err(PersistenceError::ForeignDatabase {
                        path: self.path.clone(),
                        reason: reason.clone(),
                    });
                }
                Identity::Fresh if access != Access::Create => return Ok(None),
                Identity::Fresh | Identity::Ours { .. } => {}
            }
            self.configure(&conn, &identity)?;
            *slot = Some(conn);
        }
        Ok(slot.as_mut().map(Conn::Shared))
    }
}

impl BlockingPersistence for SqliteBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn locate(&self, _header: &SessionHeader) -> Option<SessionLocation> {
        None
    }

    fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        let mut slot = lock(&self.conn);
        let Some(conn) = self.connection(&mut slot, Access::Read)? else {
            return Ok(None);
        };
        let tail: Option<Option<i64>> = conn
            .prepare_cached(
                "SELECT (SELECT MAX(seq) FROM events WHERE session_id = ?1) \
                 FROM sessions WHERE id = ?1",
            )
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(self.sqlite())?;
        Ok(tail.map(|max| max.map_or(0, |m| u64::try_from(m).unwrap_or(0).saturating_add(1))))
    }

    fn append(&self, header: &SessionHeader, events: &[Event]) -> Result<(), PersistenceError> {
        let id = &header.id;
        if events.is_empty() {
            return Ok(());
        }
        let first = batch_start(id, events)?;
        header
            .validate()
            .map_err(|e| PersistenceError::Config(format!("session {id}: invalid header: {e}")))?;
        let header_json = serde_json::to_string(header)
            .map_err(|e| PersistenceError::Config(format!("session {id}: {e}")))?;

        let mut slot = lock(&self.conn);
        let mut conn = self
            .connection(&mut slot, Access::Create)?
            .ok_or_else(|| PersistenceError::Config("database was not created".to_owned()))?;
        // IMMEDIATE, not deferred: the tail check reads before the inserts write, and SQLite
        // fails a read transaction's upgrade to a write at once ("database is locked", or
        // SQLITE_BUSY_SNAPSHOT when another connection committed in between) without waiting
        // out the busy timeout. Our own appends are serialised by the connection lock, but a
        // swapped-out backend's connection, or another process, may write the same file; taking
        // the write lock first makes such an append wait its turn instead of failing the turn.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sqlite())?;
        let stored: Option<(String, Option<i64>)> = tx
            .prepare_cached(
                "SELECT header, (SELECT MAX(seq) FROM events WHERE session_id = ?1) \
                 FROM sessions WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(self.sqlite())?;
        let new_session = stored.is_none();
        let expected = match stored {
            None => 0,
            Some((text, tail)) => {
                if crate::persistence::parse_header(&text).ok().as_ref() != Some(header) {
                    return Err(PersistenceError::Config(format!(
                        "session {id} is stored in {} with a different header",
                        self.path.display()
                    )));
                }
                tail.map_or(0, |m| u64::try_from(m).unwrap_or(0).saturating_add(1))
            }
        };
        if first != expected {
            return Err(PersistenceError::SeqMismatch {
                id: id.clone(),
                expected,
                got: first,
            });
        }
        if new_session {
            tx.prepare_cached("INSERT INTO sessions(id, header, created_at) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![id.as_str(), header_json, header.created_at]))
                .map_err(self.sqlite())?;
        }
        self.insert_events(&tx, id, events)?;
        tx.commit().map_err(self.sqlite())
    }

    fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let mut slot = lock(&self.conn);
        let mut conn = self
            .connection(&mut slot, Access::Write)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sqlite())?;
        let (header, mut events) = self.read(&tx, id)?;
        let mut repairs = Vec::new();
        if let Some((closers, repair)) = open_turn_closers(&events) {
            self.insert_events(&tx, id, &closers)?;
            repairs.push(repair);
            events.extend(closers);
        }
        tx.commit().map_err(self.sqlite())?;
        Ok(StoredSession {
            header,
            events,
            repairs,
        })
    }

    fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let mut slot = lock(&self.conn);
        let mut conn = self
            .connection(&mut slot, Access::Read)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        // A read transaction, so header and events come from one snapshot.
        let tx = conn.transaction().map_err(self.sqlite())?;
        let (header, events) = self.read(&tx, id)?;
        tx.finish().map_err(self.sqlite())?;
        Ok(StoredSession {
            header,
            events,
            repairs: Vec::new(),
        })
    }

    fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        let mut slot = lock(&self.conn);
        let Some(conn) = self.connection(&mut slot, Access::Read)? else {
            return Ok(Vec::new());
        };
        let rows: Vec<(String, String)> = conn
            .prepare_cached("SELECT id, header FROM sessions ORDER BY created_at, id")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(self.sqlite())?;
        Ok(rows
            .iter()
            .filter_map(|(id, text)| crate::persistence::readable_header(id, text))
            .collect())
    }

    /// Opens the shared connection (checking and configuring the database, which takes longer
    /// than any read) and prepares the header read, if the database exists.
    fn warm(&self) {
        let mut slot = lock(&self.conn);
        if let Ok(Some(conn)) = self.connection(&mut slot, Access::Read) {
            let _ = conn.prepare_cached(read::HEADER);
        }
    }

    fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        let mut slot = lock(&self.conn);
        match self.connection(&mut slot, Access::Read)? {
            Some(conn) => self.header_of(&conn, id),
            None => Ok(None),
        }
    }

    fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        let mut slot = lock(&self.conn);
        let mut conn = self
            .connection(&mut slot, Access::Write)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sqlite())?;
        tx.prepare_cached("DELETE FROM events WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(self.sqlite())?;
        let removed = tx
            .prepare_cached("DELETE FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(self.sqlite())?;
        if removed == 0 {
            // Nothing was stored: leave the database exactly as it was.
            return Err(PersistenceError::NotFound(id.clone()));
        }
        tx.commit().map_err(self.sqlite())
    }

    fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        if query.elsewhere() {
            return Ok(Page::default());
        }
        let mut slot = lock(&self.conn);
        match self.connection(&mut slot, Access::Read)? {
            Some(conn) => self.page(&conn, query),
            None => Ok(Page::default()),
        }
    }
}
