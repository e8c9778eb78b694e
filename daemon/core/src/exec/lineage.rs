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

use std::fmt;

use super::reaper::{CommandOrigin, read_stat, self_id, spawned_shell};
use crate::session::SessionId;

/// How far up the tree a walk goes before it gives up (real trees are a few levels deep).
const MAX_DEPTH: usize = 512;

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
        }
    }
}

/// Whether process `pid` has a controlling terminal (`None`: it is gone, or unreadable). A person
/// answering from a shell has one; an editor, a service or a command dshd started has none.
pub fn has_terminal(pid: i32) -> Option<bool> {
    read_stat(pid).map(|stat| stat.tty != 0)
}

/// Which of this daemon's commands process `pid` descends from. Reads `/proc/<pid>/stat` of the
/// process and its ancestors up to the first one that is older than the daemon (no descendant
/// can be) or whose parent is the daemon.
pub fn provenance(pid: i32) -> Provenance {
    let Some(me) = self_id() else {
        return Provenance::Unknown(UnknownReason::NoSelf);
    };
    if pid == me.pid {
        return Provenance::Outside;
    }
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        let Some(stat) = read_stat(current) else {
            return Provenance::Unknown(UnknownReason::Vanished);
        };
        if stat.ppid == me.pid {
            return spawned_shell(current).map_or(
                Provenance::Unknown(UnknownReason::Orphan),
                Provenance::Command,
            );
        }
        // Re-parenting only ever moves a process up to an ancestor, so a process that started
        // before the daemon, or hangs off init, is not below it.
        if stat.start < me.start || stat.ppid <= 1 {
            return Provenance::Outside;
        }
        current = stat.ppid;
    }
    Provenance::Unknown(UnknownReason::TooDeep)
}
