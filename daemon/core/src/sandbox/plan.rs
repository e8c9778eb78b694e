//! One confined launch: which Landlock ABI, which roots are writable, which paths must stay
//! read-only. Built and checked by dshd before anything is spawned (typed errors, nothing runs),
//! then handed to the launcher (`dsh_launch`), which checks the roots again on the directories it
//! actually opens and confines itself to the plan before it `exec`s the command.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

pub(crate) use dsh_launch::Plan;

use super::{LandlockSupport, SandboxError, SandboxMode, SandboxPolicy, SandboxSettings};

/// The newest Landlock ABI this build knows the rights of (the `landlock` crate's).
pub const KNOWN_ABI: u32 = 10;
/// The ABI the filesystem modes need: from 3 on, truncating a file is a write right.
pub(crate) const MIN_FS_ABI: u32 = 3;
/// The ABI network `off` needs: TCP bind and connect rules came with 4.
pub(crate) const MIN_NET_ABI: u32 = 4;

/// The lowest Landlock ABI that enforces every promise of `policy`: 3 for the filesystem modes
/// (truncation is a write only from ABI 3 on), 4 for network off (TCP rules); 0 when nothing is
/// confined.
pub(crate) fn min_abi(policy: &SandboxPolicy) -> u32 {
    let fs = if policy.mode == SandboxMode::Off {
        0
    } else {
        MIN_FS_ABI
    };
    let net = if policy.network == super::Network::Off {
        MIN_NET_ABI
    } else {
        0
    };
    fs.max(net)
}

/// The ABI a policy needs under `configured` (`sandbox.landlock_abi`), and why.
pub(crate) fn needed_abi(policy: &SandboxPolicy, configured: Option<u32>) -> (u32, String) {
    let own = min_abi(policy);
    match configured {
        Some(abi) if abi > own => (abi, format!("sandbox.landlock_abi is {abi}")),
        _ if own == MIN_NET_ABI => (own, "TCP rules for network off".to_owned()),
        _ => (own, "write rules that cover truncation".to_owned()),
    }
}

/// The ABI `policy` is enforced with; refused when the kernel (or this build) cannot.
pub(crate) fn check_support(
    policy: &SandboxPolicy,
    settings: &SandboxSettings,
    support: LandlockSupport,
) -> Result<u32, SandboxError> {
    let (abi, why) = needed_abi(policy, settings.landlock_abi);
    if support.abi() < abi || abi > KNOWN_ABI {
        return Err(SandboxError::Unsupported {
            policy: *policy,
            needed: abi,
            why: if abi > KNOWN_ABI {
                format!("{why}; this dsh build knows ABIs up to {KNOWN_ABI}")
            } else {
                why
            },
            support,
        });
    }
    Ok(abi)
}

/// The plan for `policy` in `workspace` (the agent's cwd), with the private temporary directory
/// `tmp` (already made). Refuses what the kernel cannot enforce and any writable root that would
/// expose a protected path.
pub(crate) fn new(
    policy: &SandboxPolicy,
    settings: &SandboxSettings,
    support: LandlockSupport,
    workspace: &Path,
    tmp: Option<&Path>,
) -> Result<Plan, SandboxError> {
    let abi = check_support(policy, settings, support)?;
    let fs = policy.mode != SandboxMode::Off;
    let mut plan = Plan {
        abi,
        kernel_abi: support.abi(),
        fs,
        net_off: policy.network == super::Network::Off,
        writable: Vec::new(),
        tmp: None,
        protected: Vec::new(),
        // Secrets stay unreadable under every confined policy, network only included.
        hidden: settings.hidden.iter().map(|p| resolve(p)).collect(),
    };
    if !fs {
        return Ok(plan);
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        let root = canonical(workspace).map_err(|source| SandboxError::Workspace {
            path: workspace.to_owned(),
            error: source,
        })?;
        plan.writable.push(root);
        // A configured root that does not exist (yet) grants nothing: skipped.
        plan.writable.extend(
            settings
                .writable_roots
                .iter()
                .filter_map(|r| canonical(r).ok()),
        );
    }
    if let Some(tmp) = tmp {
        plan.tmp = Some(canonical(tmp).map_err(|source| SandboxError::Tmp {
            path: tmp.to_owned(),
            error: source,
        })?);
    }
    plan.protected = settings.protected.iter().map(|p| resolve(p)).collect();
    for root in &plan.writable {
        check_exposure(root, false, &plan.protected)?;
    }
    if let Some(tmp) = &plan.tmp {
        check_exposure(tmp, true, &plan.protected)?;
    }
    Ok(plan)
}

/// Refuses a writable root that contains a protected path or lies inside one (a private
/// temporary directory, `tmp`, may lie inside one: see [`dsh_launch::check_exposure`]).
pub(crate) fn check_exposure(
    root: &Path,
    tmp: bool,
    protected: &[PathBuf],
) -> Result<(), SandboxError> {
    dsh_launch::check_exposure(root, tmp, protected).map_err(|e| SandboxError::Exposed {
        root: e.root,
        protected: e.protected,
        relation: e.relation,
    })
}

/// `path` with links resolved as far as it exists: the longest existing prefix canonicalized, the
/// rest appended (lexically normalised), so a protected path that is not there yet is still
/// compared where it will appear.
pub(crate) fn resolve(path: &Path) -> PathBuf {
    let path = dsh_paths::home::normalize(path);
    if path.is_absolute() && walk_without_links(&path).is_some() {
        return path;
    }
    let mut prefix = path.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = prefix.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(real, |acc, c: &OsString| acc.join(c));
        }
        match (prefix.file_name().map(ToOwned::to_owned), prefix.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                prefix = parent.to_owned();
            }
            _ => return path,
        }
    }
}

/// `path` with links resolved, as [`Path::canonicalize`]; it must exist. Every call checks a
/// dozen paths, so the common case, an absolute path with no link, `.` or `..` in it, is
/// recognised in one walk by the kernel instead of a `readlink` per component.
pub(crate) fn canonical(path: &Path) -> io::Result<PathBuf> {
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain && walk_without_links(path) == Some(true) {
        return Ok(path.components().collect());
    }
    path.canonicalize()
}

/// Walks absolute `path` refusing links (`openat2` with `RESOLVE_NO_SYMLINKS`): `Some(true)` when
/// it is there, `Some(false)` when a component is missing (everything before it was no link),
/// `None` when a link is on the way or the walk could not tell (an old kernel, a component that
/// is not a directory, no permission), for the caller to resolve the slow way.
fn walk_without_links(path: &Path) -> Option<bool> {
    match rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        Ok(_) => Some(true),
        Err(Errno::NOENT) => Some(false),
        Err(_) => None,
    }
}
