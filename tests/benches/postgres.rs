//! The PostgreSQL backend (issue 31), release builds, one run each, against a throwaway durable
//! server (`fsync=on`, the production default) on a Unix socket:
//!
//! - `Persistence.Locate` of a stored session in a database holding 100,000 sessions, against
//!   `Daemon.Status`, calls interleaved one for one (target: p50 ≤ 1.25× Status p50); and of
//!   [`FIRST_TIMES`] other stored sessions, each asked once (each reads its header from the
//!   database), against the Status calls interleaved with them (reported, no target: each pays a
//!   read from the database that `Status` does not);
//! - append per step: one step's events (`step/start`, the assistant's tool call, `tool/call`,
//!   `tool/result`, `step/end`) per append, the PostgreSQL backend against the SQLite backend
//!   (`synchronous=FULL`) on the same machine and file system, interleaved step by step (target:
//!   median ≤ 2× SQLite's); beside them, the same rows as one bare `INSERT` on the same server,
//!   which says how much of the gap is the server's own durable write and how much is dsh's.
//!
//! Run: `cargo bench -p dsh-tests --bench postgres`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_core::{
    AssistantMessage, Event, EventData, OnBlockingPool, Persistence, PostgresBackend,
    PostgresOptions, SessionHeader, SessionId, SqliteBackend,
};
use dsh_proto::v1;
use dsh_session::ToolCallRequest;
use dsh_testkit::bench::Target;
use dsh_testkit::postgres::PgServer;
use serde_json::json;

const SESSIONS: usize = 100_000;
const WARMUP: usize = 500;
const CALLS: usize = 10_000;
/// Stored sessions located once each.
const FIRST_TIMES: usize = 1_000;
/// Timed appends per session and writer, and sessions per writer.
const STEPS: usize = 200;
const ROUNDS: usize = 5;

fn main() {
    let dshd = dsh_tests::cargo_build("dsh-daemon", "dshd", true);
    let server = PgServer::start_durable();
    let db = server.fresh_database();
    let url = server.url(&db);
    let dir = dsh_tests::private_dir();
    // The backends run on a runtime with workers, as in dshd.
    let rt = tokio::runtime::Runtime::new().unwrap();

    // One session through the backend (which migrates the schema), then the rest in bulk.
    let stored = SessionHeader::new(SessionId::new_v7(), "/work".into(), 1_800_000_000_000);
    rt.block_on(async {
        let backend = PostgresBackend::open(PostgresOptions::new(&url).unwrap()).unwrap();
        backend
            .append(
                &stored,
                &dsh_tests::seed::short_turn(0, 1, 1_800_000_000_000),
            )
            .await
            .unwrap();
        backend.release(&stored.id).await;
    });
    server.sql(
        &db,
        &format!(
            "INSERT INTO sessions (id, header, created_at, cwd, host, daemon, events) \
             SELECT 'seed-' || n, json_build_object('version', 0, 'id', 'seed-' || n, \
                 'createdAt', 1700000000000 + n, 'cwd', '/work', 'delegationDepth', 0)::text, \
                 1700000000000 + n, '/work', 'bench', 'bench', 0 \
             FROM generate_series(1, {SESSIONS}) AS n; ANALYZE sessions"
        ),
    );
    let count = server.sql(&db, "SELECT count(*) FROM sessions");
    println!(
        "PostgreSQL backend (release dshd; a durable throwaway server; {} sessions stored)",
        count.trim()
    );

    locate_vs_status(&dshd, dir.path(), &url, &stored);
    appends(&rt, dir.path(), &server);
}

fn locate_vs_status(dshd: &Path, dir: &Path, url: &str, stored: &SessionHeader) {
    let socket = dir.join("d.sock");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "persistence = \"postgres\"\n[postgres]\nurl = {}\n",
            serde_json::Value::String(url.to_owned())
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(dshd)
        .env("RUST_LOG", "warn")
        .arg("--config")
        .arg(&config)
        .arg("--dsh-home")
        .arg(dir.join("home"))
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while UnixStream::connect(&socket).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let mut daemon = client.daemon();
        let mut persistence = client.persistence();
        let request = v1::LocateRequest {
            session_id: stored.id.to_string(),
        };
        let answer = persistence
            .locate(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.location.unwrap().kind, "postgres");
        let (mut status, mut locate) = (Vec::new(), Vec::new());
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            daemon.status(v1::StatusRequest {}).await.unwrap();
            let s = t.elapsed();
            let t = Instant::now();
            persistence.locate(request.clone()).await.unwrap();
            let l = t.elapsed();
            if i >= WARMUP {
                status.push(s);
                locate.push(l);
            }
        }
        status.sort_unstable();
        locate.sort_unstable();
        dsh_tests::bench::compare(
            &format!(
                "Locate of a stored session among {SESSIONS} in PostgreSQL vs Status ({CALLS} calls each, interleaved)"
            ),
            ("Locate stored", &locate),
            ("Status (floor)", &status),
            Target::AtMost(1.25),
            "PostgreSQL: Locate of a stored session (100k sessions) / Status",
        );
        let (mut first, mut first_status) = (Vec::new(), Vec::new());
        for n in 0..FIRST_TIMES {
            let t = Instant::now();
            daemon.status(v1::StatusRequest {}).await.unwrap();
            first_status.push(t.elapsed());
            let t = Instant::now();
            persistence
                .locate(v1::LocateRequest {
                    session_id: format!("seed-{}", n * 97 + 1),
                })
                .await
                .unwrap();
            first.push(t.elapsed());
        }
        first.sort_unstable();
        first_status.sort_unstable();
        dsh_tests::bench::compare(
            &format!(
                "Locate of {FIRST_TIMES} other stored sessions among {SESSIONS}, once each (header read from PostgreSQL), vs Status"
            ),
            ("Locate 1st time", &first),
            ("Status (floor)", &first_status),
            Target::Reported,
            "PostgreSQL: Locate of a stored session, first time (header read) / Status",
        );
    });
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    child.wait().unwrap();
}

/// The events of step `step` of turn 1, from seq `start`.
fn step_events(start: u64, step: u32) -> Vec<Event> {
    let call = format!("call-{step}");
    let data = vec![
        EventData::StepStart { turn: 1, step },
        EventData::AssistantMessage {
            turn: 1,
            step,
            message: AssistantMessage {
                text: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: call.clone(),
                    name: "bash".into(),
                    arguments: json!({"command": "ls -la src"}),
                }],
            },
            usage: None,
        },
        EventData::ToolCall {
            turn: 1,
            step,
            call_id: call.clone(),
            name: "bash".into(),
            arguments: json!({"command": "ls -la src"}),
        },
        EventData::ToolResult {
            turn: 1,
            step,
            call_id: call,
            content: "total 8\ndrwxr-xr-x 2 ada ada 4096 main.rs\n".repeat(8),
            is_error: false,
            code: None,
            exit_code: None,
        },
        EventData::StepEnd { turn: 1, step },
    ];
    (start..)
        .zip(data)
        .map(|(seq, data)| Event {
            seq,
            time: 1_800_000_000_000,
            data,
        })
        .collect()
}

/// The floor of an append: the same rows stored by the same server in one durable statement of
/// their own, with nothing around them (no lease, no tail or header check, no session row kept,
/// no hop between threads): what any PostgreSQL backend pays for the write itself.
struct BareInsert {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    insert: tokio_postgres::Statement,
}

impl BareInsert {
    fn connect(url: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (client, insert) = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let insert = client
                .prepare(
                    "INSERT INTO events (session_id, seq, type, time, data) \
                     SELECT $1, * FROM UNNEST($2::int8[], $3::text[], $4::int8[], $5::text[])",
                )
                .await
                .unwrap();
            (client, insert)
        });
        Self {
            runtime,
            client,
            insert,
        }
    }

    fn insert(&self, id: &str, events: &[Event]) {
        let seqs: Vec<i64> = events.iter().map(|e| e.seq as i64).collect();
        let types: Vec<&str> = events.iter().map(|e| e.data.type_name()).collect();
        let times: Vec<i64> = events.iter().map(|e| e.time).collect();
        let datas: Vec<String> = events.iter().map(Event::data_json).collect();
        self.runtime
            .block_on(
                self.client
                    .execute(&self.insert, &[&id, &seqs, &types, &times, &datas]),
            )
            .unwrap();
    }
}

/// Appends per step through the PostgreSQL backend, the SQLite backend and [`BareInsert`],
/// interleaved one for one (as the `Locate` and `Status` calls are) and in an order that rotates
/// every step, so that each writer's commit follows each other's equally often and all three see
/// the same disk. The target compares PostgreSQL with SQLite; the floor line says how much of
/// that is the server's own write.
///
/// Not in blocks of one writer's appends back to back: an agent appends a step every few
/// seconds, not every millisecond, and SQLite alone gains from commits following its own a
/// moment earlier (DECISIONS.md, "PostgreSQL").
fn appends(rt: &tokio::runtime::Runtime, dir: &Path, server: &PgServer) {
    let db = server.fresh_database();
    let url = server.url(&db);
    let postgres = PostgresBackend::open(PostgresOptions::new(&url).unwrap()).unwrap();
    let sqlite = OnBlockingPool::new(SqliteBackend::open(dir.join("bench.sqlite3")).unwrap());
    let backends: [&dyn Persistence; 2] = [&postgres, &sqlite];
    // Asking the backend anything makes the schema the bare inserts write to.
    rt.block_on(postgres.stored_len(&SessionId::parse("none").unwrap()))
        .unwrap();
    let bare = BareInsert::connect(&url);
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        // A session per round, created (with its first event) before timing starts; the bare
        // inserts write under a session of their own.
        let header = |name: &str| {
            SessionHeader::new(
                SessionId::parse(format!("{name}-{round}")).unwrap(),
                "/work".into(),
                1_800_000_000_000,
            )
        };
        let first = [Event {
            seq: 0,
            time: 1_800_000_000_000,
            data: EventData::TurnStart { turn: 1 },
        }];
        let floor = header("floor");
        rt.block_on(postgres.append(&floor, &first)).unwrap();
        rt.block_on(postgres.release(&floor.id));
        let steps = header("steps");
        for backend in backends {
            rt.block_on(backend.append(&steps, &first)).unwrap();
        }
        let mut seq = 1;
        for step in 1..=STEPS {
            let events = step_events(seq, u32::try_from(step).unwrap());
            for turn in 0..samples.len() {
                let writer = (step + turn) % samples.len();
                let t = Instant::now();
                match backends.get(writer) {
                    Some(backend) => rt.block_on(backend.append(&steps, &events)).unwrap(),
                    None => bare.insert(floor.id.as_str(), &events),
                }
                samples[writer].push(t.elapsed());
            }
            seq += events.len() as u64;
        }
    }
    for s in &mut samples {
        s.sort_unstable();
    }
    let [pg, sq, floor] = samples;
    let what = format!("{} appends each, interleaved step by step", ROUNDS * STEPS);
    dsh_tests::bench::compare(
        &format!("append per step (5 events), PostgreSQL vs SQLite, {what}"),
        ("PostgreSQL", &pg),
        ("SQLite (floor)", &sq),
        Target::AtMost(2.0),
        "PostgreSQL append per step / SQLite's",
    );
    let p50 = |v: &[Duration]| v[v.len() / 2].as_secs_f64() * 1e6;
    println!(
        "  bare INSERT      p50 {:>8.1} us   (the server's own write: PostgreSQL append / it {:.2}, it / SQLite {:.2})",
        p50(&floor),
        p50(&pg) / p50(&floor),
        p50(&floor) / p50(&sq)
    );
}
