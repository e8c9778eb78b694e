//! `Persistence.ListSessions`' first page with 1,000, 10,000 and 100,000 stored sessions, on the
//! release `dshd`, for both backends (target: ≤ 50 ms at 100,000 and independent of the count).
//!
//! The sessions are written into the home before dshd starts (five cwds, a few per millisecond).
//! For each count, a fresh dshd is started and its first listing timed alone (the JSONL backend
//! builds its listing index then, reading every header once); then, after a warm-up of
//! [`WARMUP`] (the index trusts a directory's time once it is a second old; before that it reads
//! the directory again at every listing), first pages are timed interleaved with `Daemon.Status`
//! (the floor of any call) and with a first page filtered by cwd. Printed per count: medians, the
//! ratio to the same backend's figure at 1,000 sessions (flat means independent of the count), and
//! dshd's RSS before and after its first listing (the JSONL index's memory).
//!
//! Run: `cargo bench -p dsh-tests --bench sessions`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::{Duration, Instant};

use dsh_core::session::{Event, SessionHeader, SessionId};
use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_tests::bench::ReleaseDaemon;
use dsh_tests::seed;

const COUNTS: [usize; 3] = [1_000, 10_000, 100_000];
const CALLS: usize = 300;
const WARMUP: Duration = Duration::from_millis(1500);
const PAGE: u32 = 100;

fn main() {
    for backend in ["jsonl", "sqlite"] {
        run(backend);
    }
}

fn run(backend: &str) {
    let dir = dsh_tests::private_dir();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    for n in 0..5 {
        std::fs::create_dir_all(work.join(format!("p{n}"))).unwrap();
    }
    std::fs::create_dir_all(&home).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = dsh_core::session::now_ms() - 30 * 24 * 3600 * 1000;
    let mut stored = 0;
    let mut at_1k = None;
    println!("ListSessions first page ({PAGE} sessions), {backend}, release dshd");
    for count in COUNTS {
        let batch: Vec<(SessionHeader, Vec<Event>)> = (stored..count)
            .map(|n| {
                let at = base + i64::try_from(n / 3).unwrap();
                let cwd = work.join(format!("p{}", n % 5));
                (
                    SessionHeader::new(SessionId::new_v7(), cwd, at),
                    seed::short_turn(0, 1, at),
                )
            })
            .collect();
        let seeding = Instant::now();
        match backend {
            "jsonl" => seed::jsonl(&home.join("sessions"), &batch),
            _ => seed::sqlite(&home.join("sessions.sqlite3"), &batch),
        }
        let seeded_in = seeding.elapsed();
        stored = count;
        let args: &[&str] = if backend == "sqlite" {
            &["--persistence", "sqlite"]
        } else {
            &[]
        };
        let daemon = ReleaseDaemon::start(&dir, args);
        let pid = daemon.pid();
        let socket = daemon.socket.clone();
        let cwd = work.join("p3").display().to_string();
        let figures = runtime.block_on(async {
            let client = dsh_client::Client::connect(&socket).await.unwrap();
            let mut persistence = client.persistence();
            let mut daemon_client = client.daemon();
            let first_page = |cwd: String| v1::ListSessionsRequest {
                page_size: Some(PAGE),
                cwd,
                ..v1::ListSessionsRequest::default()
            };
            let rss_before = rss_kib(pid);
            let t = Instant::now();
            let cold = persistence
                .list_sessions(first_page(String::new()))
                .await
                .unwrap()
                .into_inner();
            let cold_time = t.elapsed();
            assert_eq!(cold.sessions.len(), PAGE as usize);
            assert!(!cold.next_page_token.is_empty());
            let rss_after = rss_kib(pid);
            let warm = Instant::now();
            while warm.elapsed() < WARMUP {
                persistence
                    .list_sessions(first_page(String::new()))
                    .await
                    .unwrap();
            }
            let (mut list, mut filtered, mut status) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..CALLS {
                let t = Instant::now();
                let page = persistence
                    .list_sessions(first_page(String::new()))
                    .await
                    .unwrap()
                    .into_inner();
                list.push(t.elapsed());
                assert_eq!(page.sessions.len(), PAGE as usize);
                let t = Instant::now();
                let page = persistence
                    .list_sessions(first_page(cwd.clone()))
                    .await
                    .unwrap()
                    .into_inner();
                filtered.push(t.elapsed());
                assert!(
                    page.sessions
                        .iter()
                        .all(|s| s.header.as_ref().unwrap().cwd == cwd)
                );
                let t = Instant::now();
                daemon_client.status(v1::StatusRequest {}).await.unwrap();
                status.push(t.elapsed());
            }
            (
                cold_time,
                median(&mut list),
                median(&mut filtered),
                median(&mut status),
                rss_before,
                rss_after,
            )
        });
        drop(daemon);
        let (cold, list, filtered, status, rss_before, rss_after) = figures;
        let reference = *at_1k.get_or_insert(list);
        println!(
            "  {count:>7} sessions (seeded in {}): first page p50 {} (cwd-filtered {}; Status {}); \
             first listing after start {}; RSS {rss_before} -> {rss_after} KiB",
            duration(seeded_in),
            duration(list),
            duration(filtered),
            duration(status),
            duration(cold),
        );
        if count == COUNTS[COUNTS.len() - 1] {
            let name = format!("ListSessions first page, {count} {backend} sessions");
            ratio(
                &format!("{name} / 50 ms"),
                &format!("p50 {}", duration(list)),
                "50 ms (target)",
                list.as_secs_f64() / 0.050,
                Target::AtMost(1.0),
            );
            ratio(
                &format!("{name} / the same at 1,000"),
                &format!("p50 {}", duration(list)),
                &format!("p50 {}", duration(reference)),
                list.as_secs_f64() / reference.as_secs_f64(),
                Target::AtMost(1.25),
            );
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
