//! The release `dshd`'s CPU per step of one long turn: a scripted agent whose turn is K - 1 steps
//! each calling `bash` (`true`) and a final text step, for K = 100, 1,000 and 5,000, under both
//! checkpoint policies (real JSONL files). CPU is dshd's own user + system time (`/proc/<pid>/stat`,
//! so exited threads count) over the turn, divided by K; the bash children's CPU is not dshd's.
//! K = 100 runs fifty turns (fifty agents), as many steps as K = 5,000: fewer read ±25% between
//! runs (ten turns: 410–660 µs a step), more than the 10 ms clock tick alone explains. Even so a
//! single K = 5,000 turn read anywhere from 900 to 1,600 µs a step on this VM with nothing
//! changed, so K = 100 and K = 5,000 are measured in alternating rounds and the ratio printed is
//! the median of the rounds' ratios (target ≤ 1.2×); each round's ratio is printed too.
//!
//! Run: `cargo bench -p dsh-tests --bench turn_length`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::Instant;

use serde_json::json;

/// (steps a turn, turns) for the short, middle and long turn.
const SIZES: [(usize, usize); 3] = [(100, 50), (1_000, 1), (5_000, 1)];

/// Rounds of the short and the long turn, alternated so drift of the VM hits both alike.
const ROUNDS: usize = 3;

fn main() {
    println!(
        "dshd CPU per step by turn length (release dshd, scripted model, one bash call a step)"
    );
    for policy in ["step", "turn"] {
        let dir = dsh_tests::private_dir();
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!("checkpoint = \"{policy}\"\n[agent]\nmax_steps_per_turn = 6000\n"),
        )
        .unwrap();
        let daemon =
            dsh_tests::bench::ReleaseDaemon::start(&dir, &["--config", config.to_str().unwrap()]);
        let socket = daemon.socket.clone();
        let pid = daemon.pid();
        let run = |(steps, turns): (usize, usize)| per_step(&socket, dir.path(), pid, steps, turns);
        let middle = run(SIZES[1]);
        let mut rounds: Vec<((f64, f64), (f64, f64))> = (0..ROUNDS)
            .map(|_| (run(SIZES[0]), run(SIZES[2])))
            .collect();
        rounds.sort_by(|a, b| (a.1.0 / a.0.0).total_cmp(&(b.1.0 / b.0.0)));
        let (short, long) = rounds[ROUNDS / 2];
        let cells: Vec<String> = SIZES
            .iter()
            .zip([short, middle, long])
            .map(|((k, _), (cpu, wall))| format!("K={k}: cpu {cpu:>6.0} us wall {wall:>6.0} us"))
            .collect();
        let each: Vec<String> = rounds
            .iter()
            .map(|(short, long)| format!("{:.2}", long.0 / short.0))
            .collect();
        let ratio = long.0 / short.0;
        println!(
            "  checkpoint={policy:<4}  {}   cpu K=5000/K=100 = {ratio:.2}x, median of rounds {} (target <= 1.2x: {})",
            cells.join("   "),
            each.join(", "),
            if ratio <= 1.2 { "met" } else { "MISSED" }
        );
        dsh_testkit::bench::ratio(
            &format!("dshd CPU per step, K=5000 / K=100, checkpoint={policy}"),
            &format!("{:.0} us", long.0),
            &format!("{:.0} us", short.0),
            ratio,
            dsh_testkit::bench::Target::AtMost(1.2),
        );
    }
}

/// (CPU, wall) microseconds per step over `turns` turns of `steps` steps.
fn per_step(
    socket: &std::path::Path,
    dir: &std::path::Path,
    pid: u32,
    steps: usize,
    turns: usize,
) -> (f64, f64) {
    let mut replies: Vec<serde_json::Value> = (1..steps)
        .map(|_| json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}))
        .collect();
    replies.push(json!({"text": "done"}));
    let script = dir.join(format!("script-{steps}.json"));
    std::fs::write(&script, json!({ "replies": replies }).to_string()).unwrap();
    let agents: Vec<String> = (0..turns)
        .map(|_| {
            let out = dsh_tests::dshctl_at(
                socket,
                &[
                    "--json",
                    "agent",
                    "new",
                    "--cwd",
                    dir.to_str().unwrap(),
                    "--script",
                    script.to_str().unwrap(),
                ],
            );
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            doc["agent_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let (cpu, wall) = (dsh_tests::bench::cpu_us(pid), Instant::now());
    for agent in &agents {
        let out = dsh_tests::dshctl_at(socket, &["prompt", "--agent", agent, "go"]);
        assert!(out.status.success(), "{out:?}");
    }
    let total = (steps * turns) as f64;
    let figures = (
        (dsh_tests::bench::cpu_us(pid) - cpu) / total,
        wall.elapsed().as_secs_f64() * 1e6 / total,
    );
    // Closed, so every round starts with the same daemon: no agents but those it measures.
    for agent in &agents {
        let out = dsh_tests::dshctl_at(socket, &["agent", "close", agent]);
        assert!(out.status.success(), "{out:?}");
    }
    figures
}
