//! Overhead of the agent loop per scripted step, in process, on a 2-worker tokio runtime like
//! `dshd`'s (target: ≤ 200 µs per step without tools).
//!
//! What is measured, from `AgentRegistry::prompt` to the turn's outcome:
//!
//! 1. A turn of one text-only step (the model answers at once without tool calls, which ends the
//!    turn): `turn/start`, `user/message`, `step/start`, the history derived from the log, the
//!    scripted model's reply, `assistant/message`, `step/end`, the step checkpoint, `turn/end`
//!    and the turn checkpoint. The persistence backend here is a counting no-op, so the figure is
//!    the loop's own cost (including both checkpoints' hop to the blocking pool) without disk I/O.
//! 2. The marginal cost of one more step: turns of 9 steps, 8 of which call a tool that does not
//!    exist (dispatch answers with an error result at once), minus the one-step turn, over 8.
//! 3. The same 9-step turns with `checkpoint = "turn"`: the cost of the per-step checkpoint hop.
//! 4. For scale, the one-step turn with the real JSONL backend, `checkpoint = "step"` (two
//!    fdatasyncs per turn) and `"turn"` (one), beside the floor of one raw write+fdatasync
//!    measured after every turn of the same run.
//!
//! Each agent runs 20 turns (its log grows to ~120-400 events, so history derivation is included
//! at a realistic size); figures are medians over every turn of 40 agents.
//!
//! Run: `cargo bench -p dsh-core --bench agent_loop`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{CheckpointPolicy, JsonlBackend, OnBlockingPool, Persistence, TurnEndReason};
use serde_json::{Value, json};

#[path = "common/mod.rs"]
mod common;

use common::CountingBackend;

const AGENTS: usize = 40;
const TURNS: usize = 20;
const STEPS: usize = 9;

fn main() {
    let runtime = common::runtime();
    let scratch = common::scratch();
    let cwd = scratch.path().to_path_buf();

    let (one, _) = runtime.block_on(per_turn(
        Arc::new(CountingBackend::default()),
        CheckpointPolicy::Step,
        &cwd,
        1,
        None,
    ));
    let (many, _) = runtime.block_on(per_turn(
        Arc::new(CountingBackend::default()),
        CheckpointPolicy::Step,
        &cwd,
        STEPS,
        None,
    ));
    let (many_turn, _) = runtime.block_on(per_turn(
        Arc::new(CountingBackend::default()),
        CheckpointPolicy::Turn,
        &cwd,
        STEPS,
        None,
    ));
    let marginal = many.saturating_sub(one) / u32::try_from(STEPS - 1).unwrap();
    let floor_file = std::fs::File::create(scratch.path().join("floor")).unwrap();
    let (jsonl_step, floor_step) = runtime.block_on(per_turn(
        Arc::new(OnBlockingPool::new(
            JsonlBackend::new(scratch.path().join("step")).unwrap(),
        )),
        CheckpointPolicy::Step,
        &cwd,
        1,
        Some(&floor_file),
    ));
    let (jsonl_turn, floor_turn) = runtime.block_on(per_turn(
        Arc::new(OnBlockingPool::new(
            JsonlBackend::new(scratch.path().join("turn")).unwrap(),
        )),
        CheckpointPolicy::Turn,
        &cwd,
        1,
        Some(&floor_file),
    ));

    println!(
        "agent loop overhead, scripted model (release build; {AGENTS} agents x {TURNS} turns, medians)"
    );
    println!(
        "  one-step turn, no tools, no-I/O backend: {:>8.1} us/turn = per step (target <= 200 us: {}; {:.2}x the target)",
        us(one),
        verdict(one <= Duration::from_micros(200)),
        one.as_secs_f64() / 200e-6
    );
    dsh_testkit::bench::ratio(
        "Agent loop, one-step turn / 200 us",
        &format!("{:.1} us", us(one)),
        "200 us (target)",
        one.as_secs_f64() / 200e-6,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
    println!(
        "  {STEPS}-step turn, 8 calls to an unknown tool: {:>8.1} us/turn; marginal step {:.1} us (target <= 200 us: {})",
        us(many),
        us(marginal),
        verdict(marginal <= Duration::from_micros(200))
    );
    dsh_testkit::bench::ratio(
        "Agent loop, marginal step / 200 us",
        &format!("{:.1} us", us(marginal)),
        "200 us (target)",
        marginal.as_secs_f64() / 200e-6,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
    println!(
        "  policy: {STEPS}-step turn with checkpoint=turn {:>8.1} us/turn vs checkpoint=step {:.1} us/turn",
        us(many_turn),
        us(many)
    );
    println!(
        "  for scale, one-step turn with the JSONL backend (disk-bound; floor: a raw 1 KiB write+fdatasync after each turn):"
    );
    for (name, syncs, turn, floor) in [
        (
            "checkpoint=step (2 syncs/turn)",
            2.0,
            jsonl_step,
            floor_step,
        ),
        (
            "checkpoint=turn (1 sync/turn) ",
            1.0,
            jsonl_turn,
            floor_turn,
        ),
    ] {
        println!(
            "    {name}: {:>8.1} us/turn   floor {:>7.1} us   turn / ({syncs} x floor) = {:.2}",
            us(turn),
            us(floor),
            turn.as_secs_f64() / (syncs * floor.as_secs_f64())
        );
    }
}

/// Median wall time of a turn of `steps` steps (the last one text-only), and with `floor`, the
/// median of a raw 1 KiB append + fdatasync to that file measured after each turn.
async fn per_turn(
    backend: Arc<dyn Persistence>,
    policy: CheckpointPolicy,
    cwd: &Path,
    steps: usize,
    floor: Option<&std::fs::File>,
) -> (Duration, Duration) {
    let registry = common::registry(backend, policy, cwd, 1000);

    let mut replies: Vec<Value> = Vec::new();
    for turn in 0..TURNS {
        for step in 1..steps {
            replies.push(json!({"tool_calls": [{"name": "noop", "arguments": {"turn": turn, "step": step}}]}));
        }
        replies.push(json!({"text": format!("answer {turn}")}));
    }
    let script = json!({ "replies": replies }).to_string();

    let mut samples = Vec::with_capacity(AGENTS * TURNS);
    let mut floors = Vec::with_capacity(AGENTS * TURNS);
    let buf = vec![b'x'; 1024];
    for _ in 0..AGENTS {
        let agent = registry
            .create(
                cwd,
                &common::scripted(&script),
                dsh_core::SandboxPolicy::UNCONFINED,
                None,
            )
            .unwrap();
        for turn in 0..TURNS {
            let start = Instant::now();
            let handle = registry
                .prompt(
                    agent.id(),
                    format!("question {turn}"),
                    None,
                    dsh_core::WatchedBy::Person,
                )
                .unwrap();
            let outcome = handle.outcome.await.unwrap();
            samples.push(start.elapsed());
            assert_eq!(outcome.reason, TurnEndReason::Completed);
            assert_eq!(agent.turn_answer(outcome.turn), format!("answer {turn}"));
            if let Some(file) = floor {
                let offset = floors.len() as u64 * 1024;
                let start = Instant::now();
                file.write_all_at(&buf, offset).unwrap();
                file.sync_data().unwrap();
                floors.push(start.elapsed());
            }
        }
        registry.close(agent.id()).await.unwrap();
    }
    (median(&mut samples), median(&mut floors))
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}
