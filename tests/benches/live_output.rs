//! What live output costs a turn: a turn of ten bash calls, each printing 1 MB, followed through
//! `Agents.Prompt` with `tool/output` previews (`watch.tool_output = true`, the default) against
//! the same turn without them (`false`: the output reaches the client only in each call's
//! `tool/result`, as before previews existed). Target: with previews within 1.2× the time.
//!
//! Two release dshds, one per setting, prompted alternately; time from sending the prompt to
//! reading `turn/end`, every event read as a client does. The median of [`ROUNDS`] rounds each.
//!
//! Run: `cargo bench -p dsh-tests --bench live_output`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_client::Client;
use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_tests::bench::ReleaseDaemon;
use serde_json::json;
use tokio_stream::StreamExt;

/// Calls in the turn, and what each prints (lines of 100 bytes).
const CALLS: usize = 10;
const BYTES: usize = 1_000_000;
/// Rounds per setting (median), after one warm-up round each.
const ROUNDS: usize = 21;

/// What one followed turn took and brought.
struct Turn {
    took: Duration,
    events: usize,
    preview_bytes: usize,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let command = format!("yes {} | head -c {BYTES}", "x".repeat(99));
    let mut replies: Vec<serde_json::Value> = (0..CALLS)
        .map(|_| json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}))
        .collect();
    replies.push(json!({"text": "done"}));
    let script = json!({ "replies": replies }).to_string();

    let start = |previews: bool| {
        let dir = dsh_tests::private_dir();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("[watch]\ntool_output = {previews}\n")).unwrap();
        let daemon = ReleaseDaemon::start(&dir, &["--config", config.to_str().unwrap()]);
        (dir, daemon)
    };
    let (off_dir, off) = start(false);
    let (on_dir, on) = start(true);
    println!(
        "A turn of {CALLS} bash calls printing {} MB each, followed through Agents.Prompt (release dshd, median of {ROUNDS})",
        BYTES / 1_000_000
    );
    runtime.block_on(async {
        let off_client = Client::connect(off.socket()).await.unwrap();
        let on_client = Client::connect(on.socket()).await.unwrap();
        let mut without = Vec::new();
        let mut with = Vec::new();
        let mut last = None;
        for round in 0..=ROUNDS {
            let a = turn(&off_client, off_dir.path(), &script).await;
            let b = turn(&on_client, on_dir.path(), &script).await;
            if round > 0 {
                without.push(a.took);
                with.push(b.took);
            }
            last = Some((a, b));
        }
        let (a, b) = last.unwrap();
        without.sort();
        with.sort();
        let (off_median, on_median) = (without[ROUNDS / 2], with[ROUNDS / 2]);
        println!(
            "  without previews: {} ({} events)   with: {} ({} events, {} KB of tool/output)",
            duration(off_median),
            a.events,
            duration(on_median),
            b.events,
            b.preview_bytes / 1000
        );
        println!(
            "  rounds without: {}",
            without
                .iter()
                .map(|d| duration(*d))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "  rounds with:    {}",
            with.iter()
                .map(|d| duration(*d))
                .collect::<Vec<_>>()
                .join(", ")
        );
        ratio(
            "Prompt turn of ten 1 MB outputs, live output / without",
            &duration(on_median),
            &duration(off_median),
            on_median.as_secs_f64() / off_median.as_secs_f64(),
            Target::AtMost(1.2),
        );
    });
}

/// Creates a scripted agent, prompts it and reads its stream to `turn/end`; closes it after.
async fn turn(client: &Client, cwd: &Path, script: &str) -> Turn {
    let mut agents = client.agents();
    let agent = agents
        .create(v1::CreateAgentRequest {
            cwd: cwd.to_string_lossy().into_owned(),
            model: Some(v1::ModelSpec {
                provider: "scripted".into(),
                model: String::new(),
                script_json: script.to_owned(),
                reasoning_effort: String::new(),
            }),
            ..v1::CreateAgentRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id;
    let started = Instant::now();
    let mut stream = agents
        .prompt(v1::PromptRequest {
            agent_id: agent.clone(),
            text: "go".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let (mut events, mut preview_bytes) = (0, 0);
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        events += 1;
        if event.r#type == "tool/output" {
            preview_bytes += event.data_json.len();
        }
        if event.r#type == "turn/end" && event.session_id == agent {
            break;
        }
    }
    let took = started.elapsed();
    agents
        .close(v1::CloseAgentRequest { agent_id: agent })
        .await
        .unwrap();
    Turn {
        took,
        events,
        preview_bytes,
    }
}
