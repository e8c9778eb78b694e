//! MCP servers as agent tools, with real servers: a Python server written with the official
//! `mcp` package (tests/fixtures/mcp/probe_server.py) started per agent from `[mcp_servers]`.
//! Its tools reach the model as `mcp__probe__<tool>`; it runs with the session's managed
//! snapshot (its own `DSH_SESSION_ID`, `Locate`'s `DSH_SESSION_JSONL`, no outer `DSH_*`) inside
//! the agent's sandbox; servers that never answer or write garbage cost the turn nothing; a
//! crashed server is started again at the next turn; close and kill -9 of dshd leave no server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;

use dsh_tests::agents::PATIENCE;
use dsh_tests::shell::{locate, prompt, prompt_results, workdir};
use dsh_tests::{DaemonSpec, TestDaemon, eventually, mcp};
use serde_json::{Value, json};

/// A daemon whose agents get the probe server, and two bad ones: `silent` never answers
/// `initialize`, `garbage` floods its stdout with lines that are not JSON-RPC.
fn daemon() -> TestDaemon {
    let config = format!(
        r#"
[mcp_servers.probe]
command = {python:?}
args = [{server:?}]

[mcp_servers.silent]
command = "sleep"
args = ["600"]
startup_timeout_ms = 500

[mcp_servers.garbage]
command = "yes"
args = ["this is not JSON-RPC"]
startup_timeout_ms = 500
"#,
        python = mcp::python().display().to_string(),
        server = mcp::probe_server().display().to_string(),
    );
    TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        env: vec![("DSH_SESSION_ID".into(), "outer-forged".into())],
        ..DaemonSpec::default()
    })
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": format!("mcp__probe__{name}"), "arguments": arguments})
}

/// `dshctl --json mcp list --agent AGENT`'s servers, by name.
fn servers(daemon: &TestDaemon, agent: &str) -> Value {
    let doc = daemon.dshctl_json(&["mcp", "list", "--agent", agent]);
    let mut by_name = serde_json::Map::new();
    for server in doc["agents"][0]["mcp_servers"].as_array().unwrap() {
        by_name.insert(server["name"].as_str().unwrap().to_owned(), server.clone());
    }
    Value::Object(by_name)
}

fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

/// Waits until process `pid` is gone; fails the test after a generous bound.
fn gone(pid: &str, after: &str) {
    eventually_holds(
        &format!("the MCP server {pid} is gone after {after}"),
        || !alive(pid),
    );
}

#[test]
fn a_servers_tools_run_with_the_sessions_identity_inside_its_sandbox_and_stop_with_it() {
    let daemon = daemon();
    let cwd = workdir(&daemon, "w");
    let outside = daemon.dir.path().join("outside.txt");
    let inside = cwd.join("inside.txt");
    let agent = daemon.new_agent_with(
        &cwd,
        &["--sandbox", "workspace-write"],
        &json!({"replies": [
            {"tool_calls": [
                call("env", json!({"prefix": "DSH_"})),
                call("write_file", json!({"path": outside, "text": "escaped"})),
                call("write_file", json!({"path": inside, "text": "kept"})),
                call("pid", json!({})),
            ]},
            {"text": "done"},
        ]}),
    );
    assert_eq!(servers(&daemon, &agent)["probe"]["state"], "not started");
    let results = prompt_results(&prompt(&daemon, &agent, "use the probe"));
    assert_eq!(results.len(), 4, "{results:?}");
    let [env, out, ins, pid] = &results[..] else {
        unreachable!()
    };
    let transcript = locate(&daemon, &agent).unwrap();
    assert!(!env.is_error, "{env:?}");
    let lines: Vec<&str> = env.content.lines().collect();
    assert!(
        lines.contains(&format!("DSH_SESSION_ID={agent}").as_str()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("DSH_SESSION_JSONL={transcript}").as_str()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("DSH_HOME={}", daemon.home.display()).as_str()),
        "{lines:?}"
    );
    assert!(!env.content.contains("outer-forged"), "{lines:?}");

    assert!(
        out.is_error,
        "a write outside the workspace must fail: {out:?}"
    );
    assert!(!outside.exists());
    assert!(!ins.is_error, "{ins:?}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "kept");

    // The bad servers offered nothing and cost the turn nothing; the log has the calls.
    let events = daemon.events(&agent);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "mcp__probe__env",
            "mcp__probe__write_file",
            "mcp__probe__write_file",
            "mcp__probe__pid"
        ]
    );

    // `dshctl mcp list` says where each stands and why the bad ones offer nothing.
    let listed = servers(&daemon, &agent);
    assert_eq!(listed["probe"]["state"], "running", "{listed}");
    // A tool whose name a provider would refuse is left out, and said.
    let left_out = listed["probe"]["last_error"].as_str().unwrap();
    assert!(
        left_out.contains("not offered: tool \"files.list\"") && left_out.contains("ASCII letters"),
        "{left_out}"
    );
    assert_eq!(
        listed["probe"]["tools"],
        json!([
            "mcp__probe__env",
            "mcp__probe__pid",
            "mcp__probe__write_file",
            "mcp__probe__wait",
            "mcp__probe__big",
            "mcp__probe__crash"
        ]),
        "{listed}"
    );
    for bad in ["silent", "garbage"] {
        assert_eq!(listed[bad]["state"], "failed", "{listed}");
        assert_eq!(listed[bad]["tools"], json!([]), "{listed}");
        let error = listed[bad]["last_error"].as_str().unwrap();
        assert!(error.contains("no answer within 500 ms"), "{error}");
    }

    let pid = pid.content.trim().to_owned();
    assert!(
        alive(&pid),
        "the server {pid} should run while the agent is live"
    );
    assert!(daemon.dshctl(&["agent", "close", &agent]).status.success());
    gone(&pid, "its agent closed");
}

#[test]
fn a_crashed_server_starts_again_at_the_next_turn_and_kill_9_of_dshd_leaves_none() {
    let mut daemon = daemon();
    let cwd = workdir(&daemon, "w");
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [call("pid", json!({}))]},
            {"tool_calls": [call("crash", json!({}))]},
            {"text": "it crashed"},
            {"tool_calls": [call("pid", json!({}))]},
            {"text": "back"},
        ]}),
    );
    let first = prompt_results(&prompt(&daemon, &agent, "crash it"));
    assert_eq!(first.len(), 2, "{first:?}");
    let before = first[0].content.trim().to_owned();
    assert!(first[1].is_error, "{:?}", first[1]);
    assert!(
        first[1].content.contains("MCP server probe"),
        "the error names the server: {:?}",
        first[1]
    );
    gone(&before, "it crashed");

    let second = prompt_results(&prompt(&daemon, &agent, "again"));
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(!second[0].is_error, "{:?}", second[0]);
    let after = second[0].content.trim().to_owned();
    let listed = servers(&daemon, &agent);
    assert_eq!(listed["probe"]["state"], "running", "{listed}");
    assert_eq!(listed["probe"]["starts"], 2, "{listed}");
    assert_ne!(after, before, "a new server process");
    assert!(alive(&after));

    daemon.kill9();
    gone(&after, "dshd was killed with SIGKILL");
}

/// A client's servers are checked before anything is made live: each refusal names the field,
/// and no agent is made live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_bad_servers_are_refused_naming_the_field_and_nothing_is_made_live() {
    let daemon = tokio::task::spawn_blocking(daemon).await.unwrap();
    let client = daemon.client().await;
    let spec = |name: &str, command: &str| dsh_proto::v1::McpServerSpec {
        name: name.into(),
        command: command.into(),
        ..Default::default()
    };
    let with_env = dsh_proto::v1::McpServerSpec {
        env: [("DSH_SESSION_ID".to_owned(), "forged".to_owned())].into(),
        ..spec("ok", "x")
    };
    let relative = dsh_proto::v1::McpServerSpec {
        cwd: "rel/dir".into(),
        ..spec("ok", "x")
    };
    for (servers, says) in [
        (vec![spec("a b", "x")], "mcp_servers[0].name"),
        (vec![spec("a__b", "x")], "mcp_servers[0].name"),
        (
            vec![spec("ok", "x"), spec("ok", "y")],
            "mcp_servers[1].name: given twice",
        ),
        (vec![spec("probe", "x")], "dshd's config"),
        (vec![spec("ok", "")], "mcp_servers[0].command"),
        (vec![with_env], "mcp_servers[0].env"),
        (vec![relative], "mcp_servers[0].cwd"),
    ] {
        let refused = client
            .agents()
            .create(dsh_proto::v1::CreateAgentRequest {
                cwd: daemon.dir.path().display().to_string(),
                mcp_servers: servers,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().contains(says),
            "{says}: {}",
            refused.message()
        );
    }
    let live = client
        .agents()
        .list(dsh_proto::v1::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(live.agents.is_empty(), "{live:?}");
    tokio::task::spawn_blocking(move || drop(daemon))
        .await
        .unwrap();
}

/// The reference server (`@modelcontextprotocol/server-everything`, pinned, over stdio): its
/// tools' results reach the model (text as is, an image described, never dropped), and its
/// `get-env` shows the session's identity and no outer `DSH_*`.
#[test]
fn the_reference_server_over_stdio_answers_with_the_sessions_identity() {
    let config = format!(
        "[mcp_servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n",
        mcp::everything().display().to_string()
    );
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        env: vec![("DSH_SESSION_ID".into(), "outer-forged".into())],
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let call = |name: &str, arguments: Value| json!({"name": format!("mcp__everything__{name}"), "arguments": arguments});
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [
                call("echo", json!({"message": "hello from dsh"})),
                call("get-tiny-image", json!({})),
                call("get-env", json!({})),
            ]},
            {"text": "done"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "use everything"));
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results.iter().all(|r| !r.is_error), "{results:?}");
    assert_eq!(results[0].content, "Echo: hello from dsh");
    assert!(
        results[1].content.contains("[image content (image/png, ")
            && results[1].content.contains("not shown"),
        "{}",
        results[1].content
    );
    let env: Value = serde_json::from_str(&results[2].content).unwrap();
    assert_eq!(env["DSH_SESSION_ID"], agent.as_str(), "{env}");
    assert_eq!(
        env["DSH_SESSION_JSONL"],
        locate(&daemon, &agent).unwrap().as_str()
    );
    assert_eq!(env["DSH_SHELL"], "1");
    assert!(!results[2].content.contains("outer-forged"));
}

/// A call past `tool_timeout_ms` is an error the model reads and the server is told to stop
/// (`notifications/cancelled`: the probe's wait sees its cancellation), and the server keeps
/// serving; a 100 MB result is dropped unread (16 MiB per line at most) rather than held, and
/// its call ends at the timeout; a cancelled turn tells the server the same.
#[test]
fn a_slow_call_times_out_and_a_cancelled_turn_cancels_the_servers_call() {
    let config = format!(
        "[mcp_servers.probe]\ncommand = {:?}\nargs = [{:?}]\ntool_timeout_ms = 500\n",
        mcp::python().display().to_string(),
        mcp::probe_server().display().to_string(),
    );
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let timed_out = daemon.dir.path().join("timed-out");
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [call("wait", json!({"seconds": 30, "marker": timed_out}))]},
            {"tool_calls": [call("pid", json!({}))]},
            {"tool_calls": [call("big", json!({"megabytes": 100}))]},
            {"text": "went on"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "wait"));
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].is_error, "{:?}", results[0]);
    assert!(
        results[0].content.contains("no answer within 500 ms"),
        "{:?}",
        results[0]
    );
    assert!(
        !results[1].is_error,
        "the server still serves: {:?}",
        results[1]
    );
    // Dropped unread: the call ends at its timeout (the server stays busy writing it a while).
    assert!(results[2].is_error, "{:?}", results[2]);
    assert!(
        results[2].content.contains("no answer within 500 ms"),
        "{:?}",
        results[2]
    );
    eventually_holds("the server saw the timed-out call cancelled", || {
        std::fs::read_to_string(&timed_out).is_ok_and(|t| t == "cancelled")
    });

    // A turn cancelled while the call runs (the default timeout is far away).
    let cancelled = daemon.dir.path().join("cancelled");
    let waiting = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [call("wait", json!({"seconds": 30, "marker": cancelled}))]},
            {"text": "never"},
        ]}),
    );
    let mut turn = daemon.prompt_in_background(&waiting, "go");
    eventually_holds("the wait was called", || {
        daemon
            .events(&waiting)
            .iter()
            .any(|e| e["type"] == "tool/call")
    });
    assert!(
        daemon
            .dshctl(&["agent", "cancel", &waiting])
            .status
            .success()
    );
    turn.wait().unwrap();
    eventually_holds("the server saw the cancelled turn's call cancelled", || {
        std::fs::read_to_string(&cancelled).is_ok_and(|t| t == "cancelled")
    });
}

/// Polls `cond` until it holds; fails the test, saying `what`, after the shared bound.
fn eventually_holds(what: &str, cond: impl FnMut() -> bool) {
    assert!(eventually(PATIENCE, cond), "never: {what}");
}

/// The reference server over streamable HTTP, configured by `url` with a header: its tools reach
/// the model as a stdio server's do.
#[test]
fn the_reference_server_over_streamable_http_answers() {
    let server = mcp::HttpEverything::start();
    let config = format!(
        "[mcp_servers.web]\nurl = {:?}\nhttp_headers = {{ X-Team = \"dsh\" }}\n",
        server.url
    );
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [
                {"name": "mcp__web__echo", "arguments": {"message": "over HTTP"}},
                {"name": "mcp__web__get-sum", "arguments": {"a": 2, "b": 3}},
            ]},
            {"text": "done"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "use the web server"));
    let listed = servers(&daemon, &agent);
    assert_eq!(listed["web"]["state"], "running", "{listed}");
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().all(|r| !r.is_error), "{results:?}");
    assert_eq!(results[0].content, "Echo: over HTTP");
    assert!(results[1].content.contains('5'), "{:?}", results[1]);
}

/// A `spawn_agent` child gets a server only when the config says `children = true`, and then its
/// own instance, which knows the child's session, not the parent's.
#[test]
fn a_child_gets_its_own_instance_only_of_servers_configured_for_children() {
    let server = |name: &str, children: bool| {
        format!(
            "[mcp_servers.{name}]\ncommand = {:?}\nargs = [{:?}]\nchildren = {children}\n",
            mcp::python().display().to_string(),
            mcp::probe_server().display().to_string(),
        )
    };
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "{}{}",
            server("shared", true),
            server("own", false)
        )),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let child_script = json!({"replies": [
        {"tool_calls": [
            {"name": "mcp__shared__env", "arguments": {"prefix": "DSH_SESSION_ID"}},
            {"name": "mcp__own__env", "arguments": {"prefix": "DSH_SESSION_ID"}},
        ]},
        {"text": "child done"},
    ]});
    let parent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [
                {"name": "mcp__own__env", "arguments": {"prefix": "DSH_SESSION_ID"}},
                dsh_tests::shell::spawn_call("look", &child_script),
            ]},
            {"text": "parent done"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &parent, "delegate"));
    assert_eq!(results[0].content, format!("DSH_SESSION_ID={parent}"));
    let children = dsh_tests::shell::children_of(&daemon, &parent);
    assert_eq!(children.len(), 1, "{children:?}");
    let child = &children[0];
    let child_results = dsh_tests::shell::session_results(&daemon, child);
    assert_eq!(child_results.len(), 2, "{child_results:?}");
    assert_eq!(child_results[0].content, format!("DSH_SESSION_ID={child}"));
    assert!(!child_results[0].is_error);
    assert!(child_results[1].is_error, "{:?}", child_results[1]);
    assert!(
        child_results[1].content.contains("unknown tool"),
        "{:?}",
        child_results[1]
    );
}

/// A turn cancelled while its servers start (one never answers, and may take ten minutes) ends
/// at once, aborted, and the starting server's process is killed.
#[test]
fn a_turn_cancelled_while_its_servers_start_ends_and_kills_them() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(
            "[mcp_servers.slow]\ncommand = \"sleep\"\nargs = [\"3141\"]\nstartup_timeout_ms = 600000\n"
                .into(),
        ),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let agent = daemon.new_agent(&cwd, &json!({"replies": [{"text": "never"}]}));
    let mut turn = daemon.prompt_in_background(&agent, "go");
    let sleeping = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x003141\x00")
            })
    };
    eventually_holds("the server is starting", sleeping);
    assert!(daemon.dshctl(&["agent", "cancel", &agent]).status.success());
    eventually_holds("the cancelled turn ended", || {
        turn.try_wait().unwrap().is_some()
    });
    eventually_holds("the starting server was killed", || !sleeping());
    let ends: Vec<Value> = daemon
        .events(&agent)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["data"]["reason"]["kind"], "aborted", "{ends:?}");
}
