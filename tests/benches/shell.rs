//! The daemon's cost per command, as ratios to the floor measured in the same run (CONTRACTS §10):
//!
//! - latency: `Shell.Run` of `true` (release `dshd`, one call at a time, p50) against a direct tokio
//!   spawn of `bash -c true` with piped output and an environment of the same size (target ≤ 2.5×,
//!   restated for the launcher every command starts through: docs/BENCHMARKS.md);
//! - throughput: 8 `Shell.Run` calls in flight against 8 direct spawns in flight, calls/s
//!   (target ≥ 0.6×, restated likewise).
//!
//! Direct and daemon samples are interleaved (latency) or alternated by round (throughput), so a
//! neighbour's load on a shared machine hits both sides alike.
//!
//! Run: `cargo bench -p dsh-tests --bench shell`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use dsh_proto::v1;
use dsh_testkit::bench::Target;

const WARMUP: usize = 50;
const LATENCY_RUNS: usize = 600;
const IN_FLIGHT: usize = 8;
const THROUGHPUT_CALLS: usize = 400;
const THROUGHPUT_ROUNDS: usize = 7;
/// Targets, as restated in docs/BENCHMARKS.md ("Targets restated, and why").
const LATENCY_TARGET: f64 = 2.5;
const THROUGHPUT_TARGET: f64 = 0.6;

fn main() {
    let dir = dsh_tests::private_dir();
    let daemon = dsh_tests::bench::ReleaseDaemon::start(&dir, &[]);
    let socket = daemon.socket().to_owned();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let bench = Bench::new(client, dir.path().to_owned()).await;
        bench.report().await;
    });

    drop(daemon);
}

struct Bench {
    client: dsh_client::Client,
    /// What a daemon child's environment holds (less what bash adds itself).
    env: Arc<Vec<(String, String)>>,
    cwd: std::path::PathBuf,
}

impl Bench {
    async fn new(client: dsh_client::Client, cwd: std::path::PathBuf) -> Self {
        // The environment a command gets through the daemon (scrubbed daemon environment, terminal
        // overrides, managed snapshot): the floor spawns bash with one of exactly this size.
        let out = run(&client, "env -0").await;
        let env: Vec<(String, String)> = out
            .stdout
            .split('\0')
            .filter_map(|entry| entry.split_once('='))
            .filter(|(k, _)| !matches!(*k, "PWD" | "SHLVL" | "_" | "OLDPWD"))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            client,
            env: Arc::new(env),
            cwd,
        }
    }

    async fn report(&self) {
        println!(
            "Shell.Run of `true` vs a direct tokio spawn of `bash -c true` ({} variables, piped output)",
            self.env.len()
        );
        for _ in 0..WARMUP {
            direct(&self.env, &self.cwd).await;
            run(&self.client, "true").await;
        }

        let (mut floor, mut daemon) = (Vec::new(), Vec::new());
        for _ in 0..LATENCY_RUNS {
            let t = Instant::now();
            direct(&self.env, &self.cwd).await;
            floor.push(t.elapsed());
            let t = Instant::now();
            let o = run(&self.client, "true").await;
            daemon.push(t.elapsed());
            assert_eq!(o.exit_code, Some(0));
        }
        println!("  latency, one in flight ({LATENCY_RUNS} runs each, interleaved):");
        dsh_tests::bench::latency_ratio(
            "Shell.Run latency / direct spawn",
            ("floor  direct spawn", &mut floor),
            ("dshd   Shell.Run", &mut daemon),
            Target::AtMost(LATENCY_TARGET),
        );

        let (mut floor_rates, mut daemon_rates) = (Vec::new(), Vec::new());
        for _ in 0..THROUGHPUT_ROUNDS {
            floor_rates.push(self.throughput(Side::Direct).await);
            daemon_rates.push(self.throughput(Side::Daemon).await);
        }
        let f = median_f64(&mut floor_rates);
        let d = median_f64(&mut daemon_rates);
        println!(
            "  throughput, {IN_FLIGHT} in flight ({THROUGHPUT_CALLS} calls a round, median of {THROUGHPUT_ROUNDS} alternating rounds):"
        );
        println!("    floor  direct spawn  {f:>7.0} calls/s");
        println!("    dshd   Shell.Run     {d:>7.0} calls/s");
        println!("    ratio {:.3}x (target >= {THROUGHPUT_TARGET}x)", d / f);
        dsh_testkit::bench::ratio(
            &format!("Shell.Run throughput, {IN_FLIGHT} in flight / direct spawns"),
            &format!("{d:.0} calls/s"),
            &format!("{f:.0} calls/s"),
            d / f,
            Target::AtLeast(THROUGHPUT_TARGET),
        );
    }

    async fn throughput(&self, side: Side) -> f64 {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..IN_FLIGHT {
            let next = next.clone();
            let client = self.client.clone();
            let env = self.env.clone();
            let cwd = self.cwd.clone();
            workers.spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < THROUGHPUT_CALLS {
                    match side {
                        Side::Direct => direct(&env, &cwd).await,
                        Side::Daemon => assert_eq!(run(&client, "true").await.exit_code, Some(0)),
                    }
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done.unwrap();
        }
        THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64()
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Direct,
    Daemon,
}

/// The floor: what any daemon must do at least to run a command and capture its output.
async fn direct(env: &[(String, String)], cwd: &std::path::Path) {
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg("true")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
}

async fn run(client: &dsh_client::Client, command: &str) -> v1::CommandOutcome {
    let response = client
        .shell()
        .run(v1::RunRequest {
            sandbox: None,
            command: command.into(),
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

fn median_f64(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
