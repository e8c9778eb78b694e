//! Spill files through the real daemon: none is left behind once nothing can read it.

use std::sync::Arc;

use dsh_proto::v1;
use dsh_tests::shell::{bash_call, new_agent, prompt, prompt_results, workdir};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::json;

fn spill_files(daemon: &TestDaemon) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(daemon.home.join("run/spill"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                // dshd's own startup file (it gives children their open-file limit back; made only
                // when dshd raised its soft limit, as it does for a user whose soft limit is below
                // the hard one) lives beside the spills for the daemon's whole life: not a spill.
                .filter(|p| {
                    !p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("open-file-limit-")
                })
                .collect()
        })
        .unwrap_or_default()
}

const SMALL_CAP: &str = "[shell]\noutput_cap_bytes = 100\n";
const BIG: &str = "head -c 1000 /dev/zero | tr '\\0' x";

/// Slow (a thousand real bash calls; 20 s on the shared 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_spilling_calls_leave_no_spill_file_behind() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(SMALL_CAP.into()),
        ..DaemonSpec::default()
    });
    let client = daemon.client().await;
    let slots = Arc::new(tokio::sync::Semaphore::new(8));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..1000 {
        let permit = slots.clone().acquire_owned().await.unwrap();
        let mut shell = client.shell();
        calls.spawn(async move {
            let response = shell
                .run(v1::RunRequest {
                    sandbox: None,
                    command: BIG.into(),
                    ..v1::RunRequest::default()
                })
                .await
                .unwrap()
                .into_inner();
            drop(permit);
            let Some(v1::run_response::Result::Finished(o)) = response.result else {
                panic!("no outcome: {response:?}");
            };
            assert!(o.stdout_truncated, "{o:?}");
            assert_eq!(
                o.stdout_spill_path, "",
                "a path to a file that is gone: {o:?}"
            );
        });
    }
    while let Some(call) = calls.join_next().await {
        call.unwrap();
    }
    let left = spill_files(&daemon);
    assert!(left.is_empty(), "{} spill files left: {left:?}", left.len());
}

#[test]
fn an_agents_spill_is_readable_by_its_model_until_the_agent_closes() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(SMALL_CAP.into()),
        ..DaemonSpec::default()
    });
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(BIG)]}, {"text": "done"}]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    let note = &results[0].content;
    let path = note
        .split("full output: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no spill path in {note}"));
    assert_eq!(std::fs::read(path).unwrap(), vec![b'x'; 1000]);
    daemon.dshctl_json(&["agent", "close", &agent]);
    assert!(
        !std::path::Path::new(path).exists(),
        "{path} outlived its agent"
    );
    assert!(spill_files(&daemon).is_empty());
}
