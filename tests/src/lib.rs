//! Support for end-to-end tests: build the real `dshd` and `dshctl` binaries once, start `dshd` on a
//! private temporary home and socket, and talk to it through `dsh-client` or `dshctl`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dsh_client::Client;

pub mod agents;
pub mod bench;
pub mod mcp;
pub mod pty;
pub mod seed;
pub mod shell;

/// Path of the freshly built `dshd` binary (built once per test process).
pub fn dshd_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_bin("dsh-daemon", "dshd"))
}

/// A copy of the built `dshd` in `dir` (a hard link when the file system allows one), with
/// nothing beside it unless the test puts it there.
pub fn dshd_copy(dir: &Path) -> PathBuf {
    let copy = dir.join("dshd");
    if std::fs::hard_link(dshd_bin(), &copy).is_err() {
        std::fs::copy(dshd_bin(), &copy).unwrap_or_else(|e| panic!("copy dshd: {e}"));
    }
    copy
}

/// The `dsh-launch` built beside [`dshd_bin`].
pub fn launcher_bin() -> PathBuf {
    dshd_bin().with_file_name("dsh-launch")
}

/// Path of the freshly built `dshctl` binary (built once per test process).
pub fn dshctl_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_bin("dsh-client", "dshctl"))
}

fn build_bin(package: &str, bin: &str) -> PathBuf {
    cargo_build(package, bin, false)
}

/// Builds `bin` of `package` (release when asked) with escargot and returns its path.
///
/// `cargo test` and `cargo bench` run their binaries with the package's `CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, ... set. Some build scripts (ring's) declare `rerun-if-env-changed` on exactly
/// those names, so a nested `cargo build` that inherited them would see "changed" values and
/// rebuild ring and everything above it, every run, and undo the next plain `cargo build`'s work.
/// They are removed so the nested build sees what a build from a shell sees.
///
/// `DSH_BENCH_DSHD=<path>` makes a release build of `dshd` answer with that binary instead, so a
/// bench can compare two builds of dshd (e.g. two allocators) without rebuilding between runs.
pub fn cargo_build(package: &str, bin: &str, release: bool) -> PathBuf {
    if release
        && bin == "dshd"
        && let Some(path) = std::env::var_os("DSH_BENCH_DSHD")
    {
        return PathBuf::from(path);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut build = escargot::CargoBuild::new()
        .manifest_path(manifest)
        .package(package)
        .bin(bin);
    if release {
        build = build.release();
    }
    for (key, _) in std::env::vars_os() {
        if set_by_cargo_for_the_runner(&key.to_string_lossy()) {
            build = build.env_remove(&key);
        }
    }
    let run = build
        .run()
        .unwrap_or_else(|e| panic!("cannot build {bin}: {e}"));
    // dshd is installed with the launcher beside it (README), so every dshd started here is too.
    if bin == "dshd" {
        cargo_build("dsh-launch", "dsh-launch", release);
    }
    run.path().to_path_buf()
}

/// Whether `name` is one of the variables cargo sets for the binary it runs, which a nested
/// cargo must not inherit (see [`cargo_build`]).
pub use dsh_core::test_support::set_by_cargo_for_the_runner;

/// The lines of a child's `stdout`, read by a thread of their own as they come, so a test can
/// wait for the next one with a deadline (`recv_timeout`) while the child keeps running.
pub fn line_channel(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A private (0700) temporary directory: `tempfile` directories are 0755.
pub fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("dsh-e2e-")
        .tempdir()
        .unwrap_or_else(|e| panic!("tempdir: {e}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    dir
}

/// How to start a daemon under test.
#[derive(Debug, Default)]
pub struct DaemonSpec {
    /// Extra command-line arguments.
    pub args: Vec<OsString>,
    /// Extra environment entries for the daemon.
    pub env: Vec<(OsString, OsString)>,
    /// Do not pass `--dsh-home` (to test home precedence).
    pub no_home_flag: bool,
    /// Do not pass `--socket`.
    pub no_socket_flag: bool,
    /// A config file's text, written to `<dir>/config.toml` and passed with `--config`.
    pub config: Option<String>,
    /// Start dshd with this soft open-file limit (the hard limit unchanged), as a login session
    /// with the usual 1024 would.
    pub open_file_soft_limit: Option<u64>,
    /// A command that starts `dshd`: it is run with these words, then dshd's path and arguments,
    /// and must end by exec'ing them (so the child is dshd itself), e.g. to give dshd a private
    /// mount namespace. Empty: dshd is started directly.
    pub wrapper: Vec<OsString>,
    /// Run dshd as this uid (and gid, with no supplementary groups) through `setpriv`: dshd as an
    /// ordinary user. The test directory is handed to that user, `TMPDIR` points inside it, and
    /// [`TestDaemon::dshctl`] runs as that user too (dshctl refuses a socket of another uid).
    /// Needs root; [`NOBODY`] is the usual choice.
    pub user: Option<u32>,
    /// A `dshd` binary other than the one built with `dsh-launch` beside it, e.g. a copy alone in
    /// a directory ([`dshd_copy`]).
    pub binary: Option<PathBuf>,
}

/// The uid and gid of `nobody`: the ordinary user tests run dshd as.
pub const NOBODY: u32 = 65534;

/// A running `dshd` with its own temporary home and socket. Killed on drop if still running.
#[derive(Debug)]
pub struct TestDaemon {
    /// The daemon process.
    pub child: Child,
    /// The temporary directory holding home, socket and log.
    pub dir: tempfile::TempDir,
    /// `<dir>/home`.
    pub home: PathBuf,
    /// `<dir>/run/dshd.sock`.
    pub socket: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
    /// The uid dshd runs as when not the test's own ([`DaemonSpec::user`]).
    pub user: Option<u32>,
}

impl TestDaemon {
    /// Starts `dshd --dsh-home <dir>/home --socket <dir>/run/dshd.sock` and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(DaemonSpec::default())
    }

    /// Starts a daemon as `spec` says and waits until it answers `Status`.
    pub fn start_with(spec: DaemonSpec) -> Self {
        let daemon = Self::spawn(spec, private_dir());
        daemon.wait_ready();
        daemon
    }

    /// Starts a daemon in `dir` without waiting for it.
    pub fn spawn(spec: DaemonSpec, dir: tempfile::TempDir) -> Self {
        let home = dir.path().join("home");
        let socket = dir.path().join("run/dshd.sock");
        let log = dir.path().join("dshd.log");
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("log file: {e}"));
        if let Some(user) = spec.user {
            std::fs::create_dir_all(dir.path().join("tmp"))
                .unwrap_or_else(|e| panic!("mkdir tmp: {e}"));
            give_to(dir.path(), user);
        }
        let child = launch(&spec, &dir, &home, &socket, log_file);
        Self {
            child,
            dir,
            home,
            socket,
            log,
            user: spec.user,
        }
    }

    /// Starts a new daemon on the same home, socket and log (appended to) once the previous one
    /// has exited, and waits until it answers. Fails the test if the previous one still runs.
    pub fn restart_with(&mut self, spec: DaemonSpec) {
        assert!(
            matches!(self.child.try_wait(), Ok(Some(_))),
            "restart_with: the previous dshd is still running; stop or kill it first"
        );
        let log_file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("log file: {e}"));
        self.child = launch(&spec, &self.dir, &self.home, &self.socket, log_file);
        self.wait_ready();
    }

    /// Kills the daemon with SIGKILL (a crash: nothing is flushed or cleaned up) and reaps it.
    pub fn kill9(&mut self) {
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("kill -9 dshd: {e}"));
        self.child
            .wait()
            .unwrap_or_else(|e| panic!("reap dshd: {e}"));
    }

    /// Waits until the daemon answers `Status` (or fails the test after 20 s with its log).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.dshctl(&["status"]).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("dshd did not become ready; log:\n{}", self.log_text());
    }

    /// The daemon's stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Connects a client to the daemon's socket.
    pub async fn client(&self) -> Client {
        Client::connect(&self.socket)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"))
    }

    /// Runs `dshctl --socket <socket> ARGS...` (as [`DaemonSpec::user`] when dshd runs as one).
    pub fn dshctl(&self, args: &[&str]) -> Output {
        match self.user {
            None => dshctl_at(&self.socket, args),
            Some(user) => {
                let mut cmd = as_user(user, dshctl_bin());
                cmd.arg("--socket")
                    .arg(&self.socket)
                    .args(args)
                    .env_remove("DSH_SOCKET")
                    .output()
                    .unwrap_or_else(|e| panic!("run dshctl as uid {user}: {e}"))
            }
        }
    }

    /// Runs `dshctl --json ARGS...` and parses its one JSON document; fails the test if it exits
    /// non-zero.
    pub fn dshctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.dshctl(&full);
        assert!(
            out.status.success(),
            "dshctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "dshctl {args:?} printed no single JSON document ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Runs `dshctl --json ARGS...` for a stream and parses its JSON lines (one object per line);
    /// fails the test if it exits non-zero or a line is not one JSON object.
    pub fn dshctl_json_lines(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.dshctl(&full);
        assert!(
            out.status.success(),
            "dshctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
                    panic!("dshctl {args:?} printed a line that is not JSON ({e}): {line:?}")
                });
                assert!(value.is_object(), "dshctl {args:?}: not an object: {line}");
                value
            })
            .collect()
    }

    /// Sends `signal` to the daemon and waits (up to `limit`) for it to exit.
    pub fn signal_and_wait(
        &mut self,
        signal: rustix::process::Signal,
        limit: Duration,
    ) -> ExitStatus {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap_or_else(|e| panic!("kill: {e}"));
        self.wait_exit(limit)
    }

    /// Waits (up to `limit`) for the daemon to exit; fails the test if it does not.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        wait_child(&mut self.child, limit).unwrap_or_else(|| {
            panic!(
                "dshd did not exit within {limit:?}; log:\n{}",
                self.log_text()
            )
        })
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `program` run as `user` (uid and gid, no supplementary groups) through `setpriv`.
pub fn as_user(user: u32, program: &Path) -> Command {
    let mut cmd = Command::new(setpriv());
    cmd.args(setpriv_args(user)).arg(program);
    cmd
}

fn setpriv_args(user: u32) -> [String; 4] {
    [
        format!("--reuid={user}"),
        format!("--regid={user}"),
        "--clear-groups".to_owned(),
        "--".to_owned(),
    ]
}

/// `setpriv` on `PATH`, or the test fails saying how to install it.
fn setpriv() -> PathBuf {
    on_path(
        "setpriv",
        "it runs dshd as an ordinary user: apt-get install util-linux",
    )
}

/// `program` on `PATH`, or the test fails saying why it is needed and how to install it (`hint`).
pub fn on_path(program: &str, hint: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("this test needs {program} on PATH; {hint}"))
}

/// Hands `path` and everything under it to `user` (uid and gid).
pub fn give_to(path: &Path, user: u32) {
    let id = Some(user);
    std::os::unix::fs::lchown(path, id, id)
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            give_to(&entry.unwrap_or_else(|e| panic!("{e}")).path(), user);
        }
    }
}

fn launch(
    spec: &DaemonSpec,
    dir: &tempfile::TempDir,
    home: &Path,
    socket: &Path,
    log: std::fs::File,
) -> Child {
    let mut words: Vec<OsString> = Vec::new();
    if let Some(user) = spec.user {
        words.push(setpriv().into());
        words.extend(setpriv_args(user).map(OsString::from));
    }
    words.extend(spec.wrapper.iter().cloned());
    let dshd = spec.binary.as_deref().unwrap_or(dshd_bin());
    let mut cmd = match words.split_first() {
        Some((program, words)) => {
            let mut cmd = daemon_command_for(Path::new(program), dir);
            cmd.args(words).arg(dshd);
            cmd
        }
        None => daemon_command_for(dshd, dir),
    };
    if spec.user.is_some() {
        cmd.env("TMPDIR", dir.path().join("tmp"));
    }
    if !spec.no_home_flag {
        cmd.arg("--dsh-home").arg(home);
    }
    if !spec.no_socket_flag {
        cmd.arg("--socket").arg(socket);
    }
    if let Some(text) = &spec.config {
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("config file: {e}"));
        cmd.arg("--config").arg(path);
    }
    cmd.args(&spec.args);
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(limit) = spec.open_file_soft_limit {
        cmd = with_soft_open_file_limit(&cmd, limit);
    }
    cmd.stderr(log).stdout(Stdio::null());
    cmd.spawn().unwrap_or_else(|e| panic!("spawn dshd: {e}"))
}

/// `cmd` run through bash, which lowers its soft open-file limit and then execs it: the same
/// process (so the same pid), environment and directory.
fn with_soft_open_file_limit(cmd: &Command, limit: u64) -> Command {
    let mut wrapped = Command::new("bash");
    wrapped
        .arg("-c")
        .arg(r#"ulimit -S -n "$0" && exec "$@""#)
        .arg(limit.to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// How many descriptors process `pid` has open (from `/proc`). For dshd, only root may look: it
/// makes itself non-dumpable, which gives its `/proc` files to root.
pub fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"))
}

/// The soft and hard open-file limits of process `pid` (from `/proc`; `None`: unlimited).
pub fn open_file_limits(pid: u32) -> (Option<u64>, Option<u64>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/limits: {e}"));
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open-file limit in /proc/{pid}/limits:\n{text}"));
    let mut values = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(|v| v.parse().ok());
    (values.next().flatten(), values.next().flatten())
}

/// A `dshd` command with a clean, predictable environment: no outer `DSH_*`, no
/// `XDG_RUNTIME_DIR`, no `NOTIFY_SOCKET`, `HOME` inside `dir`.
pub fn daemon_command(dir: &tempfile::TempDir) -> Command {
    daemon_command_for(dshd_bin(), dir)
}

/// [`daemon_command`] for a given `dshd` binary (benchmarks use a release build).
pub fn daemon_command_for(bin: &Path, dir: &tempfile::TempDir) -> Command {
    let mut cmd = Command::new(bin);
    for (key, _) in std::env::vars_os() {
        if key
            .to_string_lossy()
            .to_ascii_uppercase()
            .starts_with("DSH_")
        {
            cmd.env_remove(&key);
        }
    }
    cmd.env_remove("XDG_RUNTIME_DIR")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env("HOME", dir.path().join("user"))
        .env("RUST_LOG", "info")
        .current_dir(dir.path());
    cmd
}

/// Runs `dshctl --socket <socket> ARGS...` with no ambient `DSH_SOCKET`.
pub fn dshctl_at(socket: &Path, args: &[&str]) -> Output {
    Command::new(dshctl_bin())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("DSH_SOCKET")
        .output()
        .unwrap_or_else(|e| panic!("run dshctl: {e}"))
}

/// Waits up to `limit` for `child` to exit.
pub fn wait_child(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `condition` every few milliseconds until it holds or `limit` passes; returns whether it
/// held. For waiting on an observable state, never as a stand-in for synchronisation.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Fails the test unless it runs as root. Root-only tests are `#[ignore = "needs root"]`, so the
/// README's `cargo test --workspace` leaves them out and reports them as ignored; `.ci/run` runs
/// them as root (`cargo test --workspace -- --ignored`). Run without root, such a test fails here
/// saying what it needed, rather than passing having tested nothing.
pub fn needs_root(what: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root to {what}: run the ignored tests as root (`cargo test --workspace -- --ignored`, as .ci/run does)"
    );
}

/// Compiles the C program `source` into `dir/name` with the system's `cc` and returns its path:
/// for the system calls a shell cannot make (`clone` with flags, raw `prlimit`). A missing
/// compiler fails the test with the install command.
pub fn compile_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("write {}: {e}", src.display()));
    let out = Command::new("cc")
        .arg("-O")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cc ({e}): install a C compiler, e.g. apt-get install gcc"));
    assert!(
        out.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}
