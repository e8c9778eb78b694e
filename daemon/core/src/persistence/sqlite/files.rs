//! The database file: where a database may be, whether this process may write it, and opening
//! it read-only when it may not.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::schema::Identity;
use super::{BUSY_TIMEOUT, SqliteBackend};
use crate::persistence::{PersistenceError, write_error};

impl SqliteBackend {
    /// The database file or its directory, if this process may not write it, and why. Both are
    /// needed: SQLite creates the write-ahead log and its index next to the database.
    pub(super) fn unwritable(&self) -> Option<(PathBuf, String)> {
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
    pub(super) fn open_read_only(&self) -> Result<Option<Connection>, PersistenceError> {
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

    pub(super) fn read_only(
        &self,
        immutable: bool,
    ) -> Result<Option<Connection>, PersistenceError> {
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
            Identity::Ours { .. } => Ok(Some(conn)),
        }
    }

    /// Whether a non-empty write-ahead log sits next to the database.
    pub(super) fn has_wal(&self) -> bool {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        fs::metadata(wal).is_ok_and(|meta| meta.len() > 0)
    }

    pub(super) fn exists(&self) -> Result<bool, PersistenceError> {
        match fs::symlink_metadata(&self.path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(source) => Err(PersistenceError::Io {
                action: "inspect",
                path: self.path.clone(),
                error: source,
            }),
        }
    }

    /// Creates the parent directory (0700) and an empty database file (0600) if missing. SQLite
    /// would create the file itself, but with the umask's mode rather than owner-only.
    pub(super) fn create_file(&self) -> Result<(), PersistenceError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| PersistenceError::Io {
                action,
                path,
                error: source,
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
pub(super) fn check_regular_file(path: &Path) -> Result<(), PersistenceError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_immutable_uri_escapes_every_byte_that_could_end_the_path() {
        assert_eq!(
            immutable_uri(Path::new("/a b/c?d#e%f/g.sqlite3")),
            "file:/a%20b/c%3Fd%23e%25f/g.sqlite3?immutable=1"
        );
    }
}
