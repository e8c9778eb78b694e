//! The launcher: the process between dshd and every command it runs.
//!
//! dshd starts each command (a model's bash call, a background job, `Shell.Run`, a hook) as this
//! launcher, which prepares itself and then `exec`s the command, so the pid dshd spawned is the
//! command's own: dshd's process-group kill, pidfd, reaper and owner marker work unchanged. What
//! it does, in this order:
//!
//! 1. `setsid()`, always: the command leads a new session and process group (pgid = pid) and
//!    has no controlling terminal, so `/dev/tty` fails and nothing it runs can push input into
//!    the terminal dshd was started from.
//! 2. For a confined command ([`Plan`]): `no_new_privs`, every capability dropped (bounding set
//!    first, then ambient, inheritable, permitted, effective), the Landlock domain of the plan
//!    (`domain`), and a seccomp filter (`seccomp`). The daemon is never inside a command's
//!    domain: nothing of dshd runs after this, in this process.
//! 3. The soft open-file limit dshd was started with, when dshd raised its own
//!    (`Launch::open_files`): a command gets the limit any program of the user's would.
//! 4. `exec` of the program.
//!
//! With `--file-op` instead of a program (`file_op`), step 4 is one file operation: a request
//! read from stdin, performed in this (confined) process, its reply written to stdout.
//!
//! When a step fails, the launcher writes `dsh-launch: <what failed>; nothing was run` to stderr
//! and exits with [`EXIT_REFUSED`]; the program never starts.
//!
//! dshd encodes what to do as the launcher's arguments ([`Launch::to_args`]); both sides use
//! this crate, so the encoding cannot drift.

mod args;
mod domain;
mod exposure;
pub mod file_op;
mod privileges;
mod seccomp;
pub mod sha256;

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;

pub use args::{Launch, ParseError, Plan};
pub use exposure::{Exposure, check_exposure};

/// The `argv[0]` under which dshd's own binary acts as the launcher.
pub const ARG0: &str = "dsh-launch";

/// The launcher's exit status when it refused to run the program (a step before `exec` failed).
/// A program can exit with it too; stderr's `dsh-launch: ...; nothing was run` line tells them
/// apart.
pub const EXIT_REFUSED: i32 = 125;

/// What `dsh-launch --version` prints: dshd runs an installed launcher only when it answers
/// exactly this, the version of the encoding dshd itself was built with.
pub const VERSION_LINE: &str = concat!("dsh-launch ", env!("CARGO_PKG_VERSION"));

/// Runs the launcher on this process's arguments: never returns (the program replaces it, or it
/// exits with [`EXIT_REFUSED`]).
pub fn main() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // Never an encoded launch: those start with a plan flag or the separator.
    if args == ["--version"] {
        println!("{VERSION_LINE}");
        std::process::exit(0)
    }
    let Err(reason) = run(args);
    eprintln!("{ARG0}: {reason}; nothing was run");
    std::process::exit(EXIT_REFUSED)
}

fn run(args: Vec<OsString>) -> Result<Infallible, String> {
    let launch = Launch::parse(args).map_err(|e| e.to_string())?;
    rustix::process::setsid().map_err(|e| format!("cannot start a new session: {e}"))?;
    if let Some(limit) = launch.open_files {
        open_files(limit)?;
    }
    if let Some(plan) = &launch.confine {
        confine(plan)?;
    }
    if launch.file_op {
        // A failed operation is a reply, not a refusal: only a broken pipe ends up here.
        file_op::serve()?;
        std::process::exit(0)
    }
    // `exec` only returns on failure. std resets the signal mask and SIGPIPE for the program.
    let error = std::process::Command::new(&launch.program)
        .args(&launch.args)
        .exec();
    Err(format!(
        "cannot run {}: {error}",
        launch.program.to_string_lossy()
    ))
}

/// Sets the soft open-file limit to `limit` (never above the hard one).
fn open_files(limit: u64) -> Result<(), String> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut rlimit = getrlimit(Resource::Nofile);
    rlimit.current = Some(rlimit.maximum.map_or(limit, |hard| limit.min(hard)));
    setrlimit(Resource::Nofile, rlimit).map_err(|e| format!("cannot set the open-file limit: {e}"))
}

/// Confines this process to `plan`, for good.
fn confine(plan: &Plan) -> Result<(), String> {
    // First: Landlock and seccomp without privileges need it, and it stops `exec` from granting
    // any (set-user-id files, file capabilities).
    rustix::thread::set_no_new_privs(true).map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    privileges::drop_all()?;
    domain::restrict(plan)?;
    seccomp::apply(plan)
}
