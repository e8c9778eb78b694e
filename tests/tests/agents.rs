//! Agents with the keyless scripted model end to end, through the real `dshd` and `dshctl`: turns
//! and their events, tools, child agents, refusals of bad input (with their gRPC codes), cancel,
//! close and SIGTERM in the middle of a turn, and two agents running at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::time::Duration;

use dsh_proto::v1;
use dsh_tests::TestDaemon;
use dsh_tests::agents::{
    PATIENCE, Prompted, count, finish_prompt, has_step_start, read_session_file, types,
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
    prompted
        .lines
        .iter()
        .filter(|l| l["type"] == "tool_result")
        .collect()
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
        .filter(|t| *t != "text_delta")
        .collect();
    assert_eq!(
        kinds,
        [
            "turn_started",
            "step_started",
            "assistant_text",
            "step_ended",
            "turn_ended"
        ]
    );
    assert_eq!(prompted.turn_started(), 1);
    assert_eq!(prompted.turn_ended()["text"], "hello there");
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
    assert_eq!(results[0]["is_error"], false);
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
    assert_eq!(results[0]["is_error"], false);

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

#[tokio::test]
async fn unknown_agent_and_session_ids_are_not_found_and_named() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let mut agents = client.agents();
    let mut persistence = client.persistence();
    // A well-formed id nobody has, an id that would climb out of the sessions root if it were
    // used as a path, and the longest id accepted (256 bytes).
    for id in [
        "0190a0a0-0000-7000-8000-000000000000".to_owned(),
        "../../etc".to_owned(),
        "x".repeat(256),
    ] {
        let codes = [
            (
                "get",
                agents
                    .get(v1::GetAgentRequest {
                        agent_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "prompt",
                agents
                    .prompt(v1::PromptRequest {
                        agent_id: id.clone(),
                        text: "hi".into(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "cancel",
                agents
                    .cancel(v1::CancelAgentRequest {
                        agent_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "close",
                agents
                    .close(v1::CloseAgentRequest {
                        agent_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "spawn",
                agents
                    .spawn(v1::SpawnAgentRequest {
                        parent_agent_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "resume",
                agents
                    .resume(v1::ResumeAgentRequest {
                        session_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "fork",
                agents
                    .fork(v1::ForkAgentRequest {
                        session_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "locate",
                persistence
                    .locate(v1::LocateRequest {
                        session_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "read_events",
                persistence
                    .read_events(v1::ReadEventsRequest {
                        session_id: id.clone(),
                        from_seq: 0,
                    })
                    .await
                    .map(drop),
            ),
        ];
        for (rpc, result) in codes {
            let status = result.expect_err(rpc);
            assert_eq!(status.code(), Code::NotFound, "{rpc} {id}: {status:?}");
            assert!(
                status.message().contains(&id),
                "{rpc}: {}",
                status.message()
            );
        }
    }
    assert!(
        !daemon.home.join("etc").exists() && !daemon.home.join("sessions").exists(),
        "a lookup touched the disk"
    );

    // dshctl says the same, exits 1, and the daemon keeps serving.
    for args in [
        &["agent", "show", "nobody"][..],
        &["prompt", "--agent", "nobody", "hi"],
        &["agent", "resume", "nobody"],
        &["session", "locate", "nobody"],
        &["session", "events", "nobody"],
    ] {
        let (kind, message) = refused(&daemon, args);
        assert_eq!(kind, "not_found", "{args:?}");
        assert!(message.contains("nobody"), "{args:?}: {message}");
    }
    assert_serving(&daemon);
}

#[tokio::test]
async fn empty_and_oversized_ids_are_invalid_arguments_naming_the_field() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let mut agents = client.agents();
    let mut persistence = client.persistence();
    for id in [String::new(), "x".repeat(257)] {
        let calls = [
            (
                "agent_id",
                agents
                    .get(v1::GetAgentRequest {
                        agent_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "agent_id",
                agents
                    .prompt(v1::PromptRequest {
                        agent_id: id.clone(),
                        text: "hi".into(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "agent_id",
                agents
                    .cancel(v1::CancelAgentRequest {
                        agent_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "parent_agent_id",
                agents
                    .spawn(v1::SpawnAgentRequest {
                        parent_agent_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "session_id",
                agents
                    .resume(v1::ResumeAgentRequest {
                        session_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "session_id",
                agents
                    .fork(v1::ForkAgentRequest {
                        session_id: id.clone(),
                        model: None,
                    })
                    .await
                    .map(drop),
            ),
            (
                "session_id",
                persistence
                    .locate(v1::LocateRequest {
                        session_id: id.clone(),
                    })
                    .await
                    .map(drop),
            ),
            (
                "session_id",
                persistence
                    .read_events(v1::ReadEventsRequest {
                        session_id: id.clone(),
                        from_seq: 0,
                    })
                    .await
                    .map(drop),
            ),
        ];
        for (field, result) in calls {
            let status = result.expect_err(field);
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{field} of {} bytes: {status:?}",
                id.len()
            );
            assert!(status.message().starts_with(field), "{}", status.message());
        }
    }
    let id = daemon.new_agent(&daemon.workdir("empty-prompt"), &json!({"replies": []}));
    let status = agents
        .prompt(v1::PromptRequest {
            agent_id: id,
            text: " \n".into(),
        })
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("text"), "{}", status.message());
    let (kind, message) = refused(&daemon, &["session", "locate", &"y".repeat(257)]);
    assert_eq!(kind, "invalid_argument");
    assert!(message.contains("session_id"), "{message}");
    assert_serving(&daemon);
}

#[tokio::test]
async fn resuming_a_live_session_is_refused_as_already_existing() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(
        &daemon.workdir("live"),
        &json!({"replies": [{"text": "hi"}]}),
    );
    daemon.prompt(&id, "hello").assert_completed();
    let status = daemon
        .client()
        .await
        .agents()
        .resume(v1::ResumeAgentRequest {
            session_id: id.clone(),
            model: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert!(status.message().contains(&id), "{}", status.message());
    let (kind, _) = refused(&daemon, &["agent", "resume", &id]);
    assert_eq!(kind, "already_exists");
    assert_eq!(daemon.dshctl_json(&["agent", "show", &id])["turns"], 1);
}

#[tokio::test]
async fn a_cwd_that_is_not_an_absolute_directory_is_an_invalid_argument() {
    let daemon = TestDaemon::start();
    let a_file = daemon.dir.path().join("plain-file");
    std::fs::write(&a_file, "x").unwrap();
    let missing = daemon.dir.path().join("missing");
    let mut agents = daemon.client().await.agents();
    for (cwd, why) in [
        (String::new(), "required"),
        ("relative/dir".to_owned(), "absolute"),
        (a_file.display().to_string(), "not a directory"),
        (missing.display().to_string(), "No such file"),
    ] {
        let status = agents
            .create(v1::CreateAgentRequest {
                cwd: cwd.clone(),
                model: None,
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{cwd:?}: {status:?}");
        assert!(status.message().contains("cwd"), "{}", status.message());
        assert!(status.message().contains(why), "{}", status.message());
    }
    let (kind, message) = refused(
        &daemon,
        &["agent", "new", "--cwd", a_file.to_str().unwrap()],
    );
    assert_eq!(kind, "invalid_argument");
    assert!(message.contains("is not a directory"), "{message}");
    assert_eq!(daemon.dshctl_json(&["status"])["agents"], 0);
}

#[tokio::test]
async fn the_next_prompt_is_accepted_as_soon_as_turn_ended_arrives() {
    let daemon = TestDaemon::start();
    let turns = 60;
    let replies: Vec<Value> = (1..=turns)
        .map(|t| json!({"text": format!("answer {t}")}))
        .collect();
    let id = daemon.new_agent(
        &daemon.workdir("back-to-back"),
        &json!({ "replies": replies }),
    );
    let mut agents = daemon.client().await.agents();
    for turn in 1..=turns {
        let mut stream = agents
            .prompt(v1::PromptRequest {
                agent_id: id.clone(),
                text: format!("question {turn}"),
            })
            .await
            .unwrap_or_else(|status| panic!("turn {turn} refused: {status:?}"))
            .into_inner();
        // A client that acts on turn_ended (the documented last message) without waiting for
        // the stream to close.
        loop {
            let message = stream.message().await.unwrap().expect("stream ended early");
            if let Some(v1::turn_event::Event::TurnEnded(end)) = message.event {
                assert_eq!(end.turn, turn);
                assert_eq!(end.reason.unwrap().kind, "completed");
                break;
            }
        }
    }
    let events = daemon.events(&id);
    assert_eq!(count(&events, "turn/end"), turns as usize);
}

#[tokio::test]
async fn a_prompt_while_a_turn_runs_is_refused_not_queued() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("busy"), &slow());
    let running = daemon.prompt_in_background(&id, "first");
    daemon.wait_for_events(&id, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });

    let status = daemon
        .client()
        .await
        .agents()
        .prompt(v1::PromptRequest {
            agent_id: id.clone(),
            text: "second".into(),
        })
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("busy"), "{}", status.message());
    let (kind, message) = refused(&daemon, &["prompt", "--agent", &id, "third"]);
    assert_eq!(kind, "failed_precondition");
    assert!(
        message.contains(&id) && message.contains("turn 1"),
        "{message}"
    );

    daemon.dshctl_json(&["agent", "cancel", &id]);
    finish_prompt(running);
    // Nothing was queued: the log holds exactly one turn.
    let events = daemon.events(&id);
    assert_eq!(count(&events, "turn/start"), 1);
    assert_eq!(count(&events, "user/message"), 1);
    assert_serving(&daemon);
}

#[test]
fn cancel_during_a_delayed_step_ends_the_turn_aborted_by_the_user() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("cancel"), &slow());
    let running = daemon.prompt_in_background(&id, "wait");
    daemon.wait_for_events(&id, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });
    assert_eq!(
        daemon.dshctl_json(&["agent", "show", &id])["state"],
        "running"
    );

    let cancelled = daemon.dshctl_json(&["agent", "cancel", &id]);
    assert_eq!(cancelled["cancelled"], true);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.code, Some(1), "an aborted turn must exit 1");
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));

    let log = read_session_file(&daemon.located_path(&id)).expect("no log after the turn");
    let end = log.events.last().unwrap();
    assert_eq!(end["type"], "turn/end");
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "cause": "user"})
    );
    assert_eq!(
        types(&log.events),
        [
            "turn/start",
            "user/message",
            "step/start",
            "step/end",
            "turn/end"
        ]
    );
    // Nothing left to cancel; the agent takes the next prompt (its script is spent, so it ends in
    // an error that says so).
    assert_eq!(
        daemon.dshctl_json(&["agent", "cancel", &id])["cancelled"],
        false
    );
    let next = daemon.prompt(&id, "again");
    assert_eq!(next.turn_started(), 2);
    assert_eq!(next.reason().0, "error");
    assert!(next.reason().1.contains("exhausted"), "{:?}", next.reason());
}

#[test]
fn cancel_kills_a_running_bash_call_and_records_its_result() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("started");
    let command = format!("touch {}; sleep 30; echo finished", marker.display());
    let id = daemon.new_agent(
        &daemon.workdir("cancel-tool"),
        &json!({"replies": [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]}),
    );
    let running = daemon.prompt_in_background(&id, "sleep");
    assert!(
        dsh_tests::eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );
    daemon.dshctl_json(&["agent", "cancel", &id]);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1, "the started call has no result");
    assert_eq!(results[0]["is_error"], true);
    assert!(!results[0]["content"].as_str().unwrap().contains("finished"));
}

#[test]
fn cancelling_a_parent_cancels_the_child_it_is_waiting_for() {
    let daemon = TestDaemon::start();
    let parent = daemon.new_agent(
        &daemon.workdir("family"),
        &json!({"replies": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "take forever"},
                             "child_script": {"replies": [{"text": "no", "delay_ms": 600_000}]}}]}
        ]}),
    );
    let running = daemon.prompt_in_background(&parent, "delegate");
    let mut child = String::new();
    let found = dsh_tests::eventually(PATIENCE, || {
        let list = daemon.dshctl_json(&["agent", "list"]);
        match list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["parent_agent_id"] == parent.as_str())
        {
            Some(a) => {
                child = a["agent_id"].as_str().unwrap().to_owned();
                true
            }
            None => false,
        }
    });
    assert!(found, "the child agent never appeared");
    daemon.wait_for_events(&child, "child waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });

    daemon.dshctl_json(&["agent", "cancel", &parent]);
    let prompted = finish_prompt(running);
    assert_eq!(prompted.reason(), ("aborted".to_owned(), "user".to_owned()));
    let results = tool_results(&prompted);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], true);

    let child_log = read_session_file(&daemon.located_path(&child)).expect("no child log");
    let end = child_log.events.last().unwrap();
    assert_eq!(end["type"], "turn/end");
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "cause": "parent"})
    );
}

#[test]
fn closing_an_agent_mid_turn_ends_the_turn_aborted_and_keeps_the_session() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("close"), &slow());
    let path = daemon.located_path(&id);
    let running = daemon.prompt_in_background(&id, "wait");
    daemon.wait_for_events(&id, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });

    let closed = daemon.dshctl_json(&["agent", "close", &id]);
    assert_eq!(closed["closed"], true);
    let prompted = finish_prompt(running);
    assert_eq!(
        prompted.reason(),
        ("aborted".to_owned(), "closed".to_owned())
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    let (kind, _) = refused(&daemon, &["agent", "show", &id]);
    assert_eq!(kind, "not_found");

    let log = read_session_file(&path).expect("closing must checkpoint the session");
    assert_eq!(
        log.events.last().unwrap()["data"]["reason"],
        json!({"kind": "aborted", "cause": "closed"})
    );
    // The stored session can be resumed.
    let resumed = daemon.agent_with_script(&["resume", &id], &json!({"replies": []}));
    assert_eq!(resumed["agent_id"], id.as_str());
    assert_eq!(resumed["turns"], 1);
}

#[test]
fn sigterm_during_turns_exits_zero_within_five_seconds_and_records_the_aborts() {
    let mut daemon = TestDaemon::start();
    // One agent waits for its model, another for a bash call that would sleep for 30 s and
    // ignores SIGTERM (so only the executor's escalation to SIGKILL ends it).
    let waiting = daemon.new_agent(&daemon.workdir("term-model"), &slow());
    let marker = daemon.dir.path().join("sleeping");
    let command = format!("trap '' TERM; touch {}; sleep 30", marker.display());
    let sleeping = daemon.new_agent(
        &daemon.workdir("term-tool"),
        &json!({"replies": [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]}),
    );
    let paths = [
        daemon.located_path(&waiting),
        daemon.located_path(&sleeping),
    ];
    let running = [
        daemon.prompt_in_background(&waiting, "wait"),
        daemon.prompt_in_background(&sleeping, "sleep"),
    ];
    daemon.wait_for_events(&waiting, "turn 1 waiting for the model", |e| {
        has_step_start(e, 1, 1)
    });
    assert!(
        dsh_tests::eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );
    assert!(paths.iter().all(|p| !p.exists()));

    let status = daemon.signal_and_wait(Signal::TERM, Duration::from_secs(5));
    assert!(status.success(), "exit {status:?}\n{}", daemon.log_text());
    assert!(!daemon.socket.exists());
    for child in running {
        finish_prompt(child);
    }
    for path in &paths {
        let log = read_session_file(path).expect("shutdown must checkpoint every session");
        let end = log.events.last().unwrap();
        assert_eq!(end["type"], "turn/end", "{}", path.display());
        assert_eq!(
            end["data"]["reason"],
            json!({"kind": "aborted", "cause": "shutdown"})
        );
        assert_eq!(
            count(&log.events, "tool/call"),
            count(&log.events, "tool/result")
        );
    }
    let tool_log = read_session_file(&paths[1]).unwrap();
    assert_eq!(count(&tool_log.events, "tool/result"), 1);
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
        assert_eq!(prompted.turn_ended()["text"], format!("answer from {me}"));
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
