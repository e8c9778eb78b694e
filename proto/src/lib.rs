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

/// Package `dsh.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("dsh.v1");
}
