//! `dshctl` as a finished command-line tool, end to end through the real binary and the real dshd:
//! Ctrl-C during a prompt cancels the turn, prompts from stdin, unique id prefixes, `job list`,
//! `doctor`, JSON lines for streams and JSON usage errors, exit statuses, a closed stdout, help.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

#[path = "cli/doctor.rs"]
mod doctor;
#[path = "cli/ids.rs"]
mod ids;
#[path = "cli/jobs.rs"]
mod jobs;
#[path = "cli/output.rs"]
mod output;
#[path = "cli/prompt.rs"]
mod prompt;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use dsh_tests::agents::PATIENCE;
use dsh_tests::{TestDaemon, dshctl_bin, eventually, wait_child};
use serde_json::{Value, json};

/// `dshctl --socket <daemon's> ARGS...` with piped stdin, stdout and stderr, not waited for.
fn spawn_dshctl(daemon: &TestDaemon, args: &[&str]) -> Child {
    Command::new(dshctl_bin())
        .arg("--socket")
        .arg(&daemon.socket)
        .args(args)
        .env_remove("DSH_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run dshctl: {e}"))
}

/// Waits (bounded) for a child started by [`spawn_dshctl`] and collects what it printed.
fn finish(mut child: Child) -> Output {
    drop(child.stdin.take());
    let Some(status) = wait_child(&mut child, PATIENCE) else {
        let _ = child.kill();
        panic!("dshctl did not finish within {PATIENCE:?}");
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scripted agent whose one bash call creates `marker` and then blocks for a long time (until
/// it is killed): "the tool call is running" is observable as the file.
fn blocking_agent(daemon: &TestDaemon, name: &str, marker: &Path) -> String {
    let command = format!("touch {}; sleep 300; echo finished", marker.display());
    daemon.new_agent(
        &daemon.workdir(name),
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "done"}
        ]}),
    )
}

/// The longest common prefix of two ids.
fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    &a[..n]
}
