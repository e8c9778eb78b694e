//! What a client acts on, given in a form a program reads rather than in words: the refusals
//! carry a `google.rpc.ErrorInfo` (domain `dsh`, a reason, metadata; docs/PROTOCOL.md, "Errors"),
//! read here by a plain gRPC client with tonic-types as a client in any language would read them,
//! and a turn that reaches the step limit ends with a reason of its own, which `dshctl prompt`,
//! `dshctl session events` and the ACP bridge (acp.rs) show.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::collections::HashMap;

use dsh_proto::v1;
use dsh_tests::agents::PATIENCE;
use dsh_tests::{DaemonSpec, TestDaemon, eventually};
use serde_json::{Value, json};
use tonic::Code;
use tonic_types::StatusExt;

/// The reason and metadata of `status`'s ErrorInfo, checked to be in dsh's domain.
fn error_info(status: &tonic::Status) -> (String, HashMap<String, String>) {
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "dsh", "{status:?}");
    (info.reason, info.metadata)
}

fn pairs(entries: &[(&str, &str)]) -> HashMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_agent_and_one_that_is_not_live_are_refused_with_their_reasons() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("running");
    let command = format!("touch {}; sleep 300", marker.display());
    let id = daemon.new_agent(
        &daemon.workdir("busy"),
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "done"}
        ]}),
    );
    let first = daemon.prompt_in_background(&id, "run it");
    assert!(
        eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );
    let mut agents = daemon.client().await.agents();
    let prompt = |text: &str| v1::PromptRequest {
        agent_id: id.clone(),
        text: text.to_owned(),
    };

    let busy = agents.prompt(prompt("me too")).await.unwrap_err();
    assert_eq!(busy.code(), Code::FailedPrecondition, "{busy:?}");
    assert_eq!(
        error_info(&busy),
        (
            "AGENT_BUSY".to_owned(),
            pairs(&[("agent_id", &id), ("turn", "1")])
        )
    );

    agents
        .close(v1::CloseAgentRequest {
            agent_id: id.clone(),
        })
        .await
        .unwrap();
    let first = dsh_tests::agents::finish_prompt(first);
    assert_eq!(first.reason().0, "aborted");
    // Stored, not live: it must be resumed before it takes a prompt.
    let stored = agents.prompt(prompt("hello?")).await.unwrap_err();
    assert_eq!(stored.code(), Code::NotFound, "{stored:?}");
    assert_eq!(
        error_info(&stored),
        ("AGENT_NOT_LIVE".to_owned(), pairs(&[("agent_id", &id)]))
    );
    // NOT_FOUND for something else (a session no backend holds) is no AGENT_NOT_LIVE.
    let unknown = daemon
        .client()
        .await
        .persistence()
        .locate(v1::LocateRequest {
            session_id: "0198c0de-0000-7000-8000-000000000000".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    assert!(unknown.get_details_error_info().is_none(), "{unknown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_a_key_is_refused_naming_the_variable() {
    let daemon = TestDaemon::start();
    let refused = daemon
        .client()
        .await
        .agents()
        .create(v1::CreateAgentRequest {
            cwd: daemon.dir.path().to_str().unwrap().to_owned(),
            model: Some(v1::ModelSpec {
                provider: "openai".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        error_info(&refused),
        (
            "NO_MODEL_KEY".to_owned(),
            pairs(&[("variable", "DEEPSEEK_API_KEY")])
        )
    );
}

/// A daemon whose turns end after two steps, and an agent whose model never stops calling tools.
fn step_limited() -> (TestDaemon, String) {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[agent]\nmax_steps_per_turn = 2\n".to_owned()),
        ..DaemonSpec::default()
    });
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]});
    let id = daemon.new_agent(
        &daemon.workdir("steps"),
        &json!({"replies": [call, call, call, {"text": "never"}]}),
    );
    (daemon, id)
}

#[test]
fn a_turn_at_the_step_limit_ends_step_limit_in_prompt_and_session_events() {
    let (daemon, id) = step_limited();
    let prompt = daemon.dshctl(&["prompt", "--agent", &id, "loop"]);
    let stdout = String::from_utf8_lossy(&prompt.stdout);
    assert_eq!(prompt.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "── turn 1 step_limit: the turn reached the limit of 2 steps (agent.max_steps_per_turn)"
        ),
        "{stdout}"
    );

    let events = daemon.events(&id);
    let end = events
        .iter()
        .rev()
        .find(|e| e["type"] == "turn/end")
        .unwrap();
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "step_limit", "limit": 2}),
        "{end}"
    );
    let shown = daemon.dshctl(&["session", "events", &id]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    let line = shown
        .lines()
        .find(|l| l.contains("turn/end"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        line.contains(r#""reason":{"kind":"step_limit","limit":2}"#)
            && line.ends_with("[fork point]"),
        "{line}"
    );
}

/// The step limit as the `--json` stream's last line says it.
#[test]
fn the_json_stream_ends_with_the_step_limit() {
    let (daemon, id) = step_limited();
    let prompted = daemon.prompt(&id, "loop");
    assert_eq!(prompted.code, Some(1), "{}", prompted.stderr);
    let last: &Value = prompted.lines.last().unwrap();
    assert_eq!(last["type"], "turn/end", "{last}");
    assert_eq!(last["data"]["reason"]["kind"], "step_limit", "{last}");
}
