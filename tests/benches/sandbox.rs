//! What the Landlock sandbox costs a command (issue 15): `Shell.Run` of `true` with
//! `workspace-write` against the same call with `off`, on one release `dshd`, samples interleaved
//! so a neighbour's load hits both alike. Target: p50 ratio ≤ 1.10×.
//!
//! The confined call runs the exec helper, which builds the ruleset, restricts itself and `exec`s
//! bash: one more `execve`, a private temporary directory check, and the rule syscalls. Measured
//! twice: with `dsh-sandbox-exec` next to dshd (as installed), and with a dshd that has no helper
//! beside it and runs itself in helper mode (`cargo run --bin dshd`).
//!
//! Run: `cargo bench -p dsh-tests --bench sandbox`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::{Duration, Instant};

use dsh_proto::v1;

const WARMUP: usize = 50;
const RUNS: usize = 600;

fn main() {
    let dshd = dsh_tests::cargo_build("dsh-daemon", "dshd", true);
    dsh_tests::cargo_build("dsh-daemon", "dsh-sandbox-exec", true);
    measure(&dshd, "with dsh-sandbox-exec beside dshd");
    // The same binary alone in a directory: it finds no helper and runs itself in helper mode.
    let alone = dsh_tests::private_dir();
    let copy = alone.path().join("dshd");
    std::fs::copy(&dshd, &copy).unwrap();
    measure(&copy, "dshd alone, running itself as the helper");
}

fn measure(dshd: &std::path::Path, label: &str) {
    let dir = dsh_tests::private_dir();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let daemon = dsh_tests::bench::ReleaseDaemon::start_binary(dshd, &dir, &[], &[]);
    let socket = daemon.socket().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let cwd = work.to_string_lossy().into_owned();
        let call = |mode: &'static str| {
            let client = client.clone();
            let cwd = cwd.clone();
            async move {
                let t = Instant::now();
                let o = run(&client, &cwd, mode).await;
                assert_eq!(o.exit_code, Some(0), "{mode}: {o:?}");
                t.elapsed()
            }
        };
        for _ in 0..WARMUP {
            call("off").await;
            call("workspace-write").await;
        }
        let (mut off, mut confined) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            off.push(call("off").await);
            confined.push(call("workspace-write").await);
        }
        let (o50, o90) = percentiles(&mut off);
        let (c50, c90) = percentiles(&mut confined);
        println!(
            "Shell.Run of `true`, sandbox workspace-write vs off, {label} ({RUNS} runs each, interleaved):"
        );
        println!(
            "    off              p50 {:>7.1} µs   p90 {:>7.1} µs",
            us(o50),
            us(o90)
        );
        println!(
            "    workspace-write  p50 {:>7.1} µs   p90 {:>7.1} µs",
            us(c50),
            us(c90)
        );
        println!(
            "    ratio p50 {:.3}x (target <= 1.10x); overhead p50 {:+.1} µs",
            c50.as_secs_f64() / o50.as_secs_f64(),
            us(c50) - us(o50)
        );
        dsh_testkit::bench::ratio(
            &format!("Shell.Run, sandbox workspace-write / off, {label}"),
            &format!("p50 {:.0} us", us(c50)),
            &format!("p50 {:.0} us", us(o50)),
            c50.as_secs_f64() / o50.as_secs_f64(),
            dsh_testkit::bench::Target::AtMost(1.10),
        );
    });
    // Dropping the daemon stops it (SIGTERM) and waits for it.
    drop(daemon);
}

async fn run(client: &dsh_client::Client, cwd: &str, mode: &str) -> v1::CommandOutcome {
    let response = client
        .shell()
        .run(v1::RunRequest {
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

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    (samples[samples.len() / 2], samples[samples.len() * 9 / 10])
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
