//! The PostgreSQL backend end to end: two dshd on two homes (standing for two machines) sharing
//! one database of a real PostgreSQL server, one writer per session between them, `kill -9` and
//! lease expiry, and a database that stops mid-turn or is down when dshd starts.

use dsh_testkit::postgres::{PgServer, shared};

use super::*;

/// The ErrorInfo of `daemon`'s refusal to resume `id` (with the scripted model of `script`), read
/// by a plain gRPC client.
fn leased_refusal(daemon: &TestDaemon, id: &str, script: &Path) -> tonic_types::ErrorInfo {
    use tonic_types::StatusExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = runtime.block_on(async {
        daemon
            .client()
            .await
            .agents()
            .resume(v1::ResumeAgentRequest {
                session_id: id.to_owned(),
                model: Some(v1::ModelSpec {
                    provider: "scripted".to_owned(),
                    script_json: std::fs::read_to_string(script).unwrap(),
                    reasoning_effort: String::new(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"))
}

/// A config selecting PostgreSQL at `url`, with a lease of `lease_ms` and `extra` lines.
pub(super) fn config(url: &str, lease_ms: u64, extra: &str) -> String {
    format!(
        "persistence = \"postgres\"\n{extra}\n[postgres]\nurl = {}\nlease_ms = {lease_ms}\n",
        toml_string(url)
    )
}

fn toml_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

pub(super) fn on(config: String) -> TestDaemon {
    TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        ..DaemonSpec::default()
    })
}

/// The ids `dshctl session list --all ARGS` lists.
fn listed(daemon: &TestDaemon, args: &[&str]) -> Vec<String> {
    let mut full = vec!["session", "list", "--all"];
    full.extend_from_slice(args);
    let doc = daemon.dshctl_json(&full);
    assert_eq!(doc["backend"]["name"], "postgres", "{doc}");
    doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["header"]["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The stored events of `id`: how many rows, how many distinct seqs, the largest seq.
fn stored_rows(db: &str, id: &str) -> (u64, u64, i64) {
    let row = shared().sql(
        db,
        &format!(
            "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || coalesce(max(seq), -1) \
             FROM events WHERE session_id = '{id}'"
        ),
    );
    let parts: Vec<&str> = row.trim().split(' ').collect();
    (
        parts[0].parse().unwrap(),
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    )
}

#[test]
fn two_daemons_share_one_database_with_one_writer_per_session() {
    let server = shared();
    let db = server.fresh_database();
    let url = server.url(&db);
    let mut a = on(config(&url, 2000, ""));
    let b = on(config(&url, 2000, ""));

    let id = a.new_agent(&a.workdir("shared"), &text_replies(&["one", "two"]));
    a.prompt(&id, "first").assert_completed();
    let theirs = b.new_agent(&b.workdir("own"), &text_replies(&["b"]));
    b.prompt(&theirs, "hello").assert_completed();

    // Each lists the other's sessions, through the same pages, and filters by host.
    let host = dsh_core::host_name();
    for daemon in [&a, &b] {
        let ids = listed(daemon, &["--page-size", "1"]);
        assert!(ids.contains(&id) && ids.contains(&theirs), "{ids:?}");
        assert_eq!(listed(daemon, &["--host", &host]).len(), 2);
        assert!(listed(daemon, &["--host", "no-such-host.invalid"]).is_empty());
    }
    // Each session names the host and the daemon that created it, the other daemon's too; the
    // table shows the host.
    let doc = b.dshctl_json(&["session", "list", "--all", "--host", &host]);
    let creators: Vec<(String, String, String)> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["header"]["id"].as_str().unwrap().to_owned(),
                s["host"].as_str().unwrap_or_default().to_owned(),
                s["daemon"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(creators.len(), 2, "{doc}");
    for (_, listed_host, daemon) in &creators {
        assert_eq!(listed_host, &host, "{doc}");
        assert!(!daemon.is_empty(), "{doc}");
    }
    let daemon_of = |id: &str| creators.iter().find(|c| c.0 == id).unwrap().2.clone();
    assert_ne!(
        daemon_of(&id),
        daemon_of(&theirs),
        "two daemons created them: {doc}"
    );
    let table = b.dshctl(&["session", "list"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("HOST") && text.contains(&host), "{text}");
    // Locate answers the database (no credentials) and the session; no transcript file.
    let location = b.locate(&id);
    assert_eq!(location["kind"], "postgres", "{location}");
    let database = location["database"].as_str().unwrap();
    assert!(
        database.starts_with("postgresql://dsh@/") && database.contains(&db),
        "{database}"
    );
    // b reads a's session as it reads any other.
    assert_eq!(b.events(&id).len(), a.events(&id).len());

    // a has it live: b may not resume it, and is told who has it.
    let script = b.write_script(&text_replies(&["after"]));
    let resume = ["agent", "resume", &id, "--script", script.to_str().unwrap()];
    let (kind, message) = refused(&b, &resume);
    assert_eq!(kind, "failed_precondition", "{message}");
    assert!(
        message.contains(&format!("pid {}", a.child.id())) && message.contains("host "),
        "{message}"
    );
    // A program reads who holds it from the refusal's ErrorInfo, not from those words.
    let leased = leased_refusal(&b, &id, &script);
    assert_eq!(
        (leased.domain.as_str(), leased.reason.as_str()),
        ("dsh", "SESSION_LEASED"),
        "{leased:?}"
    );
    let meta = |key: &str| leased.metadata.get(key).cloned().unwrap_or_default();
    assert_eq!(meta("session_id"), id, "{leased:?}");
    assert_eq!(meta("host"), host, "{leased:?}");
    assert_eq!(meta("pid"), a.child.id().to_string(), "{leased:?}");
    let expires: u64 = meta("expires_in_ms").parse().unwrap();
    assert!(expires <= 2000, "{leased:?}");

    // A second acknowledged turn, then a crash: the lease is not released.
    a.prompt(&id, "second").assert_completed();
    let acknowledged = a.events(&id);
    a.kill9();
    let refused_at_once = b.dshctl(&resume);
    assert!(
        !refused_at_once.status.success(),
        "the lease outlived the crash for lease_ms"
    );
    // Once the lease expires (2 s after a's last renewal), b resumes it.
    assert!(
        eventually(Duration::from_secs(30), || b
            .dshctl(&resume)
            .status
            .success()),
        "b could not resume after the lease expired: {}",
        b.log_text()
    );
    b.prompt(&id, "third").assert_completed();
    let closed = b.dshctl(&["agent", "close", &id]);
    assert!(closed.status.success(), "{closed:?}");

    // Nothing acknowledged is missing or doubled: a's log is the stored prefix, seqs once each.
    let stored = b.events(&id);
    assert_contiguous(&stored);
    assert_eq!(stored[..acknowledged.len()], acknowledged[..]);
    let (rows, distinct, max) = stored_rows(&db, &id);
    assert_eq!((rows, distinct), (stored.len() as u64, stored.len() as u64));
    assert_eq!(max + 1, stored.len() as i64);
    assert_eq!(count(&stored, "turn/end"), 3, "{:?}", types(&stored));
    assert_serving(&b);
}

/// The database stops in the middle of a turn (a tool call is running) and comes back: the turn
/// ends with an error naming the database, the agent keeps its events, and its next checkpoint
/// stores every one of them.
#[test]
fn postgres_stopped_mid_turn_loses_no_acknowledged_event() {
    let mut server = PgServer::start();
    let db = server.fresh_database();
    let daemon = on(config(&server.url(&db), 2000, "checkpoint = \"step\""));
    let cwd = daemon.workdir("p");
    let go = daemon.dir.path().join("go");
    let script = json!({"replies": [
        {"text": "warm"},
        {"tool_calls": [{"name": "bash", "id": "wait", "arguments": {
            "command": format!("while [ ! -e '{}' ]; do sleep 0.05; done; echo released", go.display())
        }}]},
        {"text": "done"},
        {"text": "again"},
    ]});
    let id = daemon.new_agent(&cwd, &script);
    daemon.prompt(&id, "first").assert_completed();
    let running = daemon.prompt_in_background(&id, "second");
    daemon.wait_for_events(&id, "the tool call runs", |e| count(e, "tool/call") == 1);
    server.stop();
    std::fs::write(&go, "").unwrap();
    let turn = dsh_tests::agents::finish_prompt(running);
    let (reason, detail) = turn.reason();
    assert_eq!(reason, "error", "{:?}", turn.lines);
    assert!(
        detail.contains("cannot persist the session") && detail.contains("unavailable"),
        "{detail}"
    );
    // Refused while the database is down, and said so.
    let status = daemon.dshctl_json(&["status"]);
    assert!(
        status["persistence_unavailable"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{status}"
    );
    let (kind, _) = refused(&daemon, &["agent", "close", &id]);
    assert_eq!(kind, "unavailable");
    let in_memory = daemon.events(&id);

    server.run();
    let closed = daemon.dshctl(&["agent", "close", &id]);
    assert!(closed.status.success(), "{closed:?}");
    let stored = daemon.events(&id);
    assert_eq!(
        stored[..in_memory.len()],
        in_memory[..],
        "the turn's events were lost"
    );
    assert_contiguous(&stored);
    let (rows, distinct, _) = stored_rows_on(&server, &db, &id);
    assert_eq!((rows, distinct), (stored.len() as u64, stored.len() as u64));
}

/// The database goes away and dshd is stopped (SIGTERM) with a turn it could not save: it exits
/// non-zero naming the session and leaves a rescue copy (the whole log, JSONL) in the home, as
/// with the file backends. With the database back, the database holds the saved prefix and the
/// copy every acknowledged event: nothing acknowledged is lost.
#[test]
fn a_shutdown_with_the_database_gone_leaves_a_rescue_copy_of_the_unsaved_turn() {
    let mut server = PgServer::start();
    let db = server.fresh_database();
    let settings = config(&server.url(&db), 2000, "");
    let mut daemon = on(settings.clone());
    let cwd = daemon.workdir("p");
    let id = daemon.new_agent(&cwd, &text_replies(&["saved", "unsaved"]));
    daemon.prompt(&id, "first").assert_completed();
    let saved = daemon.events(&id);

    server.stop();
    let turn = daemon.prompt(&id, "second");
    let (reason, detail) = turn.reason();
    assert_eq!(reason, "error", "{:?}", turn.lines);
    assert!(detail.contains("unavailable"), "{detail}");
    // Acknowledged: the client was sent every event of the second turn.
    let acknowledged = daemon.events(&id);
    assert_eq!(
        count(&acknowledged, "turn/end"),
        2,
        "{:?}",
        types(&acknowledged)
    );

    let status = daemon.signal_and_wait(rustix::process::Signal::TERM, Duration::from_secs(60));
    let log = daemon.log_text();
    let copy = the_rescue_copy(status, &log, &daemon.home.join("rescue"), &id);
    assert_eq!(
        copy.events, acknowledged,
        "the rescue copy is not the acknowledged log"
    );

    // The database back and dshd restarted: the database holds what was saved, and the copy
    // holds the rest.
    server.run();
    daemon.restart_with(DaemonSpec {
        config: Some(settings),
        ..DaemonSpec::default()
    });
    let stored = daemon.events(&id);
    assert_eq!(stored, saved, "the database lost or gained events");
    assert_eq!(copy.events[..stored.len()], stored[..]);
    let (rows, distinct, _) = stored_rows_on(&server, &db, &id);
    assert_eq!((rows, distinct), (saved.len() as u64, saved.len() as u64));
}

pub(super) fn stored_rows_on(server: &PgServer, db: &str, id: &str) -> (u64, u64, i64) {
    let row = server.sql(
        db,
        &format!(
            "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || coalesce(max(seq), -1) \
             FROM events WHERE session_id = '{id}'"
        ),
    );
    let parts: Vec<&str> = row.trim().split(' ').collect();
    (
        parts[0].parse().unwrap(),
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    )
}

/// The database is down when dshd starts: dshd starts anyway, says so in `status` and `doctor`,
/// refuses what would persist with UNAVAILABLE, and works once the database is back.
#[test]
fn a_database_down_at_start_does_not_stop_dshd() {
    let mut server = PgServer::start();
    let db = server.fresh_database();
    server.stop();
    let daemon = on(config(&server.url(&db), 2000, ""));
    assert!(
        eventually(PATIENCE, || {
            daemon.dshctl_json(&["status"])["persistence_unavailable"]
                .as_str()
                .is_some_and(|s| s.contains("unavailable") || !s.is_empty())
        }),
        "status never said the database is unavailable"
    );
    let doctor = daemon.dshctl(&["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("unavailable"), "{text}");
    let (kind, message) = refused(&daemon, &["session", "list"]);
    assert_eq!(kind, "unavailable", "{message}");
    assert!(!message.contains("password"), "{message}");

    server.run();
    let id = daemon.new_agent(&daemon.workdir("p"), &text_replies(&["hi"]));
    daemon.prompt(&id, "hello").assert_completed();
    assert!(eventually(PATIENCE, || {
        daemon.dshctl_json(&["status"])["persistence_unavailable"].is_null()
    }));
    assert_eq!(listed(&daemon, &[]), [id]);
}

/// `dshctl persistence use postgres --url` at runtime: live sessions move there at their next
/// checkpoint, the choice survives a restart, and the URL is never shown or logged.
#[test]
fn persistence_use_postgres_switches_and_is_remembered() {
    let server = shared();
    let db = server.fresh_database();
    // No password: the choice is saved in the home, which keeps no secret (a URL with one is
    // refused: sandbox::secrets).
    let url = server.url(&db);
    let mut daemon = TestDaemon::start();
    let id = daemon.new_agent(&daemon.workdir("p"), &text_replies(&["one", "two"]));
    daemon.prompt(&id, "first").assert_completed();
    let used = daemon.dshctl_json(&["persistence", "use", "postgres", "--url", &url]);
    assert_eq!(used["name"], "postgres", "{used}");
    daemon.prompt(&id, "second").assert_completed();
    let rows = stored_rows(&db, &id);
    assert_eq!(
        rows.0,
        daemon.events(&id).len() as u64,
        "the whole log moved"
    );

    let _ = daemon.dshctl(&["shutdown"]);
    assert!(daemon.wait_exit(Duration::from_secs(20)).success());
    daemon.restart_with(DaemonSpec::default());
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "postgres");
    assert_eq!(listed(&daemon, &[]), [id]);
    // The state file keeps the choice, privately.
    let state = daemon.home.join("state/persistence.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o600
    );
}
