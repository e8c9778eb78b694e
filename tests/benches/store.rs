//! The storage layer's first and listing calls side by side across backends, on the release
//! `dshd` (issue 40):
//!
//! - `Persistence.ListSessions`' first page (100 sessions) with 10,000 sessions stored, the
//!   PostgreSQL backend against the SQLite backend, two daemons called in turn (target: p50 ≤ 2×
//!   SQLite's); `Daemon.Status` of each beside it;
//! - the first `Persistence.Locate` of a stored session after dshd starts, against `Daemon.Status`
//!   on the same fresh daemon, for each backend (reported: the target of ≤ 2× Status is restated in
//!   docs/BENCHMARKS.md, as what is left is the first run of the path in a new process, and on
//!   PostgreSQL a database round trip besides): [`RESTARTS`] starts per
//!   backend, each answering one `Status` (untimed: the client's own first call), then one timed
//!   `Locate` of a session it never read, then one timed `Status`. Starts alternate with ones that
//!   time a first `Persistence.Describe` instead (a method that touches no storage), reported
//!   beside it: what any method's first call costs in a fresh dshd.
//!
//! The PostgreSQL server is a throwaway one on a Unix socket, durable (`fsync=on`) as in
//! production; the homes are on the same file system.
//!
//! Run: `cargo bench -p dsh-tests --bench store`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_core::{Persistence, PostgresBackend, PostgresOptions, SessionHeader, SessionId};
use dsh_proto::v1;
use dsh_testkit::bench::Target;
use dsh_testkit::postgres::PgServer;
use dsh_tests::bench::ReleaseDaemon;
use dsh_tests::seed;

const SESSIONS: usize = 10_000;
const PAGE: u32 = 100;
const CALLS: usize = 300;
const WARMUP: usize = 30;
const RESTARTS: usize = 25;

fn main() {
    let server = PgServer::start_durable();
    let db = server.fresh_database();
    let url = server.url(&db);
    let base = dsh_core::now_ms() - 30 * 24 * 3600 * 1000;
    let work = dsh_tests::private_dir();
    for n in 0..5 {
        std::fs::create_dir_all(work.path().join(format!("p{n}"))).unwrap();
    }
    let sessions: Vec<(SessionHeader, Vec<dsh_core::Event>)> = (0..SESSIONS)
        .map(|n| {
            let at = base + i64::try_from(n / 3).unwrap();
            let cwd = work.path().join(format!("p{}", n % 5));
            (
                SessionHeader::new(SessionId::new_v7(), cwd, at),
                seed::short_turn(0, 1, at),
            )
        })
        .collect();
    let seeding = Instant::now();
    let jsonl = dsh_tests::private_dir();
    seed::jsonl(&jsonl.path().join("home/sessions"), &sessions);
    let sqlite = dsh_tests::private_dir();
    std::fs::create_dir_all(sqlite.path().join("home")).unwrap();
    seed::sqlite(&sqlite.path().join("home/sessions.sqlite3"), &sessions);
    seed_postgres(&url, &sessions);
    println!(
        "seeded {SESSIONS} sessions in each backend in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let postgres = dsh_tests::private_dir();
    std::fs::create_dir_all(postgres.path().join("home")).unwrap();
    let config = postgres.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "persistence = \"postgres\"\n[postgres]\nurl = {}\n",
            serde_json::Value::String(url.clone())
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let pg_args = ["--config", config.as_str()];
    let sqlite_args = ["--persistence", "sqlite"];

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    list_sessions(&runtime, &postgres, &pg_args, &sqlite, &sqlite_args);
    let ids: Vec<String> = sessions.iter().map(|(h, _)| h.id.to_string()).collect();
    for (name, dir, args) in [
        ("JSONL", &jsonl, &[][..]),
        ("SQLite", &sqlite, &sqlite_args[..]),
        ("PostgreSQL", &postgres, &pg_args[..]),
    ] {
        first_locate(&runtime, name, dir, args, &ids);
    }
}

/// Stores `sessions` in the database at `url` through the backend, a few at a time.
fn seed_postgres(url: &str, sessions: &[(SessionHeader, Vec<dsh_core::Event>)]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let backend =
            std::sync::Arc::new(PostgresBackend::open(PostgresOptions::new(url).unwrap()).unwrap());
        for chunk in sessions.chunks(16) {
            let mut tasks = tokio::task::JoinSet::new();
            for (header, events) in chunk.iter().cloned() {
                let backend = backend.clone();
                tasks.spawn(async move {
                    backend.append(&header, &events).await.unwrap();
                    backend.release(&header.id).await;
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        }
    });
}

fn list_sessions(
    runtime: &tokio::runtime::Runtime,
    postgres: &tempfile::TempDir,
    pg_args: &[&str],
    sqlite: &tempfile::TempDir,
    sqlite_args: &[&str],
) {
    let daemons = [
        ReleaseDaemon::start(postgres, pg_args),
        ReleaseDaemon::start(sqlite, sqlite_args),
    ];
    let request = v1::ListSessionsRequest {
        page_size: Some(PAGE),
        ..v1::ListSessionsRequest::default()
    };
    let (mut list, mut status) = runtime.block_on(async {
        let mut clients = Vec::new();
        for daemon in &daemons {
            let client = dsh_client::Client::connect(&daemon.socket).await.unwrap();
            clients.push((client.persistence(), client.daemon()));
        }
        let mut list = [Vec::new(), Vec::new()];
        let mut status = [Vec::new(), Vec::new()];
        for call in 0..WARMUP + CALLS {
            for (i, (persistence, daemon)) in clients.iter_mut().enumerate() {
                let t = Instant::now();
                let page = persistence
                    .list_sessions(request.clone())
                    .await
                    .unwrap()
                    .into_inner();
                let listed = t.elapsed();
                assert_eq!(page.sessions.len(), PAGE as usize);
                assert!(page.sessions.iter().all(|s| !s.title.is_empty()));
                let t = Instant::now();
                daemon.status(v1::StatusRequest {}).await.unwrap();
                if call >= WARMUP {
                    list[i].push(listed);
                    status[i].push(t.elapsed());
                }
            }
        }
        (list, status)
    });
    for samples in list.iter_mut().chain(status.iter_mut()) {
        samples.sort_unstable();
    }
    println!(
        "  Status p50: PostgreSQL's dshd {:?}, SQLite's dshd {:?}",
        status[0][status[0].len() / 2],
        status[1][status[1].len() / 2]
    );
    dsh_tests::bench::compare(
        &format!(
            "ListSessions first page ({PAGE}) of {SESSIONS} sessions, PostgreSQL vs SQLite ({CALLS} calls each, interleaved)"
        ),
        ("PostgreSQL", &list[0]),
        ("SQLite (floor)", &list[1]),
        Target::AtMost(2.0),
        "ListSessions first page, 10,000 sessions, PostgreSQL / SQLite",
    );
}

fn first_locate(
    runtime: &tokio::runtime::Runtime,
    name: &str,
    dir: &tempfile::TempDir,
    args: &[&str],
    ids: &[String],
) {
    let (mut locate, mut status, mut describe) = (Vec::new(), Vec::new(), Vec::new());
    let mut again = Vec::new();
    for round in 0..2 * RESTARTS {
        let daemon = ReleaseDaemon::start(dir, args);
        let id = &ids[(round * 397 + 11) % ids.len()];
        // Starts alternate between a first Locate and a first Describe, each the first call of
        // its method in a fresh dshd.
        let first = if round % 2 == 0 {
            First::Locate(id)
        } else {
            First::Describe
        };
        let (f, s) = runtime.block_on(first_calls(daemon.socket(), first));
        match first {
            First::Locate(_) => {
                locate.push(f);
                let other = &ids[(round * 397 + 5011) % ids.len()];
                again.push(runtime.block_on(second_locate(daemon.socket(), other)));
            }
            First::Describe => describe.push(f),
        }
        status.push(s);
        drop(daemon);
    }
    for v in [&mut locate, &mut status, &mut describe, &mut again] {
        v.sort_unstable();
    }
    dsh_tests::bench::compare(
        &format!("{name}: first Locate after dshd starts vs Status ({RESTARTS} starts)"),
        ("first Locate", &locate),
        ("Status (floor)", &status),
        Target::Reported,
        &format!("{name}: first Locate after a start / Status"),
    );
    dsh_tests::bench::compare(
        &format!("{name}: first Describe after dshd starts vs Status ({RESTARTS} starts)"),
        ("first Describe", &describe),
        ("Status (floor)", &status),
        Target::Reported,
        &format!("{name}: first Describe (no storage) after a start / Status"),
    );
    dsh_tests::bench::compare(
        &format!(
            "{name}: first Locate vs first Describe after dshd starts ({RESTARTS} starts each)"
        ),
        ("first Locate", &locate),
        ("first Describe", &describe),
        Target::Reported,
        &format!("{name}: first Locate / first Describe, after a start"),
    );
    dsh_tests::bench::compare(
        &format!("{name}: Locate of a second unread session vs Status ({RESTARTS} starts)"),
        ("second Locate", &again),
        ("Status (floor)", &status),
        Target::Reported,
        &format!("{name}: Locate of a second session never read, after a start / Status"),
    );
}

/// A `Locate` of another session never read, after the first: the same reads, on code that
/// has run once.
async fn second_locate(socket: &Path, id: &str) -> Duration {
    let client = dsh_client::Client::connect(socket).await.unwrap();
    let mut persistence = client.persistence();
    client.daemon().status(v1::StatusRequest {}).await.unwrap();
    let t = Instant::now();
    persistence
        .locate(v1::LocateRequest {
            session_id: id.to_owned(),
        })
        .await
        .unwrap();
    t.elapsed()
}

/// The call a round times first.
#[derive(Clone, Copy)]
enum First<'a> {
    /// `Persistence.Locate` of this stored session (it reads the session's header).
    Locate(&'a str),
    /// `Persistence.Describe`, which touches no storage: the cost of any method's first call.
    Describe,
}

/// One `Status` (the client's own first call), then the timed `first` call and a timed `Status`.
async fn first_calls(socket: &Path, first: First<'_>) -> (Duration, Duration) {
    let client = dsh_client::Client::connect(socket).await.unwrap();
    let mut daemon = client.daemon();
    let mut persistence = client.persistence();
    daemon.status(v1::StatusRequest {}).await.unwrap();
    let t = Instant::now();
    match first {
        First::Locate(id) => {
            let answer = persistence
                .locate(v1::LocateRequest {
                    session_id: id.to_owned(),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(answer.location.is_some() || answer == v1::LocateResponse::default());
        }
        First::Describe => {
            persistence
                .describe(v1::DescribeBackendRequest {})
                .await
                .unwrap();
        }
    }
    let took = t.elapsed();
    let t = Instant::now();
    daemon.status(v1::StatusRequest {}).await.unwrap();
    (took, t.elapsed())
}
