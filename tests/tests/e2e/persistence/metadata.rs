//! Session titles, archiving and deleting, end to end on both backends: the metadata is logged in
//! the session's own log, `session list` hides archived sessions unless asked, and a deleted
//! session is gone from the store and from every call.

use super::*;

/// `dshctl --json session list --all [--archived]`: each session's (id, title, archived, live).
fn listed(daemon: &TestDaemon, archived: bool) -> Vec<(String, String, bool, bool)> {
    let mut args = vec!["session", "list", "--all"];
    if archived {
        args.push("--archived");
    }
    let doc = daemon.dshctl_json(&args);
    let mut out: Vec<(String, String, bool, bool)> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["header"]["id"].as_str().unwrap().to_owned(),
                s["title"].as_str().unwrap().to_owned(),
                s["archived"].as_bool().unwrap(),
                s["live"].as_bool().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A new agent that has run one turn on `prompt` and been closed: a stored session.
fn stored_session(daemon: &TestDaemon, cwd: &Path, prompt: &str) -> String {
    let id = daemon.new_agent(cwd, &text_replies(&["done"]));
    daemon.prompt(&id, prompt).assert_completed();
    assert!(daemon.dshctl(&["agent", "close", &id]).status.success());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_named_archived_and_deleted_in_both_backends() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("meta");
    let client = daemon.client().await;
    for backend in ["jsonl", "sqlite"] {
        if backend == "sqlite" {
            daemon.dshctl_json(&["persistence", "use", "sqlite"]);
        }
        // The title is the first prompt's first line, live and stored.
        let named = daemon.new_agent(&cwd, &text_replies(&["done"]));
        daemon
            .prompt(&named, "  fix the flaky test\nthen run it twice")
            .assert_completed();
        let live = listed(&daemon, false);
        assert!(
            live.contains(&(named.clone(), "fix the flaky test".into(), false, true)),
            "{backend}: {live:?}"
        );
        let renamed = daemon.dshctl_json(&["session", "rename", &named, "Flaky test"]);
        assert_eq!(renamed["title"], "Flaky test", "{backend}");
        assert!(daemon.dshctl(&["agent", "close", &named]).status.success());
        let other = stored_session(&daemon, &cwd, "another task");

        let archived = daemon.dshctl_json(&["session", "archive", &named]);
        assert_eq!(archived["archived"], true);
        assert_eq!(archived["title"], "Flaky test");
        // Hidden by default, shown (marked) with --archived.
        let default = listed(&daemon, false);
        assert!(
            default.iter().all(|s| s.0 != named),
            "{backend}: an archived session is listed by default: {default:?}"
        );
        assert!(default.contains(&(other.clone(), "another task".into(), false, false)));
        let all = listed(&daemon, true);
        assert!(
            all.contains(&(named.clone(), "Flaky test".into(), true, false)),
            "{backend}: {all:?}"
        );
        assert!(all.contains(&(other.clone(), "another task".into(), false, false)));
        // Both are events of the session's own log, in the store.
        let stored_types: Vec<String> = match backend {
            "jsonl" => file(&daemon.located_path(&named))
                .events
                .iter()
                .map(|e| e["type"].as_str().unwrap().to_owned())
                .collect(),
            _ => db_events(&daemon.home.join("sessions.sqlite3"), &named)
                .iter()
                .map(|e| e["type"].as_str().unwrap().to_owned())
                .collect(),
        };
        assert_eq!(
            &stored_types[stored_types.len() - 2..],
            ["session/title", "session/archived"],
            "{backend}"
        );

        // A live session cannot be deleted.
        let live_one = daemon.new_agent(&cwd, &text_replies(&["done"]));
        let (kind, message) = refused(&daemon, &["session", "delete", &live_one, "--yes"]);
        assert_eq!(kind, "failed_precondition", "{message}");
        assert!(message.contains("is live"), "{message}");

        // A stored one is removed from the backend holding it.
        let jsonl_dir = (backend == "jsonl")
            .then(|| daemon.located_path(&named).parent().unwrap().to_path_buf());
        let deleted = daemon.dshctl_json(&["session", "delete", &named, "--yes"]);
        assert_eq!(deleted["backend"], backend);
        match &jsonl_dir {
            Some(dir) => assert!(!dir.exists(), "{} is still there", dir.display()),
            None => {
                let db = daemon.home.join("sessions.sqlite3");
                assert_eq!(db_header(&db, &named), None);
                assert!(db_events(&db, &named).is_empty());
            }
        }
        let status = client
            .persistence()
            .locate(v1::LocateRequest {
                session_id: named.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::NotFound,
            "{backend}: {status:?}"
        );
        let after = listed(&daemon, true);
        assert!(after.iter().all(|s| s.0 != named), "{after:?}");
        assert!(after.iter().any(|s| s.0 == other));
        assert!(
            daemon
                .dshctl(&["agent", "close", &live_one])
                .status
                .success()
        );
    }
}
