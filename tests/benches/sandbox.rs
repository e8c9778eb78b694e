//! What the Landlock sandbox costs a command: `Shell.Run` of `true` with `workspace-write`
//! against the same call with `off`, on one release `dshd`, samples interleaved so a neighbour's
//! load hits both alike. Target: p50 ratio ≤ 1.5×. Both calls start the command through the
//! launcher (a new session, then `exec`); the confined one also drops privileges and builds its
//! Landlock domain and seccomp filter in the command's own process. Two figures:
//!
//! - **on behalf of an agent** (`agent_id` set, as a model's bash call runs);
//! - **of no agent**: the call also makes and removes the sandbox's private temporary directory.
//!
//! Run: `cargo bench -p dsh-tests --bench sandbox`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::Instant;

use dsh_proto::v1;
use dsh_testkit::bench::Target;

const WARMUP: usize = 50;
const RUNS: usize = 600;

fn main() {
    let dshd = dsh_tests::cargo_build("dsh-daemon", "dshd", true);
    let dir = dsh_tests::private_dir();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let daemon = dsh_tests::bench::ReleaseDaemon::start_binary(&dshd, &dir, &[], &[]);
    let socket = daemon.socket().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let cwd = work.to_string_lossy().into_owned();
        let unconfined = agent(&client, &cwd, "off").await;
        let confined_agent = agent(&client, &cwd, "workspace-write").await;
        for (label, off_agent, confined_agent) in [
            (
                "on behalf of an agent",
                unconfined.as_str(),
                confined_agent.as_str(),
            ),
            ("of no agent", "", ""),
        ] {
            compare(&client, &cwd, label, off_agent, confined_agent).await;
        }
    });
    // Dropping the daemon stops it (SIGTERM) and waits for it.
    drop(daemon);
}

/// Interleaves `off` and `workspace-write` calls (on behalf of the two agents, or of none) and
/// prints the ratio of their medians.
async fn compare(
    client: &dsh_client::Client,
    cwd: &str,
    label: &str,
    off_agent: &str,
    confined_agent: &str,
) {
    let call = |mode: &'static str, agent: &str| {
        let agent = agent.to_owned();
        async move {
            let t = Instant::now();
            let o = run(client, cwd, mode, &agent).await;
            assert_eq!(o.exit_code, Some(0), "{mode}: {o:?}");
            t.elapsed()
        }
    };
    for _ in 0..WARMUP {
        call("off", off_agent).await;
        call("workspace-write", confined_agent).await;
    }
    let (mut off, mut confined) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        off.push(call("off", off_agent).await);
        confined.push(call("workspace-write", confined_agent).await);
    }
    println!(
        "Shell.Run of `true` {label}, sandbox workspace-write vs off ({RUNS} runs each, interleaved):"
    );
    dsh_tests::bench::latency_ratio(
        &format!("Shell.Run {label}, sandbox workspace-write / off"),
        ("off", &mut off),
        ("workspace-write", &mut confined),
        Target::AtMost(1.5),
    );
}

/// A scripted agent in `cwd` with sandbox `mode`; its id.
async fn agent(client: &dsh_client::Client, cwd: &str, mode: &str) -> String {
    client
        .agents()
        .create(v1::CreateAgentRequest {
            cwd: cwd.into(),
            model: Some(v1::ModelSpec {
                provider: "scripted".into(),
                ..v1::ModelSpec::default()
            }),
            sandbox: Some(v1::SandboxPolicy {
                mode: mode.into(),
                network: "on".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id
}

async fn run(
    client: &dsh_client::Client,
    cwd: &str,
    mode: &str,
    agent: &str,
) -> v1::CommandOutcome {
    let response = client
        .shell()
        .run(v1::RunRequest {
            agent_id: agent.into(),
            command: "true".into(),
            cwd: cwd.into(),
            sandbox: Some(v1::SandboxPolicy {
                mode: mode.into(),
                network: "on".into(),
            }),
            ..v1::RunRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    match response.result {
        Some(v1::run_response::Result::Finished(o)) => o,
        other => panic!("no outcome: {other:?}"),
    }
}
