//! The cost of dispatching one hook, against the floor of spawning the same script directly.
//!
//! In process, on one multi-threaded tokio runtime (as in `dshd`):
//!
//! - **hook**: `Hooks::run` of a PreToolUse event whose single Claude Code handler is
//!   `cat > /dev/null` — matcher, payload (with the transcript path from a JSONL backend's
//!   `locate`), the executor (scrubbed environment, own process group, pipes, timeout), decoding,
//!   merging and the `hook/invoked`/`hook/result` records;
//! - **direct**: `tokio::process::Command::new("bash").arg("-c").arg("cat > /dev/null")` with the
//!   very payload and environment the hook got (both captured from a real hook run first), the
//!   same working directory, the payload written to stdin and stdout/stderr collected.
//!
//! The two are interleaved (alternating which goes first) so drift on a busy machine hits both
//! alike. Prints medians, p90s and the ratio of medians (target: hook ≤ 1.5 × direct, restated for the
//! launcher every command starts through: docs/BENCHMARKS.md). It
//! asserts nothing about time.
//!
//! Run: `cargo bench -p dsh-tests --bench hooks` (release build). `HOOK_BENCH_RUNS` overrides
//! the number of measured runs of each (default 400).

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{
    EventData, ExecConfig, Executor, HookContext, HookEvent, HookSettings, Hooks, JsonlBackend,
    Launcher, OnBlockingPool, PersistenceHandle, SandboxPolicy, SessionHeader, SessionId,
};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

const WARMUP: usize = 30;
const COMMAND: &str = "cat > /dev/null";
/// The target, as restated in docs/BENCHMARKS.md ("Targets restated, and why").
const TARGET: f64 = 1.5;

fn main() {
    let runs: usize = std::env::var("HOOK_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let tmp = dsh_tests::private_dir();
    let cwd = tmp.path().join("proj");
    std::fs::create_dir(&cwd).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(tmp.path(), &cwd, runs));
}

/// Hooks with one Claude Code PreToolUse handler running `command`.
fn hooks(dir: &Path, name: &str, command: &str) -> Hooks {
    let file = dir.join(format!("{name}.json"));
    let config = json!({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}
    ]}});
    std::fs::write(&file, config.to_string()).unwrap();
    let settings = HookSettings {
        claude_code: vec![file],
        ..HookSettings::default()
    };
    let executor = Executor::new(ExecConfig {
        spill_dir: dir.join("spill"),
        launcher: launcher(),
        ..ExecConfig::default()
    })
    .unwrap();
    let backend = JsonlBackend::new(dir.join("sessions")).unwrap();
    Hooks::new(
        settings,
        Arc::new(executor),
        Arc::new(PersistenceHandle::new(Arc::new(OnBlockingPool::new(
            backend,
        )))),
    )
}

/// The `dsh-launch` binary as the launcher, as dshd runs an installed one. The default, this
/// process's own binary, is dshd in the daemon; here it would be this bench, which would start
/// itself again instead of the hook.
fn launcher() -> Launcher {
    static LAUNCHER: std::sync::OnceLock<Launcher> = std::sync::OnceLock::new();
    LAUNCHER
        .get_or_init(|| {
            let bin = dsh_tests::cargo_build("dsh-launch", "dsh-launch", true);
            Launcher::installed(&bin).unwrap()
        })
        .clone()
}

fn event() -> HookEvent {
    HookEvent::PreToolUse {
        tool_name: "bash".into(),
        tool_input: json!({"command": "cargo test -p dsh-tests --test hooks", "description": "run the tests"}),
        tool_use_id: "call-1".into(),
    }
}

async fn bench(dir: &Path, cwd: &Path, runs: usize) {
    let ctx = HookContext {
        header: Arc::new(SessionHeader::new(
            SessionId::parse("bench-session").unwrap(),
            cwd.to_path_buf(),
            1,
        )),
        subagent: None,
        turn: Some(1),
        model: "bench".into(),
        effort: None,
        sandbox: SandboxPolicy::UNCONFINED,
        cancel: CancellationToken::new(),
        background: None,
        events: None,
    };

    // One real hook run captures the exact stdin and environment a hook gets.
    let payload_file = dir.join("payload.json");
    let env_file = dir.join("environ");
    let capture = hooks(
        dir,
        "capture",
        &format!(
            "cat > '{}'; cat /proc/$$/environ > '{}'",
            payload_file.display(),
            env_file.display()
        ),
    );
    assert_passed(&capture.run(&ctx, event()).await);
    let payload = std::fs::read(&payload_file).unwrap();
    let env: Vec<(OsString, OsString)> = std::fs::read(&env_file)
        .unwrap()
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let at = kv.iter().position(|b| *b == b'=').unwrap();
            (
                OsString::from_vec(kv[..at].to_vec()),
                OsString::from_vec(kv[at + 1..].to_vec()),
            )
        })
        .collect();

    let hooks = hooks(dir, "bench", COMMAND);
    let hook = || async {
        let t = Instant::now();
        let run = hooks.run(&ctx, event()).await;
        let elapsed = t.elapsed();
        assert_passed(&run);
        elapsed
    };
    let direct = || async {
        let t = Instant::now();
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(COMMAND)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&payload).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let elapsed = t.elapsed();
        assert!(out.status.success());
        elapsed
    };

    for _ in 0..WARMUP {
        hook().await;
        direct().await;
    }
    let (mut hook_times, mut direct_times) = (Vec::new(), Vec::new());
    for i in 0..runs {
        if i % 2 == 0 {
            hook_times.push(hook().await);
            direct_times.push(direct().await);
        } else {
            direct_times.push(direct().await);
            hook_times.push(hook().await);
        }
    }

    let (h50, h90) = stats(&mut hook_times);
    let (d50, d90) = stats(&mut direct_times);
    let ratio = h50.as_secs_f64() / d50.as_secs_f64();
    println!(
        "hook dispatch vs direct spawn: {runs} runs each (after {WARMUP} warm-up), payload {} bytes, \
         environment {} variables",
        payload.len(),
        env.len()
    );
    println!(
        "  direct bash -c '{COMMAND}' (floor): median {:>8.3} ms   p90 {:>8.3} ms",
        ms(d50),
        ms(d90)
    );
    println!(
        "  Hooks::run, one handler:            median {:>8.3} ms   p90 {:>8.3} ms",
        ms(h50),
        ms(h90)
    );
    println!(
        "  ratio of medians {ratio:.3} (p90s {:.3}); target <= {TARGET}: {}",
        h90.as_secs_f64() / d90.as_secs_f64(),
        if ratio <= TARGET { "met" } else { "NOT met" }
    );
    dsh_testkit::bench::ratio(
        "Hooks::run, one handler / direct spawn",
        &format!("median {:.2} ms", ms(h50)),
        &format!("median {:.2} ms", ms(d50)),
        ratio,
        dsh_testkit::bench::Target::AtMost(TARGET),
    );
}

/// The run had one handler, which exited 0 without deciding anything.
fn assert_passed(run: &dsh_core::HookRun) {
    let decisions: Vec<(&str, Option<i32>)> = run
        .records
        .iter()
        .filter_map(|r| match r {
            EventData::HookResult {
                decision,
                exit_code,
                ..
            } => Some((decision.as_str(), *exit_code)),
            _ => None,
        })
        .collect();
    assert_eq!(decisions, [("pass", Some(0))], "{:?}", run.records);
}

/// Median and 90th percentile.
fn stats(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
