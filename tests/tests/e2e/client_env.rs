//! Agents run commands in the environment of the client that made them live, not dshd's: with
//! dshd started on a minimal environment (as a systemd user service is), a tool on the client's
//! `PATH` runs by name, through `dshctl` and through the ACP bridge; what dsh scrubs (secrets,
//! `BASH_ENV`, an outer `DSH_*`) never reaches the command, and the managed snapshot is on top.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin, private_dir};
use serde_json::{Value, json};

/// What the agent's one command prints: the tool's output, then what it sees of the scrubbed
/// and managed variables.
const PROBE: &str = "mytool; echo \"secret=${MY_API_TOKEN:-unset} dsh=${DSH_OUTER:-unset} \
                     bash_env=${BASH_ENV:-unset} session=${DSH_SESSION_ID:-unset}\"";

/// A dshd whose own environment is only `PATH=/usr/bin:/bin` and `HOME`.
fn minimal_daemon() -> TestDaemon {
    let dir = private_dir();
    let home = dir.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            wrapper: vec![
                "env".into(),
                "-i".into(),
                "PATH=/usr/bin:/bin".into(),
                format!("HOME={}", home.display()).into(),
            ],
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    daemon
}

/// A directory holding `mytool`, which prints a variable only the client has.
fn tool_dir(daemon: &TestDaemon) -> PathBuf {
    let dir = daemon.dir.path().join("client-tools");
    std::fs::create_dir_all(&dir).unwrap();
    let tool = dir.join("mytool");
    std::fs::write(
        &tool,
        "#!/bin/sh\necho \"mytool ran with $MY_CLIENT_VAR\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `command` with the client's environment: the tool directory first on `PATH`, a variable of
/// its own, a secret, an outer `DSH_*` and `BASH_ENV`.
fn as_client(command: &mut Command, tools: &Path) {
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    command
        .env("PATH", path)
        .env("MY_CLIENT_VAR", "the client's value")
        .env("MY_API_TOKEN", "hunter2")
        .env("DSH_OUTER", "outer")
        .env("BASH_ENV", "/nonexistent/startup")
        .env_remove("DSH_SOCKET");
}

fn script(daemon: &TestDaemon) -> PathBuf {
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": PROBE}}]});
    daemon.write_script(&json!({"replies": [call, {"text": "done"}]}))
}

fn assert_client_env(output: &str, id: &str) {
    assert!(
        output.contains("mytool ran with the client's value"),
        "the client's tool did not run by name: {output}"
    );
    assert!(
        output.contains(&format!(
            "secret=unset dsh=unset bash_env=unset session={id}"
        )),
        "{output}"
    );
}

#[test]
fn an_agent_made_by_dshctl_runs_a_tool_on_the_clients_path_without_its_secrets() {
    let daemon = minimal_daemon();
    let tools = tool_dir(&daemon);
    let work = daemon.workdir("w");
    let mut new = Command::new(dshctl_bin());
    new.arg("--socket").arg(&daemon.socket).args([
        "--json",
        "agent",
        "new",
        "--cwd",
        work.to_str().unwrap(),
        "--script",
        script(&daemon).to_str().unwrap(),
    ]);
    as_client(&mut new, &tools);
    let out = new.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = info["agent_id"].as_str().unwrap();
    let prompted = daemon.prompt(id, "go");
    prompted.assert_completed();
    let results = prompted.tool_results();
    let output = results[0]["content"].as_str().unwrap();
    assert_client_env(output, id);
    // dshd's own environment does not have the tool: a client that sends nothing gets dshd's.
    let plain = daemon.new_agent_without_env(&work, &json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "command -v mytool || echo none"}}]},
        {"text": "done"}
    ]}));
    let prompted = daemon.prompt(&plain, "go");
    let results = prompted.tool_results();
    assert_eq!(results[0]["content"].as_str().unwrap().trim(), "none");
}

#[test]
fn an_acp_session_runs_a_tool_on_the_editors_path() {
    let daemon = minimal_daemon();
    let tools = tool_dir(&daemon);
    let work = daemon.workdir("w");
    let mut bridge = Command::new(dshctl_bin());
    bridge
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["acp", "--script", script(&daemon).to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    as_client(&mut bridge, &tools);
    let mut child = bridge.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = dsh_tests::line_channel(child.stdout.take().unwrap());
    let mut send = |id: u64, method: &str, params: Value| {
        use std::io::Write;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
    };
    let answer = |id: u64| -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let line = lines.recv_timeout(dsh_tests::agents::PATIENCE).unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    };
    send(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    answer(1);
    send(2, "session/new", json!({"cwd": work, "mcpServers": []}));
    let id = answer(2).1["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    send(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "go"}]}),
    );
    let (updates, done) = answer(3);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let output: String = updates
        .iter()
        .filter(|m| m["params"]["update"]["status"] == "completed")
        .map(|m| {
            m["params"]["update"]["rawOutput"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_client_env(&output, &id);
    drop(stdin);
    let _ = child.wait();
}
