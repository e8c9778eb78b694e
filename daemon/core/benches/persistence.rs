//! Persistence in process, each figure printed beside its floor measured in the same run:
//!
//! - `locate()` through `PersistenceHandle::locate` with the JSONL backend (target: median ≤ 1 µs),
//!   beside the floor of joining the same three precomputed path components;
//! - checkpoint throughput with 64-event checkpoints through `checkpoint` (the path the
//!   agent loop takes), JSONL beside a raw `pwrite` + `fdatasync` of the same bytes, and SQLite
//!   beside raw inserts of the same rows in one transaction per batch with the same pragmas
//!   (targets: ratio ≥ 0.8 for both). Steady state: each session's first checkpoint, which creates
//!   its file or database, is done before timing starts; rounds alternate backend and floor.
//!
//! Run: `cargo bench -p dsh-core --bench persistence`
//! (`DSH_BENCH_DIR=/some/dir` to measure another file system than `$TMPDIR`'s.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{
    AssistantMessage, BlockingPersistence, DurableCursor, Event, EventData, JsonlBackend,
    MessageSource, OnBlockingPool, Persistence, PersistenceHandle, SessionHeader, SessionId,
    SqliteBackend, TurnEndReason, UserMessage, checkpoint, project_dir_name, session_dir_name,
};
use dsh_session::{SessionLog, ToolCallRequest};
use serde_json::json;

/// Events per checkpoint.
const BATCH: usize = 64;
/// Timed checkpoints per round.
const CHECKPOINTS: usize = 150;
/// Rounds per contender (alternating with its floor).
const ROUNDS: usize = 5;

fn main() {
    let base = std::env::var_os("DSH_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let scratch = tempfile::Builder::new()
        .prefix("dsh-bench-")
        .tempdir_in(&base)
        .unwrap();
    println!(
        "persistence in process (release build; files under {})",
        scratch.path().display()
    );
    locate(scratch.path());
    stored_header(scratch.path());
    checkpoints(scratch.path());
}

/// `Persistence::header` of a stored JSONL session with a long log, beside the floor of opening
/// the same file and parsing its first line: what a header costs must not depend on the log.
fn stored_header(scratch: &Path) {
    const SAMPLES: usize = 2_000;
    let root = scratch.join("headers");
    let backend = JsonlBackend::new(root.clone()).unwrap();
    let mut report = Vec::new();
    for turns in [1usize, 3_000] {
        let header = header("/home/ada/src/dsh");
        let events: Vec<Event> = (0..turns)
            .flat_map(batch_data)
            .enumerate()
            .map(|(seq, data)| Event {
                seq: seq as u64,
                time: 1,
                data,
            })
            .collect();
        backend.append(&header, &events).unwrap();
        let path = dsh_core::jsonl_log_path(&root, &header);
        let bytes = std::fs::metadata(&path).unwrap().len();
        let (mut measured, mut floor) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let t = Instant::now();
            black_box(backend.header(black_box(&header.id)).unwrap());
            measured.push(t.elapsed());
            let t = Instant::now();
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(std::fs::File::open(&path).unwrap()),
                &mut line,
            )
            .unwrap();
            black_box(serde_json::from_str::<serde_json::Value>(&line).unwrap());
            floor.push(t.elapsed());
        }
        report.push((bytes, median(&mut measured), median(&mut floor)));
    }
    println!("  header() of a stored JSONL session ({SAMPLES} calls each)");
    for (bytes, measured, floor) in &report {
        println!(
            "    log of {:>10} bytes: median {:>6.1} us   floor (open + read + parse line 1) {:>6.1} us",
            bytes,
            measured.as_secs_f64() * 1e6,
            floor.as_secs_f64() * 1e6
        );
    }
    let (small, large) = (report[0].1, report[1].1);
    dsh_testkit::bench::ratio(
        "header() of a stored JSONL session, long log / 1-turn log",
        &format!(
            "{:.1} us ({} MB)",
            large.as_secs_f64() * 1e6,
            report[1].0 / 1_000_000
        ),
        &format!("{:.1} us", small.as_secs_f64() * 1e6),
        large.as_secs_f64() / small.as_secs_f64(),
        dsh_testkit::bench::Target::AtMost(1.25),
    );
}

fn header(cwd: &str) -> SessionHeader {
    SessionHeader::new(SessionId::new_v7(), PathBuf::from(cwd), 1_700_000_000_000)
}

// ------------------------------------------------------------------------------------------------
// locate

fn locate(scratch: &Path) {
    const CALLS: u32 = 2_000;
    const SAMPLES: usize = 301;
    let root = scratch.join("sessions");
    let handle = PersistenceHandle::new(Arc::new(OnBlockingPool::new(
        JsonlBackend::new(root.clone()).unwrap(),
    )));
    let header = header("/home/ada/src/dsh/daemon");
    let project = project_dir_name(&header.cwd);
    let dir = session_dir_name(header.id.as_str());
    assert_eq!(
        handle.locate(&header).unwrap().path,
        root.join(&project).join(&dir).join("session.jsonl")
    );

    let mut located = Vec::with_capacity(SAMPLES);
    let mut floor = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        located.push(per_call(CALLS, || {
            black_box(handle.locate(black_box(&header)));
        }));
        floor.push(per_call(CALLS, || {
            black_box(
                black_box(&root)
                    .join(black_box(&project))
                    .join(black_box(&dir))
                    .join("session.jsonl"),
            );
        }));
    }
    let (located, floor) = (median(&mut located), median(&mut floor));
    println!("  locate() via PersistenceHandle, JSONL ({SAMPLES} samples of {CALLS} calls)");
    println!(
        "    median {:>8.0} ns/call   (target <= 1000 ns: {})",
        located.as_nanos(),
        verdict(located <= Duration::from_micros(1))
    );
    println!(
        "    floor: join of the 3 precomputed components {:>6.0} ns/call   ratio {:.2}x",
        floor.as_nanos(),
        located.as_secs_f64() / floor.as_secs_f64()
    );
    dsh_testkit::bench::ratio(
        "locate() through PersistenceHandle / 1 us",
        &format!("median {} ns", located.as_nanos()),
        &format!(
            "1000 ns (target; joining the parts {} ns)",
            floor.as_nanos()
        ),
        located.as_secs_f64() / 1e-6,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
}

fn per_call(calls: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed() / calls
}

// ------------------------------------------------------------------------------------------------
// checkpoints

/// A realistic mix of step events, 64 per batch: step markers, assistant text with tool calls,
/// calls with arguments, results with a few hundred bytes of output.
fn batch_data(batch: usize) -> Vec<EventData> {
    let turn = u32::try_from(batch + 1).unwrap();
    let output = "drwxr-xr-x  2 ada ada 4096 Jan  1 00:00 src\n".repeat(8);
    let mut data = vec![
        EventData::TurnStart { turn },
        EventData::UserMessage {
            message: UserMessage {
                text: "Run the tests and fix what fails.".into(),
                source: MessageSource::User,
            },
        },
    ];
    let mut step = 0;
    while data.len() < BATCH - 1 {
        step += 1;
        let call = ToolCallRequest {
            id: format!("call_{turn}_{step}"),
            name: "bash".into(),
            arguments: json!({"command": "ls -la src && cargo test -p dsh-daemon 2>&1 | tail -20"}),
        };
        data.extend([
            EventData::StepStart { turn, step },
            EventData::AssistantMessage {
                turn,
                step,
                message: AssistantMessage {
                    text: "Let me look at the source tree and run the tests first.".into(),
                    tool_calls: vec![call.clone()],
                },
                usage: None,
            },
            EventData::ToolCall {
                turn,
                step,
                call_id: call.id.clone(),
                name: call.name,
                arguments: call.arguments,
            },
            EventData::ToolResult {
                turn,
                step,
                call_id: call.id,
                content: output.clone(),
                is_error: false,
                code: None,
                exit_code: None,
            },
            EventData::StepEnd { turn, step },
        ]);
    }
    data.truncate(BATCH - 1);
    data.push(EventData::TurnEnd {
        turn,
        reason: TurnEndReason::Completed,
        answer_seq: None,
        usage: None,
    });
    data
}

/// A log holding `batches` batches, and the events of each batch.
fn prepared_log(cwd: &str, batches: usize) -> (SessionLog, Vec<Vec<Event>>) {
    let mut log = SessionLog::new(header(cwd));
    let mut all = Vec::with_capacity(batches);
    for b in 0..batches {
        let events = batch_data(b)
            .into_iter()
            .map(|d| {
                log.append_at(d, 1_700_000_000_000 + i64::try_from(b).unwrap())
                    .clone()
            })
            .collect();
        all.push(events);
    }
    (log, all)
}

/// Events per second of `CHECKPOINTS` checkpoints of one session in `backend`, after an untimed
/// first checkpoint.
fn backend_rate(backend: Arc<dyn Persistence>, cwd: &str) -> f64 {
    let handle = PersistenceHandle::new(backend);
    let (full, batches) = prepared_log(cwd, CHECKPOINTS + 1);
    // Replay the prepared events into a growing log, checkpointing after each batch.
    let mut log = SessionLog::new(full.header().as_ref().clone());
    let mut cursor = DurableCursor::default();
    let mut timed = Duration::ZERO;
    // As in dshd: the checkpoint awaits the backend, which works on the blocking pool.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for (i, batch) in batches.iter().enumerate() {
        for event in batch {
            log.append_at(event.data.clone(), event.time);
        }
        let start = Instant::now();
        runtime
            .block_on(checkpoint(&handle, &log, &mut cursor))
            .unwrap();
        if i > 0 {
            timed += start.elapsed();
        }
    }
    assert_eq!(cursor.stored(), full.len());
    rate(timed)
}

fn rate(elapsed: Duration) -> f64 {
    (CHECKPOINTS * BATCH) as f64 / elapsed.as_secs_f64()
}

/// The bytes the JSONL backend writes for a batch: one JSON line per event.
fn jsonl_bytes(events: &[Event]) -> Vec<u8> {
    let mut buf = Vec::new();
    for event in events {
        serde_json::to_writer(&mut buf, event).unwrap();
        buf.push(b'\n');
    }
    buf
}

/// Floor: the same lines with one positioned write and one `fdatasync` per batch.
fn raw_file_rate(dir: &Path) -> f64 {
    let (_, batches) = prepared_log("/home/ada/src/raw", CHECKPOINTS + 1);
    let bytes: Vec<Vec<u8>> = batches.iter().map(|b| jsonl_bytes(b)).collect();
    let path = dir.join("raw.jsonl");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let mut offset = 0;
    let mut timed = Duration::ZERO;
    for (i, buf) in bytes.iter().enumerate() {
        let start = Instant::now();
        file.write_all_at(buf, offset).unwrap();
        file.sync_data().unwrap();
        if i > 0 {
            timed += start.elapsed();
        }
        offset += buf.len() as u64;
    }
    rate(timed)
}

/// Floor: the same rows inserted with one transaction per batch, same schema and pragmas as the
/// backend (WAL, `synchronous=FULL`, `foreign_keys=ON`).
fn raw_sqlite_rate(dir: &Path) -> f64 {
    let (log, batches) = prepared_log("/home/ada/src/raw", CHECKPOINTS + 1);
    let id = log.header().id.to_string();
    let rows: Vec<Vec<(i64, &str, i64, String)>> = batches
        .iter()
        .map(|b| {
            b.iter()
                .map(|e| {
                    (
                        i64::try_from(e.seq).unwrap(),
                        e.data.type_name(),
                        e.time,
                        e.data_json(),
                    )
                })
                .collect()
        })
        .collect();
    let mut conn = rusqlite::Connection::open(dir.join("raw.sqlite3")).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(
        "CREATE TABLE sessions(id TEXT PRIMARY KEY, header TEXT NOT NULL, created_at INTEGER NOT NULL);
         CREATE TABLE events(session_id TEXT NOT NULL REFERENCES sessions(id), seq INTEGER NOT NULL,
             type TEXT NOT NULL, time INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY(session_id, seq));",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO sessions(id, header, created_at) VALUES (?1, ?2, ?3)",
        rusqlite::params![id, serde_json::to_string(log.header().as_ref()).unwrap(), 0],
    )
    .unwrap();
    let mut timed = Duration::ZERO;
    for (i, batch) in rows.iter().enumerate() {
        let start = Instant::now();
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO events(session_id, seq, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .unwrap();
            for (seq, kind, time, data) in batch {
                insert
                    .execute(rusqlite::params![id, seq, kind, time, data])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        if i > 0 {
            timed += start.elapsed();
        }
    }
    rate(timed)
}

fn checkpoints(scratch: &Path) {
    let mut jsonl = Vec::new();
    let mut raw_file = Vec::new();
    let mut sqlite = Vec::new();
    let mut raw_sqlite = Vec::new();
    for round in 0..ROUNDS {
        let dir = scratch.join(format!("round-{round}"));
        std::fs::create_dir(&dir).unwrap();
        raw_file.push(raw_file_rate(&dir));
        jsonl.push(backend_rate(
            Arc::new(OnBlockingPool::new(
                JsonlBackend::new(dir.join("sessions")).unwrap(),
            )),
            "/home/ada/src/dsh",
        ));
        raw_sqlite.push(raw_sqlite_rate(&dir));
        sqlite.push(backend_rate(
            Arc::new(OnBlockingPool::new(
                SqliteBackend::open(dir.join("sessions.sqlite3")).unwrap(),
            )),
            "/home/ada/src/dsh",
        ));
    }
    println!(
        "  checkpoint throughput, {BATCH}-event checkpoints ({ROUNDS} rounds x {CHECKPOINTS} checkpoints, median round)"
    );
    report(
        "JSONL  checkpoint",
        "write+fdatasync of the same bytes",
        &mut jsonl,
        &mut raw_file,
    );
    report(
        "SQLite checkpoint",
        "raw inserts, 1 tx/batch, same pragmas",
        &mut sqlite,
        &mut raw_sqlite,
    );
}

fn report(name: &str, floor_name: &str, backend: &mut [f64], floor: &mut [f64]) {
    let (b, f) = (median_f(backend), median_f(floor));
    let ratio = b / f;
    println!(
        "    {name}: {:>9.0} events/s   floor ({floor_name}): {:>9.0} events/s   ratio {ratio:.2} (target >= 0.80: {})",
        b,
        f,
        verdict(ratio >= 0.8)
    );
    dsh_testkit::bench::ratio(
        &format!(
            "{} checkpoint throughput / {floor_name}",
            name.split_whitespace().next().unwrap_or(name)
        ),
        &format!("{b:.0} events/s"),
        &format!("{f:.0} events/s"),
        ratio,
        dsh_testkit::bench::Target::AtLeast(0.8),
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn median_f(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
