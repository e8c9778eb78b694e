//! `ShellEnvRegistry::collect` with every shipped contributor, in process: the per-call cost of the
//! managed `DSH_*` snapshot (CONTRACTS §5; target: median ≤ 2 µs). The execution is an agent's bash
//! call inside a turn, so every contributor answers (JSONL location, lineage, tool call, socket).
//!
//! After divan's table, the same call is timed by hand ([`SAMPLES`] samples of [`CALLS`] calls)
//! next to a floor: building the snapshot's ten owned strings into a map from values known in
//! advance, which is what any snapshot costs before a single fact is looked up.
//!
//! Run: `cargo bench -p dsh-core --bench collect`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use dsh_core::{
    AgentContext, BackendKind, ManagedEnv, PersistenceHandle, Registration, SessionHeader,
    SessionId, ShellEnvRegistry, ToolExecution, open_backend, register_builtins,
};
use dsh_session::Origin;
use tokio_util::sync::CancellationToken;

const SAMPLES: usize = 2000;
const CALLS: u32 = 100;

fn main() {
    divan::main();
    let s = setup();
    let env = collect_now(&s.registry, &s.exec);
    let pairs: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let floor_once = || {
        let map: std::collections::BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        map
    };
    let (mut measured, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let t = std::time::Instant::now();
        for _ in 0..CALLS {
            divan::black_box(collect_now(
                divan::black_box(&s.registry),
                divan::black_box(&s.exec),
            ));
        }
        measured.push(t.elapsed() / CALLS);
        let t = std::time::Instant::now();
        for _ in 0..CALLS {
            divan::black_box(floor_once());
        }
        floor.push(t.elapsed() / CALLS);
    }
    measured.sort_unstable();
    floor.sort_unstable();
    let (m, f) = (measured[SAMPLES / 2], floor[SAMPLES / 2]);
    println!(
        "collect() with every shipped contributor: median {} ns (target <= 2000 ns); floor (the same ten strings into a map) {} ns",
        m.as_nanos(),
        f.as_nanos()
    );
    dsh_testkit::bench::ratio(
        "collect(), every shipped contributor / 2 us",
        &format!("median {} ns", m.as_nanos()),
        &format!(
            "2000 ns (target; ten strings into a map {} ns)",
            f.as_nanos()
        ),
        m.as_secs_f64() / 2e-6,
        dsh_testkit::bench::Target::AtMost(1.0),
    );
}

struct Setup {
    registry: ShellEnvRegistry,
    _guards: Vec<Registration>,
    exec: ToolExecution,
}

fn setup() -> Setup {
    let home = PathBuf::from("/home/bench/.dsh");
    let backend = open_backend(BackendKind::Jsonl, home.join("sessions")).unwrap();
    let handle = Arc::new(PersistenceHandle::new(backend));
    let registry = ShellEnvRegistry::new(home.clone(), Duration::from_secs(2));
    let guards = register_builtins(&registry, handle, home.join("run/dshd.sock")).unwrap();
    let root = SessionId::new_v7();
    let header = SessionHeader {
        parent_session: Some(root.clone()),
        origin: Some(Origin::Subagent),
        delegation_depth: 1,
        ..SessionHeader::new(SessionId::new_v7(), "/home/bench/project".into(), 0)
    };
    let exec = ToolExecution {
        call_id: "call_0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4_0".into(),
        tool_name: "bash".into(),
        agent: Some(AgentContext {
            header: Arc::new(header),
            root,
            sandbox: dsh_core::SandboxPolicy::UNCONFINED,
            env: None,
        }),
        turn: Some(3),
        step: Some(2),
        cwd: "/home/bench/project".into(),
        cancel: CancellationToken::new(),
        output: None,
    };
    Setup {
        registry,
        _guards: guards,
        exec,
    }
}

/// Every shipped contributor is synchronous, so one poll completes the collection; polling by hand
/// keeps an executor's own cost out of the figure.
fn collect_now(registry: &ShellEnvRegistry, exec: &ToolExecution) -> ManagedEnv {
    let mut future = pin!(registry.collect(exec));
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(env) => env.unwrap(),
        Poll::Pending => panic!("a shipped contributor did not answer at once"),
    }
}

#[divan::bench(sample_count = 1000)]
fn collect_all_shipped_contributors(bencher: divan::Bencher) {
    let s = setup();
    let env = collect_now(&s.registry, &s.exec);
    assert_eq!(env.len(), 10, "{env:?}");
    bencher.bench_local(|| collect_now(divan::black_box(&s.registry), divan::black_box(&s.exec)));
}
