//! Runs every benchmark of the workspace, one after another, and prints one table of their ratios,
//! so that a regression anywhere is visible at a glance.
//!
//! Every bench prints, besides its own report, one `RATIO` line per figure (see
//! `dsh_testkit::bench`); this gathers them. Each bench's own output is passed through as it comes.
//! Give bench names to run only those.
//!
//! Run: `cargo run --release -p dsh-tests --bin bench-all [NAME...]`

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// Every bench, as `(package, bench)`: the in-process ones first, then those of the release dshd.
const BENCHES: [(&str, &str); 22] = [
    ("dsh-core", "collect"),
    ("dsh-core", "persistence"),
    ("dsh-core", "agent_loop"),
    ("dsh-core", "turn_length"),
    ("dsh-core", "openai_overhead"),
    ("dsh-tests", "startup"),
    ("dsh-tests", "rpc"),
    ("dsh-tests", "memory"),
    ("dsh-tests", "shell"),
    ("dsh-tests", "hooks"),
    ("dsh-tests", "turn_length"),
    ("dsh-tests", "sessions"),
    ("dsh-tests", "resume"),
    ("dsh-tests", "stream"),
    ("dsh-tests", "live_output"),
    ("dsh-tests", "sandbox"),
    ("dsh-tests", "postgres"),
    ("dsh-tests", "acp"),
    ("dsh-tests", "store"),
    ("dsh-tests", "files"),
    ("dsh-tests", "mcp"),
    ("dsh-tests", "compaction"),
];

/// One figure of the table.
struct Row {
    bench: String,
    fields: Vec<String>,
}

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let started = Instant::now();
    for (package, bench) in BENCHES {
        if !only.is_empty() && !only.iter().any(|name| name == bench) {
            continue;
        }
        println!("==> cargo bench -p {package} --bench {bench}");
        let mut command = Command::new(&cargo);
        command
            .arg("bench")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["-p", package, "--bench", bench])
            .stdout(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            if dsh_tests::set_by_cargo_for_the_runner(&key.to_string_lossy()) {
                command.env_remove(&key);
            }
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                eprintln!("cannot run cargo: {error}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.strip_prefix("RATIO\t") {
                    Some(fields) => rows.push(Row {
                        bench: bench.to_owned(),
                        fields: fields.split('\t').map(str::to_owned).collect(),
                    }),
                    None => println!("{line}"),
                }
            }
        }
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("{bench} ({status})")),
            Err(error) => failed.push(format!("{bench} ({error})")),
        }
    }
    println!();
    println!(
        "Every ratio, {} benches in {:.0} s (`cargo run --release -p dsh-tests --bin bench-all`):",
        BENCHES.len(),
        started.elapsed().as_secs_f64()
    );
    println!();
    println!("| bench | figure | measured | floor | ratio | target | |");
    println!("|---|---|---|---|---|---|---|");
    for row in &rows {
        let cell = |i: usize| row.fields.get(i).map_or("", String::as_str);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.bench,
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            cell(4),
            cell(5)
        );
    }
    let missed = rows
        .iter()
        .filter(|r| r.fields.get(5).is_some_and(|v| v == "MISSED"))
        .count();
    println!();
    println!("{} figures, {missed} missed", rows.len());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("benches that failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
