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

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use super::{
    BackendKind, Persistence, PersistenceError, Repair, SessionLocation, StoredSession,
    batch_start, write_error,
};
use crate::session::repair::close_open_turn;
use crate::session::{Event, EventData, SessionHeader, SessionId};

/// `PRAGMA application_id` of a dsh session database: "DSH1".
pub const APPLICATION_ID: i32 = 0x4453_4831;

/// `PRAGMA user_version` of the schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// How long a connection waits for another connection's lock on the same file before an operation
/// fails with "database is locked". Appends hold the write lock for one short transaction, so
/// this is only reached when something else holds the database for seconds.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE sessions(
    id TEXT PRIMARY KEY,
    header TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE events(
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
);
";

/// The columns each table must have, in order; anything else is not our schema.
const TABLES: [(&str, &[&str]); 2] = [
    ("events", &["session_id", "seq", "type", "time", "data"]),
    ("sessions", &["id", "header", "created_at"]),
];

const INSERT_EVENT: &str =
    "INSERT INTO events(session_id, seq, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)";

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

/// What a database file turned out to be.
enum Identity {
    /// Empty: no schema, no ids. Safe to initialise.
    Fresh,
    /// A dsh session database of this schema version.
    Ours,
    /// Something else, and why we think so.
    Foreign(String),
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
            _ => PersistenceError::Sqlite {
                path: self.path.clone(),
                source,
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
            let fresh = match self.identify(&conn)? {
                Identity::Foreign(reason) => {
                    return Err(PersistenceError::ForeignDatabase {
                        path: self.path.clone(),
                        reason,
                    });
                }
                Identity::Fresh if access != Access::Create => return Ok(None),
                Identity::Fresh => true,
                Identity::Ours => false,
            };
            self.configure(&conn, fresh)?;
            *slot = Some(conn);
        }
        Ok(slot.as_mut().map(Conn::Shared))
    }

    /// The database file or its directory, if this process may not write it, and why. Both are
    /// needed: SQLite creates the write-ahead log and its index next to the database.
    fn unwritable(&self) -> Option<(PathBuf, String)> {
        let parent = self.path.parent().unwrap_or(Path::new("/"));
        [self.path.as_path(), parent].into_iter().find_map(|path| {
            // Effective ids, as the open itself would use; `access(2)` alone checks the real ones.
            rustix::fs::accessat(
                rustix::fs::CWD,
                path,
                rustix::fs::Access::WRITE_OK,
                rustix::fs::AtFlags::EACCESS,
            )
            .err()
            .map(|errno| (path.to_owned(), std::io::Error::from(errno).to_string()))
        })
    }

    /// A read-only connection to a database this process cannot write, or `None` when it holds
    /// no sessions yet.
    fn open_read_only(&self) -> Result<Option<Connection>, PersistenceError> {
        match self.read_only(false) {
            Ok(found) => Ok(found),
            // A WAL database needs its `-shm` index, which cannot be created in a directory we
            // may not write. Without a write-ahead log (a clean close removes it) every committed
            // transaction is in the database file itself, so reading it as immutable (no locks,
            // no index) sees exactly what is stored. With a non-empty log that would miss
            // commits, so the first error stands.
            Err(first) if !self.has_wal() => self.read_only(true).map_err(|_| first),
            Err(first) => Err(first),
        }
    }

    fn read_only(&self, immutable: bool) -> Result<Option<Connection>, PersistenceError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = if immutable {
            Connection::open_with_flags(
                immutable_uri(&self.path),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )
        } else {
            Connection::open_with_flags(&self.path, flags)
        }
        .map_err(self.sqlite())?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(self.sqlite())?;
        match self.identify(&conn)? {
            Identity::Foreign(reason) => Err(PersistenceError::ForeignDatabase {
                path: self.path.clone(),
                reason,
            }),
            Identity::Fresh => Ok(None),
            Identity::Ours => Ok(Some(conn)),
        }
    }

    /// Whether a non-empty write-ahead log sits next to the database.
    fn has_wal(&self) -> bool {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        fs::metadata(wal).is_ok_and(|meta| meta.len() > 0)
    }

    fn exists(&self) -> Result<bool, PersistenceError> {
        match fs::symlink_metadata(&self.path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(source) => Err(PersistenceError::Io {
                action: "inspect",
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Creates the parent directory (0700) and an empty database file (0600) if missing. SQLite
    /// would create the file itself, but with the umask's mode rather than owner-only.
    fn create_file(&self) -> Result<(), PersistenceError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| PersistenceError::Io {
                action,
                path,
                source,
            }
        };
        let parent = self.path.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| write_error("create directory", parent, e))?;
        }
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&self.path)
        {
            Ok(_) => File::open(parent)
                .and_then(|dir| dir.sync_all())
                .map_err(io("sync directory", parent)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(write_error("create", &self.path, e)),
        }
    }

    fn identify(&self, conn: &Connection) -> Result<Identity, PersistenceError> {
        let not_ours = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => Ok(Identity::Foreign("not an SQLite database".into())),
            _ => Err(self.sqlite()(e)),
        };
        let application_id: i32 =
            match conn.pragma_query_value(None, "application_id", |r| r.get(0)) {
                Ok(id) => id,
                Err(e) => return not_ours(e),
            };
        let user_version: i32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.sqlite())?;
        let mut objects: Vec<(String, String)> = conn
            .prepare("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(self.sqlite())?;
        if application_id == 0 && user_version == 0 && objects.is_empty() {
            return Ok(Identity::Fresh);
        }
        if application_id != APPLICATION_ID {
            return Ok(Identity::Foreign(format!(
                "application_id is {application_id:#x}, expected {APPLICATION_ID:#x}"
            )));
        }
        if user_version != SCHEMA_VERSION {
            return Ok(Identity::Foreign(format!(
                "schema version is {user_version}, this dshd reads version {SCHEMA_VERSION}"
            )));
        }
        let expected: Vec<(String, String)> = TABLES
            .iter()
            .map(|(name, _)| ("table".to_owned(), (*name).to_owned()))
            .collect();
        objects.sort();
        if objects != expected {
            return Ok(Identity::Foreign(format!(
                "unexpected schema objects {objects:?}"
            )));
        }
        for (table, columns) in TABLES {
            let found: Vec<String> = conn
                .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
                .and_then(|mut s| s.query_map([table], |r| r.get(0))?.collect())
                .map_err(self.sqlite())?;
            if found != columns {
                return Ok(Identity::Foreign(format!(
                    "table {table} has columns {found:?}, expected {columns:?}"
                )));
            }
        }
        Ok(Identity::Ours)
    }

    /// Connection settings, and the schema when the database is `fresh`. Runs only after
    /// [`identify`](Self::identify) said the file is ours or empty.
    fn configure(&self, conn: &Connection, fresh: bool) -> Result<(), PersistenceError> {
        conn.pragma_update(None, "foreign_keys", "ON")
            .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
            .map_err(self.sqlite())?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.sqlite())?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(PersistenceError::Config(format!(
                "{}: SQLite refused WAL mode (got {mode})",
                self.path.display()
            )));
        }
        if !fresh {
            return Ok(());
        }
        // Another process may have initialised the file since we looked: decide again under the
        // write lock.
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(self.sqlite())?;
        let result = (|| -> Result<(), PersistenceError> {
            match self.identify(conn)? {
                Identity::Ours => Ok(()),
                Identity::Foreign(reason) => Err(PersistenceError::ForeignDatabase {
                    path: self.path.clone(),
                    reason,
                }),
                Identity::Fresh => conn
                    .execute_batch(&format!(
                        "{SCHEMA}
                         PRAGMA application_id = {APPLICATION_ID};
                         PRAGMA user_version = {SCHEMA_VERSION};"
                    ))
                    .map_err(self.sqlite()),
            }
        })();
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = conn.execute_batch(end).map_err(self.sqlite());
        result.and(ended)
    }

    /// Reads one session inside the caller's transaction.
    fn read(
        &self,
        conn: &Connection,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<Event>), PersistenceError> {
        let header: Option<String> = conn
            .prepare_cached("SELECT header FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(self.sqlite())?;
        let header = header.ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let header = parse_header(&header)
            .and_then(|h| {
                if h.id == *id {
                    Ok(h)
                } else {
                    Err(format!("row of session {id} holds the header of {}", h.id))
                }
            })
            .map_err(|m| self.corrupt(0, format!("session {id}: {m}")))?;

        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, type, time, data FROM events WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(self.sqlite())?;
        let mut rows = stmt.query([id.as_str()]).map_err(self.sqlite())?;
        let mut events = Vec::new();
        while let Some(row) = rows.next().map_err(self.sqlite())? {
            let expected = events.len() as u64;
            let line = usize::try_from(expected).map_or(usize::MAX, |e| e + 1);
            let bad = |m: String| self.corrupt(line, format!("session {id}: {m}"));
            let seq: i64 = row.get(0).map_err(|e| bad(format!("bad seq: {e}")))?;
            if u64::try_from(seq).ok() != Some(expected) {
                let line = usize::try_from(seq).map_or(0, |s| s.saturating_add(1));
                return Err(self.corrupt(
                    line,
                    format!("session {id}: expected seq {expected}, found {seq}"),
                ));
            }
            let type_name: String = row.get(1).map_err(|e| bad(format!("bad type: {e}")))?;
            let time: i64 = row.get(2).map_err(|e| bad(format!("bad time: {e}")))?;
            let data: String = row.get(3).map_err(|e| bad(format!("bad data: {e}")))?;
            let data: Value =
                serde_json::from_str(&data).map_err(|e| bad(format!("data is not JSON: {e}")))?;
            let event =
                serde_json::json!({"type": type_name, "seq": seq, "time": time, "data": data});
            events.push(serde_json::from_value::<Event>(event).map_err(|e| bad(e.to_string()))?);
        }
        Ok((header, events))
    }

    fn insert_events(
        &self,
        conn: &Connection,
        id: &SessionId,
        events: &[Event],
    ) -> Result<(), PersistenceError> {
        let mut insert = conn.prepare_cached(INSERT_EVENT).map_err(self.sqlite())?;
        for event in events {
            insert
                .execute(params![
                    id.as_str(),
                    i64::try_from(event.seq).unwrap_or(i64::MAX),
                    event.data.type_name(),
                    event.time,
                    event.data_json(),
                ])
                .map_err(self.sqlite())?;
        }
        Ok(())
    }
}

/// Checks that `path` can hold a database before anything is opened: an existing regular file,
/// or a new name in an existing directory. Devices (`/dev/null`, `/dev/zero`), FIFOs, sockets,
/// directories and the generated files of `/proc` and `/sys` are refused as
/// [`PersistenceError::BadLocation`]; whether a regular file is a dsh database is decided later,
/// by reading it.
pub fn check_location(path: &Path) -> Result<(), PersistenceError> {
    let bad = |reason: String| PersistenceError::BadLocation {
        path: path.to_owned(),
        reason,
    };
    match fs::metadata(path) {
        Ok(_) => check_regular_file(path),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            match fs::metadata(parent) {
                Ok(meta) if meta.is_dir() => Ok(()),
                Ok(_) => Err(bad(format!(
                    "{} is not a directory, so no database can be created in it",
                    parent.display()
                ))),
                Err(e) if e.kind() == ErrorKind::NotFound => Err(bad(format!(
                    "does not exist, and neither does its directory {}; create the directory \
                     first or give an existing database",
                    parent.display()
                ))),
                Err(e) => Err(bad(format!(
                    "cannot inspect its directory {}: {e}",
                    parent.display()
                ))),
            }
        }
        Err(e) => Err(bad(format!("cannot inspect it: {e}"))),
    }
}

/// Refuses an existing `path` that is not a regular file (links are followed, as SQLite does).
fn check_regular_file(path: &Path) -> Result<(), PersistenceError> {
    let bad = |reason: String| PersistenceError::BadLocation {
        path: path.to_owned(),
        reason,
    };
    let meta = fs::metadata(path).map_err(|e| bad(format!("cannot inspect it: {e}")))?;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    };
    if let Some(what) = what {
        return Err(bad(format!(
            "is {what}, not a regular file; a database must be a regular file or a new name in \
             an existing directory"
        )));
    }
    if meta.len() > 0 {
        return Ok(());
    }
    // Files of /proc and /sys are "regular" and report a size of 0, yet read as generated text
    // and take no database. A real empty file reads as empty. O_NONBLOCK so that a FIFO put
    // there since the check above cannot block us.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut byte = [0u8; 1];
    let read = file
        .read(&mut byte)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    // A file that grew since the stat (another process initialising the database) is real.
    let grown = file.metadata().is_ok_and(|m| m.len() > 0);
    if read > 0 && !grown {
        return Err(bad(
            "reports a size of 0 but has content: a generated pseudo-file (like those of /proc), \
             not a regular file"
                .to_owned(),
        ));
    }
    Ok(())
}

fn libc_flags() -> i32 {
    (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY)
        .bits()
        .cast_signed()
}

/// The `file:` URI that opens `path` read-only as immutable. Everything but unreserved characters
/// and `/` is percent-encoded, so no byte of the path can end it or start a parameter.
fn immutable_uri(path: &Path) -> String {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(uri, "%{byte:02X}");
        }
    }
    uri.push_str("?immutable=1");
    uri
}

fn parse_header(text: &str) -> Result<SessionHeader, String> {
    let header: SessionHeader =
        serde_json::from_str(text).map_err(|e| format!("invalid session header: {e}"))?;
    header.validate().map_err(|e| e.to_string())?;
    Ok(header)
}

impl Persistence for SqliteBackend {
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
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
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

        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
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
                if parse_header(&text).ok().as_ref() != Some(header) {
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
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut conn = self
            .connection(&mut slot, Access::Write)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sqlite())?;
        let (header, mut events) = self.read(&tx, id)?;
        let mut repairs = Vec::new();
        let closers = close_open_turn(&events);
        if let Some(Event {
            data: EventData::TurnEnd { turn, .. },
            ..
        }) = closers.last()
        {
            self.insert_events(&tx, id, &closers)?;
            repairs.push(Repair::ClosedOpenTurn {
                turn: *turn,
                events: closers.len(),
            });
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
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut headers = Vec::with_capacity(rows.len());
        for (id, text) in rows {
            match parse_header(&text) {
                Ok(header) if header.id.as_str() == id => headers.push(header),
                Ok(_) => {
                    tracing::warn!(%id, "skipping a session row whose header names another id")
                }
                Err(reason) => {
                    tracing::warn!(%id, %reason, "skipping a session with an unreadable header")
                }
            }
        }
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_immutable_uri_escapes_every_byte_that_could_end_the_path() {
        assert_eq!(
            immutable_uri(Path::new("/a b/c?d#e%f/g.sqlite3")),
            "file:/a%20b/c%3Fd%23e%25f/g.sqlite3?immutable=1"
        );
    }

    /// The fallback a read-only home takes, run here on a writable directory (the suite runs as
    /// root, for whom nothing is read-only without a mount; the e2e test mounts one): the
    /// database is read as immutable through its URI, even from a path full of URI syntax.
    #[test]
    fn a_database_is_read_through_an_immutable_read_only_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("odd ?#% dir");
        fs::create_dir(&dir).unwrap();
        let db = dir.join("s.sqlite3");
        let header = SessionHeader::new(
            SessionId::parse("ro").unwrap(),
            PathBuf::from("/work"),
            1_700_000_000_000,
        );
        let event = Event {
            seq: 0,
            time: 1_700_000_000_000,
            data: EventData::TurnStart { turn: 1 },
        };
        let writer = SqliteBackend::open(db.clone()).unwrap();
        writer.append(&header, &[event]).unwrap();
        drop(writer);

        let reader = SqliteBackend::open(db.clone()).unwrap();
        let conn = reader
            .read_only(true)
            .unwrap()
            .expect("a session is stored");
        let (read, events) = reader.read(&conn, &header.id).unwrap();
        assert_eq!(read, header);
        assert_eq!(events.len(), 1);
        // An empty database is "no sessions" read-only too, and is not initialised.
        let empty = dir.join("empty.sqlite3");
        fs::write(&empty, b"").unwrap();
        let reader = SqliteBackend::open(empty.clone()).unwrap();
        assert!(reader.read_only(true).unwrap().is_none());
        assert_eq!(fs::metadata(&empty).unwrap().len(), 0);
    }
}
