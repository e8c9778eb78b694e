//! dshd's memory with many live agents, and whether closing them gives it back: the release
//! `dshd`'s RSS (`VmRSS`) idle, with 1,000 live idle agents (scripted, each created over the
//! socket and never prompted), and after closing them all; then after the largest fan-out dshd
//! admits (one step of 1,100 `spawn_agent` calls: 1,024 live agents, the rest refused) and closing
//! its parent. Targets: at most 64 KiB per live agent above the idle figure; after closing, at most
//! 2 × the idle figure, both times.
//!
//! Run: `cargo bench -p dsh-tests --bench memory`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use dsh_proto::v1;
use dsh_tests::bench::rss_kib;
use serde_json::json;
use tokio_stream::StreamExt;

const AGENTS: usize = 1_000;
const CHILDREN: usize = 1_100;

fn main() {
    let dir = dsh_tests::private_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let daemon = dsh_tests::bench::ReleaseDaemon::start(&dir, &[]);
    let socket = daemon.socket.clone();
    let pid = daemon.pid();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (idle, live, closed) = runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let mut agents = client.agents();
        // One create and close first, so what the first agent ever allocates (lazy statics, the
        // blocking pool) counts in the idle figure rather than per agent.
        let warm = create(&mut agents, &work).await;
        close(&mut agents, warm).await;
        let idle = rss_kib(pid);
        let mut ids = Vec::with_capacity(AGENTS);
        for _ in 0..AGENTS {
            ids.push(create(&mut agents, &work).await);
        }
        let live = rss_kib(pid);
        for id in ids {
            close(&mut agents, id).await;
        }
        (idle, live, rss_kib(pid))
    });
    let settled = dsh_tests::bench::settled_rss_kib(pid);
    let per_agent = (live.saturating_sub(idle)) as f64 / AGENTS as f64;
    let back = closed as f64 / idle as f64;
    println!("dshd RSS with {AGENTS} live idle agents (release dshd, scripted agents)");
    println!(
        "  idle {idle} KiB; {AGENTS} live {live} KiB; all closed {closed} KiB, {} s later {settled} KiB",
        dsh_tests::bench::SETTLE.as_secs()
    );
    println!(
        "  per live agent {per_agent:.1} KiB (target <= 64: {}); closed / idle {back:.2}x (target <= 2: {})",
        if per_agent <= 64.0 { "met" } else { "MISSED" },
        if back <= 2.0 { "met" } else { "MISSED" }
    );
    dsh_testkit::bench::ratio(
        "RSS per live idle agent / 64 KiB",
        &format!("{per_agent:.1} KiB"),
        "64 KiB (target)",
        per_agent / 64.0,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
    dsh_testkit::bench::ratio(
        &format!("RSS after closing {AGENTS} agents / idle"),
        &format!("{closed} KiB"),
        &format!("{idle} KiB"),
        back,
        dsh_testkit::bench::Target::AtMost(2.0),
    );

    let fanned = runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let mut agents = client.agents();
        let calls: Vec<_> = (0..CHILDREN)
            .map(|k| json!({"name": "spawn_agent", "arguments": {"prompt": format!("task {k}")}, "child_script": {"replies": [{"text": "done"}]}}))
            .collect();
        let script = json!({"replies": [{"tool_calls": calls}, {"text": "parent done"}]});
        let parent = agents
            .create(v1::CreateAgentRequest {
                cwd: work.display().to_string(),
                model: Some(v1::ModelSpec {
                    provider: "scripted".into(),
                    script_json: script.to_string(),
                    reasoning_effort: String::new(),
                    ..v1::ModelSpec::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .agent_id;
        let mut events = agents
            .prompt(v1::PromptRequest {
                agent_id: parent.clone(),
                text: "fan out".into(),
            })
            .await
            .unwrap()
            .into_inner();
        while let Some(event) = events.next().await {
            event.unwrap();
        }
        let peak = rss_kib(pid);
        close(&mut agents, parent).await;
        peak
    });
    let settled_fan_out = dsh_tests::bench::settled_rss_kib(pid);
    let back = settled_fan_out as f64 / idle as f64;
    println!(
        "  {CHILDREN}-children fan-out {fanned} KiB; parent closed, {} s later {settled_fan_out} KiB; closed / idle {back:.2}x (target <= 2: {})",
        dsh_tests::bench::SETTLE.as_secs(),
        if back <= 2.0 { "met" } else { "MISSED" }
    );
    dsh_testkit::bench::ratio(
        &format!("RSS after closing a {CHILDREN}-children fan-out / idle"),
        &format!("{settled_fan_out} KiB"),
        &format!("{idle} KiB"),
        back,
        dsh_testkit::bench::Target::AtMost(2.0),
    );
}

async fn create(
    agents: &mut v1::agents_client::AgentsClient<tonic::transport::Channel>,
    work: &std::path::Path,
) -> String {
    agents
        .create(v1::CreateAgentRequest {
            sandbox: None,
            cwd: work.display().to_string(),
            model: Some(v1::ModelSpec {
                provider: "scripted".into(),
                ..v1::ModelSpec::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id
}

async fn close(
    agents: &mut v1::agents_client::AgentsClient<tonic::transport::Channel>,
    id: String,
) {
    agents
        .close(v1::CloseAgentRequest { agent_id: id })
        .await
        .unwrap();
}
