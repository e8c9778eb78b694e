//! Imports that a resumed agent answers with: a dsh bundle exported by dshd, an upstream DeepSeek
//! Harness log (plain and Zstandard, written by upstream's own code), a Claude Code transcript,
//! and a Claude Code transcript dshd exported. The first request the model gets after resuming
//! holds the imported history.

use dsh_testkit::{Mock, ok_stream};

use super::*;

/// The texts of every message of the first chat request `mock` saw.
fn first_request_texts(mock: &Mock) -> String {
    let requests = mock.requests();
    let chat = requests
        .iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap_or_else(|| panic!("no chat request among {} requests", requests.len()));
    chat.body["messages"].to_string()
}

/// Imports `path`, resumes the new session with the mock's model, prompts it, and answers what
/// the model was sent; the import's JSON document too.
async fn resumed_history(path: &Path) -> (Value, String, Vec<Value>) {
    let mock = Mock::start(vec![ok_stream("resumed")]).await;
    let daemon = crate::openai::daemon(&mock, true, "");
    let imported = import(&daemon, path);
    let id = imported["sessionId"].as_str().unwrap().to_owned();
    let events = daemon.events(&id);
    daemon.dshctl_json(&["agent", "resume", &id, "--model", "openai"]);
    let prompted = {
        let socket = daemon.socket.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &id, "and now?"])
        })
        .await
        .unwrap()
    };
    assert!(
        prompted.status.success(),
        "{}",
        String::from_utf8_lossy(&prompted.stderr)
    );
    (imported, first_request_texts(&mock), events)
}

/// The imported log ends its source's events with `session/imported`, naming the source.
fn assert_recorded(events: &[Value], format: &str, path: &Path) {
    let last = events.last().unwrap();
    assert_eq!(last["type"], "session/imported", "{events:?}");
    assert_eq!(last["data"]["format"], format);
    assert_eq!(last["data"]["source"], path.to_str().unwrap());
    dsh_tests::agents::assert_contiguous(events);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_log_resumes_with_its_history() {
    for (name, format) in [
        ("session.jsonl", "upstream-jsonl"),
        ("session.jsonl.zstd", "upstream-zstd"),
    ] {
        let source = fixture(&format!("upstream/{name}"));
        let before = std::fs::read(&source).unwrap();
        let (imported, sent, events) = resumed_history(&source).await;
        assert_eq!(imported["format"], format, "{imported}");
        let original = imported["originalId"].as_str().unwrap();
        assert!(original.starts_with("upstream-"), "{imported}");
        // Stream chunks, the todo list and route metadata are left out and counted.
        assert_eq!(imported["skipped"], 3, "{imported}");
        assert_recorded(&events, format, &source);
        for text in [
            "What is in the README?",
            "Let me read it.",
            "cat README.md",
            "zebra-7",
            "The README says the project prints the word zebra-7.",
        ] {
            assert!(sent.contains(text), "{name}: {text:?} not sent: {sent}");
        }
        let usage = &events.iter().find(|e| e["type"] == "turn/end").unwrap()["data"]["usage"];
        assert_eq!(usage["inputTokens"], 812 + 901, "{usage}");
        assert_eq!(usage["outputTokens"], 37 + 15, "{usage}");
        assert_eq!(
            std::fs::read(&source).unwrap(),
            before,
            "the source is never modified"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_transcript_resumes_with_its_history() {
    let source = fixture("claude-code.jsonl");
    let (imported, sent, events) = resumed_history(&source).await;
    assert_eq!(imported["format"], "claude-jsonl", "{imported}");
    assert_eq!(
        imported["originalId"],
        "3f6c2a9e-1b7d-4c55-8e2a-9d0b4f1e6a27"
    );
    assert_recorded(&events, "claude-jsonl", &source);
    for text in [
        "Which port does the server listen on?",
        "grep -rn PORT config/",
        "PORT = 8477",
        "The server listens on port 8477",
    ] {
        assert!(sent.contains(text), "{text:?} not sent: {sent}");
    }
    // One model answer over two records is one step, its usage counted once.
    let call = events.iter().find(|e| e["type"] == "tool/call").unwrap();
    assert_eq!(call["data"]["name"], "bash");
    assert_eq!(call["data"]["arguments"]["timeout_ms"], 30000);
    assert_eq!(dsh_tests::agents::count(&events, "assistant/message"), 2);
    let usage = &events.iter().find(|e| e["type"] == "turn/end").unwrap()["data"]["usage"];
    assert_eq!(usage["inputTokens"], 4 + 2310 + 6 + 188, "{usage}");
    assert_eq!(usage["outputTokens"], 96 + 24, "{usage}");
}

/// A bundle dshd exported comes back as a new session with the same events, and a Claude Code
/// export of it too.
#[tokio::test(flavor = "multi_thread")]
async fn exports_come_back_as_new_sessions() {
    let source_daemon = TestDaemon::start();
    let (parent, _child) = session_with_child(&source_daemon);
    let original = source_daemon.events(&parent);
    for (format, expected) in [("bundle", "dsh-bundle"), ("claude-jsonl", "claude-jsonl")] {
        let path = source_daemon
            .dir
            .path()
            .join(format!("round-trip.{format}"));
        std::fs::write(
            &path,
            export(&source_daemon, &[&parent, "--format", format]),
        )
        .unwrap();
        let (imported, sent, events) = resumed_history(&path).await;
        assert_eq!(imported["format"], expected, "{imported}");
        assert_ne!(imported["sessionId"], parent.as_str());
        assert_recorded(&events, expected, &path);
        if format == "bundle" {
            // The same events, then the import's record.
            let strip = |e: &Value| json!({"type": e["type"], "data": e["data"]});
            assert_eq!(
                events[..events.len() - 1]
                    .iter()
                    .map(strip)
                    .collect::<Vec<_>>(),
                original.iter().map(strip).collect::<Vec<_>>()
            );
        }
        for text in [
            "delegate it",
            "echo hello from bash",
            "42 files",
            "the child says 42",
        ] {
            assert!(sent.contains(text), "{format}: {text:?} not sent: {sent}");
        }
    }
}

/// An import lands in whichever backend is active: SQLite and PostgreSQL hold it as JSONL does.
#[test]
fn imports_land_in_every_backend() {
    for backend in ["sqlite", "postgres"] {
        let daemon = daemon_on(backend);
        let source = fixture("upstream/session.jsonl.zstd");
        let imported = import(&daemon, &source);
        assert_eq!(imported["format"], "upstream-zstd", "{backend}: {imported}");
        let id = imported["sessionId"].as_str().unwrap();
        let events = daemon.events(id);
        assert_eq!(events.len() as u64, imported["events"].as_u64().unwrap());
        assert_recorded(&events, "upstream-zstd", &source);
        let listed = daemon.dshctl_json(&["session", "list", "--all"]);
        assert_eq!(listed["backend"]["name"], backend, "{listed}");
        assert!(listed.to_string().contains(id), "{listed}");
    }
}

/// A bundle's child agents come back as child sessions of the imported one, with their events.
#[test]
fn a_bundles_children_come_back_as_children() {
    let daemon = TestDaemon::start();
    let (parent, child) = session_with_child(&daemon);
    let path = daemon.dir.path().join("family.zip");
    std::fs::write(&path, export(&daemon, &[&parent, "--descendants"])).unwrap();
    let imported = import(&daemon, &path);
    let new_parent = imported["sessionId"].as_str().unwrap();
    let descendants = imported["descendantIds"].as_array().unwrap();
    assert_eq!(descendants.len(), 1, "{imported}");
    let new_child = descendants[0].as_str().unwrap();
    assert_ne!(new_child, child.as_str());
    let listed = daemon.dshctl_json(&["session", "list", "--all"]);
    let header = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["header"]["id"] == new_child)
        .unwrap_or_else(|| panic!("{new_child} not listed: {listed}"))["header"]
        .clone();
    assert_eq!(header["parent_session"], new_parent, "{header}");
    assert_eq!(header["origin"], "subagent", "{header}");
    assert_eq!(header["delegation_depth"], 1, "{header}");
    let strip = |e: &Value| json!({"type": e["type"], "data": e["data"]});
    let events = daemon.events(new_child);
    assert_recorded(
        &events,
        "dsh-jsonl",
        Path::new(&format!(
            "{}!subagents/{child}/session.jsonl",
            path.display()
        )),
    );
    assert_eq!(
        events[..events.len() - 1]
            .iter()
            .map(strip)
            .collect::<Vec<_>>(),
        daemon.events(&child).iter().map(strip).collect::<Vec<_>>()
    );
}

/// An upstream session its compaction rewrote (a long result pruned, then a summary checkpoint
/// over turn 1) resumes with what upstream's model was last sent: the summary and turn 2, none
/// of turn 1.
#[tokio::test(flavor = "multi_thread")]
async fn a_compacted_upstream_log_resumes_with_its_summary() {
    let source = fixture("upstream/session-compacted.jsonl");
    let (imported, sent, events) = resumed_history(&source).await;
    assert_eq!(imported["format"], "upstream-jsonl", "{imported}");
    assert_recorded(&events, "upstream-jsonl", &source);
    let compactions: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "compaction/end")
        .collect();
    assert_eq!(compactions.len(), 2, "{events:?}");
    for text in [
        "The user asked how many lines big.log has: 400, each naming zebra-7.",
        "Which word does every line repeat?",
        "Every line repeats zebra-7.",
        "and now?",
    ] {
        assert!(sent.contains(text), "{text:?} not sent: {sent}");
    }
    for text in [
        "How many lines does big.log have?",
        "line 1: zebra-7",
        "automatically generated checkpoint",
    ] {
        assert!(
            !sent.contains(text),
            "{text:?} sent after the summary: {sent}"
        );
    }
}
