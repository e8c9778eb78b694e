//! Where dsh lives: the harness-home rules and the default socket path, shared by the daemon and
//! every client so a client's default can never drift from the daemon's. Nothing but the standard
//! library at run time (`thiserror` only derives the error type), so a thin client links little.

pub mod home;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// File name of the socket inside its directory.
pub const SOCKET_FILE_NAME: &str = "dshd.sock";

/// The socket path used when none is configured: `<runtime dir>/dsh/dshd.sock` when the runtime
/// directory is known (and absolute; see [`home::Ambient::runtime_dir`]), else
/// `<home>/run/dshd.sock`.
pub fn default_socket_path(home: &Path, runtime_dir: Option<&OsStr>) -> PathBuf {
    socket_candidates(home, runtime_dir)
        .into_iter()
        .next()
        .unwrap_or_else(|| home.join("run").join(SOCKET_FILE_NAME))
}

/// Every default socket path, in the order dshd chooses among them and clients look: under the
/// runtime directory when known, then under the home.
pub fn socket_candidates(home: &Path, runtime_dir: Option<&OsStr>) -> Vec<PathBuf> {
    let mut candidates = Vec::with_capacity(2);
    if let Some(dir) = runtime_dir.map(Path::new).filter(|d| d.is_absolute()) {
        candidates.push(dir.join("dsh").join(SOCKET_FILE_NAME));
    }
    candidates.push(home.join("run").join(SOCKET_FILE_NAME));
    candidates
}
