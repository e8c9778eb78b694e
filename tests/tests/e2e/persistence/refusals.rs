//! Bad locations, foreign databases, corrupt logs, and what a closed session keeps open.

use super::*;

#[tokio::test]
async fn an_unreadable_backend_location_is_an_invalid_argument_naming_the_field() {
    let daemon = TestDaemon::start();
    let a_file = daemon.dir.path().join("plain-file");
    std::fs::write(&a_file, "x").unwrap();
    let a_dir = daemon.workdir("a-directory");
    for (args, field, path) in [
        (["jsonl", "--root"], "jsonl.root", &a_file),
        (["sqlite", "--path"], "sqlite.path", &a_dir),
    ] {
        let path = path.to_str().unwrap();
        let (kind, message) = refused(&daemon, &["persistence", "use", args[0], args[1], path]);
        assert_eq!(kind, "invalid_argument", "{message}");
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
        assert!(message.contains(path), "{message}");
    }
    let status = daemon
        .client()
        .await
        .persistence()
        .r#use(v1::UseBackendRequest {
            backend: Some(v1::use_backend_request::Backend::Jsonl(v1::JsonlBackend {
                root: a_file.display().to_string(),
            })),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "jsonl"
    );
    assert_serving(&daemon);
}

#[test]
fn a_foreign_database_is_refused_and_the_active_backend_kept() {
    let daemon = TestDaemon::start();
    let foreign = daemon.dir.path().join("notes.db");
    std::fs::write(&foreign, "these are my notes, not a database\n".repeat(200)).unwrap();
    let before = std::fs::read(&foreign).unwrap();
    let (kind, message) = refused(
        &daemon,
        &[
            "persistence",
            "use",
            "sqlite",
            "--path",
            foreign.to_str().unwrap(),
        ],
    );
    assert_eq!(kind, "failed_precondition");
    assert!(message.contains(foreign.to_str().unwrap()), "{message}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "the foreign file was changed"
    );
    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "jsonl"
    );
    let id = daemon.new_agent(&daemon.workdir("kept"), &text_replies(&["ok"]));
    daemon.prompt(&id, "still jsonl?").assert_completed();
    assert!(daemon.located_path(&id).exists());
}

#[tokio::test]
async fn a_corrupt_log_refuses_resume_naming_file_and_line_and_is_left_untouched() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("corrupt");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    daemon.prompt(&id, "2").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);

    // Line 3 is turn 1's user/message, well before the last turn/end.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert!(lines[2].contains("\"user/message\""), "{}", lines[2]);
    lines[2] = "{\"type\":\"user/message\",\"seq\":1,\"oops\n";
    let corrupt = lines.concat();
    std::fs::write(&path, &corrupt).unwrap();

    daemon.restart_with(DaemonSpec::default());
    let (kind, message) = refused(&daemon, &["agent", "resume", &id]);
    let place = format!("{}:3:", path.display());
    assert!(
        message.contains(&place),
        "message does not name {place}: {message}"
    );
    assert_eq!(kind, "data_loss");

    let status = daemon
        .client()
        .await
        .agents()
        .resume(v1::ResumeAgentRequest {
            sandbox: None,
            session_id: id.clone(),
            model: None,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(status.message().contains(&place), "{}", status.message());

    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        corrupt,
        "file changed"
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    assert_serving(&daemon);
}

/// Creates an agent in `cwd`, runs one scripted turn to its end over gRPC, and closes it.
async fn one_closed_session(client: &dsh_client::Client, cwd: &Path) -> String {
    use tokio_stream::StreamExt;
    let mut agents = client.agents();
    let id = agents
        .create(v1::CreateAgentRequest {
            sandbox: None,
            cwd: cwd.display().to_string(),
            model: Some(v1::ModelSpec {
                script_json: text_replies(&["done"]).to_string(),
                ..v1::ModelSpec::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id;
    let mut turn = agents
        .prompt(v1::PromptRequest {
            agent_id: id.clone(),
            text: "go".into(),
        })
        .await
        .unwrap()
        .into_inner();
    while turn.next().await.transpose().unwrap().is_some() {}
    agents
        .close(v1::CloseAgentRequest {
            agent_id: id.clone(),
        })
        .await
        .unwrap();
    id
}

#[tokio::test]
#[ignore = "needs root"]
async fn closed_sessions_do_not_keep_their_log_files_open() {
    dsh_tests::needs_root(
        "list dshd's descriptors (dshd is non-dumpable: its /proc files are root's)",
    );
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("many");
    let client = daemon.client().await;
    let open_logs = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.child.id()))
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.unwrap().path()).ok())
            .filter(|target| target.to_string_lossy().contains("session.jsonl"))
            .count()
    };
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(one_closed_session(&client, &cwd).await);
    }
    assert_eq!(
        open_logs(),
        0,
        "the daemon keeps the logs of closed sessions open (a long-running daemon runs out of file descriptors)"
    );
    // Released sessions still resume and take turns where they left off.
    let first = &ids[0];
    daemon.agent_with_script(&["resume", first], &text_replies(&["again"]));
    let prompted = daemon.prompt(first, "more");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    let stored = file(&daemon.located_path(first)).events;
    assert_contiguous(&stored);
    assert_eq!(stored, daemon.events(first));
}

/// Two writers on one log (a second daemon on the same home) must never overwrite each other: a
/// log appended to behind the daemon's back stops the next append, and the foreign line stays.
#[test]
fn a_log_appended_to_behind_the_daemons_back_is_never_overwritten() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("p");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "first").assert_completed();
    let path = PathBuf::from(daemon.locate(&id)["path"].as_str().unwrap());
    // A well-formed line, as another daemon would write it.
    let foreign = r#"{"type":"turn/start","seq":6,"time":0,"data":{"turn":2}}"#;
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(foreign);
    text.push('\n');
    std::fs::write(&path, &text).unwrap();

    let second = daemon.prompt(&id, "second");
    let (kind, message) = second.reason();
    assert_eq!(kind, "error", "{:?}", second.lines);
    assert!(message.contains(path.to_str().unwrap()), "{message}");
    assert!(message.contains("another writer"), "{message}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the foreign line was overwritten or moved"
    );
    assert_serving(&daemon);
}
