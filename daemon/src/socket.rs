//! The daemon's Unix socket: where it lives, and taking it safely.
//!
//! The socket is the daemon's only door, so it is the user's alone: its directory is created 0700,
//! the socket itself is 0600, and `server` additionally drops connections whose peer uid differs.
//! A lock file next to the socket makes "is another daemon here?" race-free: whoever holds the lock
//! owns the path, so a second daemon can report the first one's pid, and a socket file left by a
//! crashed daemon (whose lock died with it) is known to be stale and is replaced.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// Longest socket path the kernel accepts: `sun_path` is 108 bytes including the final NUL.
pub const MAX_PATH_BYTES: usize = 107;

/// File name of the socket inside its directory.
pub const SOCKET_FILE_NAME: &str = "dshd.sock";

/// The socket path used when none is configured: `$XDG_RUNTIME_DIR/dsh/dshd.sock` when the runtime
/// directory is set (and absolute), else `<home>/run/dshd.sock`.
pub fn default_path(home: &Path, runtime_dir: Option<&OsStr>) -> PathBuf {
    match runtime_dir.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.join("dsh").join(SOCKET_FILE_NAME),
        _ => home.join("run").join(SOCKET_FILE_NAME),
    }
}

/// The lock file that guards a socket path.
pub fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Why the socket could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The path does not fit in `sun_path`.
    #[error(
        "socket path {} is {len} bytes, longer than the {MAX_PATH_BYTES}-byte limit of Unix socket paths; choose a shorter --socket",
        path.display()
    )]
    TooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Another daemon holds the path.
    #[error("dshd is already running on {} (pid {})", path.display(), pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()))]
    AlreadyRunning {
        /// The socket path.
        path: PathBuf,
        /// The other daemon's pid, when it could be learned.
        pid: Option<u32>,
    },
    /// Something that is not a socket sits at the path.
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// An I/O step failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SocketError {
    let path = path.to_owned();
    move |source| SocketError::Io {
        action,
        path,
        source,
    }
}

/// Ownership of a bound socket path. While it lives, the lock is held; dropping it removes the
/// socket file (if it is still the one we bound) and then releases the lock.
#[derive(Debug)]
pub struct SocketGuard {
    path: PathBuf,
    /// Device and inode of the socket we bound, so we never unlink someone else's file.
    identity: (u64, u64),
    /// Held for the guard's lifetime; closing it releases the flock.
    _lock: File,
}

impl SocketGuard {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Takes the socket path: checks its length, creates its directory (0700) if missing, takes the
/// lock, replaces a stale socket file, binds, and makes the socket 0600.
pub fn bind(path: &Path) -> Result<(UnixListener, SocketGuard), SocketError> {
    let len = path.as_os_str().len();
    if len > MAX_PATH_BYTES {
        return Err(SocketError::TooLong {
            path: path.to_owned(),
            len,
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_error("create directory", dir))?;
    }

    let lock_file = lock_path(path);
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_file)
        .map_err(io_error("open lock file", &lock_file))?;
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(SocketError::AlreadyRunning {
            path: path.to_owned(),
            pid: read_pid(&mut lock),
        });
    }

    // We hold the lock, so any daemon that bound this path before us is gone, unless it predates
    // the lock file (or someone deleted it). A successful connect proves a live listener.
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if let Ok(stream) = UnixStream::connect(path) {
                let pid = rustix::net::sockopt::socket_peercred(&stream)
                    .ok()
                    .map(|cred| cred.pid.as_raw_nonzero().get().unsigned_abs());
                return Err(SocketError::AlreadyRunning {
                    path: path.to_owned(),
                    pid,
                });
            }
            tracing::info!(path = %path.display(), "replacing stale socket file");
            std::fs::remove_file(path).map_err(io_error("remove stale socket", path))?;
        }
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_owned(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("inspect", path)(e)),
    }

    let listener = UnixListener::bind(path).map_err(io_error("bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_error("set permissions of", path))?;
    let meta = std::fs::symlink_metadata(path).map_err(io_error("inspect", path))?;
    write_pid(&mut lock).map_err(io_error("write lock file", &lock_file))?;
    Ok((
        listener,
        SocketGuard {
            path: path.to_owned(),
            identity: (meta.dev(), meta.ino()),
            _lock: lock,
        },
    ))
}

/// The listening socket systemd handed over (socket activation), with its path.
pub fn from_systemd() -> std::io::Result<Option<(UnixListener, PathBuf)>> {
    let mut fds = listenfd::ListenFd::from_env();
    let Some(listener) = fds.take_unix_listener(0)? else {
        return Ok(None);
    };
    let path = listener
        .local_addr()?
        .as_pathname()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Ok(Some((listener, path)))
}

fn read_pid(lock: &mut File) -> Option<u32> {
    let mut text = String::new();
    lock.seek(SeekFrom::Start(0)).ok()?;
    lock.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn write_pid(lock: &mut File) -> std::io::Result<()> {
    lock.set_len(0)?;
    lock.seek(SeekFrom::Start(0))?;
    writeln!(lock, "{}", std::process::id())?;
    lock.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn default_path_prefers_the_runtime_dir() {
        let home = Path::new("/h");
        assert_eq!(
            default_path(home, Some(OsStr::new("/run/user/1000"))),
            PathBuf::from("/run/user/1000/dsh/dshd.sock")
        );
        assert_eq!(default_path(home, None), PathBuf::from("/h/run/dshd.sock"));
        // Blank or relative runtime dirs are not trusted.
        assert_eq!(
            default_path(home, Some(OsStr::new(""))),
            PathBuf::from("/h/run/dshd.sock")
        );
        assert_eq!(
            default_path(home, Some(OsStr::new("rel"))),
            PathBuf::from("/h/run/dshd.sock")
        );
    }

    #[test]
    fn bind_creates_private_directory_and_socket() {
        let dir = private_dir();
        let path = dir.path().join("a/b/dshd.sock");
        let (_listener, guard) = bind(&path).unwrap();
        let dir_mode = std::fs::metadata(dir.path().join("a/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let sock_mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(sock_mode & 0o777, 0o600);
        drop(guard);
        assert!(!path.exists(), "dropping the guard removes the socket");
    }

    #[test]
    fn second_bind_reports_the_first_pid() {
        let dir = private_dir();
        let path = dir.path().join("dshd.sock");
        let (_listener, _guard) = bind(&path).unwrap();
        let err = bind(&path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "dshd is already running on {} (pid {})",
                path.display(),
                std::process::id()
            )
        );
    }

    #[test]
    fn stale_socket_is_replaced() {
        let dir = private_dir();
        let path = dir.path().join("dshd.sock");
        drop(UnixListener::bind(&path).unwrap()); // leaves the file, nobody listening
        assert!(path.exists());
        let (listener, _guard) = bind(&path).unwrap();
        UnixStream::connect(&path).unwrap();
        drop(listener);
    }

    #[test]
    fn live_listener_without_lock_is_detected() {
        let dir = private_dir();
        let path = dir.path().join("dshd.sock");
        let _other = UnixListener::bind(&path).unwrap();
        let err = bind(&path).unwrap_err();
        assert!(
            matches!(err, SocketError::AlreadyRunning { pid: Some(_), .. }),
            "{err}"
        );
    }

    #[test]
    fn regular_file_is_not_replaced() {
        let dir = private_dir();
        let path = dir.path().join("dshd.sock");
        std::fs::write(&path, "precious").unwrap();
        assert!(matches!(bind(&path), Err(SocketError::NotASocket { .. })));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn overlong_path_names_the_limit() {
        let path = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
        let msg = bind(&path).unwrap_err().to_string();
        assert!(msg.contains("107-byte limit"), "{msg}");
        assert!(msg.contains("125 bytes"), "{msg}");
    }
}
