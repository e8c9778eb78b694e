//! Helpers for agent and session tests: scripted agents created and prompted through `dshctl`, and
//! session logs read back as JSON, from the daemon (`session events`) or from the JSONL file itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::{TestDaemon, dshctl_bin, eventually, wait_child};

/// How long a test waits for an observable state (a turn starting, a file appearing).
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The result of one `dshctl --json prompt`.
#[derive(Debug)]
pub struct Prompted {
    /// dshctl's exit code (0 only when the turn completed).
    pub code: Option<i32>,
    /// One JSON object per stdout line.
    pub lines: Vec<Value>,
    /// dshctl's stderr.
    pub stderr: String,
}

impl Prompted {
    /// The session the prompt was for (the first line's: the turn's own `turn/start`).
    pub fn agent(&self) -> &str {
        self.lines
            .first()
            .and_then(|l| l["sessionId"].as_str())
            .unwrap_or_else(|| panic!("prompt printed nothing: {}", self.stderr))
    }

    /// The final `turn/end` line; fails the test if the stream did not end with the prompted
    /// agent's `turn/end`.
    pub fn turn_ended(&self) -> &Value {
        let last = self.lines.last().unwrap_or_else(|| {
            panic!(
                "prompt printed nothing (exit {:?}): {}",
                self.code, self.stderr
            )
        });
        assert_eq!(
            last["type"], "turn/end",
            "last line is not turn/end: {last}"
        );
        assert_eq!(last["sessionId"], self.agent(), "{last}");
        last
    }

    /// The turn number of the `turn/start` line.
    pub fn turn_started(&self) -> u64 {
        self.own("turn/start")
            .first()
            .and_then(|l| l["data"]["turn"].as_u64())
            .unwrap_or_else(|| panic!("no turn/start line in {:?}", self.lines))
    }

    /// `(reason.kind, the reason's detail)` of the end of the turn: the abort cause, the error
    /// message, or the hook's reason ("" for completed).
    pub fn reason(&self) -> (String, String) {
        let reason = &self.turn_ended()["data"]["reason"];
        (
            reason["kind"].as_str().unwrap_or_default().to_owned(),
            reason_detail(reason),
        )
    }

    /// The turn's answer: the text of the `assistant/message` its `turn/end` names ("" when it
    /// names none).
    pub fn text(&self) -> String {
        answer(&self.lines)
    }

    /// The prompted agent's lines of type `kind` (children's are left out).
    pub fn own(&self, kind: &str) -> Vec<&Value> {
        let agent = self.agent().to_owned();
        self.lines
            .iter()
            .filter(|l| l["type"] == kind && l["sessionId"] == agent.as_str())
            .collect()
    }

    /// The `data` of the prompted agent's `tool/result` lines.
    pub fn tool_results(&self) -> Vec<&Value> {
        self.own("tool/result")
            .into_iter()
            .map(|l| &l["data"])
            .collect()
    }

    /// Fails the test unless the turn completed and dshctl exited 0.
    pub fn assert_completed(&self) -> &Self {
        assert_eq!(
            self.reason().0,
            "completed",
            "turn did not complete: {:?}\n{}",
            self.lines,
            self.stderr
        );
        assert_eq!(self.code, Some(0), "{}", self.stderr);
        self
    }
}

/// The human detail of a `turn/end` reason: its cause, message or reason, whichever it has.
pub fn reason_detail(reason: &Value) -> String {
    ["cause", "message", "reason"]
        .iter()
        .find_map(|k| reason[k].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The answer of the turn whose `turn/end` is the last of `lines`: the text of the
/// `assistant/message` it names by seq (in the same session), or "".
pub fn answer(lines: &[Value]) -> String {
    let Some(end) = lines.iter().rev().find(|l| l["type"] == "turn/end") else {
        return String::new();
    };
    let Some(seq) = end["data"]["answerSeq"].as_u64() else {
        return String::new();
    };
    lines
        .iter()
        .find(|l| l["seq"] == seq && l["sessionId"] == end["sessionId"])
        .and_then(|l| l["data"]["message"]["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// JSON lines as printed by dshctl (blank lines ignored); fails the test on a line that is not
/// JSON.
pub fn parse_json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Events as the session log holds them: the stream's lines without `sessionId`.
pub fn as_logged(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if let Some(object) = e.as_object_mut() {
                object.remove("sessionId");
            }
            e
        })
        .collect()
}

/// A session log as stored in a JSONL file: the header line and the complete event lines after it.
#[derive(Debug, Clone)]
pub struct SessionFile {
    /// Line 1.
    pub header: Value,
    /// Every later complete line (a line still being written, without its `\n`, is left out).
    pub events: Vec<Value>,
}

/// Reads a JSONL session log; `None` when the file does not exist (or has no complete line yet).
pub fn read_session_file(path: &Path) -> Option<SessionFile> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return None,
    };
    let mut lines = complete.split('\n').map(|line| {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("{}: bad line {line:?}: {e}", path.display()))
    });
    let header = lines.next()?;
    Some(SessionFile {
        header,
        events: lines.collect(),
    })
}

/// The `type` of each event.
pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

/// Fails the test unless the events' seqs are 0, 1, 2, ...
pub fn assert_contiguous(events: &[Value]) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"].as_u64(),
            Some(i as u64),
            "seq gap at index {i}: {event}"
        );
    }
}

/// How many events have type `kind`.
pub fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// True when `events` hold a `step/start` of `turn`, `step`.
pub fn has_step_start(events: &[Value], turn: u64, step: u64) -> bool {
    events.iter().any(|e| {
        e["type"] == "step/start" && e["data"]["turn"] == turn && e["data"]["step"] == step
    })
}

/// True when `events` hold a `step/end` of `turn`, `step`.
pub fn has_step_end(events: &[Value], turn: u64, step: u64) -> bool {
    events
        .iter()
        .any(|e| e["type"] == "step/end" && e["data"]["turn"] == turn && e["data"]["step"] == step)
}

/// Waits for a `dshctl prompt` started with [`TestDaemon::prompt_in_background`] to finish.
/// Its output is read while it runs: a turn prints more than a pipe holds (a command's output
/// deltas), and a dshctl blocked on a full pipe would never finish.
pub fn finish_prompt(mut child: Child) -> Prompted {
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = wait_child(&mut child, PATIENCE).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("dshctl prompt did not finish within {PATIENCE:?}")
    });
    let joined = |reader: std::thread::JoinHandle<Vec<u8>>| {
        reader
            .join()
            .unwrap_or_else(|_| panic!("reading dshctl's output failed"))
    };
    Prompted {
        code: status.code(),
        lines: parse_json_lines(&joined(stdout)),
        stderr: String::from_utf8_lossy(&joined(stderr)).into_owned(),
    }
}

impl TestDaemon {
    /// A fresh working directory `<dir>/work/<name>` for agents.
    pub fn workdir(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("work").join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        if let Some(user) = self.user {
            crate::give_to(&self.dir.path().join("work"), user);
        }
        dir
    }

    /// Writes `script` to a new file in the test directory and returns its path.
    pub fn write_script(&self, script: &Value) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = self.dir.path().join(format!(
            "script-{}.json",
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, script.to_string()).unwrap_or_else(|e| panic!("write script: {e}"));
        path
    }

    /// `dshctl agent new --cwd CWD --script <script>`; returns the new agent's id.
    pub fn new_agent(&self, cwd: &Path, script: &Value) -> String {
        self.new_agent_with(cwd, &[], script)
    }

    /// [`new_agent`](Self::new_agent) with more `agent new` arguments (`--sandbox ...`).
    pub fn new_agent_with(&self, cwd: &Path, flags: &[&str], script: &Value) -> String {
        let script = self.write_script(script);
        let mut args = vec![
            "agent",
            "new",
            "--cwd",
            path_str(cwd),
            "--script",
            path_str(&script),
        ];
        args.extend_from_slice(flags);
        let info = self.dshctl_json(&args);
        info["agent_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no agent_id in {info}"))
            .to_owned()
    }

    /// `dshctl agent <verb> <target-args> --script <script>` (spawn, fork, resume); returns the
    /// agent JSON document.
    pub fn agent_with_script(&self, verb_and_target: &[&str], script: &Value) -> Value {
        let script = self.write_script(script);
        let mut args = vec!["agent"];
        args.extend_from_slice(verb_and_target);
        args.extend_from_slice(&["--script", path_str(&script)]);
        self.dshctl_json(&args)
    }

    /// A new agent in `cwd` on `script` created over gRPC without the client's environment (as a
    /// client that does not opt in): its commands get dshd's. Its id.
    pub fn new_agent_without_env(&self, cwd: &Path, script: &Value) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        runtime.block_on(async {
            let client = self.client().await;
            let info = client
                .agents()
                .create(dsh_proto::v1::CreateAgentRequest {
                    cwd: path_str(cwd).to_owned(),
                    model: Some(dsh_proto::v1::ModelSpec {
                        provider: "scripted".into(),
                        script_json: script.to_string(),
                        reasoning_effort: String::new(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("create: {e}"));
            info.into_inner().agent_id
        })
    }

    /// Runs `dshctl --json prompt --agent ID TEXT` to the end of the turn.
    pub fn prompt(&self, id: &str, text: &str) -> Prompted {
        finish_prompt(self.prompt_in_background(id, text))
    }

    /// Starts `dshctl --json prompt --agent ID TEXT` without waiting for it.
    pub fn prompt_in_background(&self, id: &str, text: &str) -> Child {
        Command::new(dshctl_bin())
            .arg("--socket")
            .arg(&self.socket)
            .args(["--json", "prompt", "--agent", id, text])
            .env_remove("DSH_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run dshctl prompt: {e}"))
    }

    /// The session's events as the daemon reports them (`dshctl --json session events`: one
    /// JSON line per event), each checked to name the session and then as the log holds it
    /// (`{type, seq, time, data}`, comparable with the JSONL file's lines).
    pub fn events(&self, id: &str) -> Vec<Value> {
        let out = self.dshctl(&["--json", "session", "events", id]);
        assert!(
            out.status.success(),
            "dshctl session events {id} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = parse_json_lines(&out.stdout);
        for line in &lines {
            assert_eq!(line["sessionId"], id, "an event of another session: {line}");
        }
        as_logged(&lines)
    }

    /// The `location` member of `dshctl session locate ID` (`null` when the backend keeps none).
    pub fn locate(&self, id: &str) -> Value {
        self.dshctl_json(&["session", "locate", id])["location"].clone()
    }

    /// The JSONL path `session locate` answers; fails the test if it answers none.
    pub fn located_path(&self, id: &str) -> PathBuf {
        let location = self.locate(id);
        assert_eq!(location["kind"], "jsonl", "{location}");
        PathBuf::from(location["path"].as_str().unwrap_or_default())
    }

    /// Waits until the daemon's events for `id` satisfy `condition`; fails the test otherwise.
    pub fn wait_for_events(&self, id: &str, what: &str, condition: impl Fn(&[Value]) -> bool) {
        let held = eventually(PATIENCE, || condition(&self.events(id)));
        assert!(held, "{what}: not seen; events: {:?}", self.events(id));
    }

    /// Waits until the JSONL file at `path` exists and satisfies `condition`.
    pub fn wait_for_file(&self, path: &Path, what: &str, condition: impl Fn(&SessionFile) -> bool) {
        let held = eventually(PATIENCE, || {
            read_session_file(path).is_some_and(|file| condition(&file))
        });
        assert!(
            held,
            "{what}: not seen in {}: {:?}",
            path.display(),
            read_session_file(path)
        );
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", path.display()))
}
