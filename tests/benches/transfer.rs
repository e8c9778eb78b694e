//! Export and import of a stored session with a 100 MB JSONL transcript, on the release `dshd`,
//! one run of [`ROUNDS`] rounds, medians (issue 46):
//!
//! 1. **export** (`Persistence.Export` of the bundle, every chunk received and written to a new
//!    file and `fsync`ed, as `dshctl session export -o` does) against reading the log file and
//!    writing the same bytes to a new file with an `fsync` (the floor). Target: at most 1.5×.
//! 2. **import** (`Persistence.Import` of that bundle: a new durable session of the same events)
//!    against the resume floor (reading the log and parsing every line into dsh's `Event`, as
//!    the `resume` bench measures it; target at most 1.5×), and, reported beside it, against
//!    that floor plus what an import cannot skip and a resume never does: writing the same bytes
//!    to a new file with an `fsync` (the durable floor), which says how much of the gap is the
//!    import's own work.
//!
//! It asserts nothing about time. Run: `cargo bench -p dsh-tests --bench transfer`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::io::Write;
use std::time::{Duration, Instant};

use dsh_core::{SessionHeader, SessionId};
use dsh_proto::v1;
use dsh_testkit::bench::{Target, duration, ratio};
use dsh_tests::bench::{ReleaseDaemon, p50_p90, parse_log, write_durably};
use dsh_tests::seed;
use tokio_stream::StreamExt;

const LOG_BYTES: usize = 100_000_000;
const ROUNDS: usize = 7;

fn main() {
    let events = seed::long_session(LOG_BYTES);
    let dir = dsh_tests::private_dir();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let header = SessionHeader::new(SessionId::new_v7(), work.clone(), 1_700_000_000_000);
    let root = home.join("sessions");
    seed::jsonl(&root, &[(header.clone(), events.clone())]);
    let log = dsh_core::jsonl_log_path(&root, &header);
    let bytes = std::fs::metadata(&log).unwrap().len();
    let daemon = ReleaseDaemon::start(&dir, &[]);
    let (runtime, client) = daemon.connect();
    let id = header.id.to_string();
    let bundle = work.join("export.zip");
    let copy = work.join("copy.jsonl");
    let (mut export, mut export_floor, mut import, mut import_floor, mut durable_floor) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut size = 0;
    // Every write goes to a new file, as `dshctl -o` writes one: replacing last round's would
    // time freeing its blocks too, by as much as the write itself on this kind of disk.
    let fresh = |path: &std::path::Path| match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{e}"),
        _ => (),
    };
    for _ in 0..ROUNDS {
        fresh(&copy);
        let t = Instant::now();
        let data = std::fs::read(&log).unwrap();
        write_durably(&copy, &data);
        export_floor.push(t.elapsed());
        drop(data);

        fresh(&bundle);
        let t = Instant::now();
        let written = runtime.block_on(async {
            let mut stream = client
                .persistence()
                .export(v1::ExportRequest {
                    session_id: id.clone(),
                    format: v1::ExportFormat::Bundle as i32,
                    descendants: false,
                })
                .await
                .unwrap()
                .into_inner();
            let mut out = std::fs::File::create(&bundle).unwrap();
            let mut written = 0;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.unwrap();
                out.write_all(&chunk.data).unwrap();
                written += chunk.data.len();
            }
            out.sync_all().unwrap();
            written
        });
        export.push(t.elapsed());
        size = written;

        fresh(&copy);
        let t = Instant::now();
        let data = std::fs::read(&log).unwrap();
        let parsed = parse_log(&data);
        import_floor.push(t.elapsed());
        write_durably(&copy, &data);
        durable_floor.push(t.elapsed());
        assert_eq!(parsed.len(), events.len());
        drop((parsed, data));

        let t = Instant::now();
        let imported = runtime
            .block_on(client.persistence().import(v1::ImportRequest {
                path: bundle.to_string_lossy().into_owned(),
                cwd: work.to_string_lossy().into_owned(),
            }))
            .unwrap()
            .into_inner();
        import.push(t.elapsed());
        assert_eq!(imported.events, events.len() as u64 + 1);
        // Outside the clock: the copy goes, so every round imports into the same store.
        runtime
            .block_on(client.persistence().delete(v1::DeleteSessionRequest {
                session_id: imported.session_id,
            }))
            .unwrap();
    }
    drop(daemon);
    let median = |samples: &mut [Duration]| p50_p90(samples).0;
    let (export, export_floor) = (median(&mut export), median(&mut export_floor));
    let (import, import_floor) = (median(&mut import), median(&mut import_floor));
    let durable_floor = median(&mut durable_floor);
    println!(
        "a stored session of {} events, {:.0} MB on disk, its bundle {:.0} MB; median of {ROUNDS} rounds",
        events.len(),
        bytes as f64 / 1e6,
        size as f64 / 1e6
    );
    println!(
        "  export {} (floor: read + write + fsync {}); import {} (floor: read + parse {}, + write + fsync {})",
        duration(export),
        duration(export_floor),
        duration(import),
        duration(import_floor),
        duration(durable_floor)
    );
    ratio(
        "Export of a 100 MB session (bundle) / read + write + fsync",
        &duration(export),
        &duration(export_floor),
        export.as_secs_f64() / export_floor.as_secs_f64(),
        Target::AtMost(1.5),
    );
    ratio(
        "Import of that bundle / resume floor (read + parse)",
        &duration(import),
        &duration(import_floor),
        import.as_secs_f64() / import_floor.as_secs_f64(),
        Target::AtMost(1.5),
    );
    ratio(
        "Import of that bundle / durable floor (read + parse + write + fsync)",
        &duration(import),
        &duration(durable_floor),
        import.as_secs_f64() / durable_floor.as_secs_f64(),
        Target::Reported,
    );
}
