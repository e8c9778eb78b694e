//! `dshctl acp` against the gRPC API it bridges, on the release binaries:
//!
//! 1. **First update.** Time from writing `session/prompt` to reading its first `session/update`,
//!    against the time from calling `Agents.Prompt` to its stream's first event (reported). The
//!    scripted model answers at once, so both measure the path, not a model. Rounds
//!    alternate the two; the bridge is one long-lived process, as an editor keeps it. A second,
//!    informational line compares with the gRPC stream's first event of the same origin as ACP's
//!    first update (the model's text: ACP has nothing to say for `turn/start`). A third line adds
//!    to the gRPC figure what any process between an editor and dshd costs, measured in the same
//!    round: a line's round trip through `cat` (a relay that does nothing else; the bridge wakes
//!    twice per message as it does, once for the editor's line and once for dshd's answer). That
//!    line has the target (at most 1.5×, restated from 1.2× against `Agents.Prompt` alone, which
//!    no separate process meets: docs/BENCHMARKS.md).
//!    A fourth line is what `acp/stdio.rs` saves a user per message: the same first update from a
//!    second bridge whose stdin and stdout are a `SOCK_SEQPACKET` socket pair, which the module
//!    leaves to tokio's own `stdin()`/`stdout()` (reads and writes on the blocking pool), against
//!    the bridge on pipes (served on the runtime's reactor, as an editor's pipes or stream sockets
//!    are). Rounds alternate the two bridges.
//! 2. **CPU per update.** A turn of exactly 1,000 updates (one step of 333 bash calls `true`, three
//!    updates each, and one text chunk), repeated [`BIG_TURNS`] times: the bridge's CPU time
//!    (all its threads, from `/proc/<pid>/task/*/schedstat`) per update, against `dshctl --json
//!    prompt`'s CPU per event for the same turns (the gRPC client doing the nearest work: decoding
//!    the events and printing one JSON line each).
//!
//! Run: `cargo bench -p dsh-tests --bench acp`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_tests::bench::{ReleaseDaemon, latency_ratio};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

const ROUNDS: usize = 40;
const CALLS: usize = 333;
const BIG_TURNS: usize = 5;

fn main() {
    let dir = dsh_tests::private_dir();
    let daemon = ReleaseDaemon::start(&dir, &[]);
    let dshctl = dsh_tests::cargo_build("dsh-client", "dshctl", true);
    let cwd = dir.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let small = write_script(&dir, "small", &json!({"replies": [{"text": "hi"}]}));
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| json!({"id": format!("c{i}"), "name": "bash", "arguments": {"command": "true"}}))
        .collect();
    let big = write_script(
        &dir,
        "big",
        &json!({"replies": [{"tool_calls": calls}, {"text": "done"}]}),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime
        .block_on(dsh_client::Client::connect(daemon.socket()))
        .unwrap();

    println!("first update: {ROUNDS} rounds each, alternating");
    let mut acp = Bridge::start(&dshctl, daemon.socket(), &small);
    let mut blocking = Bridge::start_on_seqpacket(&dshctl, daemon.socket(), &small);
    let mut relay = Relay::start();
    let (mut grpc_first, mut grpc_text, mut acp_first) = (Vec::new(), Vec::new(), Vec::new());
    let (mut relayed_floor, mut blocking_first) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let (first, text) = runtime.block_on(grpc_round(&client, &cwd, &small));
        let session = acp.new_session(&cwd);
        let took = acp.first_update(&session);
        let relayed = relay.round_trip();
        let other = blocking.new_session(&cwd);
        let took_blocking = blocking.first_update(&other);
        if round > 0 {
            // The first round warms both paths up.
            grpc_first.push(first);
            grpc_text.push(text);
            acp_first.push(took);
            relayed_floor.push(first + relayed);
            blocking_first.push(took_blocking);
        }
        acp.call("session/close", json!({"sessionId": session}));
        blocking.call("session/close", json!({"sessionId": other}));
    }
    drop(blocking);
    latency_ratio(
        "acp: session/prompt to the first session/update vs Agents.Prompt's first event",
        ("Agents.Prompt", &mut grpc_first),
        ("session/prompt", &mut acp_first.clone()),
        Target::Reported,
    );
    latency_ratio(
        "acp: first session/update vs Agents.Prompt's first text event (informational)",
        ("Agents.Prompt text", &mut grpc_text),
        ("session/prompt", &mut acp_first.clone()),
        Target::Reported,
    );
    latency_ratio(
        "acp: session/prompt to the first session/update vs Agents.Prompt's first event plus a relay process's round trip",
        ("Prompt + relay", &mut relayed_floor),
        ("session/prompt", &mut acp_first.clone()),
        Target::AtMost(1.5),
    );
    latency_ratio(
        "acp: first session/update with stdio on the reactor (pipes) vs tokio's blocking stdin/stdout (informational)",
        ("tokio stdin/stdout", &mut blocking_first),
        ("reactor (pipes)", &mut acp_first),
        Target::Reported,
    );
    drop(acp);

    println!(
        "CPU per update: {BIG_TURNS} turns of {} updates",
        CALLS * 3 + 1
    );
    let mut acp = Bridge::start(&dshctl, daemon.socket(), &big);
    let mut updates = 0usize;
    let mut bridge_cpu = Duration::ZERO;
    for _ in 0..BIG_TURNS {
        let session = acp.new_session(&cwd);
        let before = cpu(acp.child.id());
        updates += acp.prompt_counting(&session);
        bridge_cpu += cpu(acp.child.id()) - before;
        acp.call("session/close", json!({"sessionId": session}));
    }
    let (mut events, mut dshctl_cpu) = (0usize, Duration::ZERO);
    for _ in 0..BIG_TURNS {
        let (n, spent) = dshctl_prompt(&dshctl, daemon.socket(), &cwd, &big);
        events += n;
        dshctl_cpu += spent;
    }
    let per_update = bridge_cpu / u32::try_from(updates).unwrap();
    let per_event = dshctl_cpu / u32::try_from(events).unwrap();
    println!(
        "    bridge: {updates} updates, CPU {} ({} per update); dshctl prompt --json: {events} events, CPU {} ({} per event)",
        duration(bridge_cpu),
        duration(per_update),
        duration(dshctl_cpu),
        duration(per_event)
    );
    ratio(
        "acp: bridge CPU per update (1,000-update turns) vs dshctl --json prompt's CPU per event",
        &duration(per_update),
        &duration(per_event),
        per_update.as_secs_f64() / per_event.as_secs_f64(),
        Target::AtMost(2.0),
    );
}

fn write_script(dir: &tempfile::TempDir, name: &str, script: &Value) -> std::path::PathBuf {
    let path = dir.path().join(format!("{name}.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// One scripted agent prompted over gRPC: the time to the stream's first event, and to its first
/// text event (`text/delta` or `assistant/message` with text).
async fn grpc_round(
    client: &dsh_client::Client,
    cwd: &Path,
    script: &Path,
) -> (Duration, Duration) {
    let mut agents = client.agents();
    let agent = agents
        .create(v1::CreateAgentRequest {
            cwd: cwd.to_str().unwrap().to_owned(),
            model: Some(v1::ModelSpec {
                provider: "scripted".into(),
                model: String::new(),
                script_json: std::fs::read_to_string(script).unwrap(),
                reasoning_effort: String::new(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let started = Instant::now();
    let mut stream = agents
        .prompt(v1::PromptRequest {
            agent_id: agent.agent_id.clone(),
            text: "hello".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let (mut first, mut text) = (None, None);
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        first.get_or_insert_with(|| started.elapsed());
        if text.is_none() && (event.r#type == "text/delta" || event.r#type == "assistant/message") {
            text = Some(started.elapsed());
        }
    }
    agents
        .close(v1::CloseAgentRequest {
            agent_id: agent.agent_id,
        })
        .await
        .unwrap();
    (first.unwrap(), text.unwrap())
}

/// The least a process between the editor and dshd adds: a line's round trip through `cat`.
struct Relay {
    child: Child,
    stdin: std::fs::File,
    stdout: Lines,
}

impl Relay {
    fn start() -> Self {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cat (coreutils) is needed for the relay floor");
        let stdin = std::fs::File::from(OwnedFd::from(child.stdin.take().unwrap()));
        let stdout = Lines::new(OwnedFd::from(child.stdout.take().unwrap()));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// The median of a few round trips of a line the size of a prompt request.
    fn round_trip(&mut self) -> Duration {
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
            "params": {"sessionId": "01a23800-2bab-74e1-9f5e-000000000000",
                "prompt": [{"type": "text", "text": "hello"}]}});
        let mut took: Vec<Duration> = (0..5)
            .map(|_| {
                let started = Instant::now();
                writeln!(self.stdin, "{line}").unwrap();
                self.stdin.flush().unwrap();
                self.stdout.next();
                started.elapsed()
            })
            .collect();
        took.sort_unstable();
        took[took.len() / 2]
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child's stdout read line by line on the measuring thread itself, as the gRPC side reads its
/// stream (a reader thread would add its own hand-off to every figure). A pipe, or a
/// `SOCK_SEQPACKET` socket whose messages are read whole (64 KiB each at most here).
struct Lines(std::io::BufReader<std::fs::File>);

impl Lines {
    fn new(stdout: OwnedFd) -> Self {
        Self(std::io::BufReader::with_capacity(
            1 << 16,
            std::fs::File::from(stdout),
        ))
    }

    /// The next line, waiting at most two minutes for it (a hung child fails the bench).
    fn next(&mut self) -> String {
        use std::io::BufRead;
        if !self.0.buffer().contains(&b'\n') {
            let mut fds = [rustix::event::PollFd::new(
                self.0.get_ref(),
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 120,
                tv_nsec: 0,
            };
            let ready = rustix::event::poll(&mut fds, Some(&timeout)).unwrap();
            assert!(ready > 0, "the child said nothing for two minutes");
        }
        let mut line = String::new();
        let n = self.0.read_line(&mut line).unwrap();
        assert!(n > 0, "the child closed its stdout");
        line
    }
}

/// A release `dshctl acp`, initialized.
struct Bridge {
    child: Child,
    stdin: std::fs::File,
    stdout: Lines,
    next_id: u64,
}

impl Bridge {
    /// A bridge on pipes, as an editor starts it.
    fn start(dshctl: &Path, socket: &Path, script: &Path) -> Self {
        let mut child = Self::command(dshctl, socket, script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = OwnedFd::from(child.stdout.take().unwrap());
        let stdin = OwnedFd::from(child.stdin.take().unwrap());
        Self::initialized(child, stdin, stdout)
    }

    /// A bridge whose stdin and stdout are one end of a `SOCK_SEQPACKET` pair: neither a pipe nor
    /// a stream socket, so `acp/stdio.rs` leaves them to tokio's `stdin()` and `stdout()`.
    fn start_on_seqpacket(dshctl: &Path, socket: &Path, script: &Path) -> Self {
        use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
        let (ours, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let child = Self::command(dshctl, socket, script)
            .stdin(Stdio::from(theirs.try_clone().unwrap()))
            .stdout(Stdio::from(theirs))
            .spawn()
            .unwrap();
        let reading = ours.try_clone().unwrap();
        Self::initialized(child, ours, reading)
    }

    fn command(dshctl: &Path, socket: &Path, script: &Path) -> Command {
        let mut command = Command::new(dshctl);
        command
            .arg("--socket")
            .arg(socket)
            .args(["acp", "--script", script.to_str().unwrap()])
            .stderr(Stdio::inherit());
        command
    }

    fn initialized(child: Child, stdin: OwnedFd, stdout: OwnedFd) -> Self {
        let stdout = Lines::new(stdout);
        let stdin = std::fs::File::from(stdin);
        let mut bridge = Self {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        bridge.call("initialize", json!({"protocolVersion": 1}));
        bridge
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        self.next_id
    }

    fn recv(&mut self) -> Value {
        serde_json::from_str(&self.stdout.next()).unwrap()
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        loop {
            let message = self.recv();
            if message["id"] == id && message.get("method").is_none() {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
        }
    }

    fn new_session(&mut self, cwd: &Path) -> String {
        self.call("session/new", json!({"cwd": cwd, "mcpServers": []}))["sessionId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn prompt(&mut self, session: &str) -> u64 {
        self.send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}),
        )
    }

    /// Prompts; returns the time to the first update (and reads the turn to its end).
    fn first_update(&mut self, session: &str) -> Duration {
        let started = Instant::now();
        let id = self.prompt(session);
        let mut first = None;
        loop {
            let message = self.recv();
            if message["method"] == "session/update" {
                first.get_or_insert_with(|| started.elapsed());
            }
            if message["id"] == id && message.get("method").is_none() {
                return first.expect("a turn without an update");
            }
        }
    }

    /// Prompts; returns how many updates the turn sent.
    fn prompt_counting(&mut self, session: &str) -> usize {
        let id = self.prompt(session);
        let mut updates = 0;
        loop {
            let message = self.recv();
            if message["method"] == "session/update" {
                updates += 1;
            }
            if message["id"] == id && message.get("method").is_none() {
                assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
                return updates;
            }
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of every thread of process `pid` so far (`schedstat`: nanoseconds on a CPU).
fn cpu(pid: u32) -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat =
            std::fs::read_to_string(task.unwrap().path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(total)
}

/// `dshctl --json prompt` of a new agent with `script`: its events and its CPU time (user and
/// system, as the kernel accounts a waited-for child).
fn dshctl_prompt(dshctl: &Path, socket: &Path, cwd: &Path, script: &Path) -> (usize, Duration) {
    let new = Command::new(dshctl)
        .arg("--socket")
        .arg(socket)
        .args([
            "--json",
            "agent",
            "new",
            "--cwd",
            cwd.to_str().unwrap(),
            "--script",
        ])
        .arg(script)
        .output()
        .unwrap();
    let agent: Value = serde_json::from_slice(&new.stdout).unwrap();
    let agent = agent["agent_id"].as_str().unwrap().to_owned();
    let before = children_cpu();
    let out = Command::new(dshctl)
        .arg("--socket")
        .arg(socket)
        .args(["--json", "prompt", "--agent", &agent, "hello"])
        .output()
        .unwrap();
    let spent = children_cpu() - before;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let _ = Command::new(dshctl)
        .arg("--socket")
        .arg(socket)
        .args(["agent", "close", &agent])
        .output();
    (events, spent)
}

/// CPU time of this process's waited-for children so far (`cutime` + `cstime` of
/// `/proc/self/stat`, in clock ticks of 10 ms).
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // Fields 16 and 17 of the whole line are the 14th and 15th after the name.
    Duration::from_millis((fields[13] + fields[14]) * 10)
}
