//! Helpers shared by the daemon's unit tests and the end-to-end tests in `dsh-tests` (which enable
//! the `test-support` feature). Nothing here is part of the daemon's behaviour; `dshd` is built
//! without it.

use std::sync::Mutex;

/// Finds `jq` (the example hook scripts in `examples/hooks/` need it), installing it with apt when
/// running as root; otherwise fails the calling test with a message saying how to install it. CI
/// should install it up front (`apt-get install -y jq`); this is the fallback for a fresh machine.
/// Checked once per process.
pub fn require_jq() {
    static CHECKED: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let result = checked.get_or_insert_with(find_or_install_jq);
    if let Err(message) = result {
        panic!("{message}");
    }
}

fn jq_works() -> bool {
    std::process::Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn find_or_install_jq() -> Result<(), String> {
    if jq_works() {
        return Ok(());
    }
    if !rustix::process::getuid().is_root() {
        return Err(
            "the hook example tests need `jq`, which is not on PATH; install it \
                    (e.g. `sudo apt-get install -y jq`) and run the tests again"
                .into(),
        );
    }
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "-q", "jq"]) {
        // A fresh image may have no package lists yet.
        apt(&["update", "-q"]);
        apt(&["install", "-y", "-q", "jq"]);
    }
    if jq_works() {
        Ok(())
    } else {
        Err(
            "the hook example tests need `jq`: it is not on PATH and `apt-get install -y jq` \
             did not provide it; install jq and run the tests again"
                .into(),
        )
    }
}
