//! Following agents live through the real dshd: a second client watching sees what the prompting
//! client sees (children included, each event naming its agent), a watcher joining mid-turn gets
//! the whole history and then live events without gap or duplicate, a watcher that stops reading
//! is lagged without slowing the turn, the same event prints the same JSON line on every stream,
//! and `Status` counts running turns and jobs.
//!
//! Turns are held open deterministically with a bash call blocked on a FIFO the test opens.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use dsh_proto::v1;
use dsh_tests::agents::{PATIENCE, count, finish_prompt, parse_json_lines};
use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin};
use serde_json::{Value, json};

/// A running `dshctl --json watch ARGS`, its stdout read line by line on a thread.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watching {
    fn start(daemon: &TestDaemon, args: &[&str]) -> Self {
        let mut child = Command::new(dshctl_bin())
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["--json", "watch"])
            .args(args)
            .env_remove("DSH_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = dsh_tests::line_channel(stdout);
        Self { child, lines }
    }

    /// Raw lines until (and including) the first for which `last` holds.
    fn until(&self, last: impl Fn(&Value) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .expect("dshctl watch printed nothing more");
            let value: Value = serde_json::from_str(&line).unwrap();
            out.push(line);
            if last(&value) {
                return out;
            }
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The raw lines of logged events (those with a seq).
fn logged(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].is_u64())
        .cloned()
        .collect()
}

fn is_end_of(agent: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["type"] == "turn/end" && e["sessionId"] == agent
}

/// `dshctl --json session events ID`, raw lines.
fn session_lines(daemon: &TestDaemon, id: &str) -> Vec<String> {
    let out = daemon.dshctl(&["--json", "session", "events", id]);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Events grouped by session, each session's in stream order.
fn by_session(events: &[Value]) -> std::collections::BTreeMap<String, Vec<Value>> {
    let mut out = std::collections::BTreeMap::<String, Vec<Value>>::new();
    for e in events {
        out.entry(e["sessionId"].as_str().unwrap().to_owned())
            .or_default()
            .push(e.clone());
    }
    out
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo is missing: apt-get install coreutils");
    assert!(made.success());
}

/// Opens the gate a `cat FIFO` call waits on.
fn open_gate(fifo: &PathBuf) {
    std::fs::write(fifo, "open\n").unwrap();
}

#[test]
fn a_second_client_watching_sees_what_the_prompting_client_sees_children_included() {
    let daemon = TestDaemon::start();
    let child_script = json!({"replies": [
        {"text": "child working", "tool_calls": [{"name": "bash", "arguments": {"command": "echo from the child"}}]},
        {"text": "child done"},
    ]});
    let id = daemon.new_agent(
        &daemon.workdir("family"),
        &json!({"replies": [
            {"text": "delegating", "tool_calls": [
                {"name": "spawn_agent", "arguments": {"prompt": "one"}, "child_script": child_script},
                {"name": "spawn_agent", "arguments": {"prompt": "two"}, "child_script": child_script},
            ]},
            {"text": "both done"},
        ]}),
    );
    // From seq 0, so the watcher misses nothing whenever its registration lands.
    let watching = Watching::start(&daemon, &[&id, "--children", "--from", "0"]);
    let prompted = daemon.prompt(&id, "delegate");
    prompted.assert_completed();
    let watched = watching.until(is_end_of(&id));

    // The same events as the prompting client, each the same JSON. (The children run at the
    // same time, so only each session's own order is fixed, not how sessions interleave.)
    let prompt_logged: Vec<Value> = prompted
        .lines
        .iter()
        .filter(|l| l["seq"].is_u64())
        .cloned()
        .collect();
    assert_eq!(
        by_session(&parse(&logged(&watched))),
        by_session(&prompt_logged),
        "watch and prompt differ"
    );
    let sessions: std::collections::BTreeSet<String> = parse(&watched)
        .iter()
        .map(|e| e["sessionId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        sessions.len(),
        3,
        "the parent and its two children: {sessions:?}"
    );
    for session in &sessions {
        let from_log = session_lines(&daemon, session);
        let watched_here: Vec<String> = logged(&watched)
            .into_iter()
            .filter(|l| serde_json::from_str::<Value>(l).unwrap()["sessionId"] == session.as_str())
            .collect();
        // Each agent's whole log, line for line the same text as `session events` prints.
        assert_eq!(watched_here, from_log, "{session}");
    }
}

#[test]
fn a_watcher_joining_mid_turn_from_seq_0_gets_the_history_then_live_events_once() {
    let daemon = TestDaemon::start();
    let fifo = daemon.dir.path().join("gate");
    mkfifo(&fifo);
    let id = daemon.new_agent(
        &daemon.workdir("mid"),
        &json!({"replies": [
            {"text": "first turn"},
            {"text": "waiting", "tool_calls": [{"name": "bash", "arguments": {"command": format!("cat {}", fifo.display())}}]},
            {"text": "after the gate"},
        ]}),
    );
    daemon.prompt(&id, "one").assert_completed();
    let running = daemon.prompt_in_background(&id, "two");
    daemon.wait_for_events(&id, "the second turn's call running", |e| {
        count(e, "tool/call") == 1
    });
    let watching = Watching::start(&daemon, &[&id, "--from", "0"]);
    // The history so far (replayed), up to the call that holds the turn...
    let before = watching.until(|e| e["type"] == "tool/call");
    // ...then the rest, live.
    open_gate(&fifo);
    let after = watching.until(|e| e["type"] == "turn/end" && e["data"]["turn"] == 2);
    finish_prompt(running).assert_completed();
    let all: Vec<String> = before.into_iter().chain(after).collect();
    let events = parse(&logged(&all));
    let got = seqs(&events);
    assert_eq!(
        got,
        (0..got.len() as u64).collect::<Vec<_>>(),
        "a gap or a duplicate"
    );
    assert_eq!(logged(&all), session_lines(&daemon, &id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_lagged_and_the_turn_is_not_slowed() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[watch]\nmax_pending = 8\n".into()),
        ..DaemonSpec::default()
    });
    // A first reply larger than the client's HTTP/2 receive window (hyper's default: 2 MiB per
    // stream), so a client that does not read stops the watcher's stream there; then steps
    // whose text and events interleave, more entries than the watcher may have waiting.
    let big = "x".repeat(3 * 1024 * 1024);
    let mut replies = vec![json!({"text": big, "tool_calls": [{"name": "no_such_tool"}]})];
    for i in 0..40 {
        replies
            .push(json!({"text": format!("step {i}"), "tool_calls": [{"name": "no_such_tool"}]}));
    }
    replies.push(json!({"text": "done"}));
    let id = daemon.new_agent(&daemon.workdir("lag"), &json!({ "replies": replies }));
    let client = daemon.client().await;
    // Registered once the call returns; from then on nothing is read until the turn is over.
    let mut stalled = client
        .agents()
        .watch(v1::WatchRequest {
            agent_id: id.clone(),
            descendants: false,
            from_seq: None,
            types: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let (socket, agent) = (daemon.socket.clone(), id.clone());
    let prompted = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &agent, "go"])
    })
    .await
    .unwrap();
    // The turn ran to its end while the watcher read nothing.
    assert!(prompted.status.success());
    let prompted = parse_json_lines(&prompted.stdout);
    assert_eq!(prompted.last().unwrap()["type"], "turn/end");
    let stored = daemon.events(&id);
    assert_eq!(
        seqs(&prompted),
        seqs(&stored),
        "the prompt stream missed events"
    );

    let mut watched = Vec::new();
    while let Some(event) = stalled.message().await.unwrap() {
        let data: Value = serde_json::from_str(&event.data_json).unwrap();
        let end = event.r#type == "turn/end";
        watched.push(json!({"type": event.r#type, "seq": event.seq, "data": data}));
        if end {
            break;
        }
    }
    let markers: Vec<&Value> = watched
        .iter()
        .filter(|e| e["type"] == "watch/lagged")
        .collect();
    assert!(!markers.is_empty(), "no lag marker: {:?}", watched.len());
    let from = markers[0]["data"]["fromSeq"].as_u64().unwrap();
    assert!(from < stored.len() as u64);
    // Caught up from the log: every logged event once, in order, none missing.
    assert_eq!(seqs(&watched), seqs(&stored));
    assert_eq!(
        watched
            .iter()
            .filter(|e| e["seq"].is_u64())
            .map(|e| e["data"].clone())
            .collect::<Vec<_>>(),
        stored.iter().map(|e| e["data"].clone()).collect::<Vec<_>>()
    );
}

#[test]
fn status_counts_running_turns_and_jobs_and_session_events_follow_a_live_turn() {
    let daemon = TestDaemon::start();
    let fifo = daemon.dir.path().join("gate");
    mkfifo(&fifo);
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(
        (status["running_turns"].clone(), status["jobs"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(status["model_key_configured"], false);
    let id = daemon.new_agent(
        &daemon.workdir("status"),
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": format!("cat {}", fifo.display())}}]},
            {"text": "done"},
        ]}),
    );
    let running = daemon.prompt_in_background(&id, "hold");
    daemon.wait_for_events(&id, "the call running", |e| count(e, "tool/call") == 1);
    let mut follow = Command::new(dshctl_bin())
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["--json", "session", "events", &id, "--follow"])
        .env_remove("DSH_SOCKET")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let job = daemon.dshctl_json(&["run", "--background", "--", "sleep 600"]);
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(status["running_turns"], 1, "{status}");
    assert_eq!(status["jobs"], 1, "{status}");
    daemon.dshctl_json(&["job", "kill", job["job_id"].as_str().unwrap()]);
    open_gate(&fifo);
    finish_prompt(running).assert_completed();
    // Following the log printed the whole turn, live, and keeps going: stopped by the test.
    let stdout = follow.stdout.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let end = serde_json::from_str::<Value>(&line).unwrap()["type"] == "turn/end";
        lines.push(line);
        if end {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(lines, session_lines(&daemon, &id));
    assert_eq!(daemon.dshctl_json(&["status"])["running_turns"], 0);
}

#[tokio::test]
async fn bad_watch_and_approve_requests_name_their_field_and_unknown_ones_are_not_found() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("bad"), &json!({"replies": []}));
    let mut agents = daemon.client().await.agents();
    let watch = |agent_id: &str, from_seq: Option<u64>| v1::WatchRequest {
        agent_id: agent_id.to_owned(),
        descendants: false,
        from_seq,
        types: Vec::new(),
    };
    let status = agents.watch(watch("", Some(0))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("from_seq: "), "{status:?}");
    let status = agents.watch(watch("nobody", None)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");

    let approve = |call_id: &str, decision: i32| v1::ApproveRequest {
        agent_id: id.clone(),
        call_id: call_id.to_owned(),
        decision,
        reason: String::new(),
        scope: 0,
    };
    let status = agents.approve(approve("c1", 0)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("decision: "), "{status:?}");
    let status = agents.approve(approve("", 1)).await.unwrap_err();
    assert!(status.message().starts_with("call_id: "), "{status:?}");
    let status = agents
        .approve(v1::ApproveRequest {
            scope: v1::ApprovalScope::Session as i32,
            ..approve("c1", v1::ApprovalDecision::Deny as i32)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("scope: "), "{status:?}");
    let status = agents
        .approve(v1::ApproveRequest {
            scope: 7,
            ..approve("c1", 1)
        })
        .await
        .unwrap_err();
    assert!(status.message().starts_with("scope: "), "{status:?}");
    let status = agents.approve(approve("c1", 1)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(
        status
            .message()
            .contains("no approval request waiting for call c1"),
        "{status:?}"
    );

    let status = agents
        .create(v1::CreateAgentRequest {
            cwd: daemon.dir.path().to_str().unwrap().to_owned(),
            approval: 9,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("approval: "), "{status:?}");
}

#[test]
fn with_watch_tool_output_off_a_calls_output_arrives_only_in_its_result() {
    let turn = |config: Option<&str>| {
        let daemon = TestDaemon::start_with(DaemonSpec {
            config: config.map(str::to_owned),
            ..DaemonSpec::default()
        });
        let agent = daemon.new_agent(
            &daemon.workdir("w"),
            &json!({"replies": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": "echo live"}}]},
                {"text": "done"},
            ]}),
        );
        let prompted = daemon.prompt(&agent, "go");
        prompted.assert_completed();
        (
            count(&prompted.lines, "tool/output"),
            prompted.tool_results()[0]["content"].clone(),
        )
    };
    let (previews, result) = turn(None);
    assert!(previews >= 1, "the default streams previews");
    assert_eq!(result, "live\n");
    let (previews, result) = turn(Some("[watch]\ntool_output = false\n"));
    assert_eq!(previews, 0);
    assert_eq!(result, "live\n", "the result is the same");
}

/// A Watch that names event types (a status bar: turns and results only) is sent those types and
/// nothing else, no streamed text included; a malformed pattern names its place in the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_a_type_filter_receives_only_those_types() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"text": "running it", "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
        {"text": "done"},
    ]});
    let id = daemon.new_agent(&daemon.workdir("filter"), &script);
    let mut agents = daemon.client().await.agents();
    let mut filtered = agents
        .watch(v1::WatchRequest {
            agent_id: id.clone(),
            descendants: false,
            from_seq: None,
            types: vec!["turn/*".to_owned(), "tool/result".to_owned()],
        })
        .await
        .unwrap()
        .into_inner();
    let prompted = daemon.prompt(&id, "go");
    prompted.assert_completed();
    assert!(
        prompted.own("text/delta").len() + prompted.own("assistant/message").len() > 0,
        "the unfiltered stream has other types"
    );
    let mut seen = Vec::new();
    while let Some(event) = tokio_stream::StreamExt::next(&mut filtered).await {
        let event = event.unwrap();
        let end = event.r#type == "turn/end";
        seen.push(event.r#type);
        if end {
            break;
        }
    }
    assert_eq!(seen, ["turn/start", "tool/result", "turn/end"]);

    let status = agents
        .watch(v1::WatchRequest {
            agent_id: id.clone(),
            descendants: false,
            from_seq: None,
            types: vec!["turn/*".to_owned(), "turn".to_owned()],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("types[1]: "), "{status:?}");
}

/// A command printing more than a pipe holds (about 109 KB): the prompting client gets every
/// line of it live, the result holds its end and names the file with the whole of it, and the
/// turn completes (`dshctl --json prompt` writes more than a pipe holds while the turn runs).
#[test]
fn a_call_printing_more_than_a_pipe_holds_streams_whole() {
    let daemon = TestDaemon::start();
    let agent = daemon.new_agent(
        &daemon.workdir("w"),
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 20000"}}]},
            {"text": "done"},
        ]}),
    );
    let prompted = daemon.prompt(&agent, "go");
    prompted.assert_completed();
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let live: String = prompted
        .lines
        .iter()
        .filter(|l| l["type"] == "tool/output")
        .filter_map(|l| l["data"]["text"].as_str())
        .collect();
    assert!(live == expected, "live output: {} bytes", live.len());
    // The model gets the end, and where the whole of it is.
    let content = prompted.tool_results()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let (end, note) = content.split_once("[stdout truncated: ").unwrap();
    assert!(expected.ends_with(end), "{content}");
    let spill = note
        .split_once("full output: ")
        .and_then(|(_, path)| path.strip_suffix(']'))
        .unwrap();
    assert!(std::fs::read_to_string(spill).unwrap() == expected);
}
