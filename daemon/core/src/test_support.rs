//! Helpers shared by the daemon's unit tests and the end-to-end tests in `dsh-tests` (which enable
//! the `test-support` feature). Nothing here is part of the daemon's behaviour; `dshd` is built
//! without it.

use std::sync::Mutex;

/// Fails the calling test, saying how to install it, unless `jq` runs (the example hook scripts
/// in `examples/hooks/` and the hook tests' bash scripts need it). Tests never install anything:
/// a machine without the tool gets a message with the install command.
pub fn require_jq() {
    require_tool("jq", "sudo apt-get install -y jq");
}

/// Fails the calling test, saying how to install it, unless `python3` runs (the hook tests run
/// Python hook scripts, as many published hooks are).
pub fn require_python3() {
    require_tool("python3", "sudo apt-get install -y python3");
}

/// Fails the calling test, saying how to install it, unless `perl` runs (Anthropic's
/// `ralph-wiggum` Stop hook matches its completion promise with perl).
pub fn require_perl() {
    require_tool("perl", "sudo apt-get install -y perl");
}

/// Fails the calling test, saying how to install it, unless `rustfmt` runs (a published Claude
/// Code formatter hook for Rust calls it on the file the agent wrote).
pub fn require_rustfmt() {
    require_tool("rustfmt", "rustup component add rustfmt");
}

/// Checks once per process and tool that `tool --version` succeeds.
fn require_tool(tool: &'static str, install: &'static str) {
    static CHECKED: Mutex<Vec<(&'static str, bool)>> = Mutex::new(Vec::new());
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let works = match checked.iter().find(|(t, _)| *t == tool) {
        Some((_, works)) => *works,
        None => {
            let works = std::process::Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            checked.push((tool, works));
            works
        }
    };
    assert!(
        works,
        "the hook tests need `{tool}`, which is not on PATH; install it (e.g. `{install}`) and run the tests again"
    );
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

/// The launcher for executors outside dshd (a test binary's `/proc/self/exe` is no launcher):
/// the `dsh-launch` binary, opened and checked as dshd opens an installed one.
pub fn launcher() -> crate::exec::Launcher {
    static LAUNCHER: std::sync::OnceLock<crate::exec::Launcher> = std::sync::OnceLock::new();
    LAUNCHER
        .get_or_init(
            || match crate::exec::Launcher::installed(launcher_binary()) {
                Ok(launcher) => launcher,
                Err(error) => panic!("the dsh-launch built for the tests: {error}"),
            },
        )
        .clone()
}

/// The `dsh-launch` binary, built once per test process with escargot. The nested cargo gets
/// the environment a build from a shell has, as `dsh-tests` does for `dshd` (the variables cargo
/// sets for a test binary would make some build scripts rebuild every time).
pub fn launcher_binary() -> &'static std::path::Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let manifest =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../launch/Cargo.toml");
        let mut build = escargot::CargoBuild::new()
            .manifest_path(manifest)
            .package("dsh-launch")
            .bin("dsh-launch");
        for (key, _) in std::env::vars_os() {
            if set_by_cargo_for_the_runner(&key.to_string_lossy()) {
                build = build.env_remove(&key);
            }
        }
        match build.run() {
            Ok(run) => run.path().to_path_buf(),
            Err(error) => panic!("cannot build dsh-launch: {error}"),
        }
    })
}

/// Whether `name` is one of the variables `cargo test`, `cargo bench` and `cargo run` set for the
/// binary they run, which a nested cargo must not inherit: some build scripts (ring's) declare
/// `rerun-if-env-changed` on exactly those names and would rebuild every run.
pub fn set_by_cargo_for_the_runner(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_BIN_NAME"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
        )
}
