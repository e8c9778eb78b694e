//! Support for the benchmarks that measure the release `dshd` through its socket.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A release `dshd` on a private home and socket in `dir`, logging warnings only; stopped with
/// SIGTERM when dropped.
#[derive(Debug)]
pub struct ReleaseDaemon {
    /// The daemon process.
    pub child: Child,
    /// Its socket.
    pub socket: PathBuf,
}

impl ReleaseDaemon {
    /// Builds (once) and starts the release `dshd` with `extra` arguments, and waits until it
    /// answers `Status`.
    pub fn start(dir: &tempfile::TempDir, extra: &[&str]) -> Self {
        Self::start_with_env(dir, extra, &[])
    }

    /// [`start`](Self::start) with `env` added to the daemon's environment.
    pub fn start_with_env(dir: &tempfile::TempDir, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dshd = crate::cargo_build("dsh-daemon", "dshd", true);
        Self::start_binary(&dshd, dir, extra, env)
    }

    /// Starts the `dshd` at `dshd` (already built) as [`start_with_env`](Self::start_with_env)
    /// does. The socket is in `<dir>/run/`, apart from the rest of `dir`: a sandboxed workspace
    /// in `dir` must not lie inside the socket's (protected) directory.
    pub fn start_binary(
        dshd: &Path,
        dir: &tempfile::TempDir,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let socket = dir.path().join("run/d.sock");
        let child = crate::daemon_command_for(dshd, dir)
            .env("RUST_LOG", "warn")
            .arg("--dsh-home")
            .arg(dir.path().join("home"))
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .envs(env.iter().copied())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start release dshd: {e}"));
        let daemon = Self { child, socket };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        while !crate::dshctl_at(&self.socket, &["status"]).status.success() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the release dshd never answered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for ReleaseDaemon {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

/// How long after a load ends the benches wait before reading dshd's RSS a second time: longer
/// than the allocator's decay of freed pages (jemalloc returns dirty pages over 10 s).
pub const SETTLE: Duration = Duration::from_secs(12);

/// `VmRSS` of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// The `field` (`VmRSS`, `VmHWM`, ...) of `/proc/<pid>/status`, in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// `VmRSS` of `pid` after [`SETTLE`] of idleness.
pub fn settled_rss_kib(pid: u32) -> u64 {
    std::thread::sleep(SETTLE);
    rss_kib(pid)
}
