//! Project instructions (`AGENTS.md`) reach the model: the home's file, then the repository
//! root's down to the agent's directory, as the first message of every request; a directory
//! without `AGENTS.md` gives its `CLAUDE.md`; a large file is cut to the budget with a note; a
//! link planted in the workspace to a secret dshd hides is read under the agent's sandbox and
//! gives nothing. All of it is logged once as `session/instructions`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;

use dsh_testkit::{Mock, ok_stream};
use serde_json::Value;

use crate::openai::daemon;

/// The user messages of the `n`-th chat request the mock received.
fn user_messages(mock: &Mock, n: usize) -> Vec<String> {
    let requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/chat/completions")
        .collect();
    requests[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_from_home_root_and_subdirectory_reach_every_request_in_order() {
    let mock = Mock::start(vec![ok_stream("one"), ok_stream("two")]).await;
    let daemon = daemon(&mock, true, "");
    let base = daemon.dir.path().to_owned();
    let repo = base.join("repo");
    let sub = repo.join("crates/core");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    std::fs::write(daemon.home.join("AGENTS.md"), "Home rule: be brief.\n").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Root rule: run cargo test.\n").unwrap();
    std::fs::write(repo.join("crates/CLAUDE.md"), "Crates rule: no unsafe.\n").unwrap();
    // A large file in the agent's own directory: cut to the 32 KiB budget.
    std::fs::write(sub.join("AGENTS.md"), "Core rule.\n".repeat(100_000)).unwrap();
    let (events, daemon) = tokio::task::spawn_blocking(move || {
        let agent = crate::openai::new_agent(&daemon, &sub);
        for text in ["first", "second"] {
            assert!(
                daemon
                    .dshctl(&["prompt", "--agent", &agent, text])
                    .status
                    .success()
            );
        }
        let shown = daemon.dshctl_json(&["agent", "show", &agent]);
        assert_eq!(
            shown["instruction_files"].as_array().unwrap().len(),
            4,
            "{shown}"
        );
        (
            daemon.dshctl_json_lines(&["session", "events", &agent]),
            daemon,
        )
    })
    .await
    .unwrap();
    let first = user_messages(&mock, 0);
    assert_eq!(first.len(), 2, "{first:?}");
    let text = &first[0];
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in {text:?}"))
    };
    assert!(at("Home rule") < at("Root rule"));
    assert!(at("Root rule") < at("Crates rule"));
    assert!(at("Crates rule") < at("Core rule"));
    assert!(
        text.contains("[dsh: cut here: the file has 1100000 bytes"),
        "{text:?}"
    );
    assert!(text.len() < 34 * 1024, "{} bytes", text.len());
    assert_eq!(first[1], "first");
    // The second turn's request starts the same way (the log, not a second read).
    assert_eq!(user_messages(&mock, 1)[0], *text);

    let loaded: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "session/instructions")
        .collect();
    assert_eq!(loaded.len(), 1, "{events:?}");
    let files: Vec<(&str, bool)> = loaded[0]["data"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["cut"] == true))
        .collect();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    assert_eq!(
        files,
        [
            (path(&daemon.home.join("AGENTS.md")).as_str(), false),
            (path(&repo.join("AGENTS.md")).as_str(), false),
            (path(&repo.join("crates/CLAUDE.md")).as_str(), false),
            (path(&repo.join("crates/core/AGENTS.md")).as_str(), true),
        ]
    );
}

/// A workspace's `AGENTS.md` that is a link to dshd's own config file (which no confined
/// command may read) gives a confined agent's model nothing of it: the read runs under the
/// agent's sandbox, not as dshd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_to_a_hidden_secret_gives_nothing() {
    let mock = Mock::start(vec![ok_stream("ok")]).await;
    let daemon = daemon(&mock, true, "# sk-secret-in-config\n");
    let work = daemon.dir.path().join("work");
    std::fs::create_dir_all(work.join(".git")).unwrap();
    let config = daemon.dir.path().join("config.toml");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("sk-secret-in-config")
    );
    std::os::unix::fs::symlink(&config, work.join("AGENTS.md")).unwrap();
    let events = tokio::task::spawn_blocking(move || {
        let created = daemon.dshctl_json(&[
            "agent",
            "new",
            "--model",
            "openai",
            "--sandbox",
            "workspace-write",
            "--cwd",
            work.to_str().unwrap(),
        ]);
        let agent = created["agent_id"].as_str().unwrap();
        assert!(
            daemon
                .dshctl(&["prompt", "--agent", agent, "hi"])
                .status
                .success()
        );
        daemon.dshctl_json_lines(&["session", "events", agent])
    })
    .await
    .unwrap();
    let sent = serde_json::to_string(&mock.requests()[0].body).unwrap();
    assert!(!sent.contains("sk-secret"), "{sent}");
    let loaded = events
        .iter()
        .find(|e| e["type"] == "session/instructions")
        .expect("no session/instructions");
    let problems = loaded["data"]["problems"].to_string();
    assert!(problems.contains("AGENTS.md: cannot be read"), "{loaded}");
    assert!(!problems.contains("sk-secret"), "{loaded}");
}
