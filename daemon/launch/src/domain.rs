//! The Landlock domain of a confined command, taken by the launcher itself just before `exec`.
//!
//! Every right of the plan's ABI is handled as a hard requirement: a kernel that cannot enforce
//! one is an error, and nothing runs. dshd checked the same before it spawned; what only this
//! step can check is the roots actually opened: a root swapped for a link after dshd looked is
//! caught here.
//!
//! Beyond what the policy names, every confined command (any mode, network only included):
//! - makes no device nodes: `MAKE_CHAR` and `MAKE_BLOCK` are handled and granted nowhere;
//! - issues no device ioctls on files it opens (`IOCTL_DEV`, kernel ABI 5 on; descriptors it
//!   inherited, its pipes, are not affected: Landlock checks when a file is opened);
//! - signals no process outside its domain (`Signal` scope, kernel ABI 6 on), dshd included;
//! - with network off, connects to no abstract unix socket made outside its domain
//!   (`AbstractUnixSocket` scope, kernel ABI 6 on);
//! - reads none of the plan's hidden paths (dshd's config and state, the model key file, the
//!   systemd credentials; `Plan::hidden`), network only included. Landlock grants, it cannot
//!   deny, so reading is granted on `/` in one rule only when nothing is hidden; otherwise on
//!   every entry of each directory on the way to a hidden path but that path itself, and listing
//!   on those directories (names are no secret). An entry made after the command started, in one
//!   of those directories, is not readable by it. Links among the entries get no rule of their
//!   own: what they point to is read under that place's rules.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
};
use rustix::fs::{Dir, FileType, Mode, OFlags, openat};
use rustix::io::Errno;

use crate::Plan;
use crate::exposure::check_exposure;

/// Device files every confined command may write (`> /dev/null` is everywhere in shell code).
const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// The kernel ABI from which device ioctls are a right of their own.
const IOCTL_DEV_ABI: u32 = 5;
/// The kernel ABI from which signals and abstract unix sockets can be scoped.
const SCOPE_ABI: u32 = 6;

/// Restricts this process (one thread, about to `exec`) to `plan`, for good.
pub(crate) fn restrict(plan: &Plan) -> Result<(), String> {
    let abi = abi(plan.abi)?;
    let landlock = |e: landlock::RulesetError| format!("Landlock ABI {}: {e}", plan.abi);
    // Granted nowhere, in every confined mode.
    let mut never = make_bitflags!(AccessFs::{MakeChar | MakeBlock});
    if plan.kernel_abi >= IOCTL_DEV_ABI {
        never |= AccessFs::IoctlDev;
    }
    let mut handled = never;
    if plan.fs {
        handled |= AccessFs::from_all(abi);
    } else if !plan.hidden.is_empty() {
        // Reading is confined even where writing is not. Any ruleset that handles file access
        // refuses moving a file between directories unless `Refer` is granted on both, so it is
        // handled (and granted with every read rule) to keep `mv` working: the kernel still
        // refuses a move that would make a hidden file readable.
        handled |= AccessFs::from_read(abi) | (AccessFs::from_all(abi) & AccessFs::Refer);
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(landlock)?;
    if plan.net_off {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock)?;
    }
    if plan.kernel_abi >= SCOPE_ABI {
        let mut scopes: BitFlags<Scope> = Scope::Signal.into();
        if plan.net_off {
            scopes |= Scope::AbstractUnixSocket;
        }
        ruleset = ruleset.scope(scopes).map_err(landlock)?;
    }
    let mut created = ruleset.create().map_err(landlock)?;
    if plan.fs {
        created = fs_rules(created, plan, abi, never)?;
    } else if !plan.hidden.is_empty() {
        let read = AccessFs::from_read(abi) | (AccessFs::from_all(abi) & AccessFs::Refer);
        created = read_rules(created, plan, read)?;
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

/// Read everywhere; everything but `never` under the writable roots; the harmless devices.
fn fs_rules(
    mut created: RulesetCreated,
    plan: &Plan,
    abi: ABI,
    never: BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    let landlock = |e: landlock::RulesetError| format!("Landlock ABI {}: {e}", plan.abi);
    created = read_rules(created, plan, AccessFs::from_read(abi))?;
    let roots = plan
        .writable
        .iter()
        .map(|path| (path, false))
        .chain(plan.tmp.iter().map(|path| (path, true)));
    for (path, tmp) in roots {
        let fd = open(path).map_err(|e| format!("writable root {}: {e}", path.display()))?;
        // What was opened, not what was named: a link put in place after dshd's check points
        // somewhere else, and that is what the rule would grant.
        let real =
            opened_path(&fd).map_err(|e| format!("writable root {}: {e}", path.display()))?;
        check_exposure(&real, tmp, &plan.protected).map_err(|e| e.to_string())?;
        let access = if is_dir(&fd) {
            AccessFs::from_all(abi)
        } else {
            AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access & !never))
            .map_err(landlock)?;
    }
    for device in DEVICES {
        // A device this system lacks needs no rule.
        if let Ok(fd) = open(Path::new(device))
            && !is_dir(&fd)
        {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(abi) & !never))
                .map_err(landlock)?;
        }
    }
    Ok(created)
}

/// `read` everywhere but the plan's hidden paths.
fn read_rules(
    created: RulesetCreated,
    plan: &Plan,
    read: BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    let root = Path::new("/");
    if plan.hidden.iter().any(|h| h == root) {
        return Err("/ cannot be hidden: nothing could be read".to_owned());
    }
    let file = read & AccessFs::from_file(ABI::V1);
    let rights = Reading {
        tree: read,
        file,
        listing: read & !file,
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd =
        rustix::fs::open(root, flags, Mode::empty()).map_err(|e| format!("cannot open /: {e}"))?;
    around_hidden(created, plan, root, fd, rights)
}

/// The rights [`around_hidden`] grants.
#[derive(Clone, Copy)]
struct Reading {
    /// On a directory with nothing hidden below it.
    tree: BitFlags<AccessFs>,
    /// On a file (Landlock takes only file rights there).
    file: BitFlags<AccessFs>,
    /// On a directory with something hidden below it: listing, no reading of files.
    listing: BitFlags<AccessFs>,
}

/// Reading of `dir` in one rule when no hidden path lies below it, else listing `dir` and reading
/// each of its entries, around the hidden ones. `dir` is itself no hidden path, and `fd` is it,
/// opened.
///
/// Entries are opened relative to their directory's descriptor, never by their full path, and
/// without following a link: a directory on the way swapped for a link while the launcher walks
/// (by another agent's command, in its workspace) cannot make the walk grant reading of the
/// place the link points to. What the rules cost is their number: five system calls an entry
/// (open, the landlock crate's `fstat`, ours for files, the rule, close), about 5 µs here.
fn around_hidden(
    mut created: RulesetCreated,
    plan: &Plan,
    dir: &Path,
    fd: OwnedFd,
    rights: Reading,
) -> Result<RulesetCreated, String> {
    let landlock = |e: landlock::RulesetError| format!("Landlock ABI {}: {e}", plan.abi);
    if !hides_below(plan, dir) {
        return created
            .add_rule(PathBeneath::new(fd, rights.tree))
            .map_err(landlock);
    }
    created = created
        .add_rule(PathBeneath::new(&fd, rights.listing))
        .map_err(landlock)?;
    // A directory this user cannot list, it cannot look into either: nothing more to grant.
    let Ok(entries) = Dir::read_from(&fd) else {
        return Ok(created);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let path = dir.join(OsStr::from_bytes(name.to_bytes()));
        if plan.hidden.contains(&path) {
            continue;
        }
        // Gone, or swapped for something else, since it was listed: nothing to grant.
        match entry.file_type() {
            FileType::Directory => {
                // Read for listing when something below is hidden, else only named in a rule.
                let how = if hides_below(plan, &path) {
                    OFlags::RDONLY
                } else {
                    OFlags::PATH
                };
                let flags = how | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let child = match openat(&fd, name, flags, Mode::empty()) {
                    // Not readable by this user: a listing rule alone, as `read_from` fails.
                    Err(Errno::ACCESS) => openat(&fd, name, flags | OFlags::PATH, Mode::empty()),
                    other => other,
                };
                if let Ok(child) = child {
                    created = around_hidden(created, plan, &path, child, rights)?;
                }
            }
            FileType::RegularFile => {
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                if let Ok(file) = openat(&fd, name, flags, Mode::empty())
                    && rustix::fs::fstat(&file)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode).is_file())
                {
                    created = created
                        .add_rule(PathBeneath::new(file, rights.file))
                        .map_err(landlock)?;
                }
            }
            // Links: read where they lead, under that place's rules. Sockets, FIFOs and devices
            // in these directories: nothing to read. A file system that does not say an
            // entry's type (`Unknown`) gets no rule for it: reading is refused, never granted
            // by mistake.
            _ => {}
        }
    }
    Ok(created)
}

/// Whether a hidden path lies strictly below `dir`.
fn hides_below(plan: &Plan, dir: &Path) -> bool {
    plan.hidden.iter().any(|h| h != dir && h.starts_with(dir))
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

/// The crate's ABI for a version number dshd has already bounded to 1..=10.
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
