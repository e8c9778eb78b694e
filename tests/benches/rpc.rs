//! Ratios over Unix sockets, calls interleaved one for one so drift hits both sides alike:
//!
//! - `Persistence.Locate` of a live agent's session against `Daemon.Status` on the release `dshd`
//!   (target: Locate p50 ≤ 1.25 × Status p50; Status is a unary call that touches nothing);
//! - `Persistence.Locate` of a stored session (no live agent) whose JSONL log is 100 MB, against
//!   the same `Status` (target ≤ 1.25×): the daemon reads the log's header line once and keeps it;
//! - `Persistence.Locate` of [`FIRST_TIMES`] other stored sessions, each asked once (so each reads
//!   its header on the blocking pool), against the `Status` calls interleaved with them;
//! - `Daemon.Status` against the floor of any tonic unary call: a bare tonic server built here
//!   (the standard health service, nothing else, on its own runtime thread and socket) answering
//!   `grpc.health.v1.Health/Check` to the same kind of client (target ≤ 1.5×);
//! - dshd's own `Health/Check` against the same floor: what dshd's connection handling and
//!   layers cost, without a handler of its own (Status minus this is Status's handler).
//!
//! Run: `cargo bench -p dsh-tests --bench rpc`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_proto::v1;

const WARMUP: usize = 500;
const CALLS: usize = 10_000;
/// The size of the stored session's log.
const LOG_BYTES: usize = 100_000_000;
/// Stored sessions located once each.
const FIRST_TIMES: usize = 2_000;

/// Set in the environment of this bench started again as the out-of-process floor server.
const BARE_SERVER_ENV: &str = "DSH_BENCH_BARE_TONIC_SOCKET";

fn main() {
    if let Some(socket) = std::env::var_os(BARE_SERVER_ENV) {
        // This process is the floor server of another run: serve until killed.
        serve_bare_tonic(std::os::unix::net::UnixListener::bind(socket).unwrap());
        return;
    }
    // Through `cargo_build`, which keeps the bench's own cargo variables from the nested build
    // (they would make it rebuild ring and everything above it, every time).
    let dshd = dsh_tests::cargo_build("dsh-daemon", "dshd", true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let dir = dsh_tests::private_dir();
    let socket = dir.path().join("d.sock");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // A stored session with a 100 MB log, written before dshd starts.
    let stored = dsh_core::SessionHeader::new(
        dsh_core::SessionId::new_v7(),
        work.clone(),
        1_700_000_000_000,
    );
    let events = dsh_tests::seed::long_session(LOG_BYTES);
    let root = dir.path().join("home").join("sessions");
    dsh_tests::seed::jsonl(&root, &[(stored.clone(), events)]);
    let others: Vec<_> = (0..FIRST_TIMES)
        .map(|n| {
            let header = dsh_core::SessionHeader::new(
                dsh_core::SessionId::new_v7(),
                work.clone(),
                1_700_000_000_000 + n as i64,
            );
            let events = dsh_tests::seed::short_turn(0, 1, 1_700_000_000_000);
            (header, events)
        })
        .collect();
    dsh_tests::seed::jsonl(&root, &others);
    let log = dsh_core::jsonl_log_path(&root, &stored);
    let log_bytes = std::fs::metadata(&log).unwrap().len();
    let mut child = dsh_tests::daemon_command_for(&dshd, &dir)
        .env("RUST_LOG", "warn")
        .arg("--dsh-home")
        .arg(dir.path().join("home"))
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while UnixStream::connect(&socket).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }

    let floor_socket = dir.path().join("floor.sock");
    start_bare_tonic_server(&floor_socket);
    // The same server in a process of its own, as dshd is.
    let process_floor_socket = dir.path().join("floor-process.sock");
    let mut floor_process = std::process::Command::new(std::env::current_exe().unwrap())
        .env(BARE_SERVER_ENV, &process_floor_socket)
        .spawn()
        .unwrap();
    while UnixStream::connect(&process_floor_socket).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }

    let (mut status, mut locate, mut floor, mut stored_locate, mut own, mut process_floor) =
        runtime.block_on(async {
            let client = dsh_client::Client::connect(&socket).await.unwrap();
            let bare = dsh_client::Client::connect(&floor_socket).await.unwrap();
            let mut health = tonic_health::pb::health_client::HealthClient::new(bare.channel());
            let mut own_health =
                tonic_health::pb::health_client::HealthClient::new(client.channel());
            let mut process_health = tonic_health::pb::health_client::HealthClient::new(
                dsh_client::Client::connect(&process_floor_socket)
                    .await
                    .unwrap()
                    .channel(),
            );
            let agent = client
                .agents()
                .create(v1::CreateAgentRequest {
                    sandbox: None,
                    cwd: work.display().to_string(),
                    model: Some(v1::ModelSpec {
                        provider: "scripted".into(),
                        ..v1::ModelSpec::default()
                    }),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let mut daemon = client.daemon();
            let mut persistence = client.persistence();
            let request = v1::LocateRequest {
                session_id: agent.agent_id.clone(),
            };
            let answer = persistence
                .locate(request.clone())
                .await
                .unwrap()
                .into_inner();
            assert_eq!(answer.location.unwrap().kind, "jsonl");
            let stored_request = v1::LocateRequest {
                session_id: stored.id.to_string(),
            };
            let answer = persistence
                .locate(stored_request.clone())
                .await
                .unwrap()
                .into_inner();
            assert_eq!(answer.location.unwrap().path, log.display().to_string());

            let mut status = Vec::with_capacity(CALLS);
            let mut locate = Vec::with_capacity(CALLS);
            let mut floor = Vec::with_capacity(CALLS);
            let mut stored_locate = Vec::with_capacity(CALLS);
            let mut own = Vec::with_capacity(CALLS);
            let mut process_floor = Vec::with_capacity(CALLS);
            for i in 0..WARMUP + CALLS {
                let t = Instant::now();
                daemon.status(v1::StatusRequest {}).await.unwrap();
                let s = t.elapsed();
                let t = Instant::now();
                persistence.locate(request.clone()).await.unwrap();
                let l = t.elapsed();
                let t = Instant::now();
                health
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await
                    .unwrap();
                let f = t.elapsed();
                let t = Instant::now();
                persistence.locate(stored_request.clone()).await.unwrap();
                let d = t.elapsed();
                let t = Instant::now();
                own_health
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await
                    .unwrap();
                let o = t.elapsed();
                let t = Instant::now();
                process_health
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await
                    .unwrap();
                let p = t.elapsed();
                if i >= WARMUP {
                    own.push(o);
                    process_floor.push(p);
                    status.push(s);
                    locate.push(l);
                    floor.push(f);
                    stored_locate.push(d);
                }
            }
            // Each of the other stored sessions once, between Status calls.
            let (mut first, mut first_status) = (Vec::new(), Vec::new());
            for (header, _) in &others {
                let t = Instant::now();
                daemon.status(v1::StatusRequest {}).await.unwrap();
                first_status.push(t.elapsed());
                let t = Instant::now();
                persistence
                    .locate(v1::LocateRequest {
                        session_id: header.id.to_string(),
                    })
                    .await
                    .unwrap();
                first.push(t.elapsed());
            }
            first.sort_unstable();
            first_status.sort_unstable();
            dsh_tests::bench::compare(
                &format!("Locate of {FIRST_TIMES} other stored sessions, once each, vs Status"),
                ("Locate 1st time", &first),
                ("Status (floor)", &first_status),
                1.25,
                "Locate of a stored session, first time (header read) / Status",
            );
            (status, locate, floor, stored_locate, own, process_floor)
        });
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    child.wait().unwrap();

    status.sort_unstable();
    locate.sort_unstable();
    floor.sort_unstable();
    stored_locate.sort_unstable();
    own.sort_unstable();
    process_floor.sort_unstable();
    floor_process.kill().unwrap();
    floor_process.wait().unwrap();
    dsh_tests::bench::compare(
        &format!(
            "Locate vs Status over the Unix socket (release dshd, one client, live agent, {CALLS} calls each, interleaved)"
        ),
        ("Locate", &locate),
        ("Status (floor)", &status),
        1.25,
        "Locate of a live session / Status",
    );
    dsh_tests::bench::compare(
        &format!(
            "Locate of a stored session whose JSONL log is {:.0} MB vs Status ({CALLS} calls each, interleaved)",
            log_bytes as f64 / 1e6
        ),
        ("Locate stored", &stored_locate),
        ("Status (floor)", &status),
        1.25,
        "Locate of a stored session, 100 MB log / Status",
    );
    dsh_tests::bench::compare(
        &format!(
            "Status vs a bare tonic server's Health/Check (same client kind, {CALLS} calls each)"
        ),
        ("Status", &status),
        ("bare tonic", &floor),
        1.5,
        "Status / bare tonic unary call",
    );
    dsh_tests::bench::compare(
        &format!(
            "dshd's own Health/Check vs the bare tonic server's ({CALLS} calls each): dshd's connection and layers without a handler of its own"
        ),
        ("dshd Health", &own),
        ("bare tonic", &floor),
        1.5,
        "dshd Health/Check / bare tonic unary call",
    );
    dsh_tests::bench::compare(
        &format!(
            "The bare tonic server in a process of its own vs on a thread of the bench ({CALLS} calls each)"
        ),
        ("bare, process", &process_floor),
        ("bare, thread", &floor),
        1.5,
        "bare tonic in its own process / on a thread",
    );
}

/// A tonic server with only the standard health service, on `socket`, on a runtime thread of its
/// own (as dshd runs in a process of its own): the floor of a unary call over a Unix socket.
fn start_bare_tonic_server(socket: &std::path::Path) {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || serve_bare_tonic(listener));
}

/// Serves the standard health service alone on `listener`, forever.
fn serve_bare_tonic(listener: std::os::unix::net::UnixListener) {
    listener.set_nonblocking(true).unwrap();
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let (_reporter, service) = tonic_health::server::health_reporter();
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
    }
}
