//! Unique id prefixes wherever an id is asked for; an ambiguous one lists the candidates.

use super::*;

fn reply() -> Value {
    json!({"replies": [{"text": "ok"}]})
}

#[test]
fn an_eight_character_prefix_works_for_session_locate() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("locate"), &reply());
    daemon.prompt(&id, "hi").assert_completed();

    let full = daemon.locate(&id);
    assert_eq!(full["kind"], "jsonl", "{full}");
    assert_eq!(daemon.locate(&id[..8]), full);
    // The human form too, and the other commands that take a session or an agent.
    let out = daemon.dshctl(&["session", "locate", &id[..8]]);
    assert!(text(&out.stdout).contains(full["path"].as_str().unwrap()));
    let events = daemon.dshctl_json_lines(&["session", "events", &id[..8]]);
    assert_eq!(events.first().unwrap()["type"], "turn/start");
    assert_eq!(
        daemon.dshctl_json(&["agent", "show", &id[..8]])["agent_id"],
        id
    );

    // A stored (not live) session: resume by prefix.
    daemon.dshctl_json(&["agent", "close", &id[..8]]);
    let resumed = daemon.agent_with_script(&["resume", &id[..8]], &reply());
    assert_eq!(resumed["agent_id"], id);
}

#[test]
fn an_ambiguous_prefix_is_refused_with_the_candidates_and_a_longer_one_resolves() {
    let daemon = TestDaemon::start();
    let a = daemon.new_agent(&daemon.workdir("a"), &reply());
    let b = daemon.new_agent(&daemon.workdir("b"), &reply());
    // UUIDv7 ids share their leading (time) digits; the common prefix is ambiguous by construction.
    let shared = common_prefix(&a, &b);
    assert!(!shared.is_empty(), "{a} {b}");

    for args in [
        &["agent", "show", shared][..],
        &["session", "locate", shared],
        &["prompt", "--agent", shared, "hi"],
    ] {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = daemon.dshctl(&full);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["error"]["kind"], "ambiguous_id", "{doc}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&a) && message.contains(&b),
            "{args:?}: {message}"
        );
        assert!(text(&out.stderr).contains("is ambiguous"));
    }
    // Nothing was prompted.
    assert_eq!(daemon.dshctl_json(&["agent", "show", &a])["turns"], 0);

    // One more character tells them apart.
    let unique_a = &a[..shared.len() + 1];
    let unique_b = &b[..shared.len() + 1];
    assert_eq!(
        daemon.dshctl_json(&["agent", "show", unique_a])["agent_id"],
        a
    );
    daemon.prompt(unique_b, "hi").assert_completed();
    assert_eq!(daemon.dshctl_json(&["agent", "show", &b])["turns"], 1);
}

#[test]
fn a_prefix_that_names_nothing_says_where_ids_are_listed() {
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&["--json", "agent", "cancel", "fff"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "not_found");
    assert_eq!(
        doc["error"]["message"],
        "no live agent has an id starting with \"fff\"; dshctl agent list shows them"
    );
}

/// The next line of `lines` that `want` accepts; fails the test after [`PATIENCE`].
fn next_line(
    lines: &std::sync::mpsc::Receiver<String>,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {what} ({e})"),
        }
    }
}

#[test]
fn watch_and_approve_take_eight_character_prefixes_of_the_agent_and_a_prefix_of_the_call() {
    let daemon = TestDaemon::start();
    let script = daemon.write_script(&json!({"replies": [
        {"tool_calls": [{"id": "call_0123456789", "name": "bash", "arguments": {"command": "echo ran"}}]},
        {"text": "done"},
    ]}));
    let agent = daemon.dshctl_json(&[
        "agent",
        "new",
        "--cwd",
        daemon.workdir("w").to_str().unwrap(),
        "--approval",
        "always",
        "--script",
        script.to_str().unwrap(),
    ])["agent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let short = &agent[..8];

    let mut watch = spawn_dshctl(&daemon, &["--json", "watch", short, "--from", "0"]);
    let lines = dsh_tests::line_channel(watch.stdout.take().unwrap());
    let prompt = daemon.prompt_in_background(&agent, "go");
    let request = next_line(&lines, "the approval request", |l| {
        l.contains("\"approval/request\"")
    });
    let request: Value = serde_json::from_str(&request).unwrap();
    assert_eq!(
        request["sessionId"],
        agent.as_str(),
        "watch followed the agent named by its prefix"
    );

    let answered = daemon.dshctl_json(&["approve", short, "call_01", "--allow"]);
    assert_eq!(answered["agent_id"], agent.as_str(), "{answered}");
    assert_eq!(answered["call_id"], "call_0123456789", "{answered}");
    let decided = next_line(&lines, "the decision", |l| {
        l.contains("\"approval/decision\"")
    });
    assert!(decided.contains("\"decision\":\"allow\""), "{decided}");
    dsh_tests::agents::finish_prompt(prompt).assert_completed();
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn the_child_marker_watch_prints_names_the_child_in_session_locate() {
    let daemon = TestDaemon::start();
    let parent = daemon.new_agent(
        &daemon.workdir("p"),
        &json!({"replies": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "hello"},
                             "child_script": {"replies": [{"text": "child here"}]}}]},
            {"text": "done"},
        ]}),
    );
    // A reply for every probe turn the loop below may need: on a loaded machine the watch can
    // take more than one round to start following.
    let probe = daemon.new_agent(
        &daemon.workdir("probe"),
        &json!({"replies": vec![json!({"text": "ok"}); 1000]}),
    );
    // Every agent, human form: each line marked with its agent's id.
    let mut watch = spawn_dshctl(&daemon, &["watch"]);
    let lines = dsh_tests::line_channel(watch.stdout.take().unwrap());
    // The watch is following once a probe's turn shows on it.
    loop {
        daemon.prompt(&probe, "hi").assert_completed();
        if lines
            .recv_timeout(std::time::Duration::from_secs(1))
            .is_ok()
        {
            break;
        }
    }
    daemon.prompt(&parent, "go").assert_completed();
    let children = dsh_tests::shell::children_of(&daemon, &parent);
    assert_eq!(children.len(), 1, "{children:?}");
    let child = &children[0];
    let line = next_line(&lines, "the child's text", |l| l.contains("child here"));
    let marker = line
        .strip_prefix("[")
        .and_then(|l| l.split_once("] "))
        .map(|(m, _)| m.to_owned())
        .unwrap_or_else(|| panic!("no marker on {line:?}"));
    assert!(
        child.ends_with(marker.trim_start_matches('…')),
        "{marker} {child}"
    );
    let _ = watch.kill();
    let _ = watch.wait();

    let full = daemon.locate(child);
    // As printed (with the ellipsis), and as a double-click selects it (without).
    assert_eq!(daemon.locate(&marker), full, "{marker}");
    assert_eq!(
        daemon.locate(marker.trim_start_matches('…')),
        full,
        "{marker}"
    );
}
