//! The dsh gRPC protocol (package `dsh.v1`): generated message types, service clients and servers,
//! and the encoded file descriptor set served by reflection.
//!
//! This crate holds no logic. The daemon translates between these types and its core in `rpc/`.

/// Version of the wire protocol reported by `Daemon.Status`. Bumped only on incompatible changes;
/// fields and methods may be added without a bump.
pub const PROTOCOL_VERSION: u32 = 2;

/// Encoded `FileDescriptorSet` of every dsh proto file, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/dsh_descriptor.bin"));

/// The machine-readable refusals: the `reason` of the `google.rpc.ErrorInfo` that dshd attaches to
/// the status of a refusal a client may act on (docs/PROTOCOL.md, "Errors"), and the keys of its
/// `metadata`. dshd writes them and `dsh-client` reads them from these constants; clients in other
/// languages read the same strings (`domain` is always [`DOMAIN`](refusal::DOMAIN)). Only names:
/// which error carries which reason is decided where dshd translates its errors (`rpc/convert.rs`).
pub mod refusal {
    /// The `domain` of every `ErrorInfo` dshd attaches.
    pub const DOMAIN: &str = "dsh";
    /// The agent runs a turn (`FAILED_PRECONDITION`): wait for its `turn/end`, or cancel it.
    /// Metadata: [`AGENT_ID`](metadata::AGENT_ID), [`TURN`](metadata::TURN).
    pub const AGENT_BUSY: &str = "AGENT_BUSY";
    /// The chosen provider needs an API key dshd does not have (`FAILED_PRECONDITION`).
    /// Metadata: [`VARIABLE`](metadata::VARIABLE), the environment variable dshd reads it from.
    pub const NO_MODEL_KEY: &str = "NO_MODEL_KEY";
    /// No live agent has the id (`NOT_FOUND`): a stored session must be resumed first.
    /// Metadata: [`AGENT_ID`](metadata::AGENT_ID).
    pub const AGENT_NOT_LIVE: &str = "AGENT_NOT_LIVE";
    /// Another dshd has the session live in a shared database and holds its lease
    /// (`FAILED_PRECONDITION`). Metadata: [`SESSION_ID`](metadata::SESSION_ID),
    /// [`HOST`](metadata::HOST), [`PID`](metadata::PID),
    /// [`EXPIRES_IN_MS`](metadata::EXPIRES_IN_MS).
    pub const SESSION_LEASED: &str = "SESSION_LEASED";

    /// The keys of an `ErrorInfo`'s `metadata` (values are strings; numbers in decimal).
    pub mod metadata {
        /// An agent (= session) id.
        pub const AGENT_ID: &str = "agent_id";
        /// The running turn's number.
        pub const TURN: &str = "turn";
        /// An environment variable's name.
        pub const VARIABLE: &str = "variable";
        /// A session id.
        pub const SESSION_ID: &str = "session_id";
        /// A host name.
        pub const HOST: &str = "host";
        /// A process id.
        pub const PID: &str = "pid";
        /// Milliseconds until a lease expires unless its holder renews it.
        pub const EXPIRES_IN_MS: &str = "expires_in_ms";
    }
}

/// Package `dsh.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("dsh.v1");
}
