//! dshd's memory comes back after the largest fan-out it admits: 1,100 `spawn_agent` calls in one
//! step (1,024 live agents admitted, the rest refused), then the parent closed.

use dsh_tests::TestDaemon;
use dsh_tests::bench::{rss_kib, settled_rss_kib};
use dsh_tests::shell::{new_agent, prompt, prompt_results, spawn_call, workdir};
use serde_json::{Value, json};

/// Slow (1,100 child agents; 30 s on the shared 2-core machine).
#[test]
fn after_a_1100_children_fan_out_is_closed_dshd_is_back_near_idle() {
    const CHILDREN: usize = 1_100;
    let daemon = TestDaemon::start();
    let pid = daemon.child.id();
    let cwd = workdir(&daemon, "w");
    // A warm-up agent first, so what the first agent ever allocates counts as idle.
    let warm = new_agent(&daemon, &cwd, &json!({"replies": [{"text": "warm"}]}));
    prompt(&daemon, &warm, "hi");
    daemon.dshctl(&["agent", "close", &warm]);
    let idle = settled_rss_kib(pid);

    let calls: Vec<Value> = (0..CHILDREN)
        .map(|k| {
            spawn_call(
                &format!("task {k}"),
                &json!({"replies": [{"text": format!("child {k} done")}]}),
            )
        })
        .collect();
    let parent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": calls}, {"text": "parent done"}]}),
    );
    let results = prompt_results(&prompt(&daemon, &parent, "fan out"));
    assert_eq!(results.len(), CHILDREN);
    let refused = results.iter().filter(|r| r.is_error).count();
    let peak = rss_kib(pid);
    let closed = daemon.dshctl(&["agent", "close", &parent]);
    assert!(closed.status.success(), "{closed:?}");
    let live = daemon.dshctl_json(&["agent", "list"]);
    assert_eq!(
        live["agents"],
        json!([]),
        "closing the parent closes its children"
    );
    let after = settled_rss_kib(pid);
    println!(
        "dshd RSS: idle {idle} KiB, after the fan-out {peak} KiB ({refused} refused), closed and settled {after} KiB"
    );
    assert!(
        after <= 2 * idle,
        "dshd holds {after} KiB after the fan-out was closed, against {idle} KiB idle"
    );
}
