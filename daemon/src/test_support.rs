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

/// Polls `cond` until it holds; fails the calling test after a generous bound. For waiting on an
/// observable state (a pid file written, a process gone), never as a stand-in for synchronisation.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Waits for a command to write a pid (one complete line) to `path` and returns it.
pub async fn read_pid(path: &std::path::Path) -> i32 {
    let mut pid = None;
    eventually(&format!("pid file {}", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.unwrap_or_default()
}

/// State letter and parent pid from `/proc/<pid>/stat`.
pub fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// `pid` is a live (non-zombie) process whose command line contains `needle` (so a reused pid
/// cannot pass for the process a test started).
pub fn alive(pid: i32, needle: &str) -> bool {
    match proc_state(pid) {
        Some((state, _)) if state != 'Z' => {}
        _ => return false,
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline)
        .replace('\0', " ")
        .contains(needle)
}

/// Waits until `pid` (running `needle`) is dead; a zombie awaiting init counts as dead.
pub async fn assert_dies(pid: i32, needle: &str) {
    eventually(&format!("pid {pid} ({needle}) to die"), || {
        !alive(pid, needle)
    })
    .await;
}

/// The top-level keys of a JSON object, in the order they are written (hook payloads promise an
/// order, which `serde_json::Value` would lose). Panics, failing the test, on anything else.
pub fn keys(json: impl AsRef<[u8]>) -> Vec<String> {
    let json = json.as_ref();
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys(Vec<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<IgnoredAny>()?;
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
    match serde_json::from_slice::<Keys>(json) {
        Ok(keys) => keys.0,
        Err(e) => panic!("not a JSON object ({e}): {}", String::from_utf8_lossy(json)),
    }
}
