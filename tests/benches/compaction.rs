//! Compaction of a long session, against issue 44's targets, on the release `dshd` with the
//! `openai` provider pointed at the repository's mock API (in this process):
//!
//! 1. **one compaction** (`dshctl compact`) of a 100-turn session (each turn one `bash` call
//!    printing 2 KB, then an answer): its wall time against the floor of one request of the same
//!    size to the same mock (the summary request's own body, sent again over a fresh
//!    connection), and dshd's peak RSS during it (`VmHWM`, reset just before) against its RSS
//!    before. Reported: what dshd adds to the one request it cannot avoid.
//! 2. **a step after compaction**: dshd's CPU per step of a 60-step turn just before the
//!    compaction and of one just after it. Target: at most 1.1×.
//!
//! It asserts nothing about time.
//!
//! Run: `cargo bench -p dsh-tests --bench compaction`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dsh_testkit::bench::{self, Target};
use dsh_testkit::{
    DONE, End, Mock, Recorded, Reply, finish, text_delta, tool_call_stream, usage_event,
};
use dsh_tests::bench::{ReleaseDaemon, status_kib};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Turns of the session compacted.
const TURNS: usize = 100;

/// Steps of the turns whose CPU per step is compared.
const STEPS: usize = 60;

/// Whether `request` is dsh's summary request.
fn is_summary(request: &Recorded) -> bool {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .is_some_and(|t| t.contains("Compact the conversation so far"))
}

/// A model: after a prompt or a steer, one `bash` call printing 2 KB (or `STEPS - 1` of them
/// while `long` is set); after a call's result, the answer. Every reply reports its request's
/// size as prompt tokens.
fn model(long: Arc<AtomicBool>) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    move |request| {
        let messages = request.body["messages"].as_array().unwrap();
        let results_since_user = messages
            .iter()
            .rev()
            .take_while(|m| m["role"] != "user")
            .filter(|m| m["role"] == "tool")
            .count();
        let mut pieces = if is_summary(request) {
            vec![
                text_delta("Summary: a hundred turns each printed a block."),
                finish("stop"),
            ]
        } else if results_since_user
            < if long.load(Ordering::SeqCst) {
                STEPS - 1
            } else {
                1
            }
        {
            let command = json!({"command": "head -c 2000 /dev/zero | tr '\\0' x"}).to_string();
            tool_call_stream("c", "bash", &[&command])
        } else {
            vec![text_delta("ok"), finish("stop")]
        };
        pieces.push(usage_event(request.tokens(), 10, 0));
        pieces.push(DONE.into());
        Reply::Stream {
            pieces,
            end: End::Complete,
        }
    }
}

fn dshctl(daemon: &ReleaseDaemon, args: &[&str]) -> std::process::Output {
    let out = dsh_tests::dshctl_at(&daemon.socket, args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    out
}

/// dshd's CPU per step of one turn of `STEPS` steps.
fn long_turn(daemon: &ReleaseDaemon, agent: &str, long: &AtomicBool) -> f64 {
    long.store(true, Ordering::SeqCst);
    let before = dsh_tests::bench::cpu_us(daemon.pid());
    dshctl(daemon, &["prompt", "--agent", agent, "a long one"]);
    long.store(false, Ordering::SeqCst);
    (dsh_tests::bench::cpu_us(daemon.pid()) - before) / STEPS as f64
}

/// The time one request with `body` takes the mock at `base_url`, over a fresh connection.
async fn one_request(base_url: &str, body: &[u8]) -> Duration {
    let address = base_url.trim_start_matches("http://");
    let started = Instant::now();
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    started.elapsed()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let long = Arc::new(AtomicBool::new(false));
    let mock = runtime.block_on(Mock::start_with(model(long.clone())));
    let dir = dsh_tests::private_dir();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\ncontext_window = 10000000\n",
            mock.base_url
        ),
    )
    .unwrap();
    let daemon = ReleaseDaemon::start_with_env(
        &dir,
        &["--config", config.to_str().unwrap()],
        &[("DEEPSEEK_API_KEY", "sk-bench")],
    );
    let out = dshctl(
        &daemon,
        &[
            "--json",
            "agent",
            "new",
            "--model",
            "openai",
            "--cwd",
            work.to_str().unwrap(),
        ],
    );
    let agent = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["agent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for turn in 0..TURNS {
        dshctl(
            &daemon,
            &["prompt", "--agent", &agent, &format!("turn {turn}")],
        );
    }
    let before_step = long_turn(&daemon, &agent, &long);

    let pid = daemon.pid();
    let rss_before = status_kib(pid, "VmRSS");
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let started = Instant::now();
    dshctl(&daemon, &["compact", &agent]);
    let compaction = started.elapsed();
    let peak = status_kib(pid, "VmHWM");
    let summary = mock
        .requests()
        .into_iter()
        .rfind(is_summary)
        .expect("a summary request");
    let body = serde_json::to_vec(&summary.body).unwrap();
    let floor = (0..5)
        .map(|_| runtime.block_on(one_request(&mock.base_url, &body)))
        .min()
        .unwrap();
    let after_step = long_turn(&daemon, &agent, &long);

    println!(
        "compaction of a {TURNS}-turn session ({} KiB summary request), release dshd, mock API",
        body.len() / 1024
    );
    let ratio = compaction.as_secs_f64() / floor.as_secs_f64();
    println!(
        "  dshctl compact {}   one request of the same size {}   {ratio:.1}x (reported)",
        bench::duration(compaction),
        bench::duration(floor)
    );
    bench::ratio(
        "compaction of a 100-turn session / one mock request of its size",
        &bench::duration(compaction),
        &bench::duration(floor),
        ratio,
        Target::Reported,
    );
    println!(
        "  dshd RSS before {rss_before} KiB, peak during the compaction {peak} KiB (+{} KiB)",
        peak.saturating_sub(rss_before)
    );
    let step_ratio = after_step / before_step;
    println!(
        "  dshd CPU per step: before {before_step:.0} us, after {after_step:.0} us: {step_ratio:.2}x (target <= 1.1x: {})",
        if step_ratio <= 1.1 { "met" } else { "MISSED" }
    );
    bench::ratio(
        "dshd CPU per step after a compaction / before",
        &format!("{after_step:.0} us"),
        &format!("{before_step:.0} us"),
        step_ratio,
        Target::AtMost(1.1),
    );
}
