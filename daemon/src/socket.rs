//! The daemon's Unix socket: where it lives, and taking it safely.
//!
//! The socket is the daemon's only door, so it is the user's alone: its directory is created 0700,
//! the socket itself is 0600, and `server` additionally drops connections whose peer uid differs.
//! A lock file next to the socket makes "is another daemon here?" race-free: whoever holds the lock
//! owns the path, so a second daemon can report the first one's pid, and a socket file left by a
//! crashed daemon (whose lock died with it) is known to be stale and is replaced.
//!
//! Whoever can write the socket's directory can unlink the socket and bind their own, or plant a
//! symbolic link where the lock file goes. So the directory must be ours and writable by nobody
//! else (as ssh and gpg-agent require of theirs), must not itself be a symbolic link, and the lock
//! file is opened relative to the checked directory without following links, then checked to be a
//! regular file of ours with a single name.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags, flock};
use rustix::io::Errno;

/// Longest socket path the kernel accepts: `sun_path` is 108 bytes including the final NUL.
pub const MAX_PATH_BYTES: usize = 107;

pub use dsh_paths::{SOCKET_FILE_NAME, default_socket_path as default_path};

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
    /// Another daemon serves the same harness home (perhaps on another socket: two logins with
    /// different runtime directories do exactly this).
    #[error(
        "another dshd is running on home {} (pid {}, socket {}); one home has one daemon: stop it, or use another --dsh-home",
        home.display(),
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        socket.as_deref().map_or_else(|| "unknown".to_owned(), |s| s.display().to_string())
    )]
    HomeInUse {
        /// The home.
        home: PathBuf,
        /// The running daemon's pid, when it could be learned.
        pid: Option<u32>,
        /// The running daemon's socket, when it could be learned.
        socket: Option<PathBuf>,
    },
    /// Something that is not a socket sits at the path.
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket's directory is a symbolic link.
    #[error(
        "socket directory {} is a symbolic link (to {}); dshd does not follow it, since whoever can change the link could redirect the socket. Give --socket (or `socket` in the config) a path in the real directory",
        dir.display(),
        target.display()
    )]
    DirectoryIsSymlink {
        /// The directory path.
        dir: PathBuf,
        /// What the link points at.
        target: PathBuf,
    },
    /// The socket's directory belongs to another user.
    #[error(
        "socket directory {} belongs to uid {owner}, not to you (uid {uid}); its owner could replace the socket. Remove it (its owner or root: rm -r {}) or choose a --socket in a directory you own",
        dir.display(),
        dir.display()
    )]
    DirectoryNotOwned {
        /// The directory path.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        uid: u32,
    },
    /// Others may create and delete entries in the socket's directory.
    #[error("{}", directory_writable_message(dir, *mode))]
    DirectoryWritable {
        /// The directory path.
        dir: PathBuf,
        /// Its permission bits (with setuid, setgid and sticky).
        mode: u32,
    },
    /// The lock file is a symbolic link.
    #[error(
        "lock file {} is a symbolic link; refusing to follow it (its target is left untouched). Remove the link (rm {}) and start dshd again",
        path.display(),
        path.display()
    )]
    LockIsSymlink {
        /// The lock file path.
        path: PathBuf,
    },
    /// The lock file is not a regular file of ours with a single name.
    #[error(
        "lock file {} {reason}; refusing to use it. Remove it (rm {}) and start dshd again",
        path.display(),
        path.display()
    )]
    LockUnsafe {
        /// The lock file path.
        path: PathBuf,
        /// What is wrong with it, e.g. "belongs to uid 65534, not to you (uid 1000)".
        reason: String,
    },
    /// An I/O step failed.
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
}

fn directory_writable_message(dir: &Path, mode: u32) -> String {
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        _ => "others",
    };
    let risk = format!(
        "socket directory {} is writable by {who} (mode {:04o}): they could replace the socket",
        dir.display(),
        mode & 0o7777
    );
    if mode & 0o1000 != 0 {
        // A sticky shared directory such as /tmp: tightening it is not the user's fix to make.
        format!(
            "{risk}. It is a shared directory; put the socket in a private directory inside it, e.g. --socket {}/dsh/dshd.sock (dshd creates it 0700)",
            dir.display()
        )
    } else {
        format!(
            "{risk}. Run `chmod 700 {}`, or choose a --socket in a private directory",
            dir.display()
        )
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SocketError {
    let path = path.to_owned();
    move |source| SocketError::Io {
        action,
        path,
        error: source,
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

/// Takes the socket path: checks its length, creates its directory (0700) if missing and checks
/// that it is ours and private, takes the lock, replaces a stale socket file, binds, and makes the
/// socket 0600.
pub fn bind(path: &Path) -> Result<(UnixListener, SocketGuard), SocketError> {
    let len = path.as_os_str().len();
    if len > MAX_PATH_BYTES {
        return Err(SocketError::TooLong {
            path: path.to_owned(),
            len,
        });
    }
    let Some(name) = path.file_name() else {
        return Err(io_error("use as a socket path", path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it names no file",
        )));
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir_fd = create_private_dir(dir)?;

    let lock_file = lock_path(path);
    let mut lock_name = OsString::from(name);
    lock_name.push(".lock");
    let mut lock = open_lock(&dir_fd, &lock_name, &lock_file)?;
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

    // bind(2) never follows a link at the final name (it fails with EADDRINUSE instead), and the
    // directory is private, so nobody can swap the socket for a link before the chmod below.
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

/// Creates `dir` (0700, with its parents) when it is missing, then opens and checks it like
/// [`open_private_dir`] — checked even when we just created it: someone may have made it first.
fn create_private_dir(dir: &Path) -> Result<OwnedFd, SocketError> {
    if let Err(e) = std::fs::symlink_metadata(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(io_error("inspect", dir)(e));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_error("create directory", dir))?;
    }
    open_private_dir(dir)
}

/// Opens the socket's directory without following a link and checks that it is ours and that
/// neither its group nor others may write it: the same rule ssh applies to the directories on its
/// key paths, and gpg-agent and tmux to their socket directories (they also refuse read access,
/// which is harmless here: the socket is 0600 and the peer is checked).
fn open_private_dir(dir: &Path) -> Result<OwnedFd, SocketError> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| {
        // Linux reports a link opened this way as ENOTDIR (O_DIRECTORY is checked first) or ELOOP.
        let is_link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
        if is_link && [Errno::NOTDIR, Errno::LOOP].contains(&errno) {
            SocketError::DirectoryIsSymlink {
                dir: dir.to_owned(),
                target: std::fs::read_link(dir).unwrap_or_default(),
            }
        } else {
            io_error("open socket directory", dir)(errno.into())
        }
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_error("inspect", dir)(e.into()))?;
    let uid = rustix::process::geteuid().as_raw();
    if stat.st_uid != uid {
        return Err(SocketError::DirectoryNotOwned {
            dir: dir.to_owned(),
            owner: stat.st_uid,
            uid,
        });
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(SocketError::DirectoryWritable {
            dir: dir.to_owned(),
            mode: stat.st_mode & 0o7777,
        });
    }
    Ok(fd)
}

/// Opens (creating it 0600 if missing) the lock file inside the checked directory, never through
/// a link, and checks what was opened: a regular file of ours with one name. Nothing is truncated
/// or written before these checks pass.
fn open_lock(dir: &OwnedFd, name: &OsStr, path: &Path) -> Result<File, SocketError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        // NONBLOCK and NOCTTY: a FIFO or a terminal planted here must not block us or become our
        // controlling terminal before the checks below refuse it.
        OFlags::RDWR
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY
            | OFlags::NONBLOCK,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|errno| {
        if errno == Errno::LOOP {
            SocketError::LockIsSymlink {
                path: path.to_owned(),
            }
        } else {
            io_error("open lock file", path)(errno.into())
        }
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_error("inspect", path)(e.into()))?;
    let uid = rustix::process::geteuid().as_raw();
    let unsafe_because = |reason: String| SocketError::LockUnsafe {
        path: path.to_owned(),
        reason,
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(unsafe_because("is not a regular file".into()));
    }
    if stat.st_uid != uid {
        return Err(unsafe_because(format!(
            "belongs to uid {}, not to you (uid {uid})",
            stat.st_uid
        )));
    }
    if stat.st_nlink != 1 {
        // A hard link to one of the user's files would otherwise be overwritten with our pid.
        return Err(unsafe_because(format!(
            "has {} hard links, so it is also another file",
            stat.st_nlink
        )));
    }
    Ok(File::from(fd))
}

/// The lock that makes a harness home one daemon's: held for the daemon's life (closing the file
/// releases it, also when the daemon is killed).
#[derive(Debug)]
pub struct HomeLock {
    /// `None` on a read-only home without a lock file: nothing can be written there, so two
    /// daemons cannot overwrite each other's sessions either.
    _lock: Option<File>,
}

/// File name of the home lock, directly in the home.
pub const HOME_LOCK_NAME: &str = "dshd.lock";

/// Takes `home` for this daemon: creates it (0700) if missing, checks it like the socket
/// directory (ours, not writable by group or others, not a link), and takes `<home>/dshd.lock`
/// through the same link-refusing opener. A second daemon on the same home is refused with the
/// first one's pid and socket, which the lock file records.
pub fn lock_home(home: &Path, socket: &Path) -> Result<HomeLock, SocketError> {
    let dir = create_private_dir(home)?;
    let path = home.join(HOME_LOCK_NAME);
    let mut lock = match open_lock(&dir, OsStr::new(HOME_LOCK_NAME), &path) {
        Ok(lock) => lock,
        Err(SocketError::Io { error: source, .. })
            if source.raw_os_error() == Some(Errno::ROFS.raw_os_error()) =>
        {
            return lock_read_only_home(&dir, home, &path);
        }
        Err(error) => return Err(error),
    };
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut text = String::new();
        let _ = lock.seek(SeekFrom::Start(0));
        let _ = lock.read_to_string(&mut text);
        let mut lines = text.lines();
        return Err(SocketError::HomeInUse {
            home: home.to_owned(),
            pid: lines.next().and_then(|l| l.trim().parse().ok()),
            socket: lines.next().map(PathBuf::from),
        });
    }
    let record = (|| {
        lock.set_len(0)?;
        lock.seek(SeekFrom::Start(0))?;
        writeln!(lock, "{}", std::process::id())?;
        lock.write_all(socket.as_os_str().as_encoded_bytes())?;
        writeln!(lock)?;
        lock.sync_data()
    })();
    record.map_err(io_error("write lock file", &path))?;
    Ok(HomeLock { _lock: Some(lock) })
}

/// A home on a read-only file system (sessions there can still be read): the lock is taken on the
/// existing lock file opened for reading (flock needs no write access); without one, there is
/// nothing to lock and nothing that could be overwritten.
fn lock_read_only_home(dir: &OwnedFd, home: &Path, path: &Path) -> Result<HomeLock, SocketError> {
    let opened = rustix::fs::openat(
        dir,
        HOME_LOCK_NAME,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    );
    let lock = match opened {
        Ok(fd) => File::from(fd),
        Err(Errno::NOENT) => {
            tracing::warn!(home = %home.display(), "the home is read-only and has no lock file; not locking it");
            return Ok(HomeLock { _lock: None });
        }
        Err(errno) => return Err(io_error("open lock file", path)(errno.into())),
    };
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(SocketError::HomeInUse {
            home: home.to_owned(),
            pid: None,
            socket: None,
        });
    }
    Ok(HomeLock { _lock: Some(lock) })
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
    fn a_symlinked_lock_file_is_refused_and_its_target_untouched() {
        let dir = private_dir();
        let precious = dir.path().join("precious");
        std::fs::write(&precious, "the user's file").unwrap();
        let run = dir.path().join("run");
        std::fs::DirBuilder::new().mode(0o700).create(&run).unwrap();
        let path = run.join("dshd.sock");
        std::os::unix::fs::symlink(&precious, lock_path(&path)).unwrap();
        let err = bind(&path).unwrap_err();
        assert!(matches!(err, SocketError::LockIsSymlink { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("lock file {}", lock_path(&path).display())),
            "{msg}"
        );
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "the user's file"
        );
        assert!(!path.exists(), "no socket was bound");
    }

    #[test]
    fn a_lock_file_with_another_name_or_of_another_kind_is_refused() {
        let dir = private_dir();
        let path = dir.path().join("dshd.sock");
        let other = dir.path().join("notes.txt");
        std::fs::write(&other, "keep me").unwrap();
        std::fs::hard_link(&other, lock_path(&path)).unwrap();
        let msg = bind(&path).unwrap_err().to_string();
        assert!(msg.contains("has 2 hard links"), "{msg}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep me");

        std::fs::remove_file(lock_path(&path)).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            lock_path(&path),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let msg = bind(&path).unwrap_err().to_string();
        assert!(msg.contains("is not a regular file"), "{msg}");
    }

    #[test]
    fn a_directory_others_can_write_is_refused_with_the_fix() {
        for mode in [0o777, 0o770, 0o702] {
            let dir = private_dir();
            let run = dir.path().join("run");
            std::fs::create_dir(&run).unwrap();
            std::fs::set_permissions(&run, std::fs::Permissions::from_mode(mode)).unwrap();
            let path = run.join("dshd.sock");
            let err = bind(&path).unwrap_err();
            assert!(
                matches!(err, SocketError::DirectoryWritable { .. }),
                "{mode:o}: {err}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("chmod 700 {}", run.display())),
                "{msg}"
            );
            assert!(msg.contains(&format!("mode {mode:04o}")), "{msg}");
            assert!(!lock_path(&path).exists(), "nothing is created there");
        }
    }

    #[test]
    fn a_shared_sticky_directory_is_refused_with_a_private_subdirectory_as_the_fix() {
        let dir = private_dir();
        let shared = dir.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let msg = bind(&shared.join("dshd.sock")).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("--socket {}/dsh/dshd.sock", shared.display())),
            "{msg}"
        );
        assert!(!msg.contains("chmod"), "{msg}");
        // The suggested fix works.
        let (_listener, _guard) = bind(&shared.join("dsh/dshd.sock")).unwrap();
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let dir = private_dir();
        let real = dir.path().join("real");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&real)
            .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = bind(&link.join("dshd.sock")).unwrap_err();
        assert!(
            matches!(err, SocketError::DirectoryIsSymlink { ref target, .. } if *target == real),
            "{err}"
        );
        assert!(err.to_string().contains(&link.display().to_string()));
        assert!(std::fs::read_dir(&real).unwrap().next().is_none());
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_an_error() {
        let dir = private_dir();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let msg = bind(&file.join("dshd.sock")).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("cannot open socket directory {}", file.display())),
            "{msg}"
        );
    }

    #[test]
    fn overlong_path_names_the_limit() {
        let path = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
        let msg = bind(&path).unwrap_err().to_string();
        assert!(msg.contains("107-byte limit"), "{msg}");
        assert!(msg.contains("125 bytes"), "{msg}");
    }
}
