//! Who a client of the socket is: the credentials the kernel gave for its connection and where it
//! runs with respect to the commands dshd started, both told once, when the connection is
//! accepted. Handlers find it in every request's extensions ([`of`]), so a method can serve a
//! client inside an agent's command less than the user (`confined_clients`, jobs, approvals).

use std::sync::Arc;

use dsh_core::{Provenance, UnknownReason};

use crate::connection::ConnectionInfo;

/// One connection's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The pid that connected (`SO_PEERCRED`); `None` when the kernel did not tell.
    pub pid: Option<i32>,
    /// Its uid (always ours: other users' connections are dropped at accept).
    pub uid: u32,
    /// Where it runs: outside every command, inside one (which sandbox, which agent), or unknown.
    pub provenance: Provenance,
}

impl Peer {
    /// Places a client that connected as `pid` and `uid`: reads its ancestry from `/proc` now,
    /// while the process that connected is surely alive.
    pub fn place(pid: Option<i32>, uid: u32) -> Self {
        let provenance = pid.map_or(
            Provenance::Unknown(UnknownReason::Vanished),
            dsh_core::provenance,
        );
        Self {
            pid,
            uid,
            provenance,
        }
    }

    /// A client of no connection: an in-process caller (tests). dshd's accept loop places every
    /// real one.
    pub fn in_process() -> Self {
        Self {
            pid: None,
            uid: rustix::process::geteuid().as_raw(),
            provenance: Provenance::Outside,
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

/// The client that sent `request` ([`Peer::in_process`] for a request of no connection).
pub fn of<T>(request: &tonic::Request<T>) -> Arc<Peer> {
    request
        .extensions()
        .get::<ConnectionInfo>()
        .map_or_else(|| Arc::new(Peer::in_process()), |info| info.peer.clone())
}
