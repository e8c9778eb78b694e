//! Agents with the keyless scripted model end to end, through the real `dshd` and `dshctl`: turns
//! and their events, tools, child agents, refusals of bad input (with their gRPC codes), cancel,
//! close and SIGTERM in the middle of a turn, and two agents running at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::time::Duration;

use dsh_proto::v1;
use dsh_tests::TestDaemon;
use dsh_tests::agents::{
    PATIENCE, Prompted, as_logged, count, finish_prompt, has_step_start, read_session_file, types,
};
use rustix::process::Signal;
use serde_json::{Value, json};
use tonic::Code;

fn assert_serving(daemon: &TestDaemon) {
    assert!(
        daemon.dshctl(&["status"]).status.success(),
        "the daemon stopped serving; log:\n{}",
        daemon.log_text()
    );
}

/// `dshctl --json ARGS` that must fail: returns the error document's (kind, message), after
/// checking the exit code and that stderr says the same.
fn refused(daemon: &TestDaemon, args: &[&str]) -> (String, String) {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = daemon.dshctl(&full);
    assert_eq!(out.status.code(), Some(1), "{args:?} did not fail: {out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = doc["error"]["message"].as_str().unwrap().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&message),
        "stderr lacks the message: {stderr}"
    );
    (doc["error"]["kind"].as_str().unwrap().to_owned(), message)
}

/// A script whose only reply waits (cancellably) for ten minutes.
fn slow() -> Value {
    json!({"replies": [{"text": "too late", "delay_ms": 600_000}]})
}

fn tool_results(prompted: &Prompted) -> Vec<&Value> {
    prompted.tool_results()
}

#[test]
fn a_scripted_prompt_streams_its_turn_and_completes_with_the_reply() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(
        &daemon.workdir("hello"),
        &json!({"replies": [{"text": "hello there"}]}),
    );
    let prompted = daemon.prompt(&id, "greet me");
    prompted.assert_completed();
    let kinds: Vec<&str> = prompted
        .lines
        .iter()
        .map(|l| l["type"].as_str().unwrap())
        .filter(|t| *t != "text/delta")
        .collect();
    // Every event of the log, in the log's vocabulary.
    assert_eq!(
        kinds,
        [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    assert_eq!(prompted.turn_started(), 1);
    assert_eq!(prompted.text(), "hello there");
    let logged: Vec<&Value> = prompted
        .lines
        .iter()
        .filter(|l| l["seq"].is_u64())
        .collect();
    assert_eq!(
        as_logged(&logged.into_iter().cloned().collect::<Vec<_>>()),
        daemon.events(&id),
        "the prompt stream and session events print the same events"
    );
    assert_eq!(prompted.reason(), ("completed".to_owned(), String::new()));

    let shown = daemon.dshctl_json(&["agent", "show", &id]);
    assert_eq!(shown["state"], "idle");
    assert_eq!(shown["turns"], 1);
    assert_eq!(shown["provider"], "scripted");
}

#[test]
fn a_bash_call_runs_in_the_session_cwd_and_its_result_feeds_the_next_step() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("bash");
    let id = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "pwd; echo \"id=$DSH_SESSION_ID\""}}]},
            {"text": "done"}
        ]}),
    );
    let prompted = daemon.prompt(&id, "where am I?");
    prompted.assert_completed();
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1);
    let content = results[0]["content"].as_str().unwrap();
    assert!(content.contains(cwd.to_str().unwrap()), "{content}");
    assert!(content.contains(&format!("id={id}")), "{content}");
    assert_eq!(results[0]["isError"], false);
    let events = daemon.events(&id);
    assert_eq!(count(&events, "step/start"), 2);
    assert_eq!(count(&events, "tool/call"), 1);
    assert_eq!(count(&events, "tool/result"), 1);
}

#[test]
fn the_spawn_agent_tool_runs_a_stored_child_whose_answer_is_the_result() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("delegate");
    let parent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "count the files"},
                             "child_script": {"replies": [{"text": "42 files"}]}}]},
            {"text": "the child says 42"}
        ]}),
    );
    let prompted = daemon.prompt(&parent, "delegate it");
    prompted.assert_completed();
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["content"], "42 files");
    assert_eq!(results[0]["isError"], false);

    // The one-shot child is closed, its session stored next to its parent's.
    assert_eq!(
        daemon.dshctl_json(&["agent", "list"])["agents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let sessions = daemon.dshctl_json(&["session", "list"]);
    let child = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["header"]["parent_session"] == parent.as_str())
        .unwrap_or_else(|| panic!("no child session in {sessions}"));
    assert_eq!(child["header"]["origin"], "subagent");
    assert_eq!(child["header"]["delegation_depth"], 1);
    let child_id = child["header"]["id"].as_str().unwrap();
    let child_path = daemon.located_path(child_id);
    let parent_path = daemon.located_path(&parent);
    assert_eq!(
        child_path.parent().unwrap().parent(),
        parent_path.parent().unwrap().parent()
    );
    let child_log = read_session_file(&child_path).expect("child log missing");
    assert_eq!(child_log.header["parentSession"], parent.as_str());
    assert!(
        child_log
            .events
            .iter()
            .any(|e| e["type"] == "assistant/message" && e["data"]["message"]["text"] == "42 files")
    );
    let parent_log = read_session_file(&parent_path).unwrap();
    assert!(
        !parent_log
            .events
            .iter()
            .any(|e| e["type"] == "assistant/message" && e["data"]["message"]["text"] == "42 files"),
        "the child's answer was logged as the parent's message"
    );
}

#[test]
fn two_agents_prompted_at_once_each_log_only_their_own_events() {
    let daemon = TestDaemon::start();
    let rendezvous = daemon.dir.path().join("rendezvous");
    std::fs::create_dir(&rendezvous).unwrap();
    // Each agent's bash call announces itself and waits until the other one has started too, so
    // the two turns are provably running at the same time.
    let script = |me: &str, other: &str| {
        let command = format!(
            "cd {dir}; touch {me}; for i in $(seq 2000); do [ -e {other} ] && break; sleep 0.01; done; \
             [ -e {other} ] && echo \"{me} saw {other} as $DSH_SESSION_ID\"",
            dir = rendezvous.display()
        );
        json!({"replies": [
            {"text": format!("{me} step 1"), "tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": format!("answer from {me}")}
        ]})
    };
    let a = daemon.new_agent(&daemon.workdir("a"), &script("alpha", "beta"));
    let b = daemon.new_agent(&daemon.workdir("b"), &script("beta", "alpha"));
    let run_a = daemon.prompt_in_background(&a, "go a");
    let run_b = daemon.prompt_in_background(&b, "go b");
    let (pa, pb) = (finish_prompt(run_a), finish_prompt(run_b));

    for (prompted, id, me, other, other_id) in [
        (&pa, &a, "alpha", "beta", &b),
        (&pb, &b, "beta", "alpha", &a),
    ] {
        prompted.assert_completed();
        assert_eq!(prompted.text(), format!("answer from {me}"));
        let results = tool_results(prompted);
        assert_eq!(results.len(), 1);
        assert_eq!(
            results[0]["content"].as_str().unwrap().trim(),
            format!("{me} saw {other} as {id}")
        );
        let log = read_session_file(&daemon.located_path(id)).unwrap();
        assert_eq!(log.events, daemon.events(id));
        let text = serde_json::to_string(&log.events).unwrap();
        assert!(
            !text.contains(other_id.as_str()),
            "{me}'s log mentions {other_id}"
        );
        assert!(!text.contains(&format!("answer from {other}")));
        assert!(!text.contains(&format!("go {}", &other[..1])));
        assert_eq!(count(&log.events, "turn/start"), 1);
    }
}

#[path = "agents/cancel.rs"]
mod cancel;
#[path = "agents/memory.rs"]
mod memory;
#[path = "agents/refusals.rs"]
mod refusals;
#[path = "agents/settings.rs"]
mod settings;
