//! [`PersistenceError`], what every backend answers when an operation fails, and the helpers that
//! word a failed write the same way in every backend.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use dsh_session::SessionId;

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
