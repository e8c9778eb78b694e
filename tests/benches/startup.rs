//! Startup and idle footprint of the release `dshd`: time from process start to the first answered
//! `Status`, and resident memory when idle. Medians of several runs, printed beside the floor of
//! spawning and reaping `/bin/true` measured in the same run.
//!
//! Run: `cargo bench -p dsh-tests --bench startup`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_proto::v1;

const RUNS: usize = 15;

fn main() {
    // Through `cargo_build`, which keeps the bench's own cargo variables from the nested build
    // (they would make it rebuild ring and everything above it, every time).
    let dshd = dsh_tests::cargo_build("dsh-daemon", "dshd", true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut floor = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        Command::new("/bin/true").status().unwrap();
        floor.push(t.elapsed());
    }

    let mut startup = Vec::new();
    let mut rss_kib = Vec::new();
    for _ in 0..RUNS {
        let dir = dsh_tests::private_dir();
        let socket = dir.path().join("d.sock");
        let mut cmd = dsh_tests::daemon_command_for(&dshd, &dir);
        cmd.env("RUST_LOG", "warn")
            .arg("--dsh-home")
            .arg(dir.path().join("home"))
            .arg("--socket")
            .arg(&socket)
            .stderr(Stdio::null());
        let t = Instant::now();
        let mut child = cmd.spawn().unwrap();
        while UnixStream::connect(&socket).is_err() {
            std::thread::sleep(Duration::from_micros(200));
        }
        let status = runtime.block_on(async {
            let client = dsh_client::Client::connect(&socket).await.unwrap();
            client
                .daemon()
                .status(v1::StatusRequest {})
                .await
                .unwrap()
                .into_inner()
        });
        startup.push(t.elapsed());
        assert_eq!(status.pid, child.id());
        std::thread::sleep(Duration::from_millis(300)); // let it settle into idle
        rss_kib.push(rss_of(child.id()));
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        child.wait().unwrap();
    }

    let floor_med = median(&mut floor);
    let start_med = median(&mut startup);
    let rss_med = {
        rss_kib.sort_unstable();
        rss_kib[rss_kib.len() / 2]
    };
    println!("dshd startup and idle footprint ({RUNS} runs, release build)");
    println!(
        "  start -> first Status answered: median {:.1} ms (target <= 100 ms)",
        ms(start_med)
    );
    println!(
        "  floor: spawn+reap /bin/true:     median {:.2} ms (ratio {:.1}x)",
        ms(floor_med),
        start_med.as_secs_f64() / floor_med.as_secs_f64()
    );
    println!(
        "  idle RSS:                        median {:.1} MiB (target <= 16 MiB), min {:.1}, max {:.1}",
        rss_med as f64 / 1024.0,
        rss_kib[0] as f64 / 1024.0,
        rss_kib[rss_kib.len() - 1] as f64 / 1024.0
    );
    dsh_testkit::bench::ratio(
        "Startup: spawn -> first Status / 100 ms",
        &format!("median {:.1} ms", ms(start_med)),
        &format!(
            "100 ms (target; spawn of /bin/true {:.1} ms)",
            ms(floor_med)
        ),
        ms(start_med) / 100.0,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
    dsh_testkit::bench::ratio(
        "Idle RSS / 16 MiB",
        &format!("median {:.1} MiB", rss_med as f64 / 1024.0),
        "16 MiB (target)",
        rss_med as f64 / 1024.0 / 16.0,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
}

fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
