//! Who a client of the socket is: the credentials the kernel gave for its connection and where it
//! runs with respect to the commands dshd started, both told once, when the connection is
//! accepted. Handlers find it in every request's extensions ([`of`]), so a method can serve a
//! client inside an agent's command less than the user (`confined_clients`, jobs, approvals).

use std::os::fd::AsFd;

use dsh_core::{Provenance, UnknownReason};

/// One connection's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The pid that connected (`SO_PEERCRED`); `None` when the kernel did not tell.
    pub pid: Option<i32>,
    /// Its uid (always ours: other users' connections are dropped at accept).
    pub uid: u32,
    /// Where it runs: outside every command, inside one (which sandbox, which agent), or unknown.
    pub provenance: Provenance,
    /// Whether it had a controlling terminal when it was placed (`None`: not known), which an
    /// approval records: a person answering from a shell has one.
    pub terminal: Option<bool>,
}

impl Peer {
    /// Places the client of `socket`, which connected as `pid` and `uid`: its pidfd taken from
    /// the connection (so it names the process that connected, never a later owner of its pid),
    /// then its ancestry read from `/proc` and checked against that pidfd
    /// ([`dsh_core::place`]). `None`: the process that connected has exited, so nobody can be
    /// placed and the connection is refused. Where the kernel gives no peer pidfd (before Linux
    /// 6.5) the pid could be anybody's by now: the client is served as one that cannot be
    /// placed, that is, as confined.
    pub fn place(socket: impl AsFd, pid: Option<i32>, uid: u32) -> Option<Self> {
        use nix::sys::socket::{getsockopt, sockopt::PeerPidfd};
        let unplaced = |reason| Self {
            pid,
            uid,
            provenance: Provenance::Unknown(reason),
            terminal: None,
        };
        let Some(pid) = pid else {
            return Some(unplaced(UnknownReason::Vanished));
        };
        match getsockopt(&socket, PeerPidfd) {
            Ok(pidfd) => dsh_core::place(pid, pidfd.as_fd()).map(|placed| Self {
                pid: Some(pid),
                uid,
                provenance: placed.provenance,
                terminal: Some(placed.terminal),
            }),
            Err(nix::errno::Errno::ENOPROTOOPT) => Some(unplaced(UnknownReason::NoPidfd)),
            // EINVAL (before Linux 6.16) or ESRCH: the peer is gone.
            Err(_) => None,
        }
    }

    /// How its streams count for approvals: only a client outside every command is a person
    /// who could answer one (`Agents.Approve` is refused to the rest).
    pub fn watched_by(&self) -> dsh_core::WatchedBy {
        if self.provenance.is_outside() {
            dsh_core::WatchedBy::Person
        } else {
            dsh_core::WatchedBy::Command
        }
    }

    /// A client of no connection: an in-process caller (tests). dshd's accept loop places every
    /// real one.
    pub fn in_process() -> Self {
        Self {
            pid: None,
            uid: rustix::process::geteuid().as_raw(),
            provenance: Provenance::Outside,
            terminal: None,
        }
    }

    /// A client running where `provenance` says, with no pid (tests).
    pub fn at(provenance: Provenance) -> Self {
        Self {
            provenance,
            ..Self::in_process()
        }
    }
}
