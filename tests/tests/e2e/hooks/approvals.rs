//! Approvals through the real daemon: a PreToolUse hook's "ask" (policy `on-request`, the
//! default) and the `always` policy make a bash call wait for `dshctl approve`; a denial, no
//! answer within `approvals.timeout_ms`, or nobody watching the agent keep the command from
//! running, and the model is told why.

use super::*;

/// A PreToolUse hook on Bash that asks for approval of every call.
fn asking_hook() -> Value {
    let ask = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "ask",
        "permissionDecisionReason": "a person should see this",
    }});
    hook_file(&[(
        "PreToolUse",
        Some("Bash"),
        &format!("cat > /dev/null; echo '{ask}'"),
    )])
}

/// A world whose Bash calls a hook asks about, with `more_toml` after the `[hooks]` table.
fn asking_world(more_toml: &str) -> World {
    World::new(|_| Setup {
        hooks_toml: more_toml.to_owned(),
        ..Setup::claude_code(asking_hook())
    })
}

/// A script whose bash call `c1` would create the marker.
fn marker_script(w: &World) -> Value {
    json!({"replies": [
        {"text": "making it", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": format!("touch {}", w.q("marker"))}}]},
        {"text": "done"},
    ]})
}

/// Waits until agent `agent` has logged `n` approval requests; returns the last one's data.
fn wait_for_request(w: &World, agent: &str, n: usize) -> Value {
    w.daemon.wait_for_events(agent, "an approval request", |e| {
        of_type(e, "approval/request").len() >= n
    });
    of_type(&w.events(agent), "approval/request")[n - 1]["data"].clone()
}

/// `dshctl --json approve AGENT CALL ARGS...`.
fn approve(w: &World, agent: &str, call: &str, args: &[&str]) -> Value {
    let mut full = vec!["approve", agent, call];
    full.extend_from_slice(args);
    w.daemon.dshctl_json(&full)
}

/// The one `approval/decision` of the turn's lines.
fn decision(turn: &Turn) -> Value {
    let decisions = turn.of_type("approval/decision");
    assert_eq!(decisions.len(), 1, "{:?}", turn.lines);
    decisions[0]["data"].clone()
}

#[test]
fn an_ask_hook_waits_and_an_allow_from_dshctl_approve_runs_the_command() {
    let w = asking_world("");
    let agent = w.agent(&marker_script(&w));
    let running = w.prompt_in_background(&agent, "make the marker");
    let request = wait_for_request(&w, &agent, 1);
    assert_eq!(request["callId"], "c1");
    assert_eq!(request["tool"], "bash");
    assert_eq!(request["reason"], "a person should see this");
    assert_eq!(request["cwd"], w.cwd.to_str().unwrap());
    assert!(
        request["command"].as_str().unwrap().starts_with("touch "),
        "{request}"
    );
    assert!(!w.path("marker").exists(), "it ran before it was allowed");
    approve(&w, &agent, "c1", &["--allow"]);
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(w.path("marker").exists(), "the allowed command did not run");
    // The prompting client saw the request and the answer (they are events like any other).
    assert_eq!(turn.of_type("approval/request").len(), 1);
    let decided = decision(&turn);
    assert_eq!(
        (decided["decision"].clone(), decided["by"].clone()),
        (json!("allow"), json!("client"))
    );
    // Who answered, as dshd saw the client: this test's own `dshctl` (a pid, our uid).
    let client = &decided["client"];
    assert!(client["pid"].as_i64().is_some_and(|p| p > 1), "{decided}");
    assert_eq!(
        client["uid"],
        rustix::process::geteuid().as_raw(),
        "{decided}"
    );
    assert!(client["terminal"].is_boolean(), "{decided}");
    assert_eq!(turn.tool_results()[0]["isError"], false);
}

#[test]
fn a_deny_keeps_the_command_from_running_and_the_model_gets_the_reason() {
    let w = asking_world("");
    let agent = w.agent(&marker_script(&w));
    let running = w.prompt_in_background(&agent, "make the marker");
    wait_for_request(&w, &agent, 1);
    approve(
        &w,
        &agent,
        "c1",
        &["--deny", "--reason", "not in this repo"],
    );
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.path("marker").exists(), "the denied command ran");
    assert_eq!(decision(&turn)["decision"], "deny");
    let result = turn.tool_results()[0];
    assert_eq!(result["isError"], true);
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("not in this repo"), "{content}");
    // Answered once: a second answer finds nothing waiting.
    let out = w
        .daemon
        .dshctl(&["--json", "approve", &agent, "c1", "--allow"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "not_found", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no approval request waiting for call c1"),
        "{doc}"
    );
}

#[test]
fn no_answer_within_the_timeout_denies() {
    let w = asking_world("[approvals]\ntimeout_ms = 300\n");
    let agent = w.agent(&marker_script(&w));
    let turn = w.prompt(&agent, "make the marker");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.path("marker").exists(), "the unanswered command ran");
    let decided = decision(&turn);
    assert_eq!(
        (decided["decision"].clone(), decided["by"].clone()),
        (json!("deny"), json!("timeout"))
    );
    let content = turn.tool_results()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains("nobody answered"), "{content}");
}

#[test]
fn under_the_always_policy_every_bash_call_waits_for_approval() {
    let w = World::new(|_| Setup {
        hooks_toml: "[approvals]\npolicy = \"always\"\n".into(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [
        {"tool_calls": [{"id": "one", "name": "bash", "arguments": {"command": format!("touch {}", w.q("one"))}}]},
        {"tool_calls": [{"id": "two", "name": "bash", "arguments": {"command": format!("touch {}", w.q("two"))}}]},
        {"text": "done"},
    ]}));
    assert_eq!(
        w.daemon.dshctl_json(&["agent", "show", &agent])["approval"],
        "always"
    );
    let running = w.prompt_in_background(&agent, "make both");
    for (n, call) in [(1, "one"), (2, "two")] {
        let request = wait_for_request(&w, &agent, n);
        assert_eq!(request["callId"], call);
        assert!(!w.path(call).exists(), "{call} ran before it was allowed");
        approve(&w, &agent, call, &["--allow"]);
    }
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(w.path("one").exists() && w.path("two").exists());
    assert_eq!(turn.of_type("approval/request").len(), 2);
    // A policy chosen per agent wins over the config's.
    let never = w.agent_with(&["--approval", "never"], &json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": format!("touch {}", w.q("three"))}}]},
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&never, "go").kind(), "completed");
    assert!(w.path("three").exists());
}

#[test]
fn an_allow_for_the_session_allows_the_same_request_again_without_asking() {
    let w = World::new(|_| Setup {
        hooks_toml: "[approvals]\npolicy = \"always\"\n".into(),
        ..Setup::default()
    });
    let append = format!("echo x >> {}", w.q("log"));
    let other = format!("touch {}", w.q("other"));
    let agent = w.agent(&json!({"replies": [
        {"tool_calls": [{"id": "a1", "name": "bash", "arguments": {"command": append}}]},
        {"tool_calls": [{"id": "a2", "name": "bash", "arguments": {"command": append}}]},
        {"tool_calls": [{"id": "b1", "name": "bash", "arguments": {"command": other}}]},
        {"text": "done"},
    ]}));
    let running = w.prompt_in_background(&agent, "go");
    wait_for_request(&w, &agent, 1);
    let answered = approve(&w, &agent, "a1", &["--allow", "--always"]);
    assert_eq!(answered["scope"], "session", "{answered}");
    // The same command again is allowed by the rule; another command still asks.
    let request = wait_for_request(&w, &agent, 2);
    assert_eq!(request["callId"], "b1", "the repeated command asked again");
    let shown = w.daemon.dshctl_json(&["agent", "show", &agent]);
    assert_eq!(
        shown["approval_rules"],
        json!([{"tool": "bash", "command": append, "cwd": w.cwd.to_str().unwrap()}]),
        "{shown}"
    );
    approve(&w, &agent, "b1", &["--allow"]);
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(std::fs::read_to_string(w.path("log")).unwrap(), "x\nx\n");
    assert!(w.path("other").exists());
    let decisions: Vec<_> = turn
        .of_type("approval/decision")
        .iter()
        .map(|d| {
            let d = &d["data"];
            (d["callId"].clone(), d["by"].clone(), d["scope"].clone())
        })
        .collect();
    assert_eq!(
        decisions,
        [
            (json!("a1"), json!("client"), json!("session")),
            (json!("a2"), json!("rule"), Value::Null),
            (json!("b1"), json!("client"), Value::Null),
        ]
    );
    // A rule made once is listed once; an allow for this call only makes none.
    let shown = w.daemon.dshctl_json(&["agent", "show", &agent]);
    assert_eq!(
        shown["approval_rules"].as_array().unwrap().len(),
        1,
        "{shown}"
    );
}

#[test]
fn with_nobody_watching_the_agent_a_request_is_denied_at_once() {
    // The hook asks about the second call only (the first is a `cat`, which it lets through).
    let hook = hook_file(&[(
        "PreToolUse",
        Some("Bash"),
        r#"grep -q touch || exit 0; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask"}}'"#,
    )]);
    let w = World::new(|_| Setup {
        hooks_toml: "[approvals]\ntimeout_ms = 600000\n".into(),
        ..Setup::claude_code(hook)
    });
    // The first call holds the turn until the test opens the gate.
    let fifo = w.path("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo is missing: apt-get install coreutils");
    assert!(made.success());
    let agent = w.agent(&json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": format!("cat {}", fifo.display())}}]},
        {"tool_calls": [{"id": "c2", "name": "bash", "arguments": {"command": format!("touch {}", w.q("marker"))}}]},
        {"text": "done"},
    ]}));
    let mut running = w.prompt_in_background(&agent, "wait, then make the marker");
    w.daemon
        .wait_for_events(&agent, "the first call running", |e| {
            of_type(e, "tool/call").len() == 1
        });
    // The only watcher goes away; then the turn goes on.
    running.kill().unwrap();
    running.wait().unwrap();
    std::fs::write(&fifo, "open\n").unwrap();
    w.daemon.wait_for_events(&agent, "the turn's end", |e| {
        !of_type(e, "turn/end").is_empty()
    });
    let events = w.events(&agent);
    let decided = &of_type(&events, "approval/decision")[0]["data"];
    assert_eq!(
        (decided["decision"].clone(), decided["by"].clone()),
        (json!("deny"), json!("unwatched"))
    );
    assert!(!w.path("marker").exists());
    let result = of_type(&events, "tool/result")[1]["data"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(result.contains("nobody is watching"), "{result}");
}

/// The attack: under `always`, the agent's own background job (unconfined) watches the agent and
/// answers its next request with `dshctl approve` (it used to be allowed, logged as a person's
/// answer). Approvals come from people: the job's answer is PERMISSION_DENIED, the call waits
/// until nobody has answered in time and is denied, and the log says the timeout decided. The
/// job's start itself was allowed by this test, a client outside every command, which the log
/// records with its pid and uid.
#[test]
fn an_agents_own_job_cannot_approve_its_calls() {
    let w = World::new(|_| Setup {
        hooks_toml: "[approvals]\npolicy = \"always\"\ntimeout_ms = 3000\n".into(),
        ..Setup::default()
    });
    let dshctl = format!(
        "'{}' --socket '{}'",
        dsh_tests::dshctl_bin().display(),
        w.daemon.socket.display()
    );
    let job = format!(
        "{dshctl} --json watch --from 0 \"$DSH_SESSION_ID\" | grep -m1 -q 'approval/request.*\"callId\":\"c2\"'; \
         {dshctl} approve \"$DSH_SESSION_ID\" c2 --allow > {out} 2>&1; echo rc=$? >> {out}",
        out = w.q("answered")
    );
    let agent = w.agent(&json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": job, "run_in_background": true}}]},
        {"tool_calls": [{"id": "c2", "name": "bash", "arguments": {"command": format!("touch {}", w.q("marker"))}}]},
        {"text": "done"},
    ]}));
    let running = w.prompt_in_background(&agent, "go");
    wait_for_request(&w, &agent, 1);
    approve(&w, &agent, "c1", &["--allow"]);
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(
        dsh_tests::eventually(std::time::Duration::from_secs(30), || w
            .path("answered")
            .exists()
            && std::fs::read_to_string(w.path("answered"))
                .unwrap()
                .contains("rc=")),
        "the job never answered"
    );
    let answered = w.read("answered");
    assert!(
        answered.contains("Agents.Approve is refused")
            && answered.contains("approvals come from people")
            && answered.contains("rc=1"),
        "{answered}"
    );
    assert!(
        !w.path("marker").exists(),
        "the job's approval ran the call"
    );
    let decisions = turn.of_type("approval/decision");
    assert_eq!(decisions.len(), 2, "{:?}", turn.lines);
    assert_eq!(decisions[0]["data"]["by"], "client");
    assert!(
        decisions[0]["data"]["client"]["pid"].is_i64(),
        "{}",
        decisions[0]
    );
    assert_eq!(
        (
            &decisions[1]["data"]["decision"],
            &decisions[1]["data"]["by"]
        ),
        (&json!("deny"), &json!("timeout")),
        "{}",
        decisions[1]
    );
    assert!(
        decisions[1]["data"].get("client").is_none(),
        "{}",
        decisions[1]
    );
}
