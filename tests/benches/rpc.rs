//! Ratios over Unix sockets, calls interleaved one for one so drift hits both sides alike:
//!
//! - `Persistence.Locate` of a live agent's session against `Daemon.Status` on the release `dshd`
//!   (target: Locate p50 ≤ 1.25 × Status p50; Status is a unary call that touches nothing);
//! - `Persistence.Locate` of a stored session (no live agent) whose JSONL log is 100 MB, against
//!   the same `Status` (target ≤ 1.25×): the daemon reads the log's header line once and keeps it;
//! - `Persistence.Locate` of [`FIRST_TIMES`] other stored sessions, each asked once (so each reads
//!   its header on the blocking pool), against the `Status` calls interleaved with them (target
//!   ≤ 1.5×, restated: docs/BENCHMARKS.md);
//! - `Daemon.Status` against the floor of any tonic unary call: a bare tonic server built here
//!   (the standard health service, nothing else, on its own runtime thread and socket) answering
//!   `grpc.health.v1.Health/Check` to the same kind of client (target ≤ 1.5×).
//!
//! Run: `cargo bench -p dsh-tests --bench rpc`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_proto::v1;
use dsh_testkit::bench::Target;

const WARMUP: usize = 500;
const CALLS: usize = 10_000;
/// The size of the stored session's log.
const LOG_BYTES: usize = 100_000_000;
/// Stored sessions located once each.
const FIRST_TIMES: usize = 2_000;

fn main() {
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

    let (mut status, mut locate, mut floor, mut stored_locate) = runtime.block_on(async {
        let client = dsh_client::Client::connect(&socket).await.unwrap();
        let bare = dsh_client::Client::connect(&floor_socket).await.unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(bare.channel());
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
        // Every dshd call comes right after a bare call and every bare call right after a
        // dshd call, so each side meets the same conditions (a server whose threads just
        // went idle wakes slower than one called twice in a row).
        for i in 0..WARMUP + CALLS {
            let f = timed(health.check(tonic_health::pb::HealthCheckRequest::default())).await;
            let s = timed(daemon.status(v1::StatusRequest {})).await;
            timed(health.check(tonic_health::pb::HealthCheckRequest::default())).await;
            let l = timed(persistence.locate(request.clone())).await;
            timed(health.check(tonic_health::pb::HealthCheckRequest::default())).await;
            let d = timed(persistence.locate(stored_request.clone())).await;
            if i >= WARMUP {
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
            // Restated from 1.25 (docs/BENCHMARKS.md, "Targets restated, and why").
            Target::AtMost(1.5),
            "Locate of a stored session, first time (header read) / Status",
        );
        (status, locate, floor, stored_locate)
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
    dsh_tests::bench::compare(
        &format!(
            "Locate vs Status over the Unix socket (release dshd, one client, live agent, {CALLS} calls each, interleaved)"
        ),
        ("Locate", &locate),
        ("Status (floor)", &status),
        Target::AtMost(1.25),
        "Locate of a live session / Status",
    );
    dsh_tests::bench::compare(
        &format!(
            "Locate of a stored session whose JSONL log is {:.0} MB vs Status ({CALLS} calls each, interleaved)",
            log_bytes as f64 / 1e6
        ),
        ("Locate stored", &stored_locate),
        ("Status (floor)", &status),
        Target::AtMost(1.25),
        "Locate of a stored session, 100 MB log / Status",
    );
    dsh_tests::bench::compare(
        &format!(
            "Status vs a bare tonic server's Health/Check (same client kind, {CALLS} calls each)"
        ),
        ("Status", &status),
        ("bare tonic", &floor),
        Target::AtMost(1.5),
        "Status / bare tonic unary call",
    );
}

/// How long a call took; a failed call aborts the bench.
async fn timed<T>(call: impl std::future::Future<Output = Result<T, tonic::Status>>) -> Duration {
    let t = Instant::now();
    call.await.unwrap();
    t.elapsed()
}

/// A tonic server with only the standard health service, on `socket`, on a runtime thread of its
/// own (as dshd runs in a process of its own; measured in a process of its own, it answered as
/// fast): the floor of a unary call over a Unix socket.
fn start_bare_tonic_server(socket: &std::path::Path) {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
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
    });
}
