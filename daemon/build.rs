//! Links `dshd` with `hot-text/dshd.ld` on Linux: the functions the daemon runs from start to idle
//! are placed together at the front of its code, so that the kernel, which maps code 64 KiB around
//! each page fault, makes less of the binary resident (idle RSS; see `hot-text/generate.sh`).
//! Where the code goes changes nothing about what it does.

fn main() {
    println!("cargo::rerun-if-changed=hot-text/dshd.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!(
            "cargo::rustc-link-arg-bin=dshd=-Wl,-T,{}/hot-text/dshd.ld",
            env!("CARGO_MANIFEST_DIR")
        );
    }
}
