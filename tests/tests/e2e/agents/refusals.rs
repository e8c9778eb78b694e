//! Bad input: unknown, empty and oversized ids, bad cwds, a busy agent; the daemon keeps serving.

use super::*;

#[tokio::test]
async fn unknown_agent_and_session_ids_are_not_found_and_named() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    // A well-formed id nobody has, an id that would climb out of the sessions root if it were
    // used as a path, and the longest id accepted (256 bytes).
    for id in [
        "0190a0a0-0000-7000-8000-000000000000".to_owned(),
        "../../etc".to_owned(),
        "x".repeat(256),
    ] {
        let codes = calls_naming(&client, &id).await;
        for (rpc, _, result) in codes {
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
    for id in [String::new(), "x".repeat(257)] {
        let calls = calls_naming(&client, &id).await;
        for (rpc, field, result) in calls {
            let status = result.expect_err(rpc);
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{rpc} with a {}-byte {field}: {status:?}",
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
            sandbox: None,
            session_id: id.clone(),
            model: None,
            ..Default::default()
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
                sandbox: None,
                cwd: cwd.clone(),
                model: None,
                ..Default::default()
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
async fn the_next_prompt_is_accepted_as_soon_as_turn_end_arrives() {
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
        // A client that acts on turn/end (the documented last message) without waiting for
        // the stream to close.
        loop {
            let message = stream.message().await.unwrap().expect("stream ended early");
            if message.r#type == "turn/end" {
                let end: Value = serde_json::from_str(&message.data_json).unwrap();
                assert_eq!(end["turn"], turn);
                assert_eq!(end["reason"]["kind"], "completed");
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

/// Every RPC that takes an agent or session id, called with `id`: (method, id field, result).
async fn calls_naming(
    client: &dsh_client::Client,
    id: &str,
) -> Vec<(&'static str, &'static str, Result<(), tonic::Status>)> {
    let (mut agents, mut persistence) = (client.agents(), client.persistence());
    let id = || id.to_owned();
    vec![
        (
            "get",
            "agent_id",
            agents
                .get(v1::GetAgentRequest { agent_id: id() })
                .await
                .map(drop),
        ),
        (
            "prompt",
            "agent_id",
            agents
                .prompt(v1::PromptRequest {
                    agent_id: id(),
                    text: "hi".into(),
                })
                .await
                .map(drop),
        ),
        (
            "cancel",
            "agent_id",
            agents
                .cancel(v1::CancelAgentRequest { agent_id: id() })
                .await
                .map(drop),
        ),
        (
            "close",
            "agent_id",
            agents
                .close(v1::CloseAgentRequest { agent_id: id() })
                .await
                .map(drop),
        ),
        (
            "spawn",
            "parent_agent_id",
            agents
                .spawn(v1::SpawnAgentRequest {
                    sandbox: None,
                    parent_agent_id: id(),
                    model: None,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        (
            "resume",
            "session_id",
            agents
                .resume(v1::ResumeAgentRequest {
                    sandbox: None,
                    session_id: id(),
                    model: None,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        (
            "fork",
            "session_id",
            agents
                .fork(v1::ForkAgentRequest {
                    sandbox: None,
                    session_id: id(),
                    model: None,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        (
            "locate",
            "session_id",
            persistence
                .locate(v1::LocateRequest { session_id: id() })
                .await
                .map(drop),
        ),
        (
            "read_events",
            "session_id",
            persistence
                .read_events(v1::ReadEventsRequest {
                    session_id: id(),
                    from_seq: 0,
                    follow: false,
                })
                .await
                .map(drop),
        ),
    ]
}

/// A model that delegates recursively, and one that fans out wider than the daemon allows, stop at
/// the configured bounds with a tool error the model can read; RPC callers get RESOURCE_EXHAUSTED;
/// the daemon keeps serving.
#[tokio::test]
async fn recursive_and_wide_delegation_stop_at_the_configured_limits() {
    use dsh_tests::shell::{session_results, spawn_call};
    let daemon = TestDaemon::start_with(dsh_tests::DaemonSpec {
        config: Some("[agent]\nmax_depth = 2\nmax_live_agents = 4\n".into()),
        ..Default::default()
    });
    let cwd = daemon.workdir("w");
    // Each level spawns the next, forever if nothing stops it.
    let mut script = json!({"replies": [{"text": "bottom"}]});
    for level in (0..4).rev() {
        script = json!({"replies": [
            {"tool_calls": [spawn_call(&format!("level {level}"), &script)]},
            {"text": format!("level {level} done")},
        ]});
    }
    let root = daemon.new_agent(&cwd, &script);
    daemon.prompt(&root, "go").assert_completed();
    let sessions = daemon.dshctl_json(&["session", "list"]);
    let sessions = sessions["sessions"].as_array().unwrap();
    let depths: Vec<u64> = sessions
        .iter()
        .map(|s| s["header"]["delegation_depth"].as_u64().unwrap())
        .collect();
    assert_eq!(depths.iter().max(), Some(&2), "{sessions:?}");
    let deepest = sessions
        .iter()
        .find(|s| s["header"]["delegation_depth"] == 2)
        .unwrap();
    let refused = session_results(&daemon, deepest["header"]["id"].as_str().unwrap());
    assert!(refused[0].is_error, "{refused:?}");
    assert!(
        refused[0].content.contains("agent.max_depth"),
        "{}",
        refused[0].content
    );

    // Wide: five children in one step while the root and one other agent are live (limit 4).
    let wide = json!({"replies": [
        {"tool_calls": (0..5).map(|i| spawn_call(&format!("child {i}"), &json!({"replies": [{"text": "ok"}]}))).collect::<Vec<_>>()},
        {"text": "fanned out"},
    ]});
    let parent = daemon.new_agent(&cwd, &wide);
    daemon.prompt(&parent, "go").assert_completed();
    let results = session_results(&daemon, &parent);
    let refusals = results
        .iter()
        .filter(|r| r.is_error && r.content.contains("agent.max_live_agents"))
        .count();
    assert!(refusals >= 1, "{results:?}");

    // Over RPC the same bound is RESOURCE_EXHAUSTED, and the daemon still answers.
    let client = daemon.client().await;
    let mut agents = client.agents();
    let mut codes = Vec::new();
    for _ in 0..5 {
        let result = agents
            .create(v1::CreateAgentRequest {
                sandbox: None,
                cwd: cwd.display().to_string(),
                ..Default::default()
            })
            .await;
        codes.push(result.map(|_| ()).map_err(|s| s.code()));
    }
    assert!(codes.contains(&Err(Code::ResourceExhausted)), "{codes:?}");
    assert!(daemon.dshctl(&["status"]).status.success());
}
