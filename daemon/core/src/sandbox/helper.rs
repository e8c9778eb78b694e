//! The exec helper: confines its own process with Landlock, then becomes the shell.
//!
//! `dshd __dsh_sandbox_exec <plan> -- <shell> -c <command>`: the executor starts this exactly where
//! it would start the shell (same environment, cwd, process group, pipes), so after `exec` nothing
//! distinguishes the confined shell from an unconfined one but the Landlock domain. Every right of
//! the plan's ABI is handled as a hard requirement: a kernel that cannot enforce one makes the
//! helper exit with [`HELPER_FAILURE`] before the shell exists. The daemon checks the same things
//! before spawning, so this is defence in depth (and the check of the roots actually opened, which
//! no earlier check can replace: a root swapped for a link after the daemon looked is caught here).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::fs::{FileType, Mode, OFlags};

use super::plan::{Plan, check_exposure};

/// The first argument that makes `dshd` act as the helper instead of the daemon.
pub const HELPER_ARG: &str = "__dsh_sandbox_exec";

/// The helper's exit status when it could not confine itself or start the shell; nothing of the
/// command ran. Its stderr then has one line starting `dshd sandbox:`.
pub const HELPER_FAILURE: u8 = 125;

/// Device files every confined command may write (`> /dev/null` is everywhere in shell code).
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Runs the helper on the arguments after [`HELPER_ARG`]. Returns only on failure: on success the
/// process has become the shell.
pub fn helper_main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let error = match confine(&mut args) {
        Ok(()) => {
            let Some(shell) = args.next() else {
                return fail("no shell after --");
            };
            // `exec` returns only when it failed.
            let error = Command::new(&shell).args(args).exec();
            format!("cannot start {}: {error}", Path::new(&shell).display())
        }
        Err(error) => error,
    };
    fail(&error)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("dshd sandbox: {message}; nothing was run");
    ExitCode::from(HELPER_FAILURE)
}

/// Reads the plan and restricts this process to it.
fn confine(args: &mut impl Iterator<Item = OsString>) -> Result<(), String> {
    let plan = Plan::from_args(args)?;
    let abi = abi(plan.abi)?;
    let landlock = |e: landlock::RulesetError| format!("Landlock ABI {}: {e}", plan.abi);
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if plan.fs {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(abi))
            .map_err(landlock)?;
    }
    if plan.net_off {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock)?;
    }
    let mut scopes = BitFlags::<Scope>::EMPTY;
    if plan.abi >= 6 {
        if plan.fs {
            // No signals to processes outside the sandbox (dshd, the user's other programs).
            scopes |= Scope::Signal;
        }
        if plan.net_off {
            scopes |= Scope::AbstractUnixSocket;
        }
    }
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(landlock)?;
    }
    let mut created = ruleset.create().map_err(landlock)?;
    if plan.fs {
        created = fs_rules(created, &plan, abi)?;
    }
    let status = created.restrict_self().map_err(landlock)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "Landlock ABI {}: the ruleset is not fully enforced ({:?})",
            plan.abi, status.ruleset
        ));
    }
    Ok(())
}

/// Read everywhere; everything under the writable roots; the harmless devices.
fn fs_rules(mut created: RulesetCreated, plan: &Plan, abi: ABI) -> Result<RulesetCreated, String> {
    let landlock = |e: landlock::RulesetError| format!("Landlock ABI {}: {e}", plan.abi);
    let root = open(Path::new("/")).map_err(|e| format!("cannot open /: {e}"))?;
    created = created
        .add_rule(PathBeneath::new(root, AccessFs::from_read(abi)))
        .map_err(landlock)?;
    for path in &plan.writable {
        let fd = open(path).map_err(|e| format!("writable root {}: {e}", path.display()))?;
        // What was opened, not what was named: a link put in place after the daemon's check
        // points somewhere else, and that is what the rule would grant.
        let real =
            opened_path(&fd).map_err(|e| format!("writable root {}: {e}", path.display()))?;
        check_exposure(&real, &plan.protected).map_err(|e| e.to_string())?;
        let access = if is_dir(&fd) {
            AccessFs::from_all(abi)
        } else {
            AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(landlock)?;
    }
    for device in DEVICES {
        // A device this system lacks needs no rule.
        if let Ok(fd) = open(Path::new(device))
            && !is_dir(&fd)
        {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(abi)))
                .map_err(landlock)?;
        }
    }
    Ok(created)
}

fn open(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
}

fn is_dir(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode).is_dir())
}

fn opened_path(fd: &OwnedFd) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The crate's ABI for a version number the plan has already bounded to 1..=10.
fn abi(version: u32) -> Result<ABI, String> {
    Ok(match version {
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        10 => ABI::V10,
        other => return Err(format!("unknown Landlock ABI {other}")),
    })
}
