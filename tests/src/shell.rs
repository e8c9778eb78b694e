//! Helpers for the managed-environment, executor and tool tests: scripted agents driven through
//! `dshctl`, external `ShellEnv.Contribute` clients, start/end intervals of concurrent commands,
//! and a view of `/proc` for the process-hygiene checks.

// Test support: a failed step fails the test that called it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use dsh_client::Client;
use dsh_proto::v1;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use crate::TestDaemon;

/// A working directory for agents and commands inside the daemon's temporary directory.
pub fn workdir(daemon: &TestDaemon, name: &str) -> PathBuf {
    let dir = daemon.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    dir
}

/// A scripted agent created with `dshctl agent new --cwd CWD --script FILE`; returns its id.
pub fn new_agent(daemon: &TestDaemon, cwd: &Path, script: &Value) -> String {
    let file = daemon.dir.path().join(format!(
        "script-{}.json",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::write(&file, script.to_string()).unwrap_or_else(|e| panic!("write script: {e}"));
    let cwd = cwd.to_str().expect("utf-8 cwd");
    let file = file.to_str().expect("utf-8 script path");
    let info = daemon.dshctl_json(&["agent", "new", "--cwd", cwd, "--script", file]);
    info["agent_id"]
        .as_str()
        .unwrap_or_else(|| panic!("agent new printed no agent_id: {info}"))
        .to_owned()
}

/// One scripted `bash` call.
pub fn bash_call(command: &str) -> Value {
    json!({"name": "bash", "arguments": {"command": command}})
}

/// One scripted `spawn_agent` call whose child replays `child_script`.
pub fn spawn_call(prompt: &str, child_script: &Value) -> Value {
    json!({"name": "spawn_agent", "arguments": {"prompt": prompt}, "child_script": child_script})
}

/// Runs one turn with `dshctl --json prompt` and returns its event lines. Fails the test unless the
/// turn completed.
pub fn prompt(daemon: &TestDaemon, agent: &str, text: &str) -> Vec<Value> {
    let out = daemon.dshctl(&["--json", "prompt", "--agent", agent, text]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "prompt failed: {}\n{stdout}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log_text()
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A tool call and its result, as a turn's events or a session's log report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The result text.
    pub content: String,
    /// Whether the result is an error.
    pub is_error: bool,
}

/// The prompted agent's calls in `dshctl --json prompt` event lines (the stream also carries its
/// children's), in result order.
pub fn prompt_results(events: &[Value]) -> Vec<CallResult> {
    let agent = events.first().map(|e| e["sessionId"].clone());
    let own: Vec<Value> = events
        .iter()
        .filter(|e| Some(&e["sessionId"]) == agent.as_ref())
        .cloned()
        .collect();
    results(&own)
}

/// The calls of a session log (`dshctl --json session events`), in result order.
pub fn session_results(daemon: &TestDaemon, session: &str) -> Vec<CallResult> {
    results(&daemon.events(session))
}

/// The calls of a stream of events (the same vocabulary everywhere), in result order.
fn results(events: &[Value]) -> Vec<CallResult> {
    let names: HashMap<String, String> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| {
            (
                e["data"]["callId"].as_str().unwrap().to_owned(),
                e["data"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            let d = &e["data"];
            let call_id = d["callId"].as_str().unwrap().to_owned();
            CallResult {
                name: names
                    .get(&call_id)
                    .unwrap_or_else(|| panic!("result without a call: {e}"))
                    .clone(),
                content: d["content"].as_str().unwrap().to_owned(),
                is_error: d["isError"].as_bool().unwrap(),
                call_id,
            }
        })
        .collect()
}

/// `KEY=VALUE` lines of `text` (other lines ignored); a key seen twice fails the test.
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=')
            && !k.is_empty()
            && !k.contains(' ')
        {
            assert!(
                out.insert(k.to_owned(), v.to_owned()).is_none(),
                "{k} printed twice in:\n{text}"
            );
        }
    }
    out
}

/// A command that prints every `DSH_*` variable of its environment as `KEY=VALUE` lines.
pub const PRINT_MANAGED: &str = "env | grep '^DSH_' | sort";

/// The `DSH_*` variables a `PRINT_MANAGED` output shows.
pub fn managed_of(output: &str) -> BTreeMap<String, String> {
    key_values(output)
        .into_iter()
        .filter(|(k, _)| k.starts_with("DSH_"))
        .collect()
}

/// `dshctl session locate ID`: the JSONL path, or `None` when the backend keeps no file.
pub fn locate(daemon: &TestDaemon, session: &str) -> Option<String> {
    let doc = daemon.dshctl_json(&["session", "locate", session]);
    match &doc["location"] {
        Value::Null => None,
        l => {
            assert_eq!(l["kind"], "jsonl", "{doc}");
            Some(l["path"].as_str().unwrap().to_owned())
        }
    }
}

/// `dshctl --json run ARGS...` (the outcome document); fails the test if dshctl fails, or if it
/// does not exit with the status its document gives the command (`run` exits with the command's
/// status, `--json` or not).
pub fn run_json(daemon: &TestDaemon, args: &[&str]) -> Value {
    let mut full = vec!["--json", "run"];
    full.extend_from_slice(args);
    let out = daemon.dshctl(&full);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "dshctl run {args:?} printed no single JSON document ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        doc.get("error").is_none(),
        "dshctl run {args:?} failed: {doc}"
    );
    let expected = if doc["timed_out"] == true {
        Some(124)
    } else {
        doc["exit_code"].as_i64().map(|code| (code & 0xff) as i32)
    };
    if let Some(expected) = expected {
        assert_eq!(
            out.status.code(),
            Some(expected),
            "dshctl run {args:?}: {doc}"
        );
    }
    doc
}

/// `dshctl --json job output ID`.
pub fn job_output(daemon: &TestDaemon, job: &str) -> Value {
    daemon.dshctl_json(&["job", "output", job])
}

/// Starts a background job with `dshctl run --background ARGS...`; returns its id.
pub fn background(daemon: &TestDaemon, args: &[&str]) -> String {
    let mut full = vec!["run", "--background"];
    full.extend_from_slice(args);
    let doc = daemon.dshctl_json(&full);
    doc["job_id"].as_str().unwrap().to_owned()
}

/// Reads the job until it has ended and its output is read to the end (bounded); returns
/// everything read and the last document.
pub fn read_to_end(daemon: &TestDaemon, job: &str, stdout: &mut String) -> Value {
    let mut last = Value::Null;
    assert!(
        crate::eventually(std::time::Duration::from_secs(30), || {
            last = job_output(daemon, job);
            stdout.push_str(last["stdout"].as_str().unwrap());
            last["running"] == false && last["more"] == false
        }),
        "job {job} did not end"
    );
    last
}

/// A command that records its own start and end (`$EPOCHREALTIME`, microseconds) with `tag` in
/// `file`, around `body`.
pub fn timed(file: &Path, tag: &str, body: &str) -> String {
    format!(
        "s=$EPOCHREALTIME; {body}; e=$EPOCHREALTIME; printf '%s %s %s %s\\n' \"$DSH_SESSION_ID\" '{tag}' \"$s\" \"$e\" >> '{}'",
        file.display()
    )
}

/// One recorded interval of a command run by [`timed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// The `DSH_SESSION_ID` the command saw.
    pub session: String,
    /// The tag it was given.
    pub tag: String,
    /// Start, microseconds since the epoch.
    pub start: u64,
    /// End, microseconds since the epoch.
    pub end: u64,
}

/// Reads the intervals [`timed`] commands wrote to `file`.
pub fn intervals(file: &Path) -> Vec<Interval> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let micros = |s: &str| -> u64 {
        let digits: String = s.chars().filter(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    };
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 4, "bad interval line {line:?}");
            Interval {
                session: parts[0].to_owned(),
                tag: parts[1].to_owned(),
                start: micros(parts[2]),
                end: micros(parts[3]),
            }
        })
        .collect()
}

/// What the intervals show about overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// Most commands running at one instant.
    pub max_running: usize,
    /// Most distinct sessions with a command running at one instant.
    pub max_sessions: usize,
    /// Intervals that overlap no interval of another session.
    pub alone: Vec<Interval>,
}

/// Sweeps the intervals: how many ran at once, and which overlapped nothing of another session.
pub fn overlap(all: &[Interval]) -> Overlap {
    let mut edges: Vec<(u64, bool, usize)> = Vec::new();
    for (i, iv) in all.iter().enumerate() {
        assert!(iv.start <= iv.end, "interval ends before it starts: {iv:?}");
        edges.push((iv.start, true, i));
        edges.push((iv.end, false, i));
    }
    // Ends before starts at the same instant: touching intervals do not overlap.
    edges.sort_by_key(|&(t, start, _)| (t, start));
    let mut running: BTreeMap<usize, &str> = BTreeMap::new();
    let (mut max_running, mut max_sessions) = (0, 0);
    for (_, start, i) in edges {
        if start {
            running.insert(i, &all[i].session);
            max_running = max_running.max(running.len());
            let sessions: std::collections::BTreeSet<&str> = running.values().copied().collect();
            max_sessions = max_sessions.max(sessions.len());
        } else {
            running.remove(&i);
        }
    }
    let alone = all
        .iter()
        .filter(|a| {
            !all.iter()
                .any(|b| b.session != a.session && b.start < a.end && a.start < b.end)
        })
        .cloned()
        .collect();
    Overlap {
        max_running,
        max_sessions,
        alone,
    }
}

/// An external contributor on a `ShellEnv.Contribute` stream.
#[derive(Debug)]
pub struct Contributor {
    requests: tokio::sync::mpsc::Sender<v1::ContributeRequest>,
    responses: tonic::Streaming<v1::ContributeResponse>,
}

impl Contributor {
    /// Opens the stream and declares `name` with `variables` (key, description). Returns the
    /// daemon's refusal as is; on success the `registered` answer has been read.
    pub async fn declare(
        client: &Client,
        name: &str,
        variables: &[(&str, &str)],
    ) -> Result<Self, tonic::Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let declare = v1::ContributeRequest {
            message: Some(v1::contribute_request::Message::Declare(v1::Declare {
                name: name.to_owned(),
                variables: variables
                    .iter()
                    .map(|(key, description)| v1::VariableDeclaration {
                        key: (*key).to_owned(),
                        description: (*description).to_owned(),
                    })
                    .collect(),
            })),
        };
        tx.send(declare).await.expect("request channel open");
        let mut responses = client
            .shell_env()
            .contribute(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        match responses.next().await {
            Some(Ok(v1::ContributeResponse {
                message: Some(v1::contribute_response::Message::Registered(r)),
            })) => assert_eq!(r.name, name),
            Some(Err(status)) => return Err(status),
            other => panic!("expected `registered`, got {other:?}"),
        }
        Ok(Self {
            requests: tx,
            responses,
        })
    }

    /// Waits for the next resolve request.
    pub async fn next_request(&mut self) -> v1::ResolveRequest {
        match self.responses.next().await {
            Some(Ok(v1::ContributeResponse {
                message: Some(v1::contribute_response::Message::Resolve(r)),
            })) => r,
            other => panic!("expected a resolve request, got {other:?}"),
        }
    }

    /// Answers request `id` with `values_json`.
    pub async fn answer(&self, id: u64, values_json: &str) {
        self.requests
            .send(v1::ContributeRequest {
                message: Some(v1::contribute_request::Message::Answer(v1::ResolveAnswer {
                    request_id: id,
                    values_json: values_json.to_owned(),
                    error: String::new(),
                })),
            })
            .await
            .expect("request channel open");
    }

    /// Answers every request with `answer(facts)` until the stream ends; the task owns the
    /// contributor, so aborting it disconnects.
    pub fn serve(
        mut self,
        answer: impl Fn(&v1::ExecutionFacts) -> String + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Some(Ok(message)) = self.responses.next().await {
                if let Some(v1::contribute_response::Message::Resolve(r)) = message.message {
                    let facts = r.facts.unwrap_or_default();
                    self.answer(r.request_id, &answer(&facts)).await;
                }
            }
        })
    }
}

/// One line of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
}

/// The stat line of `pid`, if the process exists.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgid,
    })
}

/// Every process in `/proc` (a process may vanish while it is read; it is then left out).
pub fn processes() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .expect("/proc is readable")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .collect()
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|s| s.state != 'Z')
}

/// Processes whose parent chain reaches `ancestor` (not `ancestor` itself).
pub fn descendants(ancestor: i32) -> Vec<ProcStat> {
    let all = processes();
    let parent: HashMap<i32, i32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    all.into_iter()
        .filter(|p| {
            let mut current = p.ppid;
            for _ in 0..64 {
                if current == ancestor {
                    return true;
                }
                match parent.get(&current) {
                    Some(&next) if next != current && current > 1 => current = next,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Live and stored sessions whose header names `parent`.
pub fn children_of(daemon: &TestDaemon, parent: &str) -> Vec<String> {
    let sessions = daemon.dshctl_json(&["session", "list"]);
    sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["header"]["parent_session"] == parent)
        .map(|s| s["header"]["id"].as_str().unwrap().to_owned())
        .collect()
}
