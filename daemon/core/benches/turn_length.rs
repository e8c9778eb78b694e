//! Does a step cost more the longer its turn has run? One turn of K scripted steps, each calling a
//! tool (an unknown one: the loop answers at once, so the figure is the loop's own cost), for
//! K = 100, 1,000 and 5,000, under both checkpoint policies, on a 2-worker runtime like `dshd`'s.
//! Prints the wall time per step (the turn's time over K) and the ratio of K = 5,000 to K = 100
//! (target ≤ 1.2×: a step's cost independent of how many came before).
//!
//! The per-step checkpoint uses the no-I/O counting backend, so disk latency does not hide the
//! loop's growth. Each K runs three turns (fresh agents); the median is printed.
//!
//! Run: `cargo bench -p dsh-core --bench turn_length`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{CheckpointPolicy, TurnEndReason};
use serde_json::json;

const SIZES: [usize; 3] = [100, 1_000, 5_000];
const RUNS: usize = 3;

fn main() {
    let runtime = common::runtime();
    let scratch = common::scratch();
    println!("agent loop cost per step by turn length (release build; median of {RUNS} turns)");
    for policy in [CheckpointPolicy::Step, CheckpointPolicy::Turn] {
        let per_step: Vec<Duration> = SIZES
            .iter()
            .map(|&k| runtime.block_on(per_step(policy, scratch.path(), k)))
            .collect();
        let cells: Vec<String> = SIZES
            .iter()
            .zip(&per_step)
            .map(|(k, d)| format!("K={k}: {:>6.1} us", d.as_secs_f64() * 1e6))
            .collect();
        let ratio = per_step[2].as_secs_f64() / per_step[0].as_secs_f64();
        println!(
            "  checkpoint={:<4}  {}   K=5000/K=100 = {ratio:.2}x (target <= 1.2x: {})",
            format!("{policy:?}").to_lowercase(),
            cells.join("   "),
            if ratio <= 1.2 { "met" } else { "MISSED" }
        );
        dsh_testkit::bench::ratio(
            &format!(
                "Loop cost per step, K=5000 / K=100, checkpoint={}",
                format!("{policy:?}").to_lowercase()
            ),
            &format!("{:.1} us", per_step[2].as_secs_f64() * 1e6),
            &format!("{:.1} us", per_step[0].as_secs_f64() * 1e6),
            ratio,
            dsh_testkit::bench::Target::AtMost(1.2),
        );
    }
}

/// Median over [`RUNS`] turns of one turn's wall time divided by its `steps`.
async fn per_step(policy: CheckpointPolicy, cwd: &std::path::Path, steps: usize) -> Duration {
    let registry = common::registry(
        Arc::new(common::CountingBackend::default()),
        policy,
        cwd,
        u32::try_from(steps + 1).unwrap(),
    );
    let mut replies: Vec<serde_json::Value> = (1..steps)
        .map(|step| json!({"tool_calls": [{"name": "noop", "arguments": {"step": step}}]}))
        .collect();
    replies.push(json!({"text": "done"}));
    let script = json!({ "replies": replies }).to_string();
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let agent = registry
            .create(
                cwd,
                &common::scripted(&script),
                dsh_core::SandboxPolicy::UNCONFINED,
                None,
            )
            .unwrap();
        let start = Instant::now();
        let handle = registry
            .prompt(agent.id(), "go".into(), None, dsh_core::WatchedBy::Person)
            .unwrap();
        let outcome = handle.outcome.await.unwrap();
        let elapsed = start.elapsed();
        assert_eq!(outcome.reason, TurnEndReason::Completed, "{outcome:?}");
        samples.push(elapsed / u32::try_from(steps).unwrap());
        registry.close(agent.id()).await.unwrap();
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}
