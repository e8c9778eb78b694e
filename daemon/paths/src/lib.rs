//! Where dsh lives: the harness-home rules and the default socket path, shared by the daemon and
//! every client so a client's default can never drift from the daemon's. Nothing but the standard
//! library at run time (`thiserror` only derives the error type), so a thin client links little.

pub mod home;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// File name of the socket inside its directory.
pub const SOCKET_FILE_NAME: &str = "dshd.sock";

/// The socket path used when none is configured: `$XDG_RUNTIME_DIR/dsh/dshd.sock` when the runtime
/// directory is set (and absolute), else `<home>/run/dshd.sock`.
pub fn default_socket_path(home: &Path, runtime_dir: Option<&OsStr>) -> PathBuf {
    match runtime_dir.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.join("dsh").join(SOCKET_FILE_NAME),
        _ => home.join("run").join(SOCKET_FILE_NAME),
    }
}
