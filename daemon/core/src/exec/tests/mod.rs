//! Executor tests with real bash and real processes.
//!
//! Synchronisation is always on a condition (a file a command writes, a job state, a process gone
//! from `/proc`), polled with a generous bound; nothing asserts on durations. Background processes
//! use distinctive `sleep` arguments so `/proc/<pid>/cmdline` tells them apart from an unrelated
//! process that reused the pid.

mod env_guards;
mod foreground;
mod jobs;
mod sandbox;
mod spills;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

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

/// A spec run on behalf of an agent, so its spill files stay until that agent's are released.
pub(super) fn kept_spec(command: &str, cwd: &Path) -> CommandSpec {
    CommandSpec {
        spill_owner: Some(dsh_session::SessionId::new_v7()),
        ..CommandSpec::new(command, cwd)
    }
}

pub(crate) use crate::test_support::{assert_dies, eventually, proc_state, read_pid};

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
