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
