//! Executor tests with real bash and real processes.
//!
//! Synchronisation is always on a condition (a file a command writes, a job state, a process gone
//! from `/proc`), polled with a generous bound; nothing asserts on durations. Background processes
//! use distinctive `sleep` arguments so `/proc/<pid>/cmdline` tells them apart from an unrelated
//! process that reused the pid.

mod foreground;
mod jobs;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{CommandSpec, ExecConfig, Executor};

/// Short grace and drain so kill-path tests stay quick; caps left at their defaults.
pub(super) fn config(tmp: &Path) -> ExecConfig {
    ExecConfig {
        kill_grace: Duration::from_millis(300),
        spill_dir: tmp.join("spill"),
        ..ExecConfig::default()
    }
}

/// A stand-in for the daemon's environment, with secrets and an outer harness's `DSH_*` values.
pub(super) fn ambient() -> Vec<(OsString, OsString)> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let mut vars: Vec<(OsString, OsString)> = [
        ("HOME", "/home/tester"),
        ("PLAIN", "kept"),
        ("MY_API_KEY", "k"),
        ("GITHUB_TOKEN", "t"),
        ("DB_PASSWORD", "p"),
        ("DSH_HOME", "/outer/home"),
        ("DSH_SESSION_ID", "outer-session"),
        ("DSH_FOO", "outer"),
        ("dsh_lower", "outer"),
        ("MODEL_VAR", "scrub-me-by-name"),
        ("TERM", "xterm-256color"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    vars.push(("PATH".into(), path));
    vars
}

pub(super) fn executor_with(config: ExecConfig) -> Executor {
    Executor::with_base_env(config, ambient()).unwrap()
}

pub(super) fn executor(tmp: &Path) -> Executor {
    executor_with(config(tmp))
}

pub(super) fn spec(command: &str, cwd: &Path) -> CommandSpec {
    CommandSpec::new(command, cwd)
}

/// Polls `cond` until it holds; fails the test after a generous bound.
pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for a command to write a pid (one line) to `path` and returns it.
pub(super) async fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    eventually(&format!("pid file {}", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.unwrap()
}

/// State letter and parent pid from `/proc/<pid>/stat`.
pub(crate) fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// `pid` is a live (non-zombie) process whose command line contains `needle`.
pub(crate) fn alive(pid: i32, needle: &str) -> bool {
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
pub(crate) async fn assert_dies(pid: i32, needle: &str) {
    eventually(&format!("pid {pid} ({needle}) to die"), || {
        !alive(pid, needle)
    })
    .await;
}

/// Parses `env -0` output.
pub(super) fn parse_env0(out: &str) -> BTreeMap<String, String> {
    out.split('\0')
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub(super) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
