//! External contributors on `ShellEnv.Contribute`, end to end: each registry rule refused with a
//! status naming it, a wrong answer failing the call before anything is spawned, the registration
//! living exactly as long as the stream, live values reaching bash, and a bounded answer time.
//!
//! The tests run on a multi-threaded runtime: the contributor answers on a worker while the test
//! body blocks on `dshctl`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::time::Duration;

use dsh_tests::shell::{Contributor, bash_call, new_agent, prompt, prompt_results, workdir};
use dsh_tests::{DaemonSpec, TestDaemon, eventually};
use serde_json::json;
use tonic::Code;

const DESCRIBED: &str = "A value for tests.";

async fn refused(daemon: &TestDaemon, name: &str, variables: &[(&str, &str)]) -> tonic::Status {
    let client = daemon.client().await;
    match Contributor::declare(&client, name, variables).await {
        Ok(_) => panic!("{name} {variables:?} was registered"),
        Err(status) => status,
    }
}

fn listed(daemon: &TestDaemon) -> Vec<(String, String)> {
    daemon.dshctl_json(&["env", "list"])["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["key"].as_str().unwrap().to_owned(),
                v["contributor"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_a_reserved_key_is_refused() {
    let daemon = TestDaemon::start();
    for key in ["DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID"] {
        let status = refused(&daemon, "editor", &[(key, DESCRIBED)]).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("reserved key") && status.message().contains(key),
            "{status:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_a_malformed_key_is_refused() {
    let daemon = TestDaemon::start();
    for key in ["EDITOR_FILE", "DSH_lower", "DSH_", "DSH_1ST", "DSH_A-B"] {
        let status = refused(&daemon, "editor", &[(key, DESCRIBED)]).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{key}: {status:?}");
        assert!(
            status.message().contains("invalid key") && status.message().contains(key),
            "{key}: {status:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_a_key_without_a_description_is_refused() {
    let daemon = TestDaemon::start();
    let status = refused(&daemon, "editor", &[("DSH_EDITOR_FILE", "  ")]).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("must describe") && status.message().contains("DSH_EDITOR_FILE"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_contributor_name_is_refused() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let _first = Contributor::declare(&client, "editor", &[("DSH_EDITOR_FILE", DESCRIBED)])
        .await
        .unwrap();
    // Another live external contributor's name, a shipped contributor's, and the built-ins'.
    for name in ["editor", "lineage", "builtin"] {
        let status = refused(&daemon, name, &[("DSH_OTHER_KEY", DESCRIBED)]).await;
        assert_eq!(status.code(), Code::AlreadyExists, "{name}: {status:?}");
        assert!(
            status.message().contains("already registered") && status.message().contains(name),
            "{name}: {status:?}"
        );
    }
    let status = refused(&daemon, " ", &[("DSH_OTHER_KEY", DESCRIBED)]).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("name"), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_owned_by_another_contributor_is_refused() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let _first = Contributor::declare(&client, "editor", &[("DSH_EDITOR_FILE", DESCRIBED)])
        .await
        .unwrap();
    for (key, owner) in [("DSH_EDITOR_FILE", "editor"), ("DSH_SOCKET", "daemon")] {
        let status = refused(&daemon, "intruder", &[(key, DESCRIBED)]).await;
        assert_eq!(status.code(), Code::AlreadyExists, "{key}: {status:?}");
        assert!(
            status.message().contains("already owned")
                && status.message().contains(key)
                && status.message().contains(owner),
            "{key}: {status:?}"
        );
    }
    // Nothing of a refused declaration stays behind.
    assert!(!listed(&daemon).iter().any(|(_, c)| c == "intruder"));
}

/// Starts `dshd`, registers `wrong` answering every request with `answer`, and proves that both
/// `dshctl run` and an agent's bash call fail naming the contributor, without spawning anything.
async fn a_wrong_answer_fails_the_call_and_spawns_nothing(answer: &'static str, rule: &str) {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let contributor = Contributor::declare(&client, "wrong", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    let _serving = contributor.serve(move |_| answer.to_owned());
    let cwd = workdir(&daemon, "w");

    let out = daemon.dshctl(&[
        "run",
        "--cwd",
        cwd.to_str().unwrap(),
        "--",
        "touch from-run",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"wrong\"") && stderr.contains(rule),
        "{stderr}"
    );
    assert!(!cwd.join("from-run").exists(), "dshctl run spawned");

    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call("touch from-loop")]}, {"text": "ok"}]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    assert!(results[0].is_error, "{:?}", results[0]);
    assert!(
        results[0].content.contains("\"wrong\"")
            && results[0].content.contains(rule)
            && results[0].content.contains("nothing was run"),
        "{:?}",
        results[0]
    );
    assert!(!cwd.join("from-loop").exists(), "the bash tool spawned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_key_fails_the_call_and_spawns_nothing() {
    a_wrong_answer_fails_the_call_and_spawns_nothing(
        r#"{"DSH_MY_KEY": "ok", "DSH_NOT_MINE": "x"}"#,
        "undeclared key \"DSH_NOT_MINE\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_string_value_fails_the_call_and_spawns_nothing() {
    a_wrong_answer_fails_the_call_and_spawns_nothing(
        r#"{"DSH_MY_KEY": 7}"#,
        "non-string value for \"DSH_MY_KEY\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_contributor_disappears_and_its_key_can_be_taken() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let first = Contributor::declare(&client, "first", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    assert!(listed(&daemon).contains(&("DSH_MY_KEY".into(), "first".into())));
    let status = refused(&daemon, "second", &[("DSH_MY_KEY", DESCRIBED)]).await;
    assert_eq!(status.code(), Code::AlreadyExists);

    drop(first);
    assert!(
        eventually(Duration::from_secs(10), || !listed(&daemon)
            .iter()
            .any(|(k, _)| k == "DSH_MY_KEY")),
        "the disconnected contributor is still listed: {:?}",
        listed(&daemon)
    );
    let second = Contributor::declare(&client, "second", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    assert!(listed(&daemon).contains(&("DSH_MY_KEY".into(), "second".into())));
    let _serving = second.serve(|_| r#"{"DSH_MY_KEY": "from-second"}"#.to_owned());
    let out = daemon.dshctl(&["run", "--", "echo $DSH_MY_KEY"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-second\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_contributors_values_reach_bash_for_the_right_call() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let contributor = Contributor::declare(
        &client,
        "editor",
        &[
            ("DSH_MY_KEY", DESCRIBED),
            ("DSH_MY_ABSENT", "Never answered."),
        ],
    )
    .await
    .unwrap();
    // The value names the facts the daemon sent, so each call shows it was asked about itself.
    let _serving = contributor.serve(|facts| {
        json!({"DSH_MY_KEY": format!("agent:{} call:{} turn:{}", facts.agent_id, facts.tool_call_id, facts.turn)})
            .to_string()
    });
    let listed = listed(&daemon);
    assert!(listed.contains(&("DSH_MY_KEY".into(), "editor".into())));
    assert!(listed.contains(&("DSH_MY_ABSENT".into(), "editor".into())));

    let print = "echo \"$DSH_MY_KEY|$DSH_TOOL_CALL_ID|${DSH_MY_ABSENT-unset}\"";
    let out = daemon.dshctl(&["run", "--", print]);
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (value, rest) = line.split_once('|').unwrap();
    let (call, absent) = rest.split_once('|').unwrap();
    assert_eq!(value, format!("agent: call:{call} turn:0"), "{line}");
    assert_eq!(absent, "unset");

    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(print)]}, {"text": "ok"}]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    assert_eq!(
        results[0].content,
        format!(
            "agent:{agent} call:{} turn:1|{}|unset\n",
            results[0].call_id, results[0].call_id
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contributor_that_never_answers_fails_the_call_after_the_resolve_timeout() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[shell_env]\nresolve_timeout_ms = 200\n".into()),
        ..DaemonSpec::default()
    });
    let client = daemon.client().await;
    let mut silent = Contributor::declare(&client, "silent", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    let cwd = workdir(&daemon, "w");

    let socket = daemon.socket.clone();
    let cwd_arg = cwd.to_str().unwrap().to_owned();
    let run = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["run", "--cwd", &cwd_arg, "--", "touch ran"])
    });
    // The daemon did ask; the contributor keeps quiet.
    let request = silent.next_request().await;
    assert_eq!(request.facts.unwrap().tool_name, "bash");
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the call waited for the silent contributor without bound")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"silent\"") && stderr.contains("did not answer within 200ms"),
        "{stderr}"
    );
    assert!(!cwd.join("ran").exists(), "the command ran");
    // A late answer changes nothing and the contributor stays registered.
    silent
        .answer(request.request_id, r#"{"DSH_MY_KEY": "late"}"#)
        .await;
    assert!(listed(&daemon).contains(&("DSH_MY_KEY".into(), "silent".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_get_their_own_answer_even_when_answered_out_of_order() {
    const AGENTS: usize = 8;
    const CALLS: usize = 4;
    // Generous: every call's question must be waiting at once before any is answered.
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[shell_env]\nresolve_timeout_ms = 60000\n".into()),
        ..DaemonSpec::default()
    });
    let client = daemon.client().await;
    let mut contributor = Contributor::declare(&client, "per-call", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    let cwd = workdir(&daemon, "w");
    let mut agents = Vec::new();
    for _ in 0..AGENTS {
        let info = client
            .agents()
            .create(dsh_proto::v1::CreateAgentRequest {
                sandbox: None,
                cwd: cwd.display().to_string(),
                model: Some(dsh_proto::v1::ModelSpec {
                    provider: "scripted".into(),
                    script_json: r#"{"replies": []}"#.into(),
                    reasoning_effort: String::new(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        agents.push(info.agent_id);
    }
    let mut calls = tokio::task::JoinSet::new();
    for agent in &agents {
        for _ in 0..CALLS {
            let mut shell = client.shell();
            let request = dsh_proto::v1::RunRequest {
                sandbox: None,
                agent_id: agent.clone(),
                command: "echo \"$DSH_SESSION_ID|$DSH_TOOL_CALL_ID|$DSH_MY_KEY\"".into(),
                ..Default::default()
            };
            calls.spawn(async move { shell.run(request).await.unwrap().into_inner() });
        }
    }
    let mut requests = Vec::new();
    for _ in 0..AGENTS * CALLS {
        requests.push(contributor.next_request().await);
    }
    for r in requests.iter().rev() {
        let facts = r.facts.clone().unwrap();
        let value = format!("for-{}-{}", facts.agent_id, facts.tool_call_id);
        contributor
            .answer(r.request_id, &json!({ "DSH_MY_KEY": value }).to_string())
            .await;
    }
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    while let Some(response) = calls.join_next().await {
        let Some(dsh_proto::v1::run_response::Result::Finished(o)) = response.unwrap().result
        else {
            panic!("no outcome");
        };
        let line = o.stdout.trim().to_owned();
        let parts: Vec<&str> = line.split('|').collect();
        assert_eq!(parts.len(), 3, "{o:?}");
        assert_eq!(
            parts[2],
            format!("for-{}-{}", parts[0], parts[1]),
            "cross-talk"
        );
        *seen.entry(parts[0].to_owned()).or_default() += 1;
    }
    assert_eq!(seen.len(), AGENTS);
    assert!(seen.values().all(|&n| n == CALLS), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contributor_that_disconnects_mid_question_fails_the_call_at_once() {
    // Far longer than the test may take: only the disconnect can end the wait.
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[shell_env]\nresolve_timeout_ms = 600000\n".into()),
        ..DaemonSpec::default()
    });
    let client = daemon.client().await;
    let mut leaving = Contributor::declare(&client, "leaving", &[("DSH_MY_KEY", DESCRIBED)])
        .await
        .unwrap();
    let cwd = workdir(&daemon, "w");
    let socket = daemon.socket.clone();
    let cwd_arg = cwd.to_str().unwrap().to_owned();
    let run = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["run", "--cwd", &cwd_arg, "--", "touch ran"])
    });
    leaving.next_request().await;
    drop(leaving);
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the call kept waiting for a contributor that had gone")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"leaving\"") && stderr.contains("disconnected"),
        "{stderr}"
    );
    assert!(!cwd.join("ran").exists(), "the command ran");
}
