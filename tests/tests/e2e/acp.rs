//! `dshctl acp` through the real dshd, driven as an editor would: JSON-RPC lines on its stdin,
//! its stdout read line by line. A prompt's updates arrive in order and its bash call sees the
//! ACP session id as `DSH_SESSION_ID`; permission requests are answered allow, allow always and
//! reject; a cancel ends a turn `cancelled`; a load replays the stored session; a child agent's
//! calls show on the parent's session; a running command's output shows as it is produced; list,
//! close, bad input, a missing daemon, an editor that stops reading and the end of stdin behave
//! as docs/ACP.md says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

#[path = "acp/compaction.rs"]
mod compaction;
#[path = "acp/files.rs"]
mod files;
#[path = "acp/framing.rs"]
mod framing;
#[path = "acp/mcp.rs"]
mod mcp;
#[path = "acp/plan.rs"]
mod plan;
#[path = "acp/readme_settings.rs"]
mod readme_settings;
#[path = "acp/refusals.rs"]
mod refusals;
#[path = "acp/rules.rs"]
mod rules;
#[path = "acp/schema_check.rs"]
mod schema_check;
#[path = "acp/terminal.rs"]
mod terminal;
#[path = "acp/threads.rs"]
mod threads;

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use dsh_tests::agents::PATIENCE;
use dsh_tests::{TestDaemon, dshctl_bin, wait_child};
use serde_json::{Value, json};

/// A running `dshctl acp`, its stdout read on a thread.
struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Acp {
    fn start(socket: &Path, args: &[&str]) -> Self {
        Self::over(spawn_bridge(socket, args))
    }

    /// A bridge already started with its stdin and stdout piped.
    fn over(mut child: Child) -> Self {
        let stdout = child.stdout.take().unwrap();
        let lines = dsh_tests::line_channel(stdout);
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            next_id: 0,
        }
    }

    /// A bridge with a scripted model whose script is `script`.
    fn scripted(daemon: &TestDaemon, script: &Value, more: &[&str]) -> Self {
        let path = script_file(daemon, script);
        let mut args = vec!["--script", path.to_str().unwrap()];
        args.extend_from_slice(more);
        Self::start(&daemon.socket, &args)
    }

    fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request; returns its id.
    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.line(&message.to_string());
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.line(&message.to_string());
    }

    /// The next message on stdout (every line must be one JSON-RPC message).
    fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(PATIENCE)
            .expect("dshctl acp printed nothing more");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        value
    }

    /// Messages until the answer to request `id`: (what came before, the answer).
    fn until_answer(&self, id: u64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.recv();
            if message["id"] == id && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Sends a request and returns its result (failing the test on an error answer) and the
    /// messages that came before it.
    fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.send(method, params);
        let (before, answer) = self.until_answer(id);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        (before, answer["result"].clone())
    }

    /// Sends a request and returns its error.
    fn call_err(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let (_, answer) = self.until_answer(id);
        assert!(answer.get("result").is_none(), "{method}: {answer}");
        answer["error"].clone()
    }

    fn initialize(&mut self) -> Value {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}),
        )
        .1
    }

    fn new_session(&mut self, cwd: &Path) -> Value {
        self.call(
            "session/new",
            json!({"cwd": cwd.to_str().unwrap(), "mcpServers": []}),
        )
        .1
    }

    /// Initializes the bridge and makes a new session in `cwd`; its id.
    fn ready_session(&mut self, cwd: &Path) -> String {
        self.initialize();
        self.new_session(cwd)["sessionId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Ends stdin and waits for the bridge to exit.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_child(&mut self.child, PATIENCE).expect("dshctl acp did not exit after stdin closed")
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dshctl acp ARGS` on `socket`, its stdin and stdout piped.
fn spawn_bridge(socket: &Path, args: &[&str]) -> Child {
    Command::new(dshctl_bin())
        .arg("--socket")
        .arg(socket)
        .arg("acp")
        .args(args)
        .env_remove("DSH_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// `script` written to a new file in the daemon's directory.
fn script_file(daemon: &TestDaemon, script: &Value) -> std::path::PathBuf {
    let path = daemon.dir.path().join(format!(
        "script-{}.json",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// The `update`s of the `session/update` notifications among `messages`.
fn updates(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect()
}

/// A compact trace of updates: kind, and the call id and status or the text. Live output (a
/// call's content without a status) is left out: how a short command's output is cut into
/// pieces is not what these traces check; so are the session's time of last activity and its
/// slash commands (`acp::schema_check` checks those).
fn trace(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] != "tool_call_update" || u.get("status").is_some())
        .filter(|u| u["sessionUpdate"] != "session_info_update")
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .map(|u| match u["sessionUpdate"].as_str().unwrap() {
            "tool_call" | "tool_call_update" => format!(
                "{} {} {}",
                u["sessionUpdate"].as_str().unwrap(),
                u["toolCallId"].as_str().unwrap(),
                u["status"].as_str().unwrap_or("-")
            ),
            kind => format!("{kind} {}", u["content"]["text"].as_str().unwrap_or("")),
        })
        .collect()
}

fn text_of(updates: &[Value], kind: &str) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

#[test]
fn a_turn_streams_in_order_its_bash_call_sees_the_session_id_and_a_load_replays_it() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"text": "Checking.", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo id=$DSH_SESSION_ID"}}]},
        {"text": "Done."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let init = acp.initialize();
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["authMethods"],
        json!([]),
        "the scripted model needs no key"
    );
    assert_eq!(init["agentInfo"]["name"], "dsh");
    let session = acp.new_session(daemon.dir.path());
    let id = session["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(session["modes"]["currentModeId"], "on-request");
    let transcript = session["_meta"]["dsh"]["transcript"]["path"]
        .as_str()
        .unwrap();
    assert!(transcript.contains(&id), "{session}");

    let (before, answer) = acp.call("session/prompt", prompt(&id, "who are you?"));
    assert_eq!(answer["stopReason"], "end_turn");
    assert!(
        before
            .iter()
            .all(|m| m["params"]["sessionId"] == id.as_str())
    );
    // The slash commands come first (after the answer that made the session).
    let live: Vec<Value> = updates(&before)
        .into_iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .collect();
    assert_eq!(
        trace(&live),
        [
            "agent_message_chunk Checking.",
            "tool_call c1 pending",
            "tool_call_update c1 in_progress",
            "tool_call_update c1 completed",
            "agent_message_chunk Done.",
        ]
    );
    assert_eq!(live[1]["kind"], "execute");
    assert_eq!(live[1]["title"], "echo id=$DSH_SESSION_ID");
    assert_eq!(live[1]["rawInput"]["command"], "echo id=$DSH_SESSION_ID");
    let output = live[3]["content"][0]["content"]["text"].as_str().unwrap();
    assert!(output.contains(&format!("id={id}")), "{output}");

    // Listed, closed (stored, no longer live), then loaded: the same messages and calls again.
    let (_, listed) = acp.call("session/list", json!({"cwd": daemon.dir.path()}));
    let entry = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} is not listed: {listed}"))
        .clone();
    assert_eq!(entry["cwd"], daemon.dir.path().to_str().unwrap());
    assert_eq!(entry["_meta"]["dsh"]["live"], true);
    acp.call("session/close", json!({"sessionId": id}));
    let agents = daemon.dshctl_json(&["agent", "list"]);
    assert_eq!(agents["agents"], json!([]), "close ended the agent");
    let error = acp.call_err("session/close", json!({"sessionId": id}));
    assert_eq!(error["code"], -32002, "{error}");

    let (before, loaded) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path(), "mcpServers": []}),
    );
    assert_eq!(loaded["sessionId"], id.as_str());
    let replayed = updates(&before);
    assert_eq!(text_of(&replayed, "user_message_chunk"), "who are you?");
    assert_eq!(
        text_of(&replayed, "agent_message_chunk"),
        text_of(&live, "agent_message_chunk")
    );
    let calls = |u: &[Value]| -> Vec<(Value, Value)> {
        u.iter()
            .filter(|u| u["sessionUpdate"] == "tool_call")
            .map(|u| (u["toolCallId"].clone(), u["title"].clone()))
            .collect()
    };
    assert_eq!(calls(&replayed), calls(&live));
    let results = |u: &[Value]| -> Vec<Value> {
        u.iter()
            .filter(|u| u["status"] == "completed")
            .map(|u| u["content"].clone())
            .collect()
    };
    assert_eq!(results(&replayed), results(&live));
    // ... then live again: the loaded session takes a prompt.
    let (_, answer) = acp.call("session/prompt", prompt(&id, "and now?"));
    assert_eq!(answer["stopReason"], "end_turn");

    // stdin closes: exit 0, the agent the load made live is closed, the session stays stored.
    assert!(acp.finish().success());
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    let stored = daemon.dshctl_json(&["session", "list"]);
    assert!(stored.to_string().contains(&id), "{stored}");
}

#[test]
fn permission_requests_allow_allow_always_and_reject_through_dsh_approvals() {
    let daemon = TestDaemon::start();
    let q = |name: &str| daemon.dir.path().join(name).to_str().unwrap().to_owned();
    let (first, second) = (
        format!("touch {}", q("first")),
        format!("touch {}", q("second")),
    );
    let script = json!({"replies": [
        {"tool_calls": [{"id": "a", "name": "bash", "arguments": {"command": first}}]},
        {"tool_calls": [{"id": "b", "name": "bash", "arguments": {"command": first}}]},
        {"tool_calls": [{"id": "r", "name": "bash", "arguments": {"command": second}}]},
        {"text": "done"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &["--approval", "always"]);
    acp.initialize();
    let session = acp.new_session(daemon.dir.path());
    let id = session["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(session["modes"]["currentModeId"], "always");
    let turn = acp.send("session/prompt", prompt(&id, "go"));
    let mut asked = Vec::new();
    let answer = loop {
        let message = acp.recv();
        if message["id"] == turn && message.get("method").is_none() {
            break message;
        }
        if message["method"] != "session/request_permission" {
            continue;
        }
        let call = message["params"]["toolCall"]["toolCallId"]
            .as_str()
            .unwrap()
            .to_owned();
        let kinds: Vec<&str> = message["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
        let option = if call == "a" {
            "allow-always"
        } else {
            "reject-once"
        };
        asked.push(call);
        let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}});
        acp.line(&reply.to_string());
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // `b` repeats `a`'s command: allowed by the session's rule, nobody asked.
    assert_eq!(asked, ["a", "r"]);
    assert!(
        Path::new(&q("first")).exists(),
        "the allowed command did not run"
    );
    assert!(
        !Path::new(&q("second")).exists(),
        "the rejected command ran"
    );
    let agent = daemon.dshctl_json(&["agent", "show", &id]);
    assert_eq!(
        agent["approval_rules"][0]["command"],
        first.as_str(),
        "{agent}"
    );
    let events = daemon.dshctl_json_lines(&["session", "events", &id]);
    let decided: Vec<(Value, Value)> = events
        .iter()
        .filter(|e| e["type"] == "approval/decision")
        .map(|e| (e["data"]["callId"].clone(), e["data"]["by"].clone()))
        .collect();
    assert_eq!(
        decided,
        [
            (json!("a"), json!("client")),
            (json!("b"), json!("rule")),
            (json!("r"), json!("client"))
        ]
    );
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .collect();
    let denied = results[2]["data"]["content"].as_str().unwrap();
    assert!(denied.contains("denied"), "the model is told: {denied}");
}

#[test]
fn a_cancel_during_a_long_command_ends_the_turn_cancelled() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "s", "name": "bash", "arguments": {"command": "sleep 30"}}]},
        {"text": "never"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let id = acp.ready_session(daemon.dir.path());
    let turn = acp.send("session/prompt", prompt(&id, "wait"));
    loop {
        let message = acp.recv();
        if message["params"]["update"]["status"] == "in_progress" {
            break;
        }
    }
    acp.notify("session/cancel", json!({"sessionId": id}));
    let (before, answer) = acp.until_answer(turn);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let trace = trace(&updates(&before));
    assert!(
        trace.contains(&"tool_call_update s failed".to_owned()),
        "{trace:?}"
    );
}

#[test]
fn a_running_commands_output_shows_as_the_calls_content_before_it_ends() {
    let daemon = TestDaemon::start();
    let go = daemon.dir.path().join("go");
    // The command holds after its first line until the test has seen that line on the bridge's
    // stdout: the update is live, whatever the machine's speed.
    let command = format!(
        "echo one; for _ in $(seq 1200); do [ -e '{}' ] && break; sleep 0.05; done; echo two",
        go.display()
    );
    let script = json!({"replies": [
        {"tool_calls": [{"id": "c", "name": "bash", "arguments": {"command": command}}]},
        {"text": "done"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let id = acp.ready_session(daemon.dir.path());
    let turn = acp.send("session/prompt", prompt(&id, "run it"));
    let content = |u: &Value| {
        u["content"][0]["content"]["text"]
            .as_str()
            .map(str::to_owned)
    };
    loop {
        let message = acp.recv();
        assert_ne!(
            message["id"], turn,
            "the turn ended before its output showed: {message}"
        );
        let update = &message["params"]["update"];
        if update["sessionUpdate"] == "tool_call_update" && update.get("status").is_none() {
            assert_eq!(update["toolCallId"], "c", "{update}");
            assert_eq!(content(update).as_deref(), Some("one\n"), "{update}");
            break;
        }
    }
    std::fs::write(&go, "").unwrap();
    let (before, answer) = acp.until_answer(turn);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let updates = updates(&before);
    let live: Vec<String> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u.get("status").is_none())
        .filter_map(content)
        .collect();
    assert!(
        live.iter()
            .all(|text| "one\ntwo\n".starts_with(text.as_str())),
        "each update is the output so far: {live:?}"
    );
    let done = updates
        .iter()
        .find(|u| u["status"] == "completed")
        .expect("the call completed");
    assert!(content(done).unwrap().contains("one\ntwo"), "{done}");
}

#[test]
fn bad_input_gets_json_rpc_errors_and_the_bridge_keeps_serving() {
    let daemon = TestDaemon::start();
    let mut acp = Acp::start(&daemon.socket, &[]);
    acp.line("{this is not json");
    let answer = acp.recv();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    acp.line(r#"{"id": 4, "method": "initialize"}"#);
    assert_eq!(acp.recv()["error"]["code"], -32600, "jsonrpc is missing");
    let error = acp.call_err("session/fly", json!({}));
    assert_eq!(error["code"], -32601);
    assert!(error["message"].as_str().unwrap().contains("session/fly"));
    let error = acp.call_err("initialize", json!({"protocolVersion": "one"}));
    assert_eq!(error["code"], -32602, "{error}");
    acp.initialize();
    let error = acp.call_err(
        "session/new",
        json!({"cwd": "relative/dir", "mcpServers": []}),
    );
    assert_eq!(error["code"], -32602);
    assert!(
        error["message"].as_str().unwrap().starts_with("cwd: "),
        "{error}"
    );
    let error = acp.call_err("session/prompt", json!({"prompt": []}));
    assert_eq!(error["code"], -32602);
    assert!(
        error["message"].as_str().unwrap().contains("sessionId"),
        "{error}"
    );
    let error = acp.call_err(
        "session/load",
        json!({"sessionId": "nobody", "cwd": "/", "mcpServers": []}),
    );
    assert_eq!(error["code"], -32002, "{error}");
    // An unknown notification is ignored; the bridge still answers.
    acp.notify("$/whatever", json!({}));
    assert_eq!(acp.initialize()["protocolVersion"], 1);
    assert!(acp.finish().success());
}

#[test]
fn without_a_daemon_initialize_fails_with_what_dshctl_status_says_and_stdin_close_exits_0() {
    let dir = dsh_tests::private_dir();
    let socket = dir.path().join("run/dshd.sock");
    let status = dsh_tests::dshctl_at(&socket, &["status"]);
    let said = String::from_utf8_lossy(&status.stderr)
        .trim()
        .trim_start_matches("dshctl: error: ")
        .to_owned();
    assert!(said.contains("no dshd is listening"), "{said}");
    let mut acp = Acp::start(&socket, &[]);
    let error = acp.call_err("initialize", json!({"protocolVersion": 1}));
    assert_eq!(error["message"], said.as_str(), "{error}");
    let error = acp.call_err("initialize", json!({"protocolVersion": 1}));
    assert_eq!(error["message"], said.as_str(), "still serving");
    let exited = acp.finish();
    assert!(exited.success(), "{exited:?}");
}

#[test]
fn a_child_agents_calls_show_as_tool_calls_of_the_parent_session() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "spawn", "name": "spawn_agent", "arguments": {"prompt": "count"},
          "child_script": {"replies": [
            {"tool_calls": [{"id": "k1", "name": "bash", "arguments": {"command": "echo child-ran"}}]},
            {"text": "child done"}]}}]},
        {"text": "parent done"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let id = acp.ready_session(daemon.dir.path());
    let (before, answer) = acp.call("session/prompt", prompt(&id, "delegate"));
    assert_eq!(answer["stopReason"], "end_turn");
    assert!(
        before
            .iter()
            .all(|m| m["params"]["sessionId"] == id.as_str()),
        "all on the parent's session"
    );
    let updates = updates(&before);
    let spawn = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == "spawn")
        .unwrap_or_else(|| panic!("{updates:?}"));
    assert_eq!(spawn["title"], "child agent: count");
    let child_call = updates
        .iter()
        .find(|u| {
            u["sessionUpdate"] == "tool_call" && u["toolCallId"].as_str().unwrap().ends_with("/k1")
        })
        .unwrap_or_else(|| panic!("no child call: {updates:?}"));
    let child_id = child_call["toolCallId"].as_str().unwrap().to_owned();
    assert!(
        child_call["title"].as_str().unwrap().starts_with("[child "),
        "{child_call}"
    );
    let child_done = updates
        .iter()
        .find(|u| u["toolCallId"] == child_id.as_str() && u["status"] == "completed")
        .unwrap_or_else(|| panic!("the child's call never completed: {updates:?}"));
    assert!(
        child_done["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("child-ran")
    );
    let order: Vec<String> = trace(&updates)
        .into_iter()
        .filter(|t| t.contains("spawn") || t.contains(&child_id))
        .collect();
    assert_eq!(order.first().unwrap(), "tool_call spawn pending");
    assert_eq!(
        order.last().unwrap(),
        "tool_call_update spawn completed",
        "{order:?}"
    );
}

/// An editor that stops reading the bridge's stdout: the bridge's output fills the pipe and its
/// bounded queue, yet it keeps reading stdin, so a `session/cancel` sent meanwhile still reaches
/// dshd and ends the turn. Once the editor reads again, every message is there, in order, ending
/// with the prompt's `cancelled`; closing stdin then ends the bridge with 0.
#[test]
fn an_editor_that_stops_reading_can_still_cancel_and_loses_nothing() {
    use std::io::BufRead;

    let daemon = TestDaemon::start();
    // 600 calls make about 1,800 updates: more than the pipe (64 KiB) and the bridge's queue
    // (1,024 messages) hold. Then a long command keeps the turn running until the cancel.
    let calls: Vec<Value> = (0..600)
        .map(|i| json!({"id": format!("c{i}"), "name": "bash", "arguments": {"command": "true"}}))
        .collect();
    let script = json!({"replies": [
        {"tool_calls": calls},
        {"tool_calls": [{"id": "s", "name": "bash", "arguments": {"command": "sleep 29.517"}}]},
        {"text": "never"},
    ]});
    let path = script_file(&daemon, &script);
    let mut child = spawn_bridge(&daemon.socket, &["--script", path.to_str().unwrap()]);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    fn next(stdout: &mut impl BufRead) -> Value {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout ended");
        serde_json::from_str(&line).unwrap()
    }
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
    );
    assert_eq!(next(&mut stdout)["id"], 1);
    let cwd = daemon.dir.path().to_str().unwrap();
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
    );
    let id = next(&mut stdout)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt(&id, "go")}),
    );

    // Not reading: the pipe fills (and behind it the queue), and the turn reaches its long call.
    // "Full" is three quarters of the pipe's size: the pipe holds whole pages, and a message that
    // does not fit in the last page's tail starts the next page, so a full pipe of ~300-byte
    // messages holds less than its size (59,756 of 65,536 bytes in one CI run).
    let unread = || rustix::io::ioctl_fionread(stdout.get_ref()).unwrap();
    let full = rustix::pipe::fcntl_getpipe_size(stdout.get_ref()).unwrap() as u64 * 3 / 4;
    assert!(
        dsh_tests::eventually(PATIENCE, || unread() >= full),
        "the bridge's stdout never filled: {} of {full} bytes waiting",
        unread()
    );
    let sleeping = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| c.windows(6).any(|w| w == b"29.517"))
        })
    };
    assert!(
        dsh_tests::eventually(PATIENCE, sleeping),
        "the long call never started"
    );
    let state = || daemon.dshctl_json(&["agent", "show", &id])["state"].clone();
    assert_eq!(state(), "running");

    send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": id}}));
    assert!(
        dsh_tests::eventually(PATIENCE, || state() == "idle"),
        "the cancel sent while stdout was full did not reach dshd"
    );
    assert!(
        unread() >= full,
        "the test read the bridge's stdout before the cancel landed"
    );

    // Reading again: every update of every call, then the answer.
    let (mut finished, mut answer) = (0, None);
    while answer.is_none() {
        let message = next(&mut stdout);
        if message["params"]["update"]["sessionUpdate"] == "tool_call_update"
            && message["params"]["update"]["status"] == "completed"
        {
            finished += 1;
        }
        if message["id"] == 3 {
            answer = Some(message);
        }
    }
    assert_eq!(finished, 600, "calls whose completion was lost");
    assert_eq!(answer.unwrap()["result"]["stopReason"], "cancelled");
    drop(stdin);
    let status = wait_child(&mut child, PATIENCE).expect("dshctl acp did not exit");
    assert!(status.success(), "{status:?}");
}
