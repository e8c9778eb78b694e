//! Support for the benchmarks that measure the release `dshd` through its socket.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A release `dshd` on a private home and socket in `dir`, logging warnings only; stopped with
/// SIGTERM when dropped.
#[derive(Debug)]
pub struct ReleaseDaemon {
    /// The daemon process.
    pub child: Child,
    /// Its socket.
    pub socket: PathBuf,
}

impl ReleaseDaemon {
    /// Builds (once) and starts the release `dshd` with `extra` arguments, and waits until it
    /// answers `Status`.
    pub fn start(dir: &tempfile::TempDir, extra: &[&str]) -> Self {
        Self::start_with_env(dir, extra, &[])
    }

    /// [`start`](Self::start) with `env` added to the daemon's environment.
    pub fn start_with_env(dir: &tempfile::TempDir, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dshd = crate::cargo_build("dsh-daemon", "dshd", true);
        Self::start_binary(&dshd, dir, extra, env)
    }

    /// Starts the `dshd` at `dshd` (already built) as [`start_with_env`](Self::start_with_env)
    /// does. The socket is in `<dir>/run/`, apart from the rest of `dir`: a sandboxed workspace
    /// in `dir` must not lie inside the socket's (protected) directory.
    pub fn start_binary(
        dshd: &Path,
        dir: &tempfile::TempDir,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let socket = dir.path().join("run/d.sock");
        let child = crate::daemon_command_for(dshd, dir)
            .env("RUST_LOG", "warn")
            .arg("--dsh-home")
            .arg(dir.path().join("home"))
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .envs(env.iter().copied())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start release dshd: {e}"));
        let daemon = Self { child, socket };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        while !crate::dshctl_at(&self.socket, &["status"]).status.success() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the release dshd never answered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A current-thread runtime and a client connected to this daemon's socket, for a bench
    /// that drives it through `dsh-client`.
    pub fn connect(&self) -> (tokio::runtime::Runtime, dsh_client::Client) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("start a runtime: {e}"));
        let client = runtime
            .block_on(dsh_client::Client::connect(&self.socket))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.socket.display()));
        (runtime, client)
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for ReleaseDaemon {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

/// How long after a load ends the benches wait before reading dshd's RSS a second time: longer
/// than the allocator's decay of freed pages (jemalloc returns dirty pages over 10 s).
pub const SETTLE: Duration = Duration::from_secs(12);

/// The CPU time (user + system) of `pid` so far, in microseconds (`/proc/<pid>/stat`, so exited
/// threads count), in 10 ms clock ticks.
pub fn cpu_us(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat: {e}"));
    // After the command name, which may hold spaces, in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), in clock ticks (100 per second here).
    let tick = |i: usize| -> u64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("no field {} in /proc/{pid}/stat", i + 3))
    };
    (tick(11) + tick(12)) as f64 * 10_000.0
}

/// `VmRSS` of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// The `field` (`VmRSS`, `VmHWM`, ...) of `/proc/<pid>/status`, in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// `VmRSS` of `pid` after [`SETTLE`] of idleness.
pub fn settled_rss_kib(pid: u32) -> u64 {
    std::thread::sleep(SETTLE);
    rss_kib(pid)
}

/// Prints the p50 and p90 of the `floor` and `measured` latencies (sorting them), the ratio of
/// their p50s and the overhead, and the `RATIO` line `figure` with a target of at most `target`.
pub fn latency_ratio(
    figure: &str,
    (floor_name, floor): (&str, &mut [Duration]),
    (measured_name, measured): (&str, &mut [Duration]),
    target: dsh_testkit::bench::Target,
) {
    let (f50, f90) = p50_p90(floor);
    let (m50, m90) = p50_p90(measured);
    for (name, p50, p90) in [(floor_name, f50, f90), (measured_name, m50, m90)] {
        println!(
            "    {name:<20} p50 {:>7.1} µs   p90 {:>7.1} µs",
            micros(p50),
            micros(p90)
        );
    }
    let ratio = m50.as_secs_f64() / f50.as_secs_f64();
    println!(
        "    ratio p50 {ratio:.3}x ({}); overhead p50 {:+.1} µs",
        match target.text() {
            t if t.is_empty() => "reported".to_owned(),
            t => format!("target {t}x"),
        },
        micros(m50) - micros(f50)
    );
    dsh_testkit::bench::ratio(
        figure,
        &format!("p50 {:.0} us", micros(m50)),
        &format!("p50 {:.0} us", micros(f50)),
        ratio,
        target,
    );
}

/// The median and the 90th percentile of `samples` (sorted in place).
pub fn p50_p90(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    (samples[samples.len() / 2], samples[samples.len() * 9 / 10])
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints both sides' percentiles (sorted samples, p50/p90/p99) and the ratio of their p50s
/// against `target`, and the figure's `RATIO` line for the table (`name`).
pub fn compare(
    title: &str,
    measured: (&str, &[Duration]),
    floor: (&str, &[Duration]),
    target: dsh_testkit::bench::Target,
    name: &str,
) {
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("{title}");
    for (name, v) in [measured, floor] {
        println!(
            "  {name:<16} p50 {:>8.1} us   p90 {:>8.1} us   p99 {:>8.1} us",
            us(p(v, 0.5)),
            us(p(v, 0.9)),
            us(p(v, 0.99))
        );
    }
    let ratio = p(measured.1, 0.5).as_secs_f64() / p(floor.1, 0.5).as_secs_f64();
    let verdict = target.verdict(ratio);
    match target {
        dsh_testkit::bench::Target::Reported => println!("  ratio of p50s: {ratio:.2} ({verdict})"),
        _ => println!(
            "  ratio of p50s: {ratio:.2} (target {}: {verdict})",
            target.text()
        ),
    }
    dsh_testkit::bench::ratio(
        name,
        &format!("p50 {:.1} us", us(p(measured.1, 0.5))),
        &format!("p50 {:.1} us", us(p(floor.1, 0.5))),
        ratio,
        target,
    );
}

/// A scripted agent in `cwd` whose model answers `replies` in order, confined by `sandbox` when
/// one is given (else the daemon's default).
pub async fn scripted_agent(
    client: &dsh_client::Client,
    cwd: &Path,
    replies: Vec<serde_json::Value>,
    sandbox: Option<dsh_proto::v1::SandboxPolicy>,
) -> String {
    client
        .agents()
        .create(dsh_proto::v1::CreateAgentRequest {
            cwd: cwd.display().to_string(),
            model: Some(dsh_proto::v1::ModelSpec {
                provider: "scripted".into(),
                script_json: serde_json::json!({ "replies": replies }).to_string(),
                ..Default::default()
            }),
            sandbox,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("create a scripted agent: {e}"))
        .into_inner()
        .agent_id
}

/// One turn of `agent`, from the prompt to the stream's end; panics if a call failed.
pub async fn timed_turn(client: &dsh_client::Client, agent: &str) -> Duration {
    use tokio_stream::StreamExt;
    let started = Instant::now();
    let mut stream = client
        .agents()
        .prompt(dsh_proto::v1::PromptRequest {
            agent_id: agent.to_owned(),
            text: "go".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("prompt: {e}"))
        .into_inner();
    while let Some(event) = stream.next().await {
        let event = event.unwrap_or_else(|e| panic!("stream: {e}"));
        if event.r#type == "tool/result" {
            let data: serde_json::Value =
                serde_json::from_str(&event.data_json).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(data["isError"], false, "a call failed: {data}");
        }
    }
    started.elapsed()
}

/// Parses every event line of a JSONL log's bytes, the header line skipped (a resume parses it
/// too, but it is one line of a hundred thousand): the floor the resume and import benches
/// measure a store against.
pub fn parse_log(bytes: &[u8]) -> Vec<dsh_core::Event> {
    bytes
        .split(|&b| b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l).unwrap_or_else(|e| panic!("a log line does not parse: {e}"))
        })
        .collect()
}

/// Writes `bytes` to a new file at `path` and fsyncs it: the durable half of a floor.
pub fn write_durably(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut out =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    out.write_all(bytes)
        .and_then(|()| out.sync_all())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
