//! Resume and fork of a stored session with a 100 MB transcript, on the release `dshd`, against
//! the floor of reading and parsing the same data in the bench process, alternately, median of
//! [`ROUNDS`] rounds (target: resume ≤ 1.5 × the floor, for each backend).
//!
//! - JSONL floor: read the log file and `serde_json`-parse every line into dsh's `Event`.
//! - SQLite floor: `SELECT` the same rows from the database and parse each one's data into its
//!   `Event` (the bench opens its own read-only connection).
//! - Fork copies the session's completed turns into a new, durable session, so it also writes the
//!   same bytes again: it is printed against the read-and-parse floor and, for JSONL, against
//!   that floor plus writing the bytes to a new file and `fsync`ing it.
//!
//! Each resume is followed (outside the clock) by a close, each fork's agent too; dshd's RSS is
//! printed idle, with the resumed agent live and after closing it.
//!
//! Run: `cargo bench -p dsh-tests --bench resume`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_core::{Event, SessionHeader, SessionId};
use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_tests::bench::{ReleaseDaemon, parse_log, rss_kib, write_durably};
use dsh_tests::seed;

const LOG_BYTES: usize = 100_000_000;
const ROUNDS: usize = 5;

fn main() {
    let events = seed::long_session(LOG_BYTES);
    for backend in ["jsonl", "sqlite"] {
        run(backend, &events);
    }
}

fn run(backend: &str, events: &[Event]) {
    let dir = dsh_tests::private_dir();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let header = SessionHeader::new(SessionId::new_v7(), work.clone(), 1_700_000_000_000);
    let sessions = [(header.clone(), events.to_vec())];
    let root = home.join("sessions");
    let db = home.join("sessions.sqlite3");
    let args: &[&str] = match backend {
        "jsonl" => {
            seed::jsonl(&root, &sessions);
            &[]
        }
        _ => {
            seed::sqlite(&db, &sessions);
            &["--persistence", "sqlite"]
        }
    };
    drop(sessions);
    let log = dsh_core::jsonl_log_path(&root, &header);
    let bytes = match backend {
        "jsonl" => std::fs::metadata(&log).unwrap().len(),
        _ => std::fs::metadata(&db).unwrap().len(),
    };
    let daemon = ReleaseDaemon::start(&dir, args);
    let pid = daemon.pid();
    let (runtime, client) = daemon.connect();
    let id = header.id.to_string();
    // A stored scripted session's script is not stored with it: each resume and fork gives one.
    let model = || {
        Some(v1::ModelSpec {
            provider: "scripted".into(),
            script_json: r#"{"replies": []}"#.into(),
            reasoning_effort: String::new(),
            ..v1::ModelSpec::default()
        })
    };
    let scratch = dir.path().join("copy.jsonl");
    let rss_idle = rss_kib(pid);
    let (mut resume, mut fork, mut floor, mut write_floor) = (vec![], vec![], vec![], vec![]);
    let mut rss_live = 0;
    for round in 0..ROUNDS {
        // The floor.
        let t = Instant::now();
        let parsed = match backend {
            "jsonl" => parse_jsonl(&log),
            _ => parse_sqlite(&db, &header.id),
        };
        floor.push(t.elapsed());
        assert!(parsed.len() >= events.len(), "{} events", parsed.len());
        // Resume, then close outside the clock.
        let t = Instant::now();
        runtime
            .block_on(client.agents().resume(v1::ResumeAgentRequest {
                session_id: id.clone(),
                model: model(),
                ..Default::default()
            }))
            .unwrap();
        resume.push(t.elapsed());
        if round == 0 {
            rss_live = rss_kib(pid);
        }
        runtime
            .block_on(client.agents().close(v1::CloseAgentRequest {
                agent_id: id.clone(),
            }))
            .unwrap();
        // Fork (a new durable session of the same size), then close it.
        let t = Instant::now();
        let forked = runtime
            .block_on(client.agents().fork(v1::ForkAgentRequest {
                session_id: id.clone(),
                model: model(),
                ..Default::default()
            }))
            .unwrap()
            .into_inner();
        fork.push(t.elapsed());
        runtime
            .block_on(client.agents().close(v1::CloseAgentRequest {
                agent_id: forked.agent_id,
            }))
            .unwrap();
        // The fork's floor: read and parse, then write the same bytes durably.
        if backend == "jsonl" {
            let t = Instant::now();
            let bytes = std::fs::read(&log).unwrap();
            let parsed = parse_log(&bytes);
            write_durably(&scratch, &bytes);
            write_floor.push(t.elapsed());
            assert!(!parsed.is_empty());
            std::fs::remove_file(&scratch).unwrap();
        }
        drop(parsed);
    }
    let rss_closed = rss_kib(pid);
    let rss_settled = dsh_tests::bench::settled_rss_kib(pid);
    let rss_peak = dsh_tests::bench::status_kib(pid, "VmHWM");
    drop(daemon);
    let (resume, fork, floor) = (median(&mut resume), median(&mut fork), median(&mut floor));
    println!(
        "{backend}: a stored session of {} events, {:.0} MB on disk; median of {ROUNDS} rounds",
        events.len(),
        bytes as f64 / 1e6
    );
    println!(
        "  floor (read + parse) {}; Resume {}; Fork {}",
        duration(floor),
        duration(resume),
        duration(fork)
    );
    println!(
        "  dshd RSS: idle {rss_idle} KiB, resumed agent live {rss_live} KiB, after every close {rss_closed} KiB, {} s later {rss_settled} KiB ({:.2}x idle); peak {rss_peak} KiB",
        dsh_tests::bench::SETTLE.as_secs(),
        rss_settled as f64 / rss_idle as f64
    );
    ratio(
        &format!("Resume of a 100 MB {backend} session / read + parse"),
        &duration(resume),
        &duration(floor),
        resume.as_secs_f64() / floor.as_secs_f64(),
        Target::AtMost(1.5),
    );
    if backend == "jsonl" {
        let write_floor = median(&mut write_floor);
        println!(
            "  fork floor (read + parse + write + fsync) {}",
            duration(write_floor)
        );
        ratio(
            "Fork of a 100 MB jsonl session / read + parse + write + fsync",
            &duration(fork),
            &duration(write_floor),
            fork.as_secs_f64() / write_floor.as_secs_f64(),
            Target::AtMost(1.5),
        );
    } else {
        println!(
            "  Fork / read + parse: {:.2} (fork also writes the copy: no target)",
            fork.as_secs_f64() / floor.as_secs_f64()
        );
    }
}

/// Reads the log and parses every event line (the header line is skipped: a resume parses it too,
/// but it is one line of a hundred thousand).
fn parse_jsonl(log: &Path) -> Vec<Event> {
    parse_log(&std::fs::read(log).unwrap())
}

/// Reads the session's rows and parses each one's data.
fn parse_sqlite(db: &Path, id: &SessionId) -> Vec<Event> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, type, time, data FROM events WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    let mut rows = stmt.query([id.as_str()]).unwrap();
    let mut events = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let seq: i64 = row.get(0).unwrap();
        let type_name = row.get_ref(1).unwrap().as_str().unwrap();
        let time: i64 = row.get(2).unwrap();
        let data = row.get_ref(3).unwrap().as_str().unwrap();
        events
            .push(Event::from_columns(u64::try_from(seq).unwrap(), time, type_name, data).unwrap());
    }
    events
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}
