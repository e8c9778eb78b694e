//! MCP tool calls and idle servers, against the targets of issue 43, on the release `dshd` with
//! the reference server (`@modelcontextprotocol/server-everything`, `echo`, over stdio):
//!
//! 1. **a call through dsh**: a turn whose one call is `mcp__everything__echo`, less a turn whose
//!    one call is `update_plan` (a tool that does nothing: the turn's own cost, measured in the
//!    same rounds), against the same `echo` call from a bare `rmcp` client to its own instance of
//!    the same server (the floor). Target: at most 1.3×.
//! 2. **idle servers**: dshd's RSS with one live agent whose two servers run, against a dshd
//!    without servers after the same turn (one `bash true` call, so the first process start's
//!    own cost is on both sides). Target: at most 2 MiB more anonymous memory (what the servers
//!    hold); the whole RSS difference, which adds the MCP client's code pages paged in at first
//!    use (about 1.8 MiB, once, whatever the number of servers), is reported.
//!
//! Rounds interleave the turns so drift hits all alike; the first [`WARMUP`] are not counted. It
//! asserts nothing about time.
//!
//! Run: `cargo bench -p dsh-tests --bench mcp`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_testkit::bench::{self, Target};
use dsh_tests::bench::{
    ReleaseDaemon, p50_p90, scripted_agent, settled_rss_kib, status_kib, timed_turn,
};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};

const ROUNDS: usize = 200;
const WARMUP: usize = 10;

fn main() {
    let everything = dsh_tests::mcp::everything();
    let server = |name: &str| {
        format!(
            "[mcp_servers.{name}]\ncommand = {:?}\nargs = [\"stdio\"]\n",
            everything.display().to_string()
        )
    };
    let dir = dsh_tests::private_dir();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = dir.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!("{}{}", server("everything"), server("second")),
    )
    .unwrap();
    let daemon = ReleaseDaemon::start(&dir, &["--config", config.to_str().unwrap()]);
    let plain_dir = dsh_tests::private_dir();
    let plain = ReleaseDaemon::start(&plain_dir, &[]);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let turns = ROUNDS + WARMUP + 1;
    let call = |name: &str, arguments: Value| {
        vec![
            json!({"tool_calls": [{"id": "c", "name": name, "arguments": arguments}]}),
            json!({"text": "ok"}),
        ]
    };
    let repeat =
        |replies: Vec<Value>| -> Vec<Value> { (0..turns).flat_map(|_| replies.clone()).collect() };
    let echoes = repeat(call("mcp__everything__echo", json!({"message": "bench"})));
    let plans = repeat(call(
        "update_plan",
        json!({"plan": [{"step": "bench", "status": "in_progress"}]}),
    ));
    let (mut through, mut turn_only, mut bare) = runtime.block_on(async {
        let client = dsh_client::Client::connect(daemon.socket()).await.unwrap();
        let mcp = scripted_agent(&client, &work, echoes, None).await;
        let noop = scripted_agent(&client, &work, plans, None).await;
        // The first turns start the agents' servers: not counted.
        timed_turn(&client, &mcp).await;
        timed_turn(&client, &noop).await;
        let bare_client = Bare::start(&everything).await;
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS + WARMUP {
            let (x, y, z) = (
                timed_turn(&client, &mcp).await,
                timed_turn(&client, &noop).await,
                bare_client.echo().await,
            );
            if round >= WARMUP {
                a.push(x);
                b.push(y);
                c.push(z);
            }
        }
        (a, b, c)
    });
    let (t50, t90) = p50_p90(&mut through);
    let (n50, n90) = p50_p90(&mut turn_only);
    let (b50, b90) = p50_p90(&mut bare);
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!("MCP echo of the reference server over stdio: {ROUNDS} rounds, interleaved");
    for (name, p50, p90) in [
        ("turn with the MCP call", t50, t90),
        ("turn with update_plan", n50, n90),
        ("bare rmcp client call", b50, b90),
    ] {
        println!(
            "    {name:<24} p50 {:>8.1} µs   p90 {:>8.1} µs",
            micros(p50),
            micros(p90)
        );
    }
    let cost = micros(t50) - micros(n50);
    println!("  the call's cost in dsh: the p50 difference of the two turns, {cost:.1} µs");
    bench::ratio(
        "mcp: an MCP call's cost in a turn / the same call from a bare rmcp client",
        &format!("p50 {cost:.1} µs"),
        &format!("p50 {:.1} µs", micros(b50)),
        cost / micros(b50),
        Target::AtMost(1.3),
    );

    // Idle servers: one live agent after one turn, with no servers, one and two.
    let rss = |daemon: &ReleaseDaemon, work: &Path| {
        runtime.block_on(async {
            let client = dsh_client::Client::connect(daemon.socket()).await.unwrap();
            // A command too, so the first process start's own cost is on both sides.
            let run = json!({"command": "true"});
            let id = scripted_agent(&client, work, call("bash", run), None).await;
            timed_turn(&client, &id).await;
        });
        let rss = settled_rss_kib(daemon.pid());
        let (anon, file) = (
            status_kib(daemon.pid(), "RssAnon"),
            status_kib(daemon.pid(), "RssFile"),
        );
        println!("    RSS {rss} KiB: anonymous {anon} KiB, file-backed (code) {file} KiB");
        (rss, anon)
    };
    let plain_work = plain_dir.path().join("work");
    std::fs::create_dir_all(&plain_work).unwrap();
    // Fresh daemons, each with one agent and one turn: the bench agents above are not counted.
    let with_servers = |config: String| {
        let dir = dsh_tests::private_dir();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let file = dir.path().join("mcp.toml");
        std::fs::write(&file, config).unwrap();
        let daemon = ReleaseDaemon::start(&dir, &["--config", file.to_str().unwrap()]);
        let kib = rss(&daemon, &work);
        drop(daemon);
        kib
    };
    let (without, without_anon) = rss(&plain, &plain_work);
    let (with_one, _) = with_servers(server("everything"));
    let (with_two, with_two_anon) =
        with_servers(format!("{}{}", server("everything"), server("second")));
    let more = with_two.saturating_sub(without);
    let more_anon = with_two_anon.saturating_sub(without_anon);
    let second = with_two.saturating_sub(with_one);
    println!(
        "dshd RSS after one agent's turn, settled: no servers {without} KiB, one server {with_one} KiB, two {with_two} KiB"
    );
    println!(
        "  two idle servers +{more} KiB, of it anonymous (data) +{more_anon} KiB; the second server alone +{second} KiB"
    );
    // The target is on what the servers hold (anonymous memory); the code pages their first use
    // brings in are dshd's own binary, paged in once, whatever the number of servers.
    bench::ratio(
        "mcp: dshd anonymous RSS, one agent with two idle servers, above the same without servers, / 2 MiB",
        &format!("+{more_anon} KiB"),
        "2048 KiB (target)",
        more_anon as f64 / 2048.0,
        Target::AtMost(1.0),
    );
    bench::ratio(
        "mcp: dshd RSS (code pages too), one agent with two idle servers, above the same without servers, / 2 MiB",
        &format!("+{more} KiB"),
        "2048 KiB",
        more as f64 / 2048.0,
        Target::Reported,
    );
}

/// A bare `rmcp` client of its own instance of the server.
struct Bare {
    service: rmcp::service::RunningService<rmcp::RoleClient, ()>,
    _child: tokio::process::Child,
}

impl Bare {
    async fn start(program: &Path) -> Self {
        let mut child = tokio::process::Command::new(program)
            .arg("stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let service = ().serve(AsyncRwTransport::new_client(stdout, stdin)).await.unwrap();
        Self {
            service,
            _child: child,
        }
    }

    async fn echo(&self) -> Duration {
        let started = Instant::now();
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = Some(json!({"message": "bench"}).as_object().unwrap().clone());
        let result = self.service.call_tool(params).await.unwrap();
        assert_ne!(result.is_error, Some(true));
        started.elapsed()
    }
}
