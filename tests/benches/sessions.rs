//! `Persistence.ListSessions`' first page with 1,000, 10,000 and 100,000 stored sessions, on the
//! release `dshd`, for both backends (target: ≤ 50 ms at 100,000 and independent of the count).
//!
//! Each count gets its own home, written before its dshd starts (five cwds, a few sessions per
//! millisecond), and the three daemons run at once. Each one's first listing is timed alone (the
//! JSONL backend builds its listing index then, reading every header once); then, after a
//! warm-up of [`WARMUP`] (the index trusts a directory's time once it is a second old; before that
//! it reads the directory again at every listing), rounds go through the three daemons in turn:
//! a first page, a first page filtered by cwd, and `Daemon.Status` (the floor of any call), so
//! the machine's drift hits every count alike. Printed per count: medians, the ratio of the
//! 100,000 figure to the 1,000 one (flat means independent of the count), and dshd's RSS before
//! and after its first listing (the JSONL index's memory).
//!
//! Run: `cargo bench -p dsh-tests --bench sessions`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::{Duration, Instant};

use dsh_core::{Event, SessionHeader, SessionId};
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = dsh_core::now_ms() - 30 * 24 * 3600 * 1000;
    // One home and one dshd per count, all running at once, so that calls to them can be
    // interleaved and the machine's drift hits every count alike.
    let mut homes = Vec::new();
    for count in COUNTS {
        let dir = dsh_tests::private_dir();
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        for n in 0..5 {
            std::fs::create_dir_all(work.join(format!("p{n}"))).unwrap();
        }
        std::fs::create_dir_all(&home).unwrap();
        let sessions: Vec<(SessionHeader, Vec<Event>)> = (0..count)
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
            "jsonl" => seed::jsonl(&home.join("sessions"), &sessions),
            _ => seed::sqlite(&home.join("sessions.sqlite3"), &sessions),
        }
        println!(
            "  seeded {count} {backend} sessions in {}",
            duration(seeding.elapsed())
        );
        homes.push((count, dir, work.join("p3").display().to_string()));
    }
    let args: &[&str] = if backend == "sqlite" {
        &["--persistence", "sqlite"]
    } else {
        &[]
    };
    let daemons: Vec<ReleaseDaemon> = homes
        .iter()
        .map(|(_, dir, _)| ReleaseDaemon::start(dir, args))
        .collect();
    let first_page = |cwd: &str| v1::ListSessionsRequest {
        page_size: Some(PAGE),
        cwd: cwd.to_owned(),
        ..v1::ListSessionsRequest::default()
    };
    let (cold, rss, list, filtered, status) = runtime.block_on(async {
        let mut clients = Vec::new();
        for daemon in &daemons {
            let client = dsh_client::Client::connect(&daemon.socket).await.unwrap();
            clients.push((client.persistence(), client.daemon()));
        }
        // The first listing of each, alone: the JSONL index is built then.
        let (mut cold, mut rss) = (Vec::new(), Vec::new());
        for ((persistence, _), daemon) in clients.iter_mut().zip(&daemons) {
            let before = rss_kib(daemon.pid());
            let t = Instant::now();
            let page = persistence
                .list_sessions(first_page(""))
                .await
                .unwrap()
                .into_inner();
            cold.push(t.elapsed());
            rss.push((before, rss_kib(daemon.pid())));
            assert_eq!(page.sessions.len(), PAGE as usize);
            assert!(!page.next_page_token.is_empty());
        }
        let warm = Instant::now();
        while warm.elapsed() < WARMUP {
            for (persistence, _) in &mut clients {
                persistence.list_sessions(first_page("")).await.unwrap();
            }
        }
        let n = clients.len();
        let (mut list, mut filtered, mut status) = (
            vec![Vec::new(); n],
            vec![Vec::new(); n],
            vec![Vec::new(); n],
        );
        for _ in 0..CALLS {
            for (i, (persistence, daemon_client)) in clients.iter_mut().enumerate() {
                let cwd = &homes[i].2;
                let t = Instant::now();
                let page = persistence
                    .list_sessions(first_page(""))
                    .await
                    .unwrap()
                    .into_inner();
                list[i].push(t.elapsed());
                assert_eq!(page.sessions.len(), PAGE as usize);
                let t = Instant::now();
                let page = persistence
                    .list_sessions(first_page(cwd))
                    .await
                    .unwrap()
                    .into_inner();
                filtered[i].push(t.elapsed());
                assert!(
                    page.sessions
                        .iter()
                        .all(|s| &s.header.as_ref().unwrap().cwd == cwd)
                );
                let t = Instant::now();
                daemon_client.status(v1::StatusRequest {}).await.unwrap();
                status[i].push(t.elapsed());
            }
        }
        let medians = |v: Vec<Vec<Duration>>| -> Vec<Duration> {
            v.into_iter().map(|mut s| median(&mut s)).collect()
        };
        (cold, rss, medians(list), medians(filtered), medians(status))
    });
    drop(daemons);
    println!(
        "ListSessions first page ({PAGE} sessions), {backend}, release dshd, {CALLS} rounds interleaved across the counts"
    );
    for (i, (count, _, _)) in homes.iter().enumerate() {
        println!(
            "  {count:>7} sessions: first page p50 {} (cwd-filtered {}; Status {}); first listing after start {}; RSS {} -> {} KiB",
            duration(list[i]),
            duration(filtered[i]),
            duration(status[i]),
            duration(cold[i]),
            rss[i].0,
            rss[i].1,
        );
    }
    let last = COUNTS.len() - 1;
    let name = format!(
        "ListSessions first page, {} {backend} sessions",
        COUNTS[last]
    );
    ratio(
        &format!("{name} / 50 ms"),
        &format!("p50 {}", duration(list[last])),
        "50 ms (target)",
        list[last].as_secs_f64() / 0.050,
        Target::AtMost(1.0),
    );
    ratio(
        &format!("{name} / the same at 1,000"),
        &format!("p50 {}", duration(list[last])),
        &format!("p50 {}", duration(list[0])),
        list[last].as_secs_f64() / list[0].as_secs_f64(),
        Target::AtMost(1.25),
    );
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
