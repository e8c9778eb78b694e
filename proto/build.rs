//! Compiles `dsh/v1/*.proto` with protox (pure Rust: no protoc on the machine) and keeps the encoded
//! descriptor set for server reflection.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "dsh/v1/common.proto",
    "dsh/v1/daemon.proto",
    "dsh/v1/agents.proto",
    "dsh/v1/shell.proto",
    "dsh/v1/shell_env.proto",
    "dsh/v1/persistence.proto",
    "dsh/v1/skills.proto",
    "dsh/v1/hooks.proto",
    "dsh/v1/models.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=dsh");
    let fds = protox::compile(PROTOS, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("dsh_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        // An export's chunks are slices of one buffer, not copies of it.
        .bytes(".dsh.v1.ExportChunk.data")
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
