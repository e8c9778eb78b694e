//! Selecting backends: re-selecting the active database while turns run, locations that cannot
//! hold a database, the choice surviving restarts, and `session list` naming what it lists and
//! what the other backend holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;
use tokio_stream::StreamExt;

use super::*;

const AGENTS: usize = 60;
const TURNS: usize = 6;
const RESELECTIONS: usize = 20;
/// Turns that complete between two selections, so that every selection lands while turns run.
const TURNS_BETWEEN: usize = 15;

/// `TURNS` turns, each a bash call and then a text answer.
fn bash_turns() -> Value {
    let mut replies = Vec::new();
    for turn in 1..=TURNS {
        replies.push(json!({"tool_calls": [{"name": "bash", "arguments": {"command": format!("echo turn {turn}")}}]}));
        replies.push(json!({"text": format!("turn {turn} done")}));
    }
    json!({ "replies": replies })
}

/// Runs one turn over gRPC; returns how it ended: (kind, message).
async fn run_turn(client: &dsh_client::Client, id: &str, text: &str) -> (String, String) {
    let mut stream = client
        .agents()
        .prompt(v1::PromptRequest {
            agent_id: id.to_owned(),
            text: text.to_owned(),
        })
        .await
        .unwrap_or_else(|e| panic!("prompt {id}: {e}"))
        .into_inner();
    let mut ended = None;
    while let Some(event) = stream.next().await {
        let event = event.unwrap_or_else(|e| panic!("turn stream of {id}: {e}"));
        if event.r#type == "turn/end" && event.session_id == id {
            let data: serde_json::Value = serde_json::from_str(&event.data_json).unwrap();
            let reason = &data["reason"];
            ended = Some((
                reason["kind"].as_str().unwrap_or_default().to_owned(),
                dsh_tests::agents::reason_detail(reason),
            ));
        }
    }
    ended.unwrap_or_else(|| panic!("the turn of {id} ended without turn/end"))
}

fn sqlite_at(path: &Path) -> v1::UseBackendRequest {
    v1::UseBackendRequest {
        backend: Some(v1::use_backend_request::Backend::Sqlite(
            v1::SqliteBackend {
                path: path.display().to_string(),
            },
        )),
    }
}

fn jsonl_default() -> v1::UseBackendRequest {
    v1::UseBackendRequest {
        backend: Some(v1::use_backend_request::Backend::Jsonl(v1::JsonlBackend {
            root: String::new(),
        })),
    }
}

async fn select(
    client: &dsh_client::Client,
    request: v1::UseBackendRequest,
) -> v1::BackendDescription {
    client
        .persistence()
        .r#use(request.clone())
        .await
        .unwrap_or_else(|e| panic!("{request:?}: {e}"))
        .into_inner()
}

/// Runs `TURNS` turns (each with a bash call) in each of `agents` new agents while `selections`
/// are made, one every `TURNS_BETWEEN` completed turns, so each lands while turns run. Returns
/// the agents' ids and what every selection answered; fails the test if any turn did not
/// complete.
async fn turns_during_selections(
    daemon: &TestDaemon,
    agents: usize,
    selections: Vec<v1::UseBackendRequest>,
) -> (Vec<String>, Vec<v1::BackendDescription>) {
    let client = daemon.client().await;
    let cwd = daemon.workdir("load");
    let script = bash_turns().to_string();
    let mut ids = Vec::new();
    for _ in 0..agents {
        let info = client
            .agents()
            .create(v1::CreateAgentRequest {
                sandbox: None,
                cwd: cwd.display().to_string(),
                model: Some(v1::ModelSpec {
                    script_json: script.clone(),
                    ..v1::ModelSpec::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        ids.push(info.agent_id);
    }

    let (progress, mut watched) = watch::channel(0usize);
    let progress = Arc::new(progress);
    let completed = Arc::new(AtomicUsize::new(0));
    let mut running = Vec::new();
    for id in &ids {
        let (client, id) = (client.clone(), id.clone());
        let (progress, completed) = (progress.clone(), completed.clone());
        running.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for turn in 1..=TURNS {
                let (kind, message) = run_turn(&client, &id, &format!("turn {turn}")).await;
                if kind != "completed" {
                    failures.push(format!("{id} turn {turn}: {kind}: {message}"));
                }
                let done = completed.fetch_add(1, Ordering::SeqCst) + 1;
                progress.send_replace(done);
            }
            failures
        }));
    }

    let mut answers = Vec::new();
    let mut done_at_last_selection = 0;
    for (n, request) in (1..).zip(selections) {
        watched
            .wait_for(|done| *done >= n * TURNS_BETWEEN)
            .await
            .unwrap();
        // Counted as the selection starts: turns still to run then overlap it. Counted after it
        // returned, a slow selection (waiting for a checkpoint's write lock) let every turn end
        // first and failed the check below with nothing wrong.
        done_at_last_selection = completed.load(Ordering::SeqCst);
        answers.push(select(&client, request).await);
    }

    let mut failures = Vec::new();
    for agent in running {
        failures.extend(agent.await.unwrap());
    }
    assert_eq!(failures, Vec::<String>::new(), "failed turns");
    assert!(
        done_at_last_selection < agents * TURNS,
        "every turn had ended before the last selection began: the test did not select under load"
    );
    assert!(
        !daemon.log_text().contains("database is locked"),
        "{}",
        daemon.log_text()
    );
    (ids, answers)
}

/// 60 agents take turns (each with a bash call) on SQLite while the active database is selected
/// again 20 times, under two spellings of its path: not one turn fails, the database is never
/// replaced, and every session is in it exactly as the daemon holds it.
///
/// Slow (backend switches while turns run; 10 s on the shared 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selecting_the_active_database_again_while_turns_run_fails_no_turn() {
    let daemon = TestDaemon::start();
    let db = daemon.home.join("sessions.sqlite3");
    let client = daemon.client().await;
    // The configured database (an empty path): the home it lives in does not exist yet.
    let described = select(&client, sqlite_at(Path::new(""))).await;
    assert_eq!(described.path, db.display().to_string());
    // The same file through a link to its directory: still the active database.
    let link = daemon.dir.path().join("home-link");
    std::os::unix::fs::symlink(&daemon.home, &link).unwrap();
    let spellings = [db.clone(), link.join("sessions.sqlite3")];

    let selections = (0..RESELECTIONS)
        .map(|n| sqlite_at(&spellings[n % 2]))
        .collect();
    let (ids, answers) = turns_during_selections(&daemon, AGENTS, selections).await;
    for answer in answers {
        assert_eq!(
            (answer.name.as_str(), answer.path.as_str()),
            ("sqlite", db.to_str().unwrap()),
            "selecting the active database again replaced it"
        );
    }
    for id in &ids {
        let live = daemon.events(id);
        assert_eq!(count(&live, "turn/end"), TURNS, "{id}");
        assert_eq!(db_events(&db, id), live, "database copy of {id}");
    }
}

/// Real swaps back and forth while turns run: the swapped-out database's last checkpoints and
/// the new backend's first ones overlap, and still no turn fails and nothing is lost.
///
/// Slow (backend switches while turns run; 7 s on the shared 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swapping_back_and_forth_while_turns_run_fails_no_turn() {
    let daemon = TestDaemon::start();
    let db = daemon.home.join("sessions.sqlite3");
    let client = daemon.client().await;
    select(&client, sqlite_at(Path::new(""))).await;
    let selections = (0..10)
        .map(|n| {
            if n % 2 == 0 {
                jsonl_default()
            } else {
                sqlite_at(&db)
            }
        })
        .collect();
    let (ids, answers) = turns_during_selections(&daemon, 30, selections).await;
    assert_eq!(answers.last().unwrap().name, "sqlite");
    for id in &ids {
        let live = daemon.events(id);
        assert_eq!(count(&live, "turn/end"), TURNS, "{id}");
        // A checkpoint that began before the last swap wrote to the backend active then; the
        // next one (here: Close) brings the database up to date.
        daemon.dshctl_json(&["agent", "close", id]);
        assert_eq!(db_events(&db, id), live, "database copy of {id}");
    }
}

/// What cannot hold a database is refused by name, and the active backend stays.
#[tokio::test]
async fn use_refuses_what_cannot_hold_a_database_naming_the_path() {
    let daemon = TestDaemon::start();
    let fifo = daemon.dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o600),
        0,
    )
    .unwrap();
    let directory = daemon.workdir("a-directory");
    let in_missing_dir = daemon.dir.path().join("missing").join("s.sqlite3");
    for (path, reason) in [
        (Path::new("/dev/null"), "character device"),
        (Path::new("/dev/zero"), "character device"),
        (Path::new("/proc/self/status"), "pseudo-file"),
        (directory.as_path(), "directory"),
        (fifo.as_path(), "FIFO"),
        (in_missing_dir.as_path(), "does not exist"),
    ] {
        let path = path.to_str().unwrap();
        let (kind, message) = refused(&daemon, &["persistence", "use", "sqlite", "--path", path]);
        assert_eq!(kind, "invalid_argument", "{message}");
        assert!(
            message.starts_with(&format!("sqlite.path: {path}: ")),
            "{message}"
        );
        assert!(message.contains(reason), "{message}");
    }
    let status = daemon
        .client()
        .await
        .persistence()
        .r#use(v1::UseBackendRequest {
            backend: Some(v1::use_backend_request::Backend::Sqlite(
                v1::SqliteBackend {
                    path: "/dev/null".into(),
                },
            )),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("/dev/null"),
        "{}",
        status.message()
    );

    assert_eq!(
        daemon.dshctl_json(&["persistence", "show"])["name"],
        "jsonl"
    );
    assert!(!in_missing_dir.parent().unwrap().exists());
    let id = daemon.new_agent(&daemon.workdir("kept"), &text_replies(&["ok"]));
    daemon.prompt(&id, "still jsonl?").assert_completed();
    assert!(daemon.located_path(&id).exists());
}

/// `session list --json --oldest-first`: (backend name, session ids, [(other name, unlisted,
/// error)]).
fn listed(daemon: &TestDaemon) -> (String, Vec<String>, Vec<(String, u64, Value)>) {
    let doc = daemon.dshctl_json(&["session", "list", "--oldest-first"]);
    let ids = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["header"]["id"].as_str().unwrap().to_owned())
        .collect();
    let others = doc["others"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_owned(),
                o["unlisted_sessions"].as_u64().unwrap(),
                o["error"].clone(),
            )
        })
        .collect();
    (
        doc["backend"]["name"].as_str().unwrap().to_owned(),
        ids,
        others,
    )
}

/// The first line of the human `session list`.
fn list_summary(daemon: &TestDaemon) -> String {
    let out = daemon.dshctl(&["session", "list"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned()
}

fn one_turn_session(daemon: &TestDaemon, cwd: &Path) -> String {
    let id = daemon.new_agent(cwd, &text_replies(&["done"]));
    daemon.prompt(&id, "go").assert_completed();
    daemon.dshctl_json(&["agent", "close", &id]);
    id
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// The backend selected last is the one a restart uses (unless a flag or the config file says
/// otherwise), and `session list` says what it lists and how many sessions the other holds.
#[test]
fn the_backend_selected_last_survives_restarts_and_list_counts_the_other() {
    let mut daemon = TestDaemon::start();
    let db = daemon.home.join("sessions.sqlite3");
    let cwd = daemon.workdir("p");
    let on_jsonl: Vec<String> = (0..3).map(|_| one_turn_session(&daemon, &cwd)).collect();
    let jsonl_ids = sorted(on_jsonl);
    assert_eq!(
        listed(&daemon),
        (
            "jsonl".into(),
            jsonl_ids.clone(),
            vec![("sqlite".into(), 0, Value::Null)]
        )
    );
    assert_eq!(list_summary(&daemon), "jsonl: 3 sessions");

    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    let on_sqlite: Vec<String> = (0..2).map(|_| one_turn_session(&daemon, &cwd)).collect();
    let sqlite_ids = sorted(on_sqlite);
    let on_sqlite_listing = (
        "sqlite".to_owned(),
        sqlite_ids.clone(),
        vec![("jsonl".to_owned(), 3, Value::Null)],
    );
    assert_eq!(listed(&daemon), on_sqlite_listing);
    let sqlite_summary = "sqlite: 2 sessions; jsonl (not active) holds 3 more";
    assert_eq!(list_summary(&daemon), sqlite_summary);
    let state = daemon.home.join("state/persistence.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({"backend": "sqlite", "path": db.to_str().unwrap()})
    );

    // A plain restart: the backend selected last.
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec::default());
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "sqlite");
    assert_eq!(listed(&daemon), on_sqlite_listing);
    assert_eq!(list_summary(&daemon), sqlite_summary);

    // The flag wins for this run, and changes nothing saved.
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec {
        args: vec!["--persistence".into(), "jsonl".into()],
        ..DaemonSpec::default()
    });
    assert_eq!(
        listed(&daemon),
        (
            "jsonl".into(),
            jsonl_ids.clone(),
            vec![("sqlite".into(), 2, Value::Null)]
        )
    );
    assert_eq!(
        list_summary(&daemon),
        "jsonl: 3 sessions; sqlite (not active) holds 2 more"
    );
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec::default());
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "sqlite");

    // So does `persistence` in the config file.
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec {
        config: Some("persistence = \"jsonl\"\n".into()),
        ..DaemonSpec::default()
    });
    assert_eq!(daemon.dshctl_json(&["status"])["persistence"], "jsonl");
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(&state).unwrap()).unwrap(),
        saved
    );
}
