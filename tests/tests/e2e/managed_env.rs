//! The managed `DSH_*` snapshot end to end: what an agent's bash call, a spawned child's call and a
//! call of no agent are told; how the persistence backend (and a swap of it) shows; and what never
//! reaches a child: the daemon's secrets, outer `DSH_*` values, a model's `env`/`stdin`, a caller's
//! `DSH_*` entries.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::collections::BTreeSet;

use dsh_tests::shell::{
    PRINT_MANAGED, bash_call, children_of, key_values, locate, managed_of, new_agent, prompt,
    prompt_results, run_json, session_results, spawn_call, workdir,
};
use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin};
use serde_json::json;

fn keys(env: &std::collections::BTreeMap<String, String>) -> BTreeSet<&str> {
    env.keys().map(String::as_str).collect()
}

#[test]
fn an_agent_call_carries_home_session_transcript_lineage_and_its_tool_call() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "one"},
            {"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "two"},
        ]}),
    );
    let path = locate(&daemon, &agent).unwrap();
    for turn in ["1", "2"] {
        let results = prompt_results(&prompt(&daemon, &agent, "go"));
        assert_eq!(results.len(), 1);
        let env = managed_of(&results[0].content);
        assert_eq!(env["DSH_HOME"], daemon.home.display().to_string());
        assert_eq!(env["DSH_SHELL"], "1");
        assert_eq!(env["DSH_SESSION_ID"], agent);
        assert_eq!(env["DSH_SESSION_JSONL"], path);
        assert_eq!(env["DSH_ROOT_SESSION_ID"], agent);
        assert_eq!(env["DSH_AGENT_DEPTH"], "0");
        assert_eq!(env["DSH_TOOL_CALL_ID"], results[0].call_id);
        assert_eq!(env["DSH_TURN"], turn);
        assert_eq!(env["DSH_SOCKET"], daemon.socket.display().to_string());
        assert!(
            !env.contains_key("DSH_PARENT_SESSION_ID"),
            "a top-level agent has no parent: {env:?}"
        );
    }
}

#[test]
fn spawned_descendants_calls_carry_their_own_session_and_their_lineage() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let grandchild_script = json!({"replies": [
        {"tool_calls": [bash_call(PRINT_MANAGED)]},
        {"text": "grandchild done"},
    ]});
    let child_script = json!({"replies": [
        {"tool_calls": [bash_call(PRINT_MANAGED), spawn_call("deeper", &grandchild_script)]},
        {"text": "child done"},
    ]});
    let parent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"tool_calls": [spawn_call("report", &child_script)]},
            {"text": "parent done"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &parent, "delegate"));
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].content, "child done", "{:?}", results[0]);

    let children = children_of(&daemon, &parent);
    assert_eq!(children.len(), 1);
    let child = &children[0];
    let grandchildren = children_of(&daemon, child);
    assert_eq!(grandchildren.len(), 1);
    let grandchild = &grandchildren[0];

    for (session, parent_id, depth) in [(child, &parent, "1"), (grandchild, child, "2")] {
        let calls: Vec<_> = session_results(&daemon, session)
            .into_iter()
            .filter(|c| c.name == "bash")
            .collect();
        assert_eq!(calls.len(), 1, "{calls:?}");
        let env = managed_of(&calls[0].content);
        assert_eq!(env["DSH_HOME"], daemon.home.display().to_string());
        assert_eq!(env["DSH_SHELL"], "1");
        assert_eq!(&env["DSH_SESSION_ID"], session);
        assert_eq!(env["DSH_SESSION_JSONL"], locate(&daemon, session).unwrap());
        assert_ne!(env["DSH_SESSION_JSONL"], locate(&daemon, &parent).unwrap());
        assert_eq!(&env["DSH_PARENT_SESSION_ID"], parent_id);
        assert_eq!(env["DSH_ROOT_SESSION_ID"], parent);
        assert_eq!(env["DSH_AGENT_DEPTH"], depth);
        assert_eq!(env["DSH_TOOL_CALL_ID"], calls[0].call_id);
        assert_eq!(env["DSH_TURN"], "1");
    }
}

#[test]
fn a_call_of_no_agent_has_home_shell_and_socket_and_nothing_of_a_session() {
    let daemon = TestDaemon::start();
    let out = run_json(&daemon, &["--", PRINT_MANAGED]);
    let env = managed_of(out["stdout"].as_str().unwrap());
    assert_eq!(
        keys(&env),
        BTreeSet::from(["DSH_HOME", "DSH_SHELL", "DSH_SOCKET", "DSH_TOOL_CALL_ID"]),
        "{env:?}"
    );
    assert_eq!(env["DSH_HOME"], daemon.home.display().to_string());
    assert_eq!(env["DSH_SHELL"], "1");
    assert_eq!(env["DSH_SOCKET"], daemon.socket.display().to_string());

    // DSH_SOCKET is enough for the command to call back into the daemon that owns it.
    let dshctl = dshctl_bin().display().to_string();
    let out = run_json(
        &daemon,
        &[
            "--env",
            &format!("DSHCTL={dshctl}"),
            "--",
            "\"$DSHCTL\" --json status",
        ],
    );
    assert_eq!(out["exit_code"], 0, "{out}");
    let status: serde_json::Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(status["pid"], daemon.child.id());
}

#[test]
fn the_sqlite_backend_gives_no_transcript_path() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--persistence".into(), "sqlite".into()],
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "ok"}]}),
    );
    assert_eq!(locate(&daemon, &agent), None);
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    let env = managed_of(&results[0].content);
    assert_eq!(env["DSH_SESSION_ID"], agent);
    assert!(!env.contains_key("DSH_SESSION_JSONL"), "{env:?}");

    let out = run_json(&daemon, &["--agent", &agent, "--", PRINT_MANAGED]);
    let env = managed_of(out["stdout"].as_str().unwrap());
    assert_eq!(env["DSH_SESSION_ID"], agent);
    assert!(!env.contains_key("DSH_SESSION_JSONL"), "{env:?}");
    // A call made for the agent from outside a turn: no turn, a call id of its own.
    assert!(!env.contains_key("DSH_TURN"), "{env:?}");
    assert!(env["DSH_TOOL_CALL_ID"].starts_with("rpc_"), "{env:?}");
}

#[test]
fn a_backend_swap_shows_in_the_very_next_call() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "1"},
            {"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "2"},
            {"tool_calls": [bash_call(PRINT_MANAGED)]}, {"text": "3"},
        ]}),
    );
    let path = locate(&daemon, &agent).unwrap();
    let loop_call = || managed_of(&prompt_results(&prompt(&daemon, &agent, "go"))[0].content);
    let rpc_call = || {
        let out = run_json(&daemon, &["--agent", &agent, "--", PRINT_MANAGED]);
        managed_of(out["stdout"].as_str().unwrap())
    };

    assert_eq!(loop_call()["DSH_SESSION_JSONL"], path);
    assert_eq!(rpc_call()["DSH_SESSION_JSONL"], path);

    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    let env = loop_call();
    assert!(
        !env.contains_key("DSH_SESSION_JSONL"),
        "after use sqlite: {env:?}"
    );
    let env = rpc_call();
    assert!(
        !env.contains_key("DSH_SESSION_JSONL"),
        "after use sqlite: {env:?}"
    );

    daemon.dshctl_json(&["persistence", "use", "jsonl"]);
    assert_eq!(rpc_call()["DSH_SESSION_JSONL"], path);
    assert_eq!(loop_call()["DSH_SESSION_JSONL"], path);
}

/// Secrets in the daemon's environment (by name, and a credential URL under a harmless name), an
/// outer `DSH_*` value and the reserved owner marker, plus look-alikes that must pass.
const SECRETS: [(&str, &str); 13] = [
    ("MY_API_KEY", "sk-secret-1"),
    ("GITHUB_TOKEN", "ghp-secret-2"),
    ("DB_PASSWORD", "hunter2-secret-3"),
    ("MYSQL_PWD", "secret-4"),
    ("HF_AUTH", "secret-5"),
    ("SENTRY_DSN", "https://secret-6@o1.ingest.sentry.io/1"),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/secret-7",
    ),
    ("PASSPHRASE", "secret-8"),
    ("COOKIE", "session=secret-9"),
    ("DATABASE_URL", "postgres://u:pw-secret-10@h/db"),
    ("DSH_FOO", "outer-foo"),
    ("dsh_lower", "outer-lower"),
    ("DSHD_OWNER", "outer-owner"),
];

/// Names that look like secrets but are not, and must reach children.
const LOOK_ALIKES: [(&str, &str); 4] = [
    ("XAUTHORITY", "/run/user/xauth"),
    ("SSH_AUTH_SOCK", "/run/user/agent.sock"),
    ("GIT_AUTHOR_NAME", "Ada"),
    ("REPO_URL", "ssh://git@example.com/o/r"),
];

fn daemon_with_secrets() -> TestDaemon {
    TestDaemon::start_with(DaemonSpec {
        env: SECRETS
            .iter()
            .chain(&LOOK_ALIKES)
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        ..DaemonSpec::default()
    })
}

fn assert_scrubbed(daemon: &TestDaemon, env_output: &str) {
    let env = key_values(env_output);
    for (name, value) in SECRETS {
        // The executor sets its own owner marker in every child; the outer value must not survive.
        assert!(
            !env.contains_key(name) || name == "DSHD_OWNER",
            "{name} reached bash:\n{env_output}"
        );
        assert!(
            !env_output.contains(value),
            "{value} reached bash:\n{env_output}"
        );
    }
    for (name, value) in LOOK_ALIKES {
        assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
    }
    assert_eq!(
        env["PATH"],
        std::env::var("PATH").unwrap(),
        "PATH did not pass"
    );
    assert_eq!(
        env["HOME"],
        daemon.dir.path().join("user").display().to_string()
    );
}

#[test]
fn secrets_and_outer_dsh_values_never_reach_an_agents_bash() {
    let daemon = daemon_with_secrets();
    let cwd = workdir(&daemon, "w");
    let script = json!({"replies": [{"tool_calls": [bash_call("env")]}, {"text": "ok"}]});
    // A client that sends no environment: the agent's commands start from dshd's, scrubbed.
    let agent = daemon.new_agent_without_env(&cwd, &script);
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    assert!(!results[0].is_error);
    assert_scrubbed(&daemon, &results[0].content);

    // dshctl sends its own environment, which gets the same scrub.
    let file = daemon.write_script(&script);
    let mut new = std::process::Command::new(dshctl_bin());
    new.arg("--socket")
        .arg(&daemon.socket)
        .args(["--json", "agent", "new", "--cwd"])
        .arg(&cwd)
        .arg("--script")
        .arg(&file)
        .env_remove("DSH_SOCKET")
        .env("HOME", daemon.dir.path().join("user"))
        .envs(SECRETS.iter().chain(&LOOK_ALIKES).copied());
    let out = new.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = info["agent_id"].as_str().unwrap();
    let results = prompt_results(&prompt(&daemon, agent, "go"));
    assert!(!results[0].is_error);
    assert_scrubbed(&daemon, &results[0].content);
}

#[test]
fn secrets_and_outer_dsh_values_never_reach_dshctl_run() {
    let daemon = daemon_with_secrets();
    let out = run_json(&daemon, &["--", "env"]);
    assert_eq!(out["exit_code"], 0);
    assert_scrubbed(&daemon, out["stdout"].as_str().unwrap());
}

#[test]
fn a_models_env_and_stdin_arguments_are_ignored() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {
                "command": "echo \"id=$DSH_SESSION_ID\"; echo \"stdin=$(cat)\"; echo \"extra=${MODEL_EXTRA-unset}\"",
                "env": {"DSH_SESSION_ID": "spoofed", "MODEL_EXTRA": "x"},
                "stdin": "fed-by-the-model",
            }}]},
            {"text": "ok"},
        ]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    assert!(!results[0].is_error, "{:?}", results[0]);
    let seen = key_values(&results[0].content);
    assert_eq!(seen["id"], agent);
    assert_eq!(seen["stdin"], "");
    assert_eq!(seen["extra"], "unset");
}

#[test]
fn dshctl_run_refuses_a_managed_env_key_and_passes_an_ordinary_one() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let marker = cwd.join("ran");
    for key in ["DSH_X", "dsh_lower"] {
        let out = daemon.dshctl(&[
            "run",
            "--cwd",
            cwd.to_str().unwrap(),
            "--env",
            &format!("{key}=1"),
            "--",
            "touch ran",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{key}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(!marker.exists(), "{key}: the command ran");
    }

    let out = daemon.dshctl(&["run", "--env", "FOO=1", "--", "echo foo=$FOO"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "foo=1\n");
}

/// Variables bash acts on at startup, and the reserved owner marker, are refused from a caller
/// naming the key, for foreground and background calls, before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_run_refuses_startup_variables_and_the_owner_marker_naming_the_key() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let startup = cwd.join("startup.sh");
    std::fs::write(&startup, "export DSH_SESSION_ID=forged; touch sourced\n").unwrap();
    let startup = startup.display().to_string();
    let mut shell = daemon.client().await.shell();
    for (key, value) in [
        ("BASH_ENV", startup.as_str()),
        ("ENV", startup.as_str()),
        ("BASH_FUNC_x%%", "() {  echo forged\n}"),
        ("BASH_FUNC_echo%%", "() {  builtin echo forged\n}"),
        ("SHELLOPTS", "xtrace"),
        ("BASHOPTS", "extglob"),
        ("PS4", "$(touch sourced)+ "),
        ("DSHD_OWNER", "forged"),
    ] {
        for background in [false, true] {
            let status = shell
                .run(dsh_proto::v1::RunRequest {
                    sandbox: None,
                    command: "touch ran".into(),
                    cwd: cwd.display().to_string(),
                    env: [(key.to_owned(), value.to_owned())].into(),
                    background,
                    ..dsh_proto::v1::RunRequest::default()
                })
                .await
                .unwrap_err();
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{key}: {status:?}"
            );
            assert!(
                status.message().starts_with("env: ")
                    && status.message().contains(&format!("{key:?}")),
                "{key}: {status:?}"
            );
        }
    }
    assert!(!cwd.join("ran").exists(), "a refused command ran");
    assert!(!cwd.join("sourced").exists());
}

#[test]
fn a_non_utf8_daemon_environment_is_passed_on_verbatim_or_dropped_never_mangled() {
    use std::os::unix::ffi::OsStringExt;
    let daemon = TestDaemon::start_with(DaemonSpec {
        env: vec![
            (
                "BYTES_VALUE".into(),
                std::ffi::OsString::from_vec(b"a\xffb".to_vec()),
            ),
            (
                std::ffi::OsString::from_vec(b"BYTES_\xfeNAME".to_vec()),
                "dropped".into(),
            ),
        ],
        ..DaemonSpec::default()
    });
    let out = run_json(
        &daemon,
        &[
            "--",
            "printf %s \"$BYTES_VALUE\" | od -An -tx1 | tr -d ' '; env | grep -c '^BYTES_.*NAME=' || true",
        ],
    );
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["stdout"], "61ff62\n0\n", "{out}");
}

#[test]
fn env_show_reports_the_snapshot_a_call_of_the_agent_gets() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(&daemon, &cwd, &json!({"replies": []}));
    let shown = daemon.dshctl_json(&["env", "show", "--agent", &agent]);
    let mut shown: std::collections::BTreeMap<String, String> =
        serde_json::from_value(shown["env"].clone()).unwrap();
    let out = run_json(&daemon, &["--agent", &agent, "--", PRINT_MANAGED]);
    let mut ran = managed_of(out["stdout"].as_str().unwrap());
    // Each collection is its own call, with its own id.
    let (a, b) = (
        shown.remove("DSH_TOOL_CALL_ID").unwrap(),
        ran.remove("DSH_TOOL_CALL_ID").unwrap(),
    );
    assert_ne!(a, b);
    assert_eq!(shown, ran);
    assert_eq!(shown["DSH_SESSION_JSONL"], locate(&daemon, &agent).unwrap());

    let listed = daemon.dshctl_json(&["env", "list"]);
    let keys: BTreeSet<&str> = listed["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "DSH_AGENT_DEPTH",
            "DSH_HOME",
            "DSH_PARENT_SESSION_ID",
            "DSH_ROOT_SESSION_ID",
            "DSH_SESSION_ID",
            "DSH_SESSION_JSONL",
            "DSH_SHELL",
            "DSH_SOCKET",
            "DSH_TOOL_CALL_ID",
            "DSH_TURN",
        ])
    );
}
