//! A client that stops reading while the model streams a huge reply: dshd's memory stays bounded
//! (the turn's updates wait in a bounded feed, logged events are read from the session log, and
//! streamed text beyond a budget is skipped), the turn runs to its end meanwhile, and the client
//! gets the whole turn once it reads again.
//!
//! Memory is asserted with the kernel's own peak: `VmHWM` of dshd, so no moment between samples
//! is missed. It is the peak since dshd started (resetting it through `/proc/<pid>/clear_refs`
//! needs root: dshd is non-dumpable, so its `/proc` files are root's), so each bound holds for
//! everything before its phase as well, which is at least as strict.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_proto::v1;
use dsh_testkit::{Mock, Reply, huge_text, ok_stream};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::Value;

/// The reply: 50 MB of text.
const REPLY_BYTES: usize = 50_000_000;
/// Streamed in fragments of this many bytes (about 200,000 stream events).
const FRAGMENT: usize = 256;
/// How long the client does not read, at least (and until the turn is over on dshd's side).
const PAUSE: Duration = Duration::from_secs(30);

const MIB: u64 = 1024 * 1024;
/// The bound on dshd's peak RSS above its idle figure while the client does not read. The session
/// log holds the reply once (47.7 MiB: it is in memory for the agent's life); the checkpoint
/// writes each event straight to the file, so it adds no copy of it. The reply's assembly buffer
/// doubles as the text arrives, and jemalloc moves a large buffer by copying, so for a moment the
/// old 32 MiB and its copy coexist, and the old one's pages go back only after jemalloc's 1 s
/// decay (at worst 47.7 + 32 MiB, plus the runtime's own): 70.7 and 76.7 MiB measured. Everything
/// else, the waiting updates included, is bounded by constants (1 MiB of pending text). Before,
/// the turn also copied its answer out of the log, for a Stop payload nobody read and for an
/// outcome the RPC dropped (found with heaptrack; see `git log -p docs/BENCHMARKS.md`): 96.5–97.5 MiB, so this
/// bound fails on that copy. Before that, when the checkpoint serialised the batch into a growing
/// buffer, the reply was held three times (144.5–145.3 MiB); before the feed was bounded, 315 MiB.
const PAUSE_BOUND: u64 = 90 * MIB;
/// The bound while the client reads the rest. The reply goes out once, in the
/// `assistant/message` event (`turn/end` names it by seq): besides the log's copy, the event's
/// data serialised as JSON and its encoded frame exist together, and the frame may still sit in
/// the HTTP/2 send buffer. Measured before protocol v2 (the reply sent twice): 193 MiB.
const READ_BOUND: u64 = 256 * MIB;

/// A field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad line {line:?}"));
    kib * 1024
}

fn daemon(mock: &Mock) -> TestDaemon {
    TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 0\nidle_timeout_ms = 600000\nrequest_timeout_ms = 600000\n",
            mock.base_url
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
        ..DaemonSpec::default()
    })
}

async fn prompt(
    client: &dsh_client::Client,
    agent: &str,
    text: &str,
) -> tonic::Streaming<v1::Event> {
    client
        .agents()
        .prompt(v1::PromptRequest {
            agent_id: agent.to_owned(),
            text: text.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn is_idle(client: &dsh_client::Client, agent: &str) -> bool {
    let info = client
        .agents()
        .get(v1::GetAgentRequest {
            agent_id: agent.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    info.state == v1::AgentState::Idle as i32
}

/// The assistant text of the session's last `assistant/message`, read from its JSONL file.
fn logged_reply(home: &Path, agent: &str) -> String {
    let mut found = None;
    for entry in walk(&home.join("sessions")) {
        if entry.to_string_lossy().contains(agent) {
            found = Some(entry);
        }
    }
    let path = found.unwrap_or_else(|| panic!("no log of {agent} under {}", home.display()));
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("\"type\":\"assistant/message\""))
        .expect("no assistant/message in the log");
    let value: Value = serde_json::from_str(line).unwrap();
    value["data"]["message"]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Slow (at least `PAUSE`, 30 s): the pause is real time, as dshd is a real process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_during_a_50_mb_reply_keeps_dshd_bounded() {
    let mock = Mock::start(vec![
        ok_stream("warm"),
        Reply::Huge {
            bytes: REPLY_BYTES,
            fragment: FRAGMENT,
        },
    ])
    .await;
    let daemon = daemon(&mock);
    let pid = daemon.child.id();
    let client = daemon.client().await;
    let agent = client
        .agents()
        .create(v1::CreateAgentRequest {
            sandbox: None,
            cwd: daemon.dir.path().to_str().unwrap().to_owned(),
            model: Some(v1::ModelSpec {
                provider: "openai".into(),
                ..v1::ModelSpec::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id;

    // A first, small turn: every code path of a turn has run once before the idle figure.
    let mut warm = prompt(&client, &agent, "warm up").await;
    while warm.message().await.unwrap().is_some() {}
    let idle = status_bytes(pid, "VmRSS");

    // Start the big turn and read until the model is streaming.
    let mut stream = prompt(&client, &agent, "say a lot").await;
    loop {
        let message = stream.message().await.unwrap().expect("stream ended early");
        if message.r#type == "text/delta" {
            break;
        }
    }

    // Stop reading for at least PAUSE, and until dshd has finished the turn (on a slow machine
    // 50 MB may take longer than the pause): the whole reply streams while nobody reads.
    let paused = Instant::now();
    loop {
        if paused.elapsed() >= PAUSE && is_idle(&client, &agent).await {
            break;
        }
        assert!(
            paused.elapsed() < Duration::from_secs(600),
            "the turn did not finish while the client was not reading; log:\n{}",
            daemon.log_text()
        );
        // Polling an observable state (the agent's), not waiting out a race.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pause_peak = status_bytes(pid, "VmHWM");

    // Read the rest of the turn.
    // (offset, text) of each delta; (seq, text) of the assistant message; the turn's end.
    let mut deltas: Vec<(u64, String)> = Vec::new();
    let mut assistant = None;
    let mut ended = None;
    while let Some(message) = stream.message().await.unwrap() {
        let mut data: Value = serde_json::from_str(&message.data_json).unwrap();
        match message.r#type.as_str() {
            "text/delta" => deltas.push((
                data["offset"].as_u64().unwrap(),
                data["text"].as_str().unwrap().to_owned(),
            )),
            "assistant/message" => {
                let text = data["message"]["text"].take();
                assistant = Some((message.seq.unwrap(), text.as_str().unwrap().to_owned()));
            }
            "turn/end" => ended = Some(data),
            _ => {}
        }
    }
    let read_peak = status_bytes(pid, "VmHWM");
    eprintln!(
        "dshd RSS: idle {:.1} MiB; peak above idle by the end of the pause {:.1} MiB (bound {} MiB), once the client had read the rest {:.1} MiB (bound {} MiB)",
        idle as f64 / MIB as f64,
        pause_peak.saturating_sub(idle) as f64 / MIB as f64,
        PAUSE_BOUND / MIB,
        read_peak.saturating_sub(idle) as f64 / MIB as f64,
        READ_BOUND / MIB,
    );

    let expected = huge_text(REPLY_BYTES, FRAGMENT);
    let ended = ended.expect("no turn/end");
    assert_eq!(ended["reason"]["kind"], "completed", "{ended}");
    let (seq, assistant) = assistant.expect("no assistant/message");
    assert_eq!(ended["answerSeq"], seq, "turn/end does not name the reply");
    assert!(assistant == expected, "assistant/message is not the reply");
    // Every delta the client got is the reply's text at its offset; the ones that waited were
    // merged and the rest skipped, so far fewer bytes than the reply arrived as deltas.
    let mut delta_bytes = 0;
    for (offset, text) in &deltas {
        let at = usize::try_from(*offset).unwrap();
        assert!(
            expected.get(at..at + text.len()) == Some(text.as_str()),
            "a delta at offset {at} is not the reply's text there"
        );
        delta_bytes += text.len();
    }
    assert!(
        delta_bytes < REPLY_BYTES / 2,
        "{delta_bytes} bytes of deltas reached a client that did not read"
    );
    assert!(logged_reply(&daemon.home, &agent) == expected);

    assert!(
        pause_peak.saturating_sub(idle) < PAUSE_BOUND,
        "dshd grew by {} MiB while the client did not read (bound {} MiB)",
        pause_peak.saturating_sub(idle) / MIB,
        PAUSE_BOUND / MIB
    );
    assert!(
        read_peak.saturating_sub(idle) < READ_BOUND,
        "dshd grew by {} MiB by the time the client had read the rest (bound {} MiB)",
        read_peak.saturating_sub(idle) / MIB,
        READ_BOUND / MIB
    );
}
