//! Export from each backend: the bundle's logs are the stored events, byte for byte from a JSONL
//! store; the Markdown renders every event type the sessions hold.

use super::*;

/// What the Markdown shows for each event type, as a person reads it.
fn rendered(kind: &str) -> &'static str {
    match kind {
        "turn/start" => "### Turn ",
        "turn/end" => " ended: ",
        "step/start" => "*Step ",
        "step/end" => "<!-- end of step ",
        "user/message" => "**User:**",
        "assistant/message" => "**Assistant:**",
        "tool/call" => "**Tool call `",
        "tool/result" => "**Result** (`",
        "session/settings" => "*Settings: ",
        "session/end-seed" => "*Resumed or forked here*",
        "session/imported" => "*Imported from ",
        "session/instructions" => "*Project instructions: ",
        "session/title" => "*Session titled ",
        "tool/file" => "**File edit:** `",
        other => panic!("the test has no rendering for {other}; add it"),
    }
}

fn exports_with_children(backend: &str) {
    let daemon = daemon_on(backend);
    let (parent, child) = session_with_child(&daemon);

    let bundle = unzip(&export(&daemon, &[&parent, "--descendants"]));
    let manifest: Value = serde_json::from_slice(&bundle["manifest.json"]).unwrap();
    assert_eq!(manifest["bundleVersion"], 1, "{manifest}");
    assert_eq!(manifest["logFormatVersion"], 0, "{manifest}");
    assert_eq!(
        manifest["dshVersion"],
        env!("CARGO_PKG_VERSION"),
        "{manifest}"
    );
    let child_entry = format!("subagents/{child}/session.jsonl");
    assert_eq!(
        bundle.keys().collect::<Vec<_>>(),
        vec![
            &"manifest.json".to_owned(),
            &"session.jsonl".to_owned(),
            &child_entry
        ],
        "{manifest}"
    );
    for (entry, id) in [("session.jsonl", &parent), (child_entry.as_str(), &child)] {
        let (header, events) = log_lines(&bundle[entry]);
        assert_eq!(header["type"], "session");
        assert_eq!(header["id"], id.as_str());
        assert_eq!(events, daemon.events(id), "{backend}: {entry}");
    }
    let (child_header, _) = log_lines(&bundle[&child_entry]);
    assert_eq!(child_header["parentSession"], parent.as_str());
    assert_eq!(child_header["origin"], "subagent");
    if backend == "jsonl" {
        // Byte for byte what the store holds.
        for (entry, id) in [("session.jsonl", &parent), (child_entry.as_str(), &child)] {
            assert_eq!(
                bundle[entry],
                std::fs::read(daemon.located_path(id)).unwrap()
            );
        }
    }
    // Without --descendants, the session alone.
    let alone = unzip(&export(&daemon, &[&parent]));
    assert_eq!(alone.len(), 2, "{:?}", alone.keys());

    let markdown = String::from_utf8(export(
        &daemon,
        &[&parent, "--descendants", "--format", "markdown"],
    ))
    .unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for id in [&parent, &child] {
        for event in daemon.events(id) {
            kinds.insert(event["type"].as_str().unwrap().to_owned());
        }
    }
    assert!(
        kinds.len() >= 9,
        "a session of few kinds proves little: {kinds:?}"
    );
    for kind in &kinds {
        assert!(
            markdown.contains(rendered(kind)),
            "{backend}: {kind} not rendered:\n{markdown}"
        );
    }
    for shown in [
        "delegate it",
        "echo hello from bash",
        "hello from bash",
        "42 files",
        "the child says 42",
        "+noted",
        &format!("## Session `{child}`"),
    ] {
        assert!(markdown.contains(shown), "{shown:?} missing:\n{markdown}");
    }
}

#[test]
fn a_session_and_its_child_export_from_jsonl() {
    exports_with_children("jsonl");
}

#[test]
fn a_session_and_its_child_export_from_sqlite() {
    exports_with_children("sqlite");
}

#[test]
fn a_session_and_its_child_export_from_postgres() {
    exports_with_children("postgres");
}

/// A long output is cut in the Markdown, which says so; the log keeps it whole.
#[test]
fn long_outputs_are_trimmed_with_a_note() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("long");
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 3000"}}]},
            {"text": "counted"}
        ]}),
    );
    daemon.prompt(&agent, "count").assert_completed();
    let markdown = String::from_utf8(export(&daemon, &[&agent, "--format", "markdown"])).unwrap();
    assert!(markdown.contains("output trimmed: "), "{markdown}");
    assert!(markdown.contains("\n1\n2\n3\n"), "the head is shown");
    assert!(markdown.contains("2999\n3000"), "the tail is shown");
    assert!(!markdown.contains("\n1500\n"), "the middle is left out");
}

/// An unknown session is refused, naming it.
#[test]
fn exporting_an_unknown_session_is_refused() {
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&["session", "export", "no-such-session", "-o", "/dev/null"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-session"), "{stderr}");
}

/// A session in the middle of a turn exports what it logged so far: the export checkpoints it and
/// returns while its command still runs, and the turn then ends as it would have.
#[test]
fn a_live_session_exports_mid_turn_without_waiting_for_it() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("mid-turn");
    let flag = daemon.dir.path().join("go");
    let command = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo released",
        flag.display()
    );
    let agent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "done waiting"}
        ]}),
    );
    let running = daemon.prompt_in_background(&agent, "wait for the flag");
    daemon.wait_for_events(&agent, "the waiting call", |events| {
        events.iter().any(|e| e["type"] == "tool/call")
    });
    // The command waits for the flag, so the turn cannot end before this export returns.
    let bundle = unzip(&export(&daemon, &[&agent]));
    let (_, events) = log_lines(&bundle["session.jsonl"]);
    assert!(
        events.iter().any(|e| e["type"] == "tool/call"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "turn/end"),
        "{events:?}"
    );
    std::fs::write(&flag, "").unwrap();
    let finished = dsh_tests::agents::finish_prompt(running);
    finished.assert_completed();
    let (_, after) = log_lines(&unzip(&export(&daemon, &[&agent]))["session.jsonl"]);
    assert_eq!(after, daemon.events(&agent));
    assert!(after.iter().any(|e| e["type"] == "turn/end"));
}

/// A stored session of many chunks leaves as it is streamed: the bundle's log is the store's
/// file byte for byte up to its last complete line (a line being appended is left out), other
/// ZIP readers (Python's `zipfile`) accept the streamed archive and its checksums, `-o -` writes
/// the same log to stdout, and a reader that stops early ends dshctl quietly while dshd keeps
/// serving.
#[test]
fn a_long_session_streams_whole_and_other_zip_readers_open_it() {
    let dir = dsh_tests::private_dir();
    let home = dir.path().join("home");
    let header = dsh_core::SessionHeader::new(
        dsh_core::SessionId::new_v7(),
        dir.path().to_owned(),
        1_700_000_000_000,
    );
    let events = dsh_tests::seed::long_session(6_000_000);
    dsh_tests::seed::jsonl(&home.join("sessions"), &[(header.clone(), events.clone())]);
    let log = dsh_core::jsonl_log_path(&home.join("sessions"), &header);
    let stored = std::fs::read(&log).unwrap();
    // A line being appended when the export reads the file.
    let mut torn = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut torn, br#"{"seq":999999,"type":"turn/st"#).unwrap();
    let daemon = TestDaemon::spawn(DaemonSpec::default(), dir);
    daemon.wait_ready();
    let id = header.id.to_string();

    let bytes = export(&daemon, &[&id]);
    let bundle = unzip(&bytes);
    assert!(
        bundle["session.jsonl"] == stored,
        "the log is not the store's bytes"
    );
    let manifest: Value = serde_json::from_slice(&bundle["manifest.json"]).unwrap();
    assert_eq!(
        manifest["sessions"][0]["events"],
        events.len(),
        "{manifest}"
    );
    assert_eq!(manifest["sessions"][0]["verbatim"], true, "{manifest}");

    let saved = daemon.dir.path().join("long.zip");
    std::fs::write(&saved, &bytes).unwrap();
    let checked =
        std::process::Command::new(dsh_tests::on_path("python3", "apt-get install python3"))
            .args(["-m", "zipfile", "-t"])
            .arg(&saved)
            .output()
            .unwrap();
    assert!(
        checked.status.success(),
        "Python's zipfile refuses the bundle: {}",
        String::from_utf8_lossy(&checked.stderr)
    );

    let to_stdout = daemon.dshctl(&["session", "export", &id, "-o", "-"]);
    assert!(to_stdout.status.success());
    assert!(unzip(&to_stdout.stdout)["session.jsonl"] == stored);

    // dshctl's own status, not head's: a broken pipe is a quiet, successful end.
    let early = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; {} --socket {} session export {id} -o - | head -c 100 >/dev/null",
            dsh_tests::dshctl_bin().display(),
            daemon.socket.display(),
        ))
        .output()
        .unwrap();
    assert!(early.status.success(), "{early:?}");
    assert!(unzip(&export(&daemon, &[&id]))["session.jsonl"] == stored);
}

/// A session id is any string; the file name dshd gives an export is the id escaped into one
/// path component, so `dshctl session export` without `-o` writes in the current directory and
/// nowhere else, whatever the id.
#[tokio::test(flavor = "multi_thread")]
async fn an_id_that_looks_like_a_path_exports_into_the_current_directory() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("ids");
    let id = "../../escaped";
    let created = daemon
        .client()
        .await
        .agents()
        .create(dsh_proto::v1::CreateAgentRequest {
            cwd: cwd.to_str().unwrap().to_owned(),
            session_id: Some(id.to_owned()),
            model: Some(dsh_proto::v1::ModelSpec {
                provider: "scripted".into(),
                script_json: json!({"replies": [{"text": "hi"}]}).to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.agent_id, id);
    let out = daemon.dir.path().join("out/a/b");
    std::fs::create_dir_all(&out).unwrap();
    let exported = tokio::process::Command::new(dsh_tests::dshctl_bin())
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["session", "export", id])
        .current_dir(&out)
        .output()
        .await
        .unwrap();
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );
    let written: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(written, ["..~2F..~2Fescaped.zip"]);
    assert!(!daemon.dir.path().join("out/escaped.zip").exists());
    assert!(!daemon.dir.path().join("escaped.zip").exists());
}
