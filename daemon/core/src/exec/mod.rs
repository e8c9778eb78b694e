//! The local executor: runs `bash -c <command>` for tools, hooks and RPC clients (CONTRACTS §5.3, §6).
//!
//! - [`env`]: the child environment, four layers; the scrubbed daemon environment and the terminal
//!   overrides are computed once per [`Executor`].
//! - `limits`: `execve`'s size limits, checked before every spawn ([`ExecError::TooLong`],
//!   [`ExecError::TooLarge`]).
//! - `process`: spawn through the launcher in a new session (and so a new process group),
//!   timeout and cancellation (SIGTERM to the group,
//!   SIGKILL after the grace), bounded pipe drain, group kill after the shell exits, reaping.
//! - `output`: per-stream memory tail and private spill files.
//! - `tap`: live output, handed on as it is read ([`OutputTap`]) and buffered, bounded, for a
//!   reader that sends at its own pace ([`OutputFeed`]).
//! - `outcome`: [`CommandOutcome`] and its text for a model.
//! - `jobs`: background jobs with consuming reads.
//! - `reaper`: owner markers, adopted orphans and a crashed daemon's leftovers, so that no
//!   descendant outlives its owner even after leaving the process group.
//! - `lineage`: which of the daemon's commands a process (a client of the socket) descends from,
//!   and under which sandbox ([`provenance`]).
//! - `launcher`: which program every command is started through ([`Launcher`]): the
//!   `dsh-launch` installed beside dshd, or dshd's own binary.
//! - `confine`: sandboxed launches (the plan the launcher confines itself to, private temporary
//!   directories); see [`crate::sandbox`] and `dsh_launch`.
//!
//! Decisions worth knowing (details in each file):
//!
//! - **Pipe drain bound**: after the shell exits, its pipes are read for at most
//!   [`ExecConfig::pipe_drain`] (200 ms), so `sleep 100 &` cannot hold a call open.
//! - **Group kill after exit**: the group then always gets SIGKILL; a command's processes never
//!   outlive it. Anything meant to keep running must be a background job. On Linux the shell's exit
//!   is watched with a pidfd and the shell is reaped only after the group kill, so the group id
//!   cannot have been reused by then.
//! - **Spill directory**: default `$TMPDIR/dsh-spill-<uid>`, created 0700, refused if it is a
//!   symlink or owned by someone else; files are 0600, created exclusively, randomly named.
//! - **Timeouts**: `None` or zero means the default (120 s); larger values are clamped to the
//!   maximum (600 s). Background jobs have no timeout.
//! - **Cancellation**: a token already cancelled at [`Executor::run`] means nothing is spawned
//!   ([`ExecError::Cancelled`]). A background job honours the token of the spec it was started
//!   with, so a caller that wants the job to outlive its own cancellation passes a fresh token.
//! - **Shutdown and drop**: [`Executor::shutdown`] refuses new work, terminates every running
//!   command and job (SIGTERM, SIGKILL after the grace) and waits until every shell is reaped.
//!   Dropping the executor triggers the same termination without waiting; dropping a `run` future
//!   SIGKILLs its group.

#![warn(missing_docs)]

mod confine;
pub(crate) use confine::SandboxRequest;
mod env;
mod file_op;
mod jobs;
mod launcher;
mod limits;
mod lineage;
pub use lineage::{Placement, Provenance, UnknownReason, place};
mod outcome;
mod output;
pub(crate) use output::ensure_private_dir;
pub use output::remove_stale_spills;
mod process;
mod reaper;
mod serve;
pub use reaper::{CommandOrigin, adopt_orphans};
pub(crate) use serve::{Served, ServedHandle};
mod tap;
pub(crate) use tap::OutputTap;
mod visible;
pub use tap::{OutputFeed, OutputStream};
pub(crate) use visible::Withheld;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[cfg(test)]
pub(crate) use env::is_managed_name;
pub(crate) use env::{check_caller_env, check_command};
#[cfg(test)]
pub(crate) use jobs::JOB_READ_LIMIT;
pub(crate) use jobs::{JobEnd, JobIdError, JobOutput};
pub use jobs::{JobId, JobInfo, JobState};
#[cfg(test)]
pub(crate) use limits::MAX_STRING_BYTES;
#[cfg(feature = "test-support")]
pub use limits::total_limit;
pub use limits::{LaunchPart, RESERVE_BYTES};
pub use outcome::{CommandOutcome, signal_name};

use env::BaseEnv;
pub use env::ClientEnv;
use jobs::{Job, JobTable};
pub use launcher::{Launcher, LauncherError, SealError};
use output::{Collector, SpillTarget};
use process::{Launch, Limits};

use crate::locks::lock;
use crate::sandbox::{LandlockSupport, SandboxError, SandboxSettings};
use dsh_session::SessionId;

/// The default secret pattern, matched case-insensitively anywhere in a variable name.
///
/// Long, unambiguous words match anywhere (`GITHUB_TOKEN`, `PGPASSWORD`, `SLACK_WEBHOOK_URL`,
/// `PRIVATE_PEM`, `HTTP_AUTHORIZATION`). Short words match only as whole `_`-separated tokens, so
/// they do not catch longer words that contain them: `PASS`, `PW` and `DSN` anywhere as a token
/// (`DB_PASS`, `LDAP_PW`, `SENTRY_DSN`, not `PASSENGER_*` or `BYPASS`); `PWD` only after another
/// token (`MYSQL_PWD`, not the working directory `PWD` or `OLDPWD`); `AUTH` only as the whole name,
/// the first or the last token (`AUTH`, `AUTH_HEADER`, `HF_AUTH`, `NPM_CONFIG__AUTH`), so
/// `XAUTHORITY`, `GIT_AUTHOR_NAME` and the agent socket path `SSH_AUTH_SOCK` stay. Values are
/// checked too, whatever the pattern ([`has_url_password`]). `docs/CONFIG.md` states the rule.
pub(crate) const DEFAULT_SECRET_PATTERN: &str = concat!(
    "KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|BEARER|WEBHOOK",
    "|AUTHORIZATION|CONNECTION_?STRING",
    "|(^|_)(PASS|PW|DSN)(_|$)|_PWD(_|$)|^AUTH(_|$)|_AUTH$",
);

/// Compiles a secret pattern the way the executor uses it: case-insensitive, matched anywhere in
/// a variable name.
pub fn compile_secret_pattern(pattern: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
}

/// [`DEFAULT_SECRET_PATTERN`], compiled (tests).
#[cfg(test)]
pub(crate) fn default_secret_pattern() -> Regex {
    compile_secret_pattern(DEFAULT_SECRET_PATTERN).unwrap()
}

/// Executor settings. [`Executor::new`] validates them.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// Names in the daemon's environment matching this regex (case-insensitively, anywhere in the
    /// name) are not passed to children. Compiled by [`Executor::new`].
    pub secret_pattern: String,
    /// Further names (ASCII case-insensitive, exact) not passed on, e.g. the model key variable.
    pub extra_scrub: Vec<String>,
    /// The shell; a bare name is looked up once in the daemon's `PATH`.
    pub shell: PathBuf,
    /// Foreground timeout when a call gives none (or zero).
    pub default_timeout: Duration,
    /// Upper bound for a call's timeout; larger requests are clamped.
    pub max_timeout: Duration,
    /// Time between SIGTERM and SIGKILL to a group.
    pub kill_grace: Duration,
    /// How long pipes are read after the shell exited (then again after the group kill).
    pub pipe_drain: Duration,
    /// Bytes of each stream kept in memory (the tail).
    pub output_cap_bytes: usize,
    /// Bytes of each stream written to its spill file at most.
    pub spill_cap_bytes: u64,
    /// Bytes all live spill files may hold together; past it a stream keeps no full copy.
    pub spill_total_cap_bytes: u64,
    /// Private directory for spill files.
    pub spill_dir: PathBuf,
    /// Finished jobs kept readable before the oldest are forgotten.
    pub max_finished_jobs: usize,
    /// Names the deployment (the daemon sets the harness home) in every child's owner marker, so
    /// the next daemon of the same home can find and kill what a killed one left behind.
    pub owner_scope: String,
    /// How confined commands are run (extra roots, protected paths, Landlock ABI, where their
    /// temporary directories go).
    pub sandbox: SandboxSettings,
    /// The program every command is started through (see [`Launcher`]).
    pub launcher: Launcher,
    /// The soft open-file limit every command starts with: the one dshd was started with, when
    /// dshd raised its own (the launcher sets it before `exec`). `None`: dshd's own.
    pub child_open_files: Option<u64>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            secret_pattern: DEFAULT_SECRET_PATTERN.to_owned(),
            extra_scrub: Vec::new(),
            shell: PathBuf::from("bash"),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(3),
            pipe_drain: Duration::from_millis(200),
            output_cap_bytes: 64_000,
            spill_cap_bytes: 16 * 1024 * 1024,
            spill_total_cap_bytes: 1024 * 1024 * 1024,
            spill_dir: default_spill_dir(),
            max_finished_jobs: 256,
            owner_scope: String::new(),
            sandbox: SandboxSettings::default(),
            launcher: default_launcher(),
            child_open_files: None,
        }
    }
}

/// dshd's own binary (dshd picks an installed `dsh-launch` at start); in the core's unit tests,
/// which run in a test binary, the `dsh-launch` binary built for them.
fn default_launcher() -> Launcher {
    #[cfg(test)]
    return crate::test_support::launcher();
    #[cfg(not(test))]
    Launcher::this_executable()
}

/// `$TMPDIR/dsh-spill-<uid>`: per user, so two users' daemons never share it.
pub(crate) fn default_spill_dir() -> PathBuf {
    std::env::temp_dir().join(format!("dsh-spill-{}", rustix::process::getuid().as_raw()))
}

/// One command to run.
#[derive(Debug, Clone, Default)]
pub struct CommandSpec {
    /// Passed to `bash -c`.
    pub command: String,
    /// Working directory; must exist.
    pub cwd: PathBuf,
    /// Foreground timeout; `None` or zero means the default. Ignored by background jobs.
    pub timeout: Option<Duration>,
    /// Ordinary variables from a trusted caller (layer 3); `DSH_*` keys are refused.
    pub env: BTreeMap<String, String>,
    /// The managed snapshot (layer 4); every key must start with `DSH_`.
    pub managed: BTreeMap<String, String>,
    /// Bytes for stdin (then closed); `None` means `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Cancels the command (foreground: `aborted`; background: the job is killed).
    pub cancel: CancellationToken,
    /// The agent on whose behalf a foreground command runs: its spill files are kept until that
    /// agent closes (its model may read them later). `None`: removed when the call returns.
    pub spill_owner: Option<SessionId>,
    /// The sandbox to run the command in; `None` (or an unconfined policy): none.
    pub sandbox: Option<SandboxRequest>,
    /// Where the output also goes as it is produced (foreground commands; a job ignores it).
    pub output: Option<OutputTap>,
    /// The environment the command starts from in place of dshd's own (layers 1 and 2): the
    /// creating client's, for an agent whose client sent it. `None`: dshd's.
    pub base_env: Option<ClientEnv>,
}

impl CommandSpec {
    /// A spec with no extra environment, no stdin and the default timeout.
    pub fn new(command: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            cwd: cwd.into(),
            ..Self::default()
        }
    }
}

/// Why the executor refused or could not run a command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A `DSH_*` key (any case) in the ordinary `env` layer.
    #[error(
        "env key {key:?} is in the managed DSH_* namespace; managed values come only from the snapshot"
    )]
    DshKeyInEnv {
        /// The key.
        key: String,
    },
    /// A key bash (or a shell the command starts) acts on at startup, in the ordinary `env` layer.
    #[error(
        "env key {key:?} is refused: it is {effect}, so it could run code or change the command before the command itself runs"
    )]
    ShellStartupKeyInEnv {
        /// The key.
        key: String,
        /// What bash does with it.
        effect: &'static str,
    },
    /// The executor's reserved owner marker (`OWNER_MARKER`) in the ordinary `env` layer.
    #[error("env key {key:?} is reserved: the executor sets it on every child itself")]
    ReservedKeyInEnv {
        /// The key.
        key: String,
    },
    /// One `execve` string (the command, or one `NAME=value`) longer than the kernel accepts.
    #[error(
        "{part} is {bytes} bytes; one execve argument or environment string may take at most {limit} bytes (MAX_ARG_STRLEN; `NAME=` and the final NUL count)"
    )]
    TooLong {
        /// Which string.
        part: LaunchPart,
        /// Its size, `NAME=` and NUL included.
        bytes: usize,
        /// `MAX_STRING_BYTES`.
        limit: usize,
    },
    /// The command and environment together are larger than `execve` accepts.
    #[error(
        "the command and its environment take {bytes} bytes (strings and their pointers), more than the {limit} bytes execve accepts here (a quarter of the stack limit, at most 6 MiB, less a {RESERVE_BYTES}-byte reserve); the largest part is {largest} ({largest_bytes} bytes)"
    )]
    TooLarge {
        /// What the launch needs.
        bytes: usize,
        /// What is available ([`total_limit`] less [`RESERVE_BYTES`]).
        limit: usize,
        /// The largest single part, the first candidate to shrink.
        largest: LaunchPart,
        /// Its size.
        largest_bytes: usize,
    },
    /// A managed snapshot key without the `DSH_` prefix.
    #[error("managed snapshot key {key:?} does not start with DSH_")]
    UnmanagedKeyInSnapshot {
        /// The key.
        key: String,
    },
    /// An environment name the OS cannot carry.
    #[error("env name {key:?} {reason}")]
    BadEnvName {
        /// The name.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An environment value with a NUL byte.
    #[error("env value of {key:?} contains a NUL byte")]
    NulInEnvValue {
        /// The name.
        key: String,
    },
    /// The command has a NUL byte.
    #[error("command contains a NUL byte")]
    NulInCommand,
    /// The working directory is missing or not a directory.
    #[error("working directory {} is not usable: {error}", path.display())]
    BadCwd {
        /// The directory asked for.
        path: PathBuf,
        /// Why it is unusable.
        error: std::io::Error,
    },
    /// The shell could not be started.
    #[error("cannot start {}: {error}", shell.display())]
    Spawn {
        /// The program that could not be started: the shell, or the launcher.
        shell: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// No such job (never existed, or finished long ago and forgotten).
    #[error("no background job {0}")]
    UnknownJob(JobId),
    /// A malformed job id.
    #[error(transparent)]
    BadJobId(#[from] JobIdError),
    /// A config value out of range.
    #[error("invalid executor config: {field} {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The call's token was already cancelled; nothing was started.
    #[error("the call was cancelled before the command started")]
    Cancelled,
    /// [`Executor::shutdown`] has begun; nothing new is started.
    #[error("the executor is shutting down")]
    ShuttingDown,
    /// `start` was called outside a tokio runtime.
    #[error("background jobs need a tokio runtime")]
    NoRuntime,
    /// The command's sandbox cannot be set up; nothing was started.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Counts live processes so shutdown can wait for all of them.
#[derive(Clone)]
struct Tracker(Arc<watch::Sender<usize>>);

struct Tracked(Arc<watch::Sender<usize>>);

impl Tracker {
    fn enter(&self) -> Tracked {
        self.0.send_modify(|n| *n += 1);
        Tracked(self.0.clone())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Runs commands and background jobs. Share it behind an `Arc`.
pub struct Executor {
    config: ExecConfig,
    base: BaseEnv,
    /// [`ExecConfig::secret_pattern`], compiled.
    secret_pattern: Regex,
    shell: PathBuf,
    spill: Arc<SpillTarget>,
    jobs: JobTable,
    /// Cancelled by shutdown (or drop): every command and job terminates.
    stop: CancellationToken,
    closed: AtomicBool,
    tracker: Tracker,
    /// [`ExecConfig::owner_scope`] hashed: the scope part of every owner marker.
    scope: String,
    /// What the kernel offers confined commands, probed once.
    landlock: LandlockSupport,
    /// The private temporary directories of confined commands. Each agent's is removed when it
    /// closes, and at shutdown for those still live (a temporary directory does not outlive the
    /// daemon).
    tmp_dirs: confine::TmpDirs,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("shell", &self.shell)
            .field("base_env_len", &self.base.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// Builds an executor whose children inherit the daemon's own (scrubbed) environment.
    pub fn new(config: ExecConfig) -> Result<Self, ExecError> {
        Self::with_base_env(config, std::env::vars_os())
    }

    /// Builds an executor with `ambient` standing in for the daemon's environment (layer 1), for
    /// tests and embedders that must not depend on the process environment.
    pub fn with_base_env(
        mut config: ExecConfig,
        ambient: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ExecError> {
        validate(&config)?;
        // A command that could rewrite the installed launcher would choose how the next one is
        // confined: no writable root may hold it.
        if let Some(path) = config.launcher.installed_path() {
            config.sandbox.protected.push(path.to_owned());
        }
        let ambient: Vec<(OsString, OsString)> = ambient.into_iter().collect();
        let path_var = ambient
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let shell = resolve_shell(&config.shell, path_var.as_deref());
        let secret_pattern = compile_secret_pattern(&config.secret_pattern).map_err(|e| {
            ExecError::InvalidConfig {
                field: "secret_pattern",
                reason: format!("is not a valid regex: {e}"),
            }
        })?;
        let base = BaseEnv::new(ambient, &secret_pattern, &config.extra_scrub);
        let spill = Arc::new(SpillTarget::new(
            config.spill_dir.clone(),
            config.spill_cap_bytes,
            config.spill_total_cap_bytes,
        ));
        let stop = CancellationToken::new();
        spawn_sweeper(stop.clone());
        Ok(Self {
            scope: reaper::scope_of(&config.owner_scope),
            config,
            base,
            secret_pattern,
            shell,
            spill,
            jobs: JobTable::default(),
            stop,
            closed: AtomicBool::new(false),
            tracker: Tracker(Arc::new(watch::channel(0).0)),
            landlock: LandlockSupport::probe(),
            tmp_dirs: confine::TmpDirs::default(),
        })
    }

    /// Kills every process an earlier, no longer running daemon of the same
    /// [`ExecConfig::owner_scope`] left behind (it was killed before it could clean up), and waits
    /// until they are gone. Returns how many there were. Blocking: call it once, at start.
    pub fn kill_leftovers(&self) -> usize {
        reaper::kill_leftovers(&self.scope)
    }

    /// The validated settings.
    pub fn config(&self) -> &ExecConfig {
        &self.config
    }

    /// What the kernel offers confined commands.
    pub fn landlock(&self) -> LandlockSupport {
        self.landlock
    }

    /// `vars` (a client's environment) scrubbed exactly as dshd's own environment is (secrets by
    /// name and value, `DSH_*`, the owner marker, shell startup variables such as `BASH_ENV`,
    /// the model key's variable), with the terminal overrides: a base for an agent's commands.
    pub fn client_env(&self, vars: impl IntoIterator<Item = (OsString, OsString)>) -> ClientEnv {
        ClientEnv(Arc::new(BaseEnv::new(
            vars,
            &self.secret_pattern,
            &self.config.extra_scrub,
        )))
    }

    /// Why `name=value` would not be passed on to a command, as a client's variable would not
    /// (`DSH_*`, the owner marker, the secret pattern, shell start-up variables, a URL with a
    /// password); `None`: it would.
    pub(crate) fn refusal(&self, name: &str, value: &str) -> Option<&'static str> {
        env::scrub_reason(
            std::ffi::OsStr::new(name),
            std::ffi::OsStr::new(value),
            &self.secret_pattern,
            &self.config.extra_scrub,
        )
    }

    /// `name`'s value in `base` (an agent's client environment, or dshd's own when it has none).
    pub(crate) fn base_var(&self, base: Option<&ClientEnv>, name: &str) -> Option<String> {
        base.map_or(&self.base, |c| &*c.0)
            .get(name)
            .map(|v| v.to_string_lossy().into_owned())
    }

    /// `base` (an agent's client environment, or dshd's own when it has none) with `vars` on
    /// top, each already checked with [`Self::refusal`].
    pub(crate) fn env_with(
        &self,
        base: Option<&ClientEnv>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> ClientEnv {
        let mut env = base.map_or_else(|| self.base.clone(), |c| (*c.0).clone());
        env.extend(vars);
        ClientEnv(Arc::new(env))
    }

    /// Number of variables in the base environment (scrubbed daemon environment plus terminal
    /// overrides), for benchmarks and diagnostics.
    pub fn child_env_len(&self) -> usize {
        self.base.len()
    }

    /// The timeout a foreground call asking for `requested` runs under.
    pub fn effective_timeout(&self, requested: Option<Duration>) -> Duration {
        match requested {
            Some(t) if !t.is_zero() => t.min(self.config.max_timeout),
            _ => self.config.default_timeout,
        }
    }

    fn collectors(&self, tap: Option<&OutputTap>) -> (Collector, Collector) {
        let cap = self.config.output_cap_bytes;
        (
            Collector::new(OutputStream::Stdout, cap, self.spill.clone()).with_tap(tap.cloned()),
            Collector::new(OutputStream::Stderr, cap, self.spill.clone()).with_tap(tap.cloned()),
        )
    }

    fn launch<'a>(
        &'a self,
        spec: &'a CommandSpec,
        stdin: Option<Vec<u8>>,
        sandbox: Option<&'a confine::Confinement>,
        agent: Option<&'a SessionId>,
    ) -> Launch<'a> {
        Launch {
            launcher: &self.config.launcher,
            open_files: self.config.child_open_files,
            sandbox,
            shell: &self.shell,
            file_op: false,
            base: spec.base_env.as_ref().map_or(&self.base, |env| &*env.0),
            command: &spec.command,
            cwd: &spec.cwd,
            env: &spec.env,
            managed: &spec.managed,
            stdin,
            scope: &self.scope,
            agent,
        }
    }

    fn limits(&self, timeout: Option<Duration>) -> Limits {
        Limits {
            timeout,
            grace: self.config.kill_grace,
            drain: self.config.pipe_drain,
        }
    }

    /// Lets a call of `spec` start, tracked until the guard drops: refused once the executor is
    /// shutting down, or when the call is already cancelled. Entered before `closed` is checked,
    /// so shutdown either sees this call or the call sees it.
    fn admit(&self, spec: &CommandSpec) -> Result<Tracked, ExecError> {
        let tracked = self.tracker.enter();
        if self.closed.load(Ordering::SeqCst) {
            return Err(ExecError::ShuttingDown);
        }
        if spec.cancel.is_cancelled() {
            return Err(ExecError::Cancelled);
        }
        Ok(tracked)
    }

    /// Runs a command in the foreground and returns how it ended. Errors only when nothing could
    /// be started (bad input, bad cwd, spawn failure, cancelled, shutting down); every started
    /// command yields an outcome.
    pub async fn run(&self, mut spec: CommandSpec) -> Result<CommandOutcome, ExecError> {
        let _tracked = self.admit(&spec)?;
        let timeout = self.effective_timeout(spec.timeout);
        let (out, err) = self.collectors(spec.output.as_ref());
        let (out, err) = (Arc::new(Mutex::new(out)), Arc::new(Mutex::new(err)));
        let started = Instant::now();
        let stdin = spec.stdin.take();
        let (spawned, leftover) = self.spawn(&spec, stdin, spec.spill_owner.as_ref())?;
        let ended = process::supervise(
            spawned,
            out.clone(),
            err.clone(),
            self.limits(Some(timeout)),
            &spec.cancel,
            &self.stop,
        )
        .await;
        let duration = started.elapsed();
        leftover.finish_later();
        // Spill files live as long as someone can read them: the agent's model (until the agent
        // closes), or nobody once this call returns.
        let mut streams = [lock(&out), lock(&err)];
        for collector in &mut streams {
            match &spec.spill_owner {
                Some(owner) => {
                    if let Some(spill) = collector.spill_file() {
                        self.spill.keep_for(owner, spill);
                    }
                }
                None => collector.release_spill(),
            }
        }
        let [out_guard, err_guard] = streams;
        let stdout = out_guard.snapshot();
        let stderr = err_guard.snapshot();
        drop((out_guard, err_guard));
        Ok(CommandOutcome::from_parts(
            ended, timeout, stdout, stderr, duration,
        ))
    }

    /// Starts a background job and returns its id at once. The job runs with the environment and
    /// snapshot of `spec`, without a timeout, until it ends or is killed. Spawn errors are
    /// returned here; nothing is registered then.
    pub fn start(
        &self,
        mut spec: CommandSpec,
        owner: Option<SessionId>,
    ) -> Result<JobId, ExecError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExecError::NoRuntime)?;
        let tracked = self.admit(&spec)?;
        let (out, err) = self.collectors(None);
        let job = Arc::new(Job::new(
            owner,
            spec.command.clone(),
            out,
            err,
            self.stop.child_token(),
        ));
        // Spawning registers the pipes with the reactor of the runtime we are in (checked above).
        let stdin = spec.stdin.take();
        let (spawned, leftover) = self.spawn(&spec, stdin, job.owner.as_ref())?;
        self.jobs.insert(job.clone(), self.config.max_finished_jobs);
        let limits = self.limits(None);
        let id = job.id.clone();
        runtime.spawn(async move {
            let _tracked = tracked;
            let ended = process::supervise(
                spawned,
                job.stdout.clone(),
                job.stderr.clone(),
                limits,
                &spec.cancel,
                &job.kill,
            )
            .await;
            // Before the end is announced, and off the runtime: a job's directory may hold many
            // files.
            let _ = tokio::task::spawn_blocking(move || leftover.finish()).await;
            job.end.send_replace(Some(JobEnd {
                exit_code: ended.exit_code,
                signal: ended.signal,
                killed: ended.aborted,
                duration: job.started.elapsed(),
            }));
        });
        Ok(id)
    }

    fn job(&self, id: &JobId) -> Result<Arc<Job>, ExecError> {
        self.jobs
            .get(id)
            .ok_or_else(|| ExecError::UnknownJob(id.clone()))
    }

    /// The next part of the job's output after the previous call (consuming, in order, bounded;
    /// older output from its spill file), and its state.
    pub fn job_output(&self, id: &JobId) -> Result<JobOutput, ExecError> {
        Ok(self.job(id)?.read())
    }

    /// The job's owner, command and state, without consuming output.
    pub fn job_info(&self, id: &JobId) -> Result<JobInfo, ExecError> {
        Ok(self.job(id)?.info())
    }

    /// Waits until the job has ended (its output is then complete).
    pub async fn job_wait(&self, id: &JobId) -> Result<JobEnd, ExecError> {
        let mut end = self.job(id)?.end.subscribe();
        loop {
            if let Some(e) = *end.borrow_and_update() {
                return Ok(e);
            }
            if end.changed().await.is_err() {
                // The job (and its sender) is gone only after it was forgotten, i.e. finished.
                return Err(ExecError::UnknownJob(id.clone()));
            }
        }
    }

    /// Kills the job's whole group (SIGTERM, SIGKILL after the grace). True for the first
    /// request while it runs; false when it has ended or a kill is already under way.
    pub fn job_kill(&self, id: &JobId) -> Result<bool, ExecError> {
        Ok(self.job(id)?.request_kill())
    }

    /// Removes the spill files of `owner`'s foreground commands, kept so its model could read
    /// them (call when the agent closes); returns how many.
    pub fn release_spills_of(&self, owner: &SessionId) -> usize {
        self.spill.remove_kept(owner)
    }

    /// Removes the private temporary directory of `owner`'s confined commands (call when the agent
    /// closes, after its jobs were killed).
    pub fn release_sandbox_of(&self, owner: &SessionId) {
        self.tmp_dirs.release(owner);
    }

    /// Starts `spec`'s shell, confined as it asks (on behalf of agent `owner`, if any), and
    /// returns it with what is left to clean up after it; nothing is left behind on an error.
    fn spawn(
        &self,
        spec: &CommandSpec,
        stdin: Option<Vec<u8>>,
        owner: Option<&SessionId>,
    ) -> Result<(process::Spawned, confine::Leftover), ExecError> {
        self.spawn_as(spec, stdin, owner, false)
    }

    /// [`Self::spawn`], running one file operation instead of the shell when `file_op`.
    fn spawn_as(
        &self,
        spec: &CommandSpec,
        stdin: Option<Vec<u8>>,
        owner: Option<&SessionId>,
        file_op: bool,
    ) -> Result<(process::Spawned, confine::Leftover), ExecError> {
        let confined = self.confine(spec, owner)?;
        let mut launch = self.launch(spec, stdin, confined.as_ref(), owner);
        launch.file_op = file_op;
        let spawned = process::spawn(launch);
        let leftover = confine::Leftover::of(confined.as_ref());
        match spawned {
            Ok(spawned) => Ok((spawned, leftover)),
            Err(error) => {
                leftover.finish();
                Err(error)
            }
        }
    }

    /// The confinement of `spec` (see `confine`), owned by agent `owner` if any.
    fn confine(
        &self,
        spec: &CommandSpec,
        owner: Option<&SessionId>,
    ) -> Result<Option<confine::Confinement>, ExecError> {
        let Some(request) = &spec.sandbox else {
            return Ok(None);
        };
        confine::confine(
            &self.config.sandbox,
            self.landlock,
            request,
            owner,
            &self.tmp_dirs,
        )
    }

    /// Bytes the live spill files hold now.
    pub fn spill_bytes(&self) -> u64 {
        self.spill.used()
    }

    /// Kills every running job of `owner` (e.g. when its agent closes); returns how many.
    pub fn kill_jobs_of(&self, owner: &SessionId) -> usize {
        self.jobs
            .select(|j| j.owner.as_ref() == Some(owner))
            .iter()
            .filter(|j| j.request_kill())
            .count()
    }

    /// Known jobs (running and recently finished), oldest first; only `owner`'s when given.
    pub fn list_jobs(&self, owner: Option<&SessionId>) -> Vec<JobInfo> {
        self.jobs
            .select(|j| owner.is_none() || j.owner.as_ref() == owner)
            .iter()
            .map(|j| j.info())
            .collect()
    }

    /// Refuses new work, terminates every running command and job (SIGTERM to each group, SIGKILL
    /// after the grace, then the usual drain and group kill) and waits until every shell has been
    /// reaped. The wait is bounded (grace plus drains plus a margin) so a process stuck in the
    /// kernel cannot hang daemon shutdown; that case is logged.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.stop.cancel();
        let bound = self.config.kill_grace + self.config.pipe_drain * 2 + Duration::from_secs(2);
        let mut live = self.tracker.0.subscribe();
        if tokio::time::timeout(bound, live.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = *live.borrow(),
                "executor shutdown: some processes did not end in time"
            );
        }
        // Whatever was adopted and is still here (one that cleared its environment and so its
        // owner marker) goes now.
        reaper::kill_all_adopted().await;
        self.tmp_dirs.release_all();
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Without a shutdown, still terminate everything: the supervising tasks do the killing.
        self.stop.cancel();
    }
}

/// How often adopted processes are looked at between owner ends: reaps those that exited on their
/// own and kills those of an owner that ended without a close.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the periodic sweep, in a process that adopts orphans and inside a runtime; it stops with
/// the executor.
fn spawn_sweeper(stop: CancellationToken) {
    if rustix::process::child_subreaper().ok().flatten().is_none() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => { reaper::sweep(); }
            }
        }
    });
}

fn validate(c: &ExecConfig) -> Result<(), ExecError> {
    let bad = |field, reason: &str| {
        Err(ExecError::InvalidConfig {
            field,
            reason: reason.to_owned(),
        })
    };
    const LONG: Duration = Duration::from_secs(24 * 3600);
    if c.default_timeout.is_zero() {
        return bad("default_timeout", "must be positive");
    }
    if c.max_timeout < c.default_timeout || c.max_timeout > LONG {
        return bad(
            "max_timeout",
            "must be at least default_timeout and at most 24 h",
        );
    }
    if c.kill_grace.is_zero() || c.kill_grace > Duration::from_secs(600) {
        return bad("kill_grace", "must be positive and at most 600 s");
    }
    if c.pipe_drain.is_zero() || c.pipe_drain > Duration::from_secs(60) {
        return bad("pipe_drain", "must be positive and at most 60 s");
    }
    if c.output_cap_bytes == 0 {
        return bad("output_cap_bytes", "must be positive");
    }
    if c.spill_cap_bytes < c.output_cap_bytes as u64 {
        return bad("spill_cap_bytes", "must be at least output_cap_bytes");
    }
    if c.spill_total_cap_bytes < c.spill_cap_bytes {
        return bad("spill_total_cap_bytes", "must be at least spill_cap_bytes");
    }
    if c.spill_dir.as_os_str().is_empty() {
        return bad("spill_dir", "must not be empty");
    }
    if c.shell.as_os_str().is_empty() {
        return bad("shell", "must not be empty");
    }
    Ok(())
}

/// A bare shell name is looked up in `path_var` once, so spawns need no `PATH` search (and do not
/// depend on a `PATH` a caller's `env` may set). Not found: keep the name; spawning then fails
/// with a clear error.
fn resolve_shell(shell: &Path, path_var: Option<&std::ffi::OsStr>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if shell.components().count() != 1 || shell.is_absolute() {
        return shell.to_path_buf();
    }
    path_var
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(shell))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| shell.to_path_buf())
}
