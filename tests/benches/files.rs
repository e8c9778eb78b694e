//! The file tools on a 1 MB file, against the floors of issue 42, on the release binaries:
//!
//! 1. **edit**: a turn whose one call is `edit` of a 1 MB file (a read and a guarded atomic write
//!    in the launcher, the match and the diff in dshd), against a turn whose one call is `bash`
//!    running `dd if=FILE of=COPY conv=fsync`: one process of the same sandbox reading, writing
//!    and fsyncing the same bytes (the floor). Target: at most 1.5×.
//! 2. **read**: a turn whose one call is `read` of the same file, against a turn whose one call is
//!    `bash` running `cat FILE` (what `Shell.Run` of `cat` does, inside the same turn machinery).
//!    Target: at most 1.5×.
//!
//! Each figure is a whole turn (prompt to the stream's end) of a scripted model that answers at
//! once: the call, its events and the turn's log writes, the same on both sides, so the ratio is
//! the tool's cost against its floor with the turn's overhead in both. Four agents, one per
//! kind, all `workspace-write`; rounds interleave them so drift hits all alike. The first
//! [`WARMUP`] rounds are not counted. It asserts nothing about time.
//!
//! Run: `cargo bench -p dsh-tests --bench files`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::Duration;

use dsh_proto::v1;
use dsh_testkit::bench::Target;
use dsh_tests::bench::{ReleaseDaemon, latency_ratio, scripted_agent, timed_turn};
use serde_json::{Value, json};

const ROUNDS: usize = 40;
const WARMUP: usize = 3;
const FILE_BYTES: usize = 1 << 20;

fn main() {
    let dir = dsh_tests::private_dir();
    let daemon = ReleaseDaemon::start(&dir, &[]);
    let cwd = dir.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let file = cwd.join("big.txt");
    std::fs::write(&file, content()).unwrap();
    let file = file.to_str().unwrap().to_owned();
    let copy = cwd.join("copy.txt");
    let copy = copy.to_str().unwrap();

    let turns = ROUNDS + WARMUP;
    let call = |name: &str, arguments: Value| {
        vec![
            json!({"tool_calls": [{"id": "c", "name": name, "arguments": arguments}]}),
            json!({"text": "ok"}),
        ]
    };
    // The edit agent reads the file once (its own turn, not measured), then flips one token.
    let mut edits = call("read", json!({"file_path": file, "limit": 1}));
    for i in 0..turns {
        let (old, new) = if i % 2 == 0 {
            ("TOKEN_A", "TOKEN_B")
        } else {
            ("TOKEN_B", "TOKEN_A")
        };
        edits.extend(call(
            "edit",
            json!({"file_path": file, "old_string": old, "new_string": new}),
        ));
    }
    let repeat =
        |replies: Vec<Value>| -> Vec<Value> { (0..turns).flat_map(|_| replies.clone()).collect() };
    let dd = format!("dd if={file} of={copy} conv=fsync status=none");
    let floor_edits = repeat(call("bash", json!({"command": dd})));
    let reads = repeat(call("read", json!({"file_path": file})));
    let cats = repeat(call("bash", json!({"command": format!("cat {file}")})));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = dsh_client::Client::connect(daemon.socket()).await.unwrap();
        let edit = scripted_agent(&client, &cwd, edits, Some(workspace_write())).await;
        timed_turn(&client, &edit).await; // the read before the edits
        let floor = scripted_agent(&client, &cwd, floor_edits, Some(workspace_write())).await;
        let read = scripted_agent(&client, &cwd, reads, Some(workspace_write())).await;
        let cat = scripted_agent(&client, &cwd, cats, Some(workspace_write())).await;
        let mut times: [Vec<Duration>; 4] = Default::default();
        for round in 0..turns {
            for (i, id) in [&edit, &floor, &read, &cat].into_iter().enumerate() {
                let took = timed_turn(&client, id).await;
                if round >= WARMUP {
                    times[i].push(took);
                }
            }
        }
        let [mut edit, mut floor, mut read, mut cat] = times;
        println!("file tools on a {} KiB file: {ROUNDS} turns each, interleaved", FILE_BYTES / 1024);
        latency_ratio(
            "files: edit of a 1 MB file vs one confined process reading, writing and fsyncing it (dd conv=fsync), each a whole turn",
            ("bash dd conv=fsync", &mut floor),
            ("edit", &mut edit),
            Target::AtMost(1.5),
        );
        latency_ratio(
            "files: read of a 1 MB file vs bash cat of it, each a whole turn",
            ("bash cat", &mut cat),
            ("read", &mut read),
            Target::AtMost(1.5),
        );
    });
}

/// 1 MiB of numbered lines with one `TOKEN_A` in the middle.
fn content() -> String {
    let mut text = String::with_capacity(FILE_BYTES + 64);
    let mut n = 0;
    while text.len() < FILE_BYTES {
        if n == 8000 {
            text.push_str("the one line an edit changes: TOKEN_A\n");
        }
        text.push_str(&format!(
            "line {n:07} of the file the bench reads and edits\n"
        ));
        n += 1;
    }
    text
}

fn workspace_write() -> v1::SandboxPolicy {
    v1::SandboxPolicy {
        mode: "workspace-write".into(),
        network: "on".into(),
    }
}
