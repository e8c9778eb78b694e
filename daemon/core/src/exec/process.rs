//! Spawning `bash -c` in its own session, and supervising it to the end.
//!
//! Lifecycle of one process (foreground and background alike):
//!
//! 1. **Spawn** the launcher ([`Launcher`], `dsh_launch`) with `env_clear()` plus the layered
//!    environment; the launcher starts a new session (so the shell leads a new session and
//!    process group, pgid = pid, with no controlling terminal), confines itself when the command
//!    is confined, and `exec`s `bash -c`, so the pid spawned is the shell's. No `pre_exec`, so
//!    std keeps its `posix_spawn` fast path. Stdin from `/dev/null`
//!    unless the caller gave bytes (then they are written and stdin closed; `EPIPE` is ignored, the
//!    command simply did not read them), stdout and stderr piped to two collectors read
//!    concurrently.
//! 2. **Wait** for the shell to exit, the timeout, or cancellation. On timeout or cancellation the
//!    whole group gets SIGTERM, and SIGKILL after the grace if the shell is still there.
//! 3. **Drain**: after the shell exits its pipes are read for at most the drain bound (200 ms by
//!    default), because a background grandchild (`sleep 100 &`) may still hold them open.
//! 4. **Group kill**: the group then always gets SIGKILL: a command's processes never outlive it
//!    (use a background job for that). Pipe readers get one more drain bound to collect what the
//!    killed processes left in the pipes, then are abandoned (only a process that escaped the group
//!    with `setsid` could still hold them).
//! 5. **Reap** the shell.
//!
//! On Linux the shell's exit is observed through a pidfd, which becomes readable when the process
//! is a zombie *without* reaping it. Until we reap, the zombie leader pins the group id, so the
//! group kills of steps 2–4 can never hit an unrelated group that reused the number. Where pidfds
//! are unavailable the shell is reaped as it exits; the later group kill then has a theoretical
//! pid-reuse window of microseconds.
//!
//! 6. **Close the owner**: descendants that left the group (`setsid`, a double fork) carry the
//!    shell's owner marker and were adopted by the daemon; they are killed and reaped now (see
//!    `reaper`).
//!
//! Until the launcher has called `setsid` (microseconds after the spawn) the process is still in
//! dshd's group and its own group does not exist; a group signal then finds no group, so it goes
//! to the pid instead ([`signal_command`]), which stays the command's until it is reaped.
//!
//! If the supervising future is dropped midway (caller gave up, runtime shutting down), a guard
//! sends SIGKILL to the group and tokio's `kill_on_drop` kills and reaps the shell; the owner ends
//! with the future, so the reaper's periodic sweep kills whatever escaped the group.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::pending;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

use super::ExecError;
use super::confine::Confinement;
use super::env::OWNER_MARKER;
use super::env::{BaseEnv, validate_launch};
use super::launcher::Launcher;
use super::limits::Extra;
use super::output::Collector;
use super::reaper::CommandOrigin;
use super::reaper::{Owner, ShellRecord, SpawnGate};
use crate::locks::lock;
use dsh_session::SessionId;

/// What to start.
pub(crate) struct Launch<'a> {
    /// The launcher the shell is started through.
    pub launcher: &'a Launcher,
    /// The soft open-file limit the launcher gives the shell (`None`: dshd's own).
    pub open_files: Option<u64>,
    /// The confinement the launcher applies to itself before it runs the shell.
    pub sandbox: Option<&'a Confinement>,
    pub shell: &'a Path,
    /// Run one file operation (its request is `stdin`) instead of the shell; `shell` and
    /// `command` are then unused.
    pub file_op: bool,
    pub base: &'a BaseEnv,
    pub command: &'a str,
    pub cwd: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub managed: &'a BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    /// Names the harness home in the owner marker, so a later daemon of the same home can tell
    /// what an earlier one left behind.
    pub scope: &'a str,
    /// The agent the command runs for, recorded with the shell's pid so its clients of the
    /// socket are told apart (`lineage`).
    pub agent: Option<&'a SessionId>,
}

/// Time bounds for one process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `None`: no timeout (background jobs).
    pub timeout: Option<Duration>,
    pub grace: Duration,
    pub drain: Duration,
}

/// How the shell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub aborted: bool,
}

/// A started shell, not yet supervised.
pub(crate) struct Spawned {
    child: Child,
    group: GroupGuard,
    exit: ExitWatch,
    stdin: Option<(ChildStdin, Vec<u8>)>,
    /// Whose processes these are; closed once the shell is reaped.
    owner: Owner,
    /// Keeps the reaper's hands off the shell until tokio has reaped it.
    _record: ShellRecord,
}

enum ExitWatch {
    #[cfg(target_os = "linux")]
    Pidfd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    /// No pidfd: wait by reaping; the outcome of that wait is kept here.
    Reap {
        exited: bool,
        status: Option<ExitStatus>,
    },
}

/// Sends SIGKILL to the group when dropped while armed.
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_command(self.pgid, Signal::KILL);
        }
    }
}

/// Sends `signal` to the group a command leads, or to the command alone while it has no group
/// yet (the launcher has not called `setsid`). Only for a command not yet reaped, whose pid is
/// still its own.
fn signal_command(pgid: Pid, signal: Signal) {
    match rustix::process::kill_process_group(pgid, signal) {
        Ok(()) => {}
        Err(rustix::io::Errno::SRCH) => {
            let _ = rustix::process::kill_process(pgid, signal);
        }
        Err(error) => {
            tracing::warn!(%error, pgid = pgid.as_raw_pid(), ?signal, "cannot signal process group");
        }
    }
}

/// Validates the launch and starts the shell.
pub(crate) fn spawn(launch: Launch<'_>) -> Result<Spawned, ExecError> {
    let spawn_error = |source| ExecError::Spawn {
        shell: launch.shell.to_path_buf(),
        error: source,
    };
    // The launcher would fail to run it, after the spawn: refused here, before anything starts.
    rustix::fs::access(launch.shell, rustix::fs::Access::EXEC_OK)
        .map_err(|e| spawn_error(e.into()))?;
    let invocation = dsh_launch::Launch {
        confine: launch.sandbox.map(|c| c.plan.clone()),
        open_files: launch.open_files,
        file_op: launch.file_op,
        program: if launch.file_op {
            OsString::new()
        } else {
            launch.shell.as_os_str().to_owned()
        },
        args: if launch.file_op {
            Vec::new()
        } else {
            vec!["-c".into(), launch.command.into()]
        },
    }
    .to_args();
    // The shell's own three strings are counted by the check itself; a file operation has none.
    let own = if launch.file_op { 0 } else { 3 };
    // What the launcher's own `execve` adds to the shell's: its program, `argv[0]` and the
    // plan's arguments (the shell's three are counted by the check itself).
    let launcher_strings = [
        launch.launcher.program().as_os_str(),
        launch.launcher.arg0().as_os_str(),
    ]
    .into_iter()
    .chain(
        invocation[..invocation.len() - own]
            .iter()
            .map(OsString::as_os_str),
    );
    validate_launch(
        launch.shell,
        launch.base,
        launch.command,
        launch.env,
        launch.managed,
        Extra::default()
            .plus_arguments(launcher_strings)
            .plus_variable(
                launch
                    .sandbox
                    .and_then(|c| c.tmp.as_ref())
                    .map(|tmp| TMPDIR_VAR.len() + tmp.as_os_str().len()),
            ),
    )?;
    check_cwd(launch.cwd)?;
    let owner = Owner::new(launch.scope);
    let mut cmd = Command::new(launch.launcher.program());
    cmd.arg0(launch.launcher.arg0())
        .args(invocation)
        .env_clear()
        .envs(launch.base.iter());
    if let Some(tmp) = launch.sandbox.and_then(|c| c.tmp.as_ref()) {
        // Before the caller's env, so a caller's own TMPDIR still wins.
        cmd.env(TMPDIR_VAR, tmp);
    }
    cmd.envs(launch.env)
        .envs(launch.managed)
        .env(OWNER_MARKER, owner.marker());
    cmd.current_dir(launch.cwd)
        .kill_on_drop(true)
        .stdin(if launch.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let gate = SpawnGate::enter();
    let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
        shell: launch.launcher.path().to_owned(),
        error: source,
    })?;
    let Some(pgid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    else {
        // Cannot happen right after a successful spawn; `kill_on_drop` cleans up if it does.
        return Err(ExecError::Spawn {
            shell: launch.launcher.path().to_owned(),
            error: io::Error::other("spawned shell has no pid"),
        });
    };
    let record = gate.register(
        pgid,
        CommandOrigin {
            sandbox: launch
                .sandbox
                .map_or(crate::sandbox::SandboxPolicy::UNCONFINED, |c| c.policy),
            agent: launch.agent.cloned(),
        },
    );
    drop(gate);
    let group = GroupGuard { pgid, armed: true };
    let exit = watch_exit(pgid);
    let stdin = match (child.stdin.take(), launch.stdin) {
        (Some(pipe), Some(bytes)) => Some((pipe, bytes)),
        _ => None,
    };
    Ok(Spawned {
        child,
        group,
        exit,
        stdin,
        owner,
        _record: record,
    })
}

/// The variable naming a confined command's private temporary directory.
const TMPDIR_VAR: &str = "TMPDIR";

fn check_cwd(cwd: &Path) -> Result<(), ExecError> {
    let bad = |source| ExecError::BadCwd {
        path: PathBuf::from(cwd),
        error: source,
    };
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(bad(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        ))),
        Err(source) => Err(bad(source)),
    }
}

#[cfg(target_os = "linux")]
fn watch_exit(pid: Pid) -> ExitWatch {
    use rustix::process::{PidfdFlags, pidfd_open};
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    // `with_interest` is deprecated because it is unsound for a `T` that does not own its fd;
    // `OwnedFd` does, and the sound replacement is an `unsafe fn`, which this crate forbids.
    #[expect(deprecated, reason = "sound for OwnedFd; the replacement needs unsafe")]
    let register = |fd| AsyncFd::with_interest(fd, Interest::READABLE);
    match pidfd_open(pid, PidfdFlags::NONBLOCK)
        .map_err(io::Error::from)
        .and_then(register)
    {
        Ok(fd) => ExitWatch::Pidfd(fd),
        Err(error) => {
            tracing::debug!(%error, "no pidfd; falling back to reaping on exit");
            ExitWatch::Reap {
                exited: false,
                status: None,
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn watch_exit(_pid: Pid) -> ExitWatch {
    ExitWatch::Reap {
        exited: false,
        status: None,
    }
}

impl Spawned {
    /// Takes the pipes for a caller that talks to the process itself (a served process):
    /// `supervise` then pumps and feeds nothing.
    pub(crate) fn take_stdio(
        &mut self,
    ) -> (
        Option<ChildStdin>,
        Option<tokio::process::ChildStdout>,
        Option<tokio::process::ChildStderr>,
    ) {
        (
            self.stdin.take().map(|(pipe, _)| pipe),
            self.child.stdout.take(),
            self.child.stderr.take(),
        )
    }

    /// Resolves once the shell has exited. Cancel-safe. With a pidfd the shell stays a zombie
    /// (still pinning its group id) until [`Self::reap`].
    async fn exited(&mut self) {
        #[cfg(target_os = "linux")]
        if let ExitWatch::Pidfd(fd) = &self.exit {
            match fd.readable().await {
                Ok(_ready) => return,
                Err(error) => {
                    tracing::warn!(%error, "pidfd wait failed; reaping instead");
                    self.exit = ExitWatch::Reap {
                        exited: false,
                        status: None,
                    };
                }
            }
        }
        if let ExitWatch::Reap { exited, status } = &mut self.exit
            && !*exited
        {
            let waited = self.child.wait().await;
            if let Err(error) = &waited {
                // Not expected for our own child; report "no status" rather than hang.
                tracing::warn!(%error, "waiting for the shell failed");
            }
            *status = waited.ok();
            *exited = true;
        }
    }

    /// Reaps the shell (it has exited, or was SIGKILLed) and returns its status.
    async fn reap(&mut self) -> Option<ExitStatus> {
        if let ExitWatch::Reap {
            exited: true,
            status,
        } = self.exit
        {
            return status;
        }
        match self.child.wait().await {
            Ok(status) => Some(status),
            Err(error) => {
                tracing::warn!(%error, "reaping the shell failed");
                None
            }
        }
    }
}

/// Reads one pipe into its collector until EOF.
async fn pump(reader: Option<impl AsyncRead + Unpin>, sink: Arc<Mutex<Collector>>) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => lock(&sink).push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Writes the caller's stdin bytes and closes the pipe.
async fn feed(stdin: Option<(ChildStdin, Vec<u8>)>) {
    if let Some((mut pipe, bytes)) = stdin {
        // Room for all of a large input (a file operation's write) where the system allows, so
        // it goes across in one wake-up, not one per 64 KiB; a refusal changes nothing.
        if bytes.len() > 64 * 1024 {
            let _ = rustix::pipe::fcntl_setpipe_size(&pipe, bytes.len());
        }
        // EPIPE means the command exited or closed stdin without reading it all: not an error.
        let _ = pipe.write_all(&bytes).await;
        let _ = pipe.shutdown().await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Exited,
    Timeout,
    Cancelled,
}

/// Runs the shell to the end as described in the module docs. Never fails: every way out produces
/// an [`Ended`], and the collectors are finished before returning.
pub(crate) async fn supervise(
    mut sp: Spawned,
    stdout: Arc<Mutex<Collector>>,
    stderr: Arc<Mutex<Collector>>,
    limits: Limits,
    cancel: &CancellationToken,
    stop: &CancellationToken,
) -> Ended {
    let pgid = sp.group.pgid;
    let io = {
        let out = pump(sp.child.stdout.take(), stdout.clone());
        let err = pump(sp.child.stderr.take(), stderr.clone());
        let input = feed(sp.stdin.take());
        async move {
            tokio::join!(out, err, input);
        }
    };
    tokio::pin!(io);
    let mut io_done = false;

    let deadline = async {
        match limits.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => pending().await,
        }
    };
    tokio::pin!(deadline);
    let cancelled = async {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = stop.cancelled() => {}
        }
    };
    tokio::pin!(cancelled);

    let cause = loop {
        tokio::select! {
            biased;
            () = sp.exited() => break Cause::Exited,
            () = &mut io, if !io_done => io_done = true,
            () = &mut deadline => break Cause::Timeout,
            () = &mut cancelled => break Cause::Cancelled,
        }
    };

    if cause != Cause::Exited {
        signal_command(pgid, Signal::TERM);
        let grace = tokio::time::sleep(limits.grace);
        tokio::pin!(grace);
        let mut killed = false;
        loop {
            tokio::select! {
                biased;
                () = sp.exited() => break,
                () = &mut io, if !io_done => io_done = true,
                () = &mut grace, if !killed => {
                    signal_command(pgid, Signal::KILL);
                    killed = true;
                }
            }
        }
    }

    if !io_done {
        io_done = tokio::time::timeout(limits.drain, &mut io).await.is_ok();
    }
    signal_command(pgid, Signal::KILL);
    if !io_done && tokio::time::timeout(limits.drain, &mut io).await.is_err() {
        tracing::debug!(
            pgid = pgid.as_raw_pid(),
            "pipes still open after the group was killed; abandoning them"
        );
    }
    let status = sp.reap().await;
    sp.group.armed = false;
    sp.owner.close(pgid).await;
    lock(&stdout).finish();
    lock(&stderr).finish();

    Ended {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out: cause == Cause::Timeout,
        aborted: cause == Cause::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::OutputStream;
    use crate::exec::default_secret_pattern;
    use crate::exec::output::SpillTarget;

    fn collectors(dir: &Path) -> (Arc<Mutex<Collector>>, Arc<Mutex<Collector>>) {
        let target = Arc::new(SpillTarget::new(dir.join("spill"), 1 << 20, u64::MAX));
        let c = |s| Arc::new(Mutex::new(Collector::new(s, 1 << 16, target.clone())));
        (c(OutputStream::Stdout), c(OutputStream::Stderr))
    }

    fn launch<'a>(
        base: &'a BaseEnv,
        empty: &'a BTreeMap<String, String>,
        dir: &'a Path,
        command: &'a str,
    ) -> Launch<'a> {
        Launch {
            launcher: launcher(),
            open_files: None,
            shell: Path::new("/bin/bash"),
            file_op: false,
            base,
            command,
            cwd: dir,
            env: empty,
            managed: empty,
            stdin: None,
            sandbox: None,
            scope: "test",
            agent: None,
        }
    }

    fn launcher() -> &'static Launcher {
        static LAUNCHER: std::sync::OnceLock<Launcher> = std::sync::OnceLock::new();
        LAUNCHER.get_or_init(crate::test_support::launcher)
    }

    fn limits() -> Limits {
        Limits {
            timeout: Some(Duration::from_secs(60)),
            grace: Duration::from_millis(300),
            drain: Duration::from_millis(200),
        }
    }

    fn base() -> BaseEnv {
        BaseEnv::new(std::env::vars_os(), &default_secret_pattern(), &[])
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn exit_is_watched_through_a_pidfd() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, empty) = (base(), BTreeMap::new());
        let sp = spawn(launch(&base, &empty, tmp.path(), "exit 7")).unwrap();
        assert!(matches!(sp.exit, ExitWatch::Pidfd(_)));
        let (out, err) = collectors(tmp.path());
        let never = CancellationToken::new();
        let ended = supervise(sp, out, err, limits(), &never, &never).await;
        assert_eq!(ended.exit_code, Some(7));
    }

    /// The fallback used where pidfds are unavailable still drains, kills the group and reports.
    #[tokio::test]
    async fn the_reaping_fallback_behaves_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, empty) = (base(), BTreeMap::new());
        let command = "sleep 33001 & echo $! > pid; echo out; echo err >&2; exit 5";
        let mut sp = spawn(launch(&base, &empty, tmp.path(), command)).unwrap();
        sp.exit = ExitWatch::Reap {
            exited: false,
            status: None,
        };
        let (out, err) = collectors(tmp.path());
        let never = CancellationToken::new();
        let ended = supervise(sp, out.clone(), err.clone(), limits(), &never, &never).await;
        assert_eq!(ended.exit_code, Some(5));
        assert_eq!(lock(&out).snapshot().bytes, b"out\n");
        assert_eq!(lock(&err).snapshot().bytes, b"err\n");
        let pid: i32 = std::fs::read_to_string(tmp.path().join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        crate::exec::tests::assert_dies(pid, "sleep 33001").await;
    }
}
