//! A home dshd cannot write: stored sessions are read (events, locate), resume and fork say
//! FAILED_PRECONDITION naming the path they cannot write, and the daemon keeps serving.
//!
//! The home is made read-only with a read-only bind mount in a mount namespace of dshd's own
//! (`unshare -m`), which works for root too (for whom permission bits mean nothing) and needs it:
//! the test itself still sees the home writable, and nothing outside dshd is affected. If that
//! cannot be set up, dshd never starts and the test fails with the mount error in its log.

use super::*;

/// Restarts dshd with `args` in a mount namespace where `home` is mounted read-only.
fn read_only_home(daemon: &mut TestDaemon, args: &[&str]) {
    let home = daemon.home.clone();
    daemon.restart_with(DaemonSpec {
        args: args.iter().map(Into::into).collect(),
        wrapper: vec![
            "unshare".into(),
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            r#"mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" "$1" && shift && exec "$@""#
                .into(),
            "sh".into(),
            home.into(),
        ],
        ..DaemonSpec::default()
    });
    // Prove the setup took: a command dshd runs cannot write the home.
    let probe = daemon.home.join("probe");
    let out = daemon.dshctl(&["run", "--", &format!("touch {}", probe.display())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Read-only file system"),
        "the home is writable for dshd, so this test would prove nothing: {out:?}"
    );
    assert!(!probe.exists());
}

/// Every file under `dir` with its bytes, to show nothing was written.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn assert_not_writable(daemon: &TestDaemon, args: &[&str], path: &Path) {
    let (kind, message) = refused(daemon, args);
    assert_eq!(kind, "failed_precondition", "{args:?}: {message}");
    assert!(
        message.contains(path.to_str().unwrap())
            && message.contains("Read-only file system")
            && message.ends_with("sessions stored there can still be read"),
        "{args:?}: the message does not name {}: {message}",
        path.display()
    );
}

#[tokio::test]
#[ignore = "needs root"]
async fn a_read_only_home_serves_stored_sessions_and_refuses_resume_naming_the_path() {
    dsh_tests::needs_root("make the home read-only with a bind mount");
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("ro");
    let bash_then_text = json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo stored"}}]},
        {"text": "stored"},
    ]});
    // One session in each backend; SQLite is selected last, so a restart starts on it.
    let on_jsonl = daemon.new_agent(&cwd, &bash_then_text);
    daemon.prompt(&on_jsonl, "one").assert_completed();
    daemon.dshctl_json(&["agent", "close", &on_jsonl]);
    let jsonl_events = daemon.events(&on_jsonl);
    let jsonl_log = daemon.located_path(&on_jsonl);
    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    let on_sqlite = daemon.new_agent(&cwd, &bash_then_text);
    daemon.prompt(&on_sqlite, "one").assert_completed();
    daemon.dshctl_json(&["agent", "close", &on_sqlite]);
    let sqlite_events = daemon.events(&on_sqlite);
    let db = daemon.home.join("sessions.sqlite3");
    stop_gracefully(&mut daemon);
    let before = contents(&daemon.home);
    // A clean shutdown leaves no write-ahead log, so SQLite cannot make its WAL index on the
    // read-only mount either: the case that needs the database read as immutable.
    assert!(!PathBuf::from(format!("{}-wal", db.display())).exists());
    assert!(!PathBuf::from(format!("{}-shm", db.display())).exists());

    // SQLite (the saved choice), with no write-ahead log left by the clean shutdown.
    read_only_home(&mut daemon, &[]);
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "sqlite");
    assert_eq!(daemon.events(&on_sqlite), sqlite_events);
    assert_eq!(daemon.locate(&on_sqlite), Value::Null);
    let listed = daemon.dshctl_json(&["session", "list"]);
    assert_eq!(listed["sessions"][0]["header"]["id"], on_sqlite.as_str());
    assert_eq!(listed["others"][0]["unlisted_sessions"], 1, "{listed}");
    assert_not_writable(&daemon, &["agent", "resume", &on_sqlite], &db);
    let status = daemon
        .client()
        .await
        .agents()
        .resume(v1::ResumeAgentRequest {
            sandbox: None,
            session_id: on_sqlite.clone(),
            model: None,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    // Forking reads the stored session, then cannot write the fork. (A scripted session's script
    // is not stored, so the fork is given one.)
    let script = daemon.write_script(&json!({"replies": []}));
    assert_not_writable(
        &daemon,
        &[
            "agent",
            "fork",
            &on_sqlite,
            "--script",
            script.to_str().unwrap(),
        ],
        &db,
    );
    // Selecting another backend cannot be saved for the next start: refused, nothing changes.
    let (kind, message) = refused(&daemon, &["persistence", "use", "jsonl"]);
    assert_eq!(kind, "failed_precondition", "{message}");
    let state = daemon.home.join("state/persistence.json");
    assert!(
        message.starts_with("the backend was not changed: ")
            && message.contains(&format!("{}: Read-only file system", state.display())),
        "{message}"
    );
    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "sqlite"
    );
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    assert_serving(&daemon);
    stop_gracefully(&mut daemon);

    // JSONL.
    read_only_home(&mut daemon, &["--persistence", "jsonl"]);
    assert_eq!(daemon.events(&on_jsonl), jsonl_events);
    assert_eq!(daemon.located_path(&on_jsonl), jsonl_log);
    assert_not_writable(&daemon, &["agent", "resume", &on_jsonl], &jsonl_log);
    assert_eq!(daemon.dshctl_json(&["agent", "list"])["agents"], json!([]));
    assert_serving(&daemon);
    stop_gracefully(&mut daemon);

    assert_eq!(
        contents(&daemon.home),
        before,
        "the read-only home was changed"
    );
}
