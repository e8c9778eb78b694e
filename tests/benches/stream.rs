//! Ten clients each following a 10 MB streamed reply through `Agents.Prompt` at once, against one
//! client alone, on the release `dshd` (target: each of the ten within 0.8× of the lone client's
//! throughput, and dshd's memory bounded).
//!
//! The model is the in-process mock OpenAI server, streaming 10 MB of text deltas at a steady
//! pace, as a model produces text (only much faster: [`CHUNK`] bytes every [`EVERY`], about
//! 4 MB/s): the question is whether dshd keeps up with ten streams as it does with one. The same
//! is then done unpaced (the mock writes as fast as it can), where the two cores of this machine
//! are shared by the mock, dshd and the ten clients, to show what bounds it. Throughput is the
//! reply's size over the time from sending the prompt to reading `turn_ended`. Memory: dshd's
//! peak RSS (`VmHWM`, reset before each phase) above its idle RSS, against the bytes the phase's
//! turns hold in their session logs (each agent keeps its log in memory, reply included).
//!
//! Run: `cargo bench -p dsh-tests --bench stream`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::{Duration, Instant};

use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_testkit::{Mock, Reply};
use dsh_tests::bench::{ReleaseDaemon, status_kib};

const REPLY: usize = 10_000_000;
const FRAGMENT: usize = 256;
const CHUNK: usize = 64 * 1024;
const EVERY: Duration = Duration::from_millis(16);
const CLIENTS: usize = 10;
/// Rounds of the lone client (median).
const ALONE: usize = 3;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let metered = || Reply::Metered {
            bytes: REPLY,
            fragment: FRAGMENT,
            chunk: CHUNK,
            every: EVERY,
        };
        let unpaced = || Reply::Huge {
            bytes: REPLY,
            fragment: FRAGMENT,
        };
        // The replies in the order the phases ask for them.
        let mut replies = Vec::new();
        replies.extend((0..ALONE + CLIENTS).map(|_| metered()));
        replies.extend((0..ALONE + CLIENTS).map(|_| unpaced()));
        let mock = Mock::start(replies).await;
        let dir = dsh_tests::private_dir();
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 0\nidle_timeout_ms = 600000\nrequest_timeout_ms = 600000\n",
                mock.base_url
            ),
        )
        .unwrap();
        let daemon = ReleaseDaemon::start_with_env(
            &dir,
            &["--config", config.to_str().unwrap()],
            &[("DEEPSEEK_API_KEY", "sk-bench")],
        );
        let pid = daemon.pid();
        let client = dsh_client::Client::connect(&daemon.socket).await.unwrap();
        let cwd = dir.path().display().to_string();
        for paced in [true, false] {
            let label = if paced { "paced" } else { "unpaced" };
            let idle = status_kib(pid, "VmRSS");
            let mut alone = Vec::new();
            for _ in 0..ALONE {
                let agent = create(&client, &cwd).await;
                alone.push(follow(&client, &agent).await);
                close(&client, &agent).await;
            }
            alone.sort_unstable();
            let alone = alone[ALONE / 2];
            let agents: Vec<String> = {
                let mut agents = Vec::new();
                for _ in 0..CLIENTS {
                    agents.push(create(&client, &cwd).await);
                }
                agents
            };
            let idle_before = status_kib(pid, "VmRSS");
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
            let mut tasks = Vec::new();
            for agent in &agents {
                // One connection per client, as ten editors would have.
                let socket = daemon.socket.clone();
                let agent = agent.clone();
                tasks.push(tokio::spawn(async move {
                    let client = dsh_client::Client::connect(&socket).await.unwrap();
                    follow(&client, &agent).await
                }));
            }
            let mut each = Vec::new();
            for task in tasks {
                each.push(task.await.unwrap());
            }
            let peak = status_kib(pid, "VmHWM");
            for agent in &agents {
                close(&client, agent).await;
            }
            let after = status_kib(pid, "VmRSS");
            tokio::time::sleep(dsh_tests::bench::SETTLE).await;
            let settled = status_kib(pid, "VmRSS");
            let slowest = *each.iter().max().unwrap();
            let worst = alone.as_secs_f64() / slowest.as_secs_f64();
            let mb = REPLY as f64 / 1e6;
            println!(
                "{label}: a {mb:.0} MB reply alone {} ({:.1} MB/s); {CLIENTS} at once: slowest {} ({:.1} MB/s), fastest {}",
                duration(alone),
                mb / alone.as_secs_f64(),
                duration(slowest),
                mb / slowest.as_secs_f64(),
                duration(*each.iter().min().unwrap()),
            );
            let held = (CLIENTS * REPLY) as f64 / 1024.0;
            let above = peak.saturating_sub(idle_before) as f64;
            println!(
                "  dshd RSS: idle {idle} KiB; peak during the {CLIENTS} turns {peak} KiB ({:.0} KiB above the {idle_before} KiB before them, {:.2}x the {held:.0} KiB of replies their logs hold); after closing them {after} KiB, {} s later {settled} KiB ({:.2}x idle)",
                above,
                above / held,
                dsh_tests::bench::SETTLE.as_secs(),
                settled as f64 / idle as f64,
            );
            if paced {
                ratio(
                    &format!("Prompt, {CLIENTS} clients x 10 MB paced stream: slowest / one client"),
                    &format!("{:.1} MB/s", mb / slowest.as_secs_f64()),
                    &format!("{:.1} MB/s", mb / alone.as_secs_f64()),
                    worst,
                    Target::AtLeast(0.8),
                );
                ratio(
                    &format!("Prompt, {CLIENTS} clients x 10 MB: dshd peak RSS above idle / replies held"),
                    &format!("{:.0} MiB", above / 1024.0),
                    &format!("{:.0} MiB", held / 1024.0),
                    above / held,
                    Target::AtMost(3.0),
                );
            } else {
                println!(
                    "  unpaced: slowest of {CLIENTS} / one client {worst:.2} (CPU-bound: the mock, dshd and the clients share two cores)"
                );
            }
        }
        drop(daemon);
    });
}

async fn create(client: &dsh_client::Client, cwd: &str) -> String {
    client
        .agents()
        .create(v1::CreateAgentRequest {
            cwd: cwd.to_owned(),
            model: Some(v1::ModelSpec {
                provider: "openai".into(),
                ..v1::ModelSpec::default()
            }),
            ..v1::CreateAgentRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id
}

async fn close(client: &dsh_client::Client, agent: &str) {
    client
        .agents()
        .close(v1::CloseAgentRequest {
            agent_id: agent.to_owned(),
        })
        .await
        .unwrap();
}

/// Prompts `agent` and reads its turn to the end; the time from the prompt to `turn_ended`.
async fn follow(client: &dsh_client::Client, agent: &str) -> Duration {
    let start = Instant::now();
    let mut stream = client
        .agents()
        .prompt(v1::PromptRequest {
            agent_id: agent.to_owned(),
            text: "say a lot".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut text = 0;
    let mut ended = None;
    while let Some(event) = stream.message().await.unwrap() {
        let data = || serde_json::from_str::<serde_json::Value>(&event.data_json).unwrap();
        match event.r#type.as_str() {
            // The whole reply, as logged (the deltas before it carry the same text).
            "assistant/message" => {
                text += data()["message"]["text"].as_str().unwrap_or_default().len();
            }
            "turn/end" => ended = Some(data()),
            _ => {}
        }
    }
    let elapsed = start.elapsed();
    let ended = ended.expect("the stream ended without turn/end");
    assert_eq!(
        ended["reason"]["kind"], "completed",
        "the turn did not complete"
    );
    assert_eq!(text, REPLY, "the reply arrived incomplete");
    elapsed
}
