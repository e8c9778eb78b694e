//! `dsh-sandbox-exec`: the sandbox's exec helper as a binary of its own. dshd starts it in place of
//! `bash` for a confined command; it restricts itself with Landlock and `exec`s the shell (see
//! `dsh_core::sandbox::helper_main`). dshd can do the same by running itself in helper mode, but
//! this binary is a fraction of dshd's size, so a confined command costs one small `execve` rather
//! than a large one. dshd uses it when it lies next to dshd's own executable (where `cargo install`
//! and packages put both); otherwise dshd falls back to itself.

use std::process::ExitCode;

fn main() -> ExitCode {
    dsh_core::sandbox::helper_main(std::env::args_os().skip(1))
}
