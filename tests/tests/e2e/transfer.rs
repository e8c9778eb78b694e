//! Sessions leaving and entering dsh end to end (issue 46): `dshctl session export` from each
//! backend (the bundle's logs are the stored events; the Markdown renders every event type the
//! session holds), Claude Code transcripts read by tools nobody on the project wrote (`ccusage`,
//! `claude-code-log`), imports of dsh bundles, upstream DeepSeek Harness logs and Claude Code
//! transcripts that a resumed agent answers with, and bad input refused with the store left as
//! it was.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

mod bad_input;
mod export;
mod import;
mod readers;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::{Value, json};

/// A daemon on `backend` (`jsonl`, `sqlite` or `postgres`, a fresh database of the shared
/// server).
fn daemon_on(backend: &str) -> TestDaemon {
    let config = match backend {
        "jsonl" => String::new(),
        "sqlite" => "persistence = \"sqlite\"\n".to_owned(),
        "postgres" => {
            let server = dsh_testkit::postgres::shared();
            let db = server.fresh_database();
            format!(
                "persistence = \"postgres\"\n[postgres]\nurl = {}\n",
                Value::String(server.url(&db))
            )
        }
        other => panic!("no backend {other}"),
    };
    TestDaemon::start_with(DaemonSpec {
        config: Some(config),
        ..DaemonSpec::default()
    })
}

/// A parent agent whose one turn runs a command, spawns a child that answers, and answers; the
/// parent stays live. Its id and the child's.
fn session_with_child(daemon: &TestDaemon) -> (String, String) {
    let cwd = daemon.workdir("exported");
    let parent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"text": "looking first", "tool_calls": [
                {"name": "bash", "arguments": {"command": "echo hello from bash"}},
                {"name": "write", "arguments": {"file_path": "notes.txt", "content": "noted\n"}},
                {"name": "spawn_agent", "arguments": {"prompt": "count the files"},
                 "child_script": {"replies": [{"text": "42 files"}]}}]},
            {"text": "the child says 42"}
        ]}),
    );
    daemon.prompt(&parent, "delegate it").assert_completed();
    daemon.dshctl_json(&["session", "rename", &parent, "exported session"]);
    let sessions = daemon.dshctl_json(&["session", "list", "--all"]);
    let child = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["header"]["parent_session"] == parent.as_str())
        .unwrap_or_else(|| panic!("no child session in {sessions}"))["header"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (parent, child)
}

/// `dshctl session export ARGS -o <file>`: the file's bytes.
fn export(daemon: &TestDaemon, args: &[&str]) -> Vec<u8> {
    let path = daemon.dir.path().join(format!("export-{}", unique()));
    let mut full = vec!["session", "export"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", path.to_str().unwrap()]);
    let out = daemon.dshctl(&full);
    assert!(
        out.status.success(),
        "dshctl {full:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&path).unwrap()
}

fn unique() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// Every entry of a ZIP archive, by name.
fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).unwrap();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        out.insert(entry.name().to_owned(), data);
    }
    out
}

/// A log's lines as JSON: the header, then the events.
fn log_lines(bytes: &[u8]) -> (Value, Vec<Value>) {
    let text = std::str::from_utf8(bytes).unwrap();
    assert!(text.ends_with('\n'), "a log ends with a newline");
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap();
    (header, lines.collect())
}

/// `dshctl --json session import PATH`, which must succeed: its JSON document.
fn import(daemon: &TestDaemon, path: &Path) -> Value {
    daemon.dshctl_json(&["session", "import", path.to_str().unwrap()])
}

/// `dshctl session import PATH`, which must fail: its stderr.
fn import_refused(daemon: &TestDaemon, path: &Path) -> String {
    let out = daemon.dshctl(&["session", "import", path.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "importing {} succeeded: {}",
        path.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir`, with its size: what "the store is unchanged" compares.
fn tree(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(entry.path(), meta.len());
            }
        }
    }
    out
}

/// The fixtures of this module.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/transfer")
        .join(name)
}
