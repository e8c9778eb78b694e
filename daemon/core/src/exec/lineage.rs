//! Where a process stands with respect to the commands this daemon started: outside them, inside
//! one (and under which sandbox), or somewhere that cannot be told.
//!
//! The daemon's socket is reachable from inside the sandbox: Landlock before ABI 9 cannot refuse
//! connecting to a named unix socket, and a confined command that could ask dshd to run something
//! with `--sandbox off`, or make an unconfined agent, would leave its sandbox through the front
//! door. So the daemon asks, for each client, which of its commands the client descends from
//! ([`provenance`]), and serves a confined one less.
//!
//! The answer comes from the process tree, which a confined process cannot rewrite: dshd is the
//! child subreaper of everything it starts (`reaper`), so a descendant never leaves its subtree,
//! not by a double fork, not by `setsid`. Walking up from the client, the first process whose
//! parent is dshd is either a shell the executor spawned (recorded with its sandbox, see
//! `reaper::spawned_shell`) or an orphan dshd adopted after its command ended. An orphan's origin
//! is not recorded anywhere a process could not forge (its environment can be rewritten), so it is
//! [`Provenance::Unknown`], and callers treat that as confined.
//!
//! A pid alone names nobody for long: the process that connected may exit before dshd reads
//! `/proc` (a confined command can even hold dshd's accepts back, connect from a child that then
//! exits, and fork until an outside process has that pid). So a client is placed with its pidfd
//! ([`place`]), which the kernel ties to the process itself, never to a number: the tree is
//! walked, read again to see that no link of it changed meanwhile (every process keeps its parent
//! and start time), and only then is the pidfd asked whether the process that connected is still
//! alive. If it is, the pid was its own all along, so the ancestry read was its ancestry. If it is
//! not, there is nobody to place.

use std::fmt;
use std::os::fd::BorrowedFd;

use super::reaper::{CommandOrigin, Stat, read_stat, self_id, spawned_shell};
use dsh_session::SessionId;

/// How far up the tree a walk goes before it gives up (real trees are a few levels deep).
const MAX_DEPTH: usize = 512;

/// How many times a walk is repeated when the tree changed under it (a process on the way exited
/// and its children moved) before the client is left unplaced.
const MAX_WALKS: usize = 8;

/// Which of this daemon's commands a process descends from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provenance {
    /// Not a descendant of this daemon: the user's terminal, editor or service.
    Outside,
    /// A descendant of a command this daemon is running (a model's or client's shell, a hook).
    Command(CommandOrigin),
    /// A descendant of this daemon that cannot be placed: an orphan whose command has ended, or a
    /// process whose ancestry could not be read. Treat it as confined.
    Unknown(UnknownReason),
}

/// Why a process's place could not be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownReason {
    /// Its parent is the daemon, but it is no shell the daemon is running: an adopted orphan.
    Orphan,
    /// It, or one of its ancestors, was gone before it could be read.
    Vanished,
    /// Its ancestry is deeper than anything real (`MAX_DEPTH`).
    TooDeep,
    /// The daemon cannot read its own process entry.
    NoSelf,
    /// The kernel gives no pidfd for a socket's peer (`SO_PEERPIDFD`, Linux 6.5 on), so the pid
    /// it reports could belong to another process by the time it is read.
    NoPidfd,
    /// Its ancestry kept changing while it was read.
    Unsettled,
}

impl Provenance {
    /// True unless the process is known to be outside every sandbox: confined commands, and
    /// every process that cannot be placed (fail closed).
    pub fn is_confined(&self) -> bool {
        match self {
            Self::Outside => false,
            Self::Command(origin) => origin.sandbox.is_confined(),
            Self::Unknown(_) => true,
        }
    }

    /// Whether the process may see the background jobs of `owner` (`None`: jobs of no agent):
    /// from outside every command, all of them; from inside a command, only those of the agent
    /// the command runs for (a command of no agent: only jobs of no agent); from a process that
    /// cannot be placed, none. One agent's commands neither read (and so consume) another's job
    /// output nor learn that its jobs exist.
    pub fn may_see_jobs_of(&self, owner: Option<&SessionId>) -> bool {
        match self {
            Self::Outside => true,
            Self::Command(origin) => origin.agent.as_ref() == owner,
            Self::Unknown(_) => false,
        }
    }

    /// Whether the process is a person's, as far as dshd can tell: one outside every command it
    /// started. Anything a command started, confined or not (an agent's own job included), or
    /// that cannot be placed, is not.
    pub fn is_outside(&self) -> bool {
        matches!(self, Self::Outside)
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Outside => f.write_str("not started by dshd"),
            Self::Command(origin) if origin.sandbox.is_confined() => {
                write!(f, "runs inside a command under sandbox {}", origin.sandbox)
            }
            Self::Command(_) => f.write_str("runs inside an unconfined command"),
            Self::Unknown(UnknownReason::Orphan) => f.write_str(
                "was orphaned under dshd (its parent exited), so the sandbox it came from cannot be told",
            ),
            Self::Unknown(UnknownReason::Vanished) => {
                f.write_str("exited before dshd could tell where it runs")
            }
            Self::Unknown(UnknownReason::TooDeep) => {
                write!(f, "has more than {MAX_DEPTH} ancestors")
            }
            Self::Unknown(UnknownReason::NoSelf) => {
                f.write_str("cannot be placed: dshd cannot read its own /proc entry")
            }
            Self::Unknown(UnknownReason::NoPidfd) => f.write_str(
                "cannot be placed: this kernel gives no pidfd for a socket's peer (Linux 6.5 or later does), so it is served as a confined client",
            ),
            Self::Unknown(UnknownReason::Unsettled) => {
                f.write_str("cannot be placed: its ancestry kept changing while dshd read it")
            }
        }
    }
}

/// A client of the socket, placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Which of this daemon's commands it descends from.
    pub provenance: Provenance,
    /// Whether it has a controlling terminal: a person answering from a shell has one; an
    /// editor, a service or a command dshd started has none.
    pub terminal: bool,
}

/// Places process `pid`, whose pidfd is `process` (taken from the connection, so it is the
/// process that connected whatever became of the number since). `None`: that process has exited,
/// and there is nobody to place.
pub fn place(pid: i32, process: BorrowedFd<'_>) -> Option<Placement> {
    let Some(me) = self_id() else {
        return alive(process).then_some(Placement {
            provenance: Provenance::Unknown(UnknownReason::NoSelf),
            terminal: false,
        });
    };
    for _ in 0..MAX_WALKS {
        let walk = walk(pid, me.pid, me.start);
        // Read again: a process that exited, and so moved its children or gave up its pid,
        // changes a link of the chain; an unchanged chain was real while it was read twice.
        let settled = walk.chain.iter().all(|(pid, stat)| {
            read_stat(*pid)
                .is_some_and(|again| again.ppid == stat.ppid && again.start == stat.start)
        });
        if !settled {
            if !alive(process) {
                return None;
            }
            continue;
        }
        // Asked last: alive now means the pid was its own through both reads.
        if !alive(process) {
            return None;
        }
        let terminal = walk.chain.first().is_some_and(|(_, stat)| stat.tty != 0);
        return Some(Placement {
            provenance: walk.provenance,
            terminal,
        });
    }
    alive(process).then_some(Placement {
        provenance: Provenance::Unknown(UnknownReason::Unsettled),
        terminal: false,
    })
}

/// Whether the process behind pidfd `process` has not exited: a pidfd polls readable once it has.
fn alive(process: BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(&process, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(0))
}

/// One walk up from a process: where it ended, and every process read on the way (the client
/// first), for [`place`] to read again.
struct Walk {
    provenance: Provenance,
    chain: Vec<(i32, Stat)>,
}

/// Reads `/proc/<pid>/stat` of the process and its ancestors up to the first one that is older
/// than the daemon (no descendant can be) or whose parent is the daemon.
fn walk(pid: i32, daemon: i32, daemon_start: u64) -> Walk {
    let mut chain = Vec::new();
    let end = |provenance, chain| Walk { provenance, chain };
    if pid == daemon {
        return end(Provenance::Outside, chain);
    }
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        let Some(stat) = read_stat(current) else {
            return end(Provenance::Unknown(UnknownReason::Vanished), chain);
        };
        chain.push((current, stat));
        if stat.ppid == daemon {
            let origin = spawned_shell(current).map_or(
                Provenance::Unknown(UnknownReason::Orphan),
                Provenance::Command,
            );
            return end(origin, chain);
        }
        // Re-parenting only ever moves a process up to an ancestor, so a process that started
        // before the daemon, or hangs off init, is not below it.
        if stat.start < daemon_start || stat.ppid <= 1 {
            return end(Provenance::Outside, chain);
        }
        current = stat.ppid;
    }
    end(Provenance::Unknown(UnknownReason::TooDeep), chain)
}
