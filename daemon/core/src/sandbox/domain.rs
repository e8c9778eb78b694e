//! Applying a plan: restricts the calling thread with Landlock.
//!
//! Landlock confines the thread that asks and everything it starts afterwards, never the rest of
//! the process. dshd calls this on a thread of its own that then only spawns commands
//! (`spawner`), so the commands are confined from their first instruction while dshd's other
//! threads keep their rights. Every right of the plan's ABI is handled as a hard requirement: a
//! kernel that cannot enforce one is an error, and nothing is spawned. The daemon checks the same
//! things before (`plan`); what only this step can check is the roots actually opened: a root
//! swapped for a link after the daemon looked is caught here.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::fs::{FileType, Mode, OFlags};

use super::plan::{Plan, check_exposure};

/// Device files every confined command may write (`> /dev/null` is everywhere in shell code).
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Which file a writable root is: the rule holds the inode opened, not the path, so a root
/// removed and made again is another file, which an existing domain does not grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RootId {
    dev: u64,
    ino: u64,
}

impl RootId {
    fn of(fd: &OwnedFd) -> rustix::io::Result<Self> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Self {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// The file at `path` now (links followed), if it is there.
    pub(crate) fn at(path: &Path) -> Option<Self> {
        let st = rustix::fs::stat(path).ok()?;
        Some(Self {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

/// Restricts the calling thread (and whatever it starts from now on) to `plan`, for good.
/// Returns the writable roots as opened, in the plan's order.
pub(crate) fn restrict_current_thread(plan: &Plan) -> Result<Vec<RootId>, String> {
    keep_tracers_out()?;
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
    let mut roots = Vec::new();
    if plan.fs {
        created = fs_rules(created, plan, abi, &mut roots)?;
    }
    let status = created.restrict_self().map_err(landlock)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "Landlock ABI {}: the ruleset is not fully enforced ({:?})",
            plan.abi, status.ruleset
        ));
    }
    Ok(roots)
}

/// Keeps the commands this thread starts from tracing dshd.
///
/// Landlock lets a process trace only processes of its own domain or one nested in it. This
/// thread joins the commands' domain but shares dshd's memory, so through it a command could
/// attach to dshd (`ptrace`, `/proc/<pid>/task/<tid>/mem`) and be out. So dshd is made
/// non-dumpable, which refuses both to any process without `CAP_SYS_PTRACE`, and this thread
/// drops `CAP_SYS_PTRACE` from every set its commands could hold it through, the bounding set
/// included (root regains the bounding set on `exec`). When it cannot, nothing is spawned.
fn keep_tracers_out() -> Result<(), String> {
    use rustix::thread::{
        CapabilitySet, capabilities, capability_is_in_bounding_set,
        remove_capability_from_bounding_set, set_capabilities,
    };
    const TRACE: CapabilitySet = CapabilitySet::SYS_PTRACE;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make dshd non-dumpable: {e}"))?;
    let cannot = |e: rustix::io::Errno| format!("cannot drop CAP_SYS_PTRACE: {e}");
    if capability_is_in_bounding_set(TRACE).map_err(cannot)? {
        // Needs CAP_SETPCAP; without it only root could regain the capability, checked below.
        let _ = remove_capability_from_bounding_set(TRACE);
    }
    let mut sets = capabilities(None).map_err(cannot)?;
    let held = [sets.effective, sets.permitted, sets.inheritable]
        .iter()
        .any(|set| set.contains(TRACE));
    if held {
        sets.effective.remove(TRACE);
        sets.permitted.remove(TRACE);
        sets.inheritable.remove(TRACE);
        set_capabilities(None, sets).map_err(cannot)?;
    }
    if rustix::process::geteuid().is_root()
        && capability_is_in_bounding_set(TRACE).map_err(cannot)?
    {
        return Err(
            "cannot drop CAP_SYS_PTRACE from the bounding set (CAP_SETPCAP is missing), \
                    and commands run as root would get it back"
                .to_owned(),
        );
    }
    Ok(())
}

/// Read everywhere; everything under the writable roots; the harmless devices.
fn fs_rules(
    mut created: RulesetCreated,
    plan: &Plan,
    abi: ABI,
    roots: &mut Vec<RootId>,
) -> Result<RulesetCreated, String> {
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
        roots.push(RootId::of(&fd).map_err(|e| format!("writable root {}: {e}", path.display()))?);
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
