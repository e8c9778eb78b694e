//! Links `dshd` with `hot-text/dshd.ld` on Linux: the functions the daemon runs from start to idle
//! are placed together at the front of its code, so that the kernel, which maps code 64 KiB around
//! each page fault, makes less of the binary resident (idle RSS; see `hot-text/generate.sh`).
//! Where the code goes changes nothing about what it does.
//!
//! The script uses `INSERT BEFORE .text`, which GNU ld and lld understand. A linker that does not
//! (mold, for one) can be used with `DSH_HOT_TEXT=0`: dshd then links without it, and only its
//! idle RSS is larger.

fn main() {
    println!("cargo::rerun-if-changed=hot-text/dshd.ld");
    println!("cargo::rerun-if-env-changed=DSH_HOT_TEXT");
    let wanted = std::env::var("DSH_HOT_TEXT").map_or(true, |v| v != "0");
    if wanted && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!(
            "cargo::rustc-link-arg-bin=dshd=-Wl,-T,{}/hot-text/dshd.ld",
            env!("CARGO_MANIFEST_DIR")
        );
    }
}
