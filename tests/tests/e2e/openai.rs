//! The `openai` provider end to end: the real dshd talking to a local mock of an OpenAI-compatible
//! API (no test reaches the internet), skills in the system prompt, and the API key kept from
//! every child.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use dsh_testkit::{
    DONE, End, Mock, Reply, finish, ok_stream, status, text_delta, tool_call_stream, usage_event,
};
use dsh_tests::{DaemonSpec, TestDaemon, eventually, private_dir};
use serde_json::{Value, json};

pub(crate) const KEY: &str = "sk-test-e2e-7f3a";

/// A daemon whose `openai` provider points at `mock`, with the key in its environment (unless
/// `with_key` is false) and `extra` appended to its config.
pub(crate) fn daemon(mock: &Mock, with_key: bool, extra: &str) -> TestDaemon {
    let mut env = vec![];
    if with_key {
        env.push(("DEEPSEEK_API_KEY".into(), KEY.into()));
    }
    TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 2\nmax_backoff_ms = 10\nidle_timeout_ms = 20000\n{extra}",
            mock.base_url
        )),
        env,
        ..DaemonSpec::default()
    })
}

/// A new agent of the `openai` provider in `cwd`; its id.
pub(crate) fn new_agent(daemon: &TestDaemon, cwd: &Path) -> String {
    daemon.dshctl_json(&[
        "agent",
        "new",
        "--model",
        "openai",
        "--cwd",
        cwd.to_str().unwrap(),
    ])["agent_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Runs `dshctl --json prompt` off the async runtime (the mock serves on it) and parses its lines.
async fn prompt(daemon: &TestDaemon, agent: &str, text: &str) -> (Output, Vec<Value>) {
    let socket = daemon.socket.clone();
    let (agent, text) = (agent.to_owned(), text.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &agent, &text])
    })
    .await
    .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// The `data` of the stream's last line, which must be `turn/end`.
fn turn_end(lines: &[Value]) -> &Value {
    let last = lines.last().expect("no events");
    assert_eq!(last["type"], "turn/end", "{lines:?}");
    &last["data"]
}

/// The `data` of the first `tool/result` line.
fn tool_result(lines: &[Value]) -> &Value {
    &lines
        .iter()
        .find(|l| l["type"] == "tool/result")
        .expect("no tool result")["data"]
}

/// A streamed answer of `pieces` that ends as a complete stream does.
pub(crate) fn stream(pieces: Vec<String>) -> Reply {
    Reply::Stream {
        pieces,
        end: End::Complete,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_bash_call_runs_and_the_final_text_streams() {
    let mut call = tool_call_stream(
        "call_1",
        "bash",
        &[
            "{\"command\": \"env | grep ^DSH_ | ",
            "sort; echo ",
            "marker-ok\"}",
        ],
    );
    call.push(usage_event(120, 30, 20));
    call.push(DONE.into());
    let mut answer = vec![text_delta("All "), text_delta("done.")];
    answer.push(finish("stop"));
    answer.push(usage_event(200, 5, 100));
    answer.push(DONE.into());
    let mock = Mock::start(vec![stream(call), stream(answer)]).await;
    let daemon = daemon(&mock, true, "");
    let agent = new_agent(&daemon, daemon.dir.path());

    let (out, lines) = prompt(&daemon, &agent, "look around").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let content = tool_result(&lines)["content"].as_str().unwrap();
    assert!(
        content.contains(&format!("DSH_SESSION_ID={agent}")),
        "{content}"
    );
    assert!(
        content.contains(&format!("DSH_HOME={}", daemon.home.display())),
        "{content}"
    );
    assert!(
        content.contains("DSH_SHELL=1") && content.contains("DSH_SESSION_JSONL="),
        "{content}"
    );
    assert!(content.contains("marker-ok"), "{content}");
    let deltas: String = lines
        .iter()
        .filter(|l| l["type"] == "text/delta")
        .map(|l| l["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "All done.");
    let end = turn_end(&lines);
    assert_eq!(end["reason"]["kind"], "completed");
    assert_eq!(dsh_tests::agents::answer(&lines), "All done.");

    // Usage is recorded on the assistant messages, cached prompt tokens split out.
    let events = daemon.events(&agent);
    let usages: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .map(|e| e["data"]["usage"].clone())
        .collect();
    assert_eq!(
        usages,
        [
            json!({"inputTokens": 100, "outputTokens": 30, "cacheReadTokens": 20}),
            json!({"inputTokens": 100, "outputTokens": 5, "cacheReadTokens": 100})
        ]
    );

    // The second request carried the call and its result back to the model, and the key.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].headers["authorization"],
        format!("Bearer {KEY}")
    );
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("no tool message");
    assert_eq!(tool["tool_call_id"], "call_1");
    assert!(tool["content"].as_str().unwrap().contains("marker-ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_reaches_no_child_hook_or_snapshot() {
    let mut call = tool_call_stream(
        "call_1",
        "bash",
        &["{\"command\": \"env; echo end-of-env\"}"],
    );
    call.push(DONE.into());
    let mock = Mock::start(vec![stream(call), ok_stream("ok")]).await;
    let dir = private_dir();
    let hook_env = dir.path().join("hook-env.txt");
    let hooks = dir.path().join("hooks.json");
    std::fs::write(
        &hooks,
        json!({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": format!("env > {}", hook_env.display())}]}]}})
            .to_string(),
    )
    .unwrap();
    let daemon = daemon(
        &mock,
        true,
        &format!("[hooks]\nclaude_code = [\"{}\"]\n", hooks.display()),
    );
    let agent = new_agent(&daemon, dir.path());

    let (out, lines) = prompt(&daemon, &agent, "dump env").await;
    assert!(out.status.success());
    let content = tool_result(&lines)["content"].as_str().unwrap().to_owned();
    assert!(
        content.contains("end-of-env") && content.contains("PATH="),
        "{content}"
    );
    assert!(
        !content.contains(KEY) && !content.contains("DEEPSEEK_API_KEY"),
        "{content}"
    );
    let hook_seen = std::fs::read_to_string(&hook_env).unwrap();
    assert!(hook_seen.contains("PATH="));
    assert!(
        !hook_seen.contains(KEY) && !hook_seen.contains("DEEPSEEK_API_KEY"),
        "{hook_seen}"
    );
    for args in [vec!["env", "show"], vec!["env", "show", "--agent", &agent]] {
        let shown = daemon.dshctl_json(&args).to_string();
        assert!(
            !shown.contains(KEY) && !shown.contains("DEEPSEEK_API_KEY"),
            "{shown}"
        );
    }
    let run = daemon.dshctl(&["run", "--", "env"]);
    assert!(!String::from_utf8_lossy(&run.stdout).contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiting_with_retry_after_is_retried_and_succeeds() {
    let mock = Mock::start(vec![
        status(
            429,
            vec![("retry-after", "0".into())],
            r#"{"error":{"message":"slow down"}}"#,
        ),
        ok_stream("after the wait"),
    ])
    .await;
    let daemon = daemon(&mock, true, "");
    let agent = new_agent(&daemon, daemon.dir.path());
    let (out, lines) = prompt(&daemon, &agent, "hi").await;
    assert!(out.status.success());
    assert_eq!(dsh_tests::agents::answer(&lines), "after the wait");
    assert_eq!(mock.requests().len(), 2);
    // The wait is on the stream, unlogged, before the reply.
    let retry = lines
        .iter()
        .position(|l| l["type"] == "model/retry")
        .expect("no model/retry event");
    assert_eq!(
        lines[retry]["data"],
        json!({"turn": 1, "step": 1, "attempt": 1, "delayMs": 0, "reason": "429"})
    );
    assert!(lines[retry].get("seq").is_none(), "unlogged");
    let reply = lines
        .iter()
        .position(|l| l["type"] == "assistant/message")
        .unwrap();
    assert!(retry < reply);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_says_how_long_a_rate_limited_request_waits_and_why() {
    let mock = Mock::start(vec![
        status(
            429,
            vec![("retry-after", "1".into())],
            r#"{"error":{"message":"slow down"}}"#,
        ),
        ok_stream("after the wait"),
    ])
    .await;
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 1\nmax_backoff_ms = 5000\n",
            mock.base_url
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), KEY.into())],
        ..DaemonSpec::default()
    });
    let agent = new_agent(&daemon, daemon.dir.path());
    let socket = daemon.socket.clone();
    let out = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["prompt", "--agent", &agent, "hi"])
    })
    .await
    .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("⟳ retrying in 1 s (429)\n"), "{screen}");
    // Not a terminal: no status line.
    assert!(!screen.contains('\r'), "{screen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_ends_the_turn_naming_the_key_variable() {
    let mock = Mock::start(vec![status(
        401,
        vec![],
        r#"{"error":{"message":"bad key"}}"#,
    )])
    .await;
    let daemon = daemon(&mock, true, "");
    let agent = new_agent(&daemon, daemon.dir.path());
    let (out, lines) = prompt(&daemon, &agent, "hi").await;
    assert_eq!(out.status.code(), Some(1));
    let end = turn_end(&lines);
    assert_eq!(end["reason"]["kind"], "error");
    let message = end["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("DEEPSEEK_API_KEY") && message.contains("401"),
        "{message}"
    );
    assert!(!message.contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agent_without_a_key_is_refused_at_once_naming_the_variable() {
    let mock = Mock::start(vec![ok_stream("never")]).await;
    let daemon = daemon(&mock, false, "");
    let out = daemon.dshctl(&[
        "--json",
        "agent",
        "new",
        "--model",
        "openai",
        "--cwd",
        daemon.dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "failed_precondition", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    // The message the first prompt used to give.
    assert!(
        message.starts_with("no API key: set DEEPSEEK_API_KEY in dshd's environment"),
        "{message}"
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    // The configured default provider is refused the same way.
    let out = daemon.dshctl(&["agent", "new", "--cwd", daemon.dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(status["model_key_configured"], false);
    assert_eq!(status["model_key_env"], "DEEPSEEK_API_KEY");
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agent_keeps_its_provider_and_model_across_a_restart() {
    let mock = Mock::start(vec![ok_stream("before"), ok_stream("after")]).await;
    let mut daemon = daemon(&mock, true, "");
    assert_eq!(
        daemon.dshctl_json(&["status"])["model_key_configured"],
        true
    );
    let created = daemon.dshctl_json(&[
        "agent",
        "new",
        "--model",
        "openai",
        "--model-name",
        "deepseek-reasoner",
        "--cwd",
        daemon.dir.path().to_str().unwrap(),
    ]);
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let (out, _) = prompt(&daemon, &agent, "first").await;
    assert!(out.status.success());

    let stopped = daemon.dshctl(&["shutdown"]);
    assert!(stopped.status.success(), "{stopped:?}");
    daemon.wait_exit(Duration::from_secs(20));
    daemon.restart_with(DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"scripted\"\nbase_url = \"{}\"\n",
            mock.base_url
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), KEY.into())],
        ..DaemonSpec::default()
    });

    // No --model, and a default provider that is not the session's: the session decides.
    let resumed = daemon.dshctl_json(&["agent", "resume", &agent]);
    assert_eq!(resumed["provider"], "openai", "{resumed}");
    assert_eq!(resumed["model"], "deepseek-reasoner", "{resumed}");
    let (out, lines) = prompt(&daemon, &agent, "second").await;
    assert!(out.status.success(), "{lines:?}");
    assert_eq!(dsh_tests::agents::answer(&lines), "after");
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the resumed agent's prompt reached the mock"
    );
    assert_eq!(requests[1].body["model"], "deepseek-reasoner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_session_resumed_without_a_script_says_it_needs_one() {
    let mock = Mock::start(vec![]).await;
    let daemon = daemon(&mock, true, "");
    let script = daemon.write_script(&json!({"replies": [{"text": "one"}]}));
    let created = daemon.dshctl_json(&[
        "agent",
        "new",
        "--script",
        script.to_str().unwrap(),
        "--cwd",
        daemon.dir.path().to_str().unwrap(),
    ]);
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let (out, _) = prompt(&daemon, &agent, "first").await;
    assert!(out.status.success());
    daemon.dshctl_json(&["agent", "close", &agent]);
    let out = daemon.dshctl(&["--json", "agent", "resume", &agent]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "invalid_argument", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("model.script_json: ") && message.contains("--script FILE"),
        "{message}"
    );
    let resumed = daemon.dshctl_json(&[
        "agent",
        "resume",
        &agent,
        "--script",
        script.to_str().unwrap(),
    ]);
    assert_eq!(resumed["provider"], "scripted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_ends_the_turn_and_the_session_stays_loadable() {
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![text_delta("half an ans")],
        end: End::Cut,
    }])
    .await;
    let daemon = daemon(&mock, true, "");
    let agent = new_agent(&daemon, daemon.dir.path());
    let (_, lines) = prompt(&daemon, &agent, "hi").await;
    let end = turn_end(&lines);
    assert_eq!(end["reason"]["kind"], "error");
    assert!(
        end["reason"]["message"].as_str().unwrap().contains("cut"),
        "{end}"
    );

    // Closed and resumed from disk: the stored log loads, turn numbers continue.
    daemon.dshctl_json(&["agent", "close", &agent]);
    let resumed = daemon.dshctl_json(&["agent", "resume", &agent, "--model", "openai"]);
    assert_eq!(resumed["agent_id"], agent);
    assert_eq!(resumed["turns"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_stream_ends_the_turn_aborted() {
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![text_delta("thinking...")],
        end: End::Stall,
    }])
    .await;
    let daemon = daemon(&mock, true, "");
    let agent = new_agent(&daemon, daemon.dir.path());
    let socket = daemon.socket.clone();
    let agent_id = agent.clone();
    let prompting = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &agent_id, "hi"])
    });
    // The stream is open once the agent is running and the mock has the request.
    assert!(eventually(Duration::from_secs(20), || !mock
        .requests()
        .is_empty()));
    let cancelled = daemon.dshctl_json(&["agent", "cancel", &agent]);
    assert_eq!(cancelled["cancelled"], true);
    let out = tokio::time::timeout(Duration::from_secs(20), prompting)
        .await
        .expect("the prompt did not end after cancel")
        .unwrap();
    let last: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["data"]["reason"]["kind"], "aborted");
    assert_eq!(last["data"]["reason"]["cause"], "user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_of_the_home_are_listed_and_reach_the_system_prompt() {
    let mock = Mock::start(vec![ok_stream("one"), ok_stream("two")]).await;
    let dir = private_dir();
    let home = dir.path().join("home");
    let skill = |name: &str, description: &str| {
        let path = home.join("skills").join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(
            path.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n"),
        )
        .unwrap();
    };
    skill("pdf-tools", "Read and fill PDF forms");
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\n",
                mock.base_url
            )),
            env: vec![("DEEPSEEK_API_KEY".into(), KEY.into())],
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();

    let listed = daemon.dshctl_json(&["skills", "list"]);
    assert_eq!(listed["skills"][0]["name"], "pdf-tools");
    assert_eq!(
        listed["skills"][0]["path"],
        home.join("skills/pdf-tools/SKILL.md").display().to_string()
    );
    let agent = new_agent(&daemon, daemon.dir.path());
    prompt(&daemon, &agent, "hi").await;
    let system = mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("pdf-tools: Read and fill PDF forms"),
        "{system}"
    );

    skill("sql", "Query the team database");
    let reloaded = daemon.dshctl_json(&["skills", "reload"]);
    assert_eq!(reloaded["skills"].as_array().unwrap().len(), 2);
    prompt(&daemon, &agent, "again").await;
    let system = mock.requests()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("sql: Query the team database"), "{system}");
    // The tool schemas went along; the bash description teaches only the $DSH_* convention.
    let tools = mock.requests()[1].body["tools"].to_string();
    assert!(
        tools.contains("\"bash\"") && tools.contains("$DSH_*"),
        "{tools}"
    );
    assert!(!system.contains("DSH_SESSION_JSONL"));
}

/// The key can stay out of dshd's environment: from a private file (`model.api_key_file`), or
/// from a systemd credential (`$CREDENTIALS_DIRECTORY/dsh-model-api-key`, what the unit's
/// `LoadCredential=` gives); either reaches the model in the Authorization header. A key file
/// others can read stops dshd at start, saying which file and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_comes_from_a_private_file_or_a_systemd_credential() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = private_dir();
    let file = secrets.path().join("key");
    std::fs::write(&file, "sk-from-file\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let credentials = secrets.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("dsh-model-api-key"), "sk-from-credential").unwrap();

    for (extra, env, want) in [
        (
            format!("api_key_file = \"{}\"\n", file.display()),
            vec![],
            "sk-from-file",
        ),
        (
            String::new(),
            vec![("CREDENTIALS_DIRECTORY".into(), credentials.clone().into())],
            "sk-from-credential",
        ),
    ] {
        let mock = Mock::start(vec![ok_stream("ok")]).await;
        let daemon = TestDaemon::start_with(DaemonSpec {
            config: Some(format!(
                "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 0\n{extra}",
                mock.base_url
            )),
            env,
            ..DaemonSpec::default()
        });
        let agent = new_agent(&daemon, daemon.dir.path());
        let (out, _) = prompt(&daemon, &agent, "hi").await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = mock.requests();
        assert_eq!(
            requests[0].headers["authorization"],
            format!("Bearer {want}")
        );
        assert!(
            daemon.log_text().contains("model API key"),
            "{}",
            daemon.log_text()
        );
    }

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut refused = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!("[model]\napi_key_file = \"{}\"\n", file.display())),
            ..DaemonSpec::default()
        },
        private_dir(),
    );
    assert!(!refused.wait_exit(Duration::from_secs(20)).success());
    let log = refused.log_text();
    assert!(
        log.contains("model.api_key_file")
            && log.contains("readable by its group")
            && log.contains("chmod 600"),
        "{log}"
    );
}

/// A token logger written for Claude Code (our own fixture in the shape of published ones, see
/// SOURCES.md) reads `message.usage` from the Claude-format transcript and logs the counts the
/// provider reported (issue 45).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_token_logger_logs_the_providers_counts() {
    dsh_core::test_support::require_jq();
    let mut call = tool_call_stream("call_1", "bash", &["{\"command\": \"true\"}"]);
    call.push(usage_event(120, 30, 20));
    call.push(DONE.into());
    let mut answer = vec![text_delta("Done."), finish("stop")];
    answer.push(usage_event(200, 5, 100));
    answer.push(DONE.into());
    let mock = Mock::start(vec![stream(call), stream(answer)]).await;
    let dir = dsh_tests::private_dir();
    let logger =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hooks/own/token-usage-log.sh");
    let hooks = dir.path().join("hooks.json");
    std::fs::write(
        &hooks,
        json!({"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": logger.to_str().unwrap()}
        ]}]}})
        .to_string(),
    )
    .unwrap();
    let daemon = daemon(
        &mock,
        true,
        &format!(
            "[hooks]\nclaude_code = [{:?}]\nclaude_code_transcript = \"claude\"\n",
            hooks.to_str().unwrap()
        ),
    );
    let project = dir.path().join("proj");
    std::fs::create_dir(&project).unwrap();
    let agent = new_agent(&daemon, &project);
    let (out, _) = prompt(&daemon, &agent, "look around").await;
    assert!(out.status.success());
    let log = std::fs::read_to_string(project.join(".claude/token-usage.jsonl")).unwrap();
    let line: Value = serde_json::from_str(log.trim()).unwrap();
    // Prompt tokens are split into the uncached input and the cache reads, as the Messages API
    // reports them.
    assert_eq!(
        line,
        json!({"session": agent, "usage": {"input": 200, "output": 35, "cache_read": 120}})
    );
}

/// Claude Code hooks see the agent's reasoning effort (issue 45): `effort.level` on the events of
/// a tool-use context (not on UserPromptSubmit), and `CLAUDE_EFFORT` in their environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_hooks_see_the_agents_reasoning_effort() {
    let mut call = tool_call_stream("call_1", "bash", &["{\"command\": \"true\"}"]);
    call.push(DONE.into());
    let mock = Mock::start(vec![stream(call), ok_stream("Done.")]).await;
    let dir = dsh_tests::private_dir();
    let dump = dir.path().join("dump.sh");
    let log = dir.path().join("payloads.jsonl");
    std::fs::write(
        &dump,
        format!(
            "#!/bin/sh\ncat >> '{l}'\necho >> '{l}'\necho \"env=$CLAUDE_EFFORT\" >> '{l}.env'\n",
            l = log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dump, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook = || json!([{"hooks": [{"type": "command", "command": dump.to_str().unwrap()}]}]);
    let hooks = dir.path().join("hooks.json");
    std::fs::write(
        &hooks,
        json!({"hooks": {"UserPromptSubmit": hook(), "PreToolUse": hook()}}).to_string(),
    )
    .unwrap();
    let daemon = daemon(
        &mock,
        true,
        &format!("[hooks]\nclaude_code = [{:?}]\n", hooks.to_str().unwrap()),
    );
    let agent = daemon.dshctl_json(&[
        "agent",
        "new",
        "--model",
        "openai",
        "--reasoning-effort",
        "high",
        "--cwd",
        dir.path().to_str().unwrap(),
    ])["agent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (out, _) = prompt(&daemon, &agent, "look").await;
    assert!(out.status.success());
    let payloads: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |name: &str| {
        payloads
            .iter()
            .find(|p| p["hook_event_name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {payloads:?}"))
    };
    assert_eq!(of("PreToolUse")["effort"], json!({"level": "high"}));
    assert!(of("UserPromptSubmit").get("effort").is_none());
    let env = std::fs::read_to_string(format!("{}.env", log.display())).unwrap();
    assert_eq!(env, "env=high\nenv=high\n");
}
