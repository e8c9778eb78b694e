//! A `claude-jsonl` export read by tools nobody on the project wrote, installed and pinned by
//! `.ci/run`: `ccusage` (npm, tests/fixtures/ccusage) reports the same token totals as dsh's
//! `turn/end` usage, and `claude-code-log` (PyPI, tests/fixtures/claude-code-log) renders it.
//! A missing tool fails the test with the command that installs it.

use std::process::Command;

use dsh_testkit::{DONE, Mock, finish, text_delta, tool_call_stream, usage_event};

use super::*;
use crate::openai::stream;

/// Where `.ci/run` puts claude-code-log's venv when run as root.
const CLAUDE_CODE_LOG_VENV: &str = "/opt/dsh-ci/claude-code-log";

fn ccusage() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ccusage");
    let bin = dir.join("node_modules/.bin/ccusage");
    assert!(
        bin.exists(),
        "this test needs ccusage at {}; install it with: npm ci --ignore-scripts --prefix {}",
        bin.display(),
        dir.display()
    );
    bin
}

fn claude_code_log() -> PathBuf {
    let bin = std::env::var_os("CLAUDE_CODE_LOG").map_or_else(
        || Path::new(CLAUDE_CODE_LOG_VENV).join("bin/claude-code-log"),
        PathBuf::from,
    );
    assert!(
        bin.exists(),
        "this test needs claude-code-log at {} (or $CLAUDE_CODE_LOG); install it with: python3 -m venv {CLAUDE_CODE_LOG_VENV} && {CLAUDE_CODE_LOG_VENV}/bin/pip install -r tests/fixtures/claude-code-log/requirements.txt",
        bin.display()
    );
    bin
}

/// A session of the `openai` provider whose two model calls report usage, exported as
/// `claude-jsonl`: the daemon, the session's `turn/end` usage and the export's path under a
/// Claude config directory (`<dir>/claude/projects/<project>/<id>.jsonl`).
async fn exported_session() -> (TestDaemon, Value, PathBuf) {
    let mut call = tool_call_stream("call-1", "bash", &["{\"command\": \"echo counted\"}"]);
    call.push(usage_event(1200, 34, 200));
    call.push(DONE.into());
    let answer = vec![
        text_delta("There are 3 files."),
        finish("stop"),
        usage_event(1500, 12, 1024),
        DONE.into(),
    ];
    let mock = Mock::start(vec![stream(call), stream(answer)]).await;
    let daemon = crate::openai::daemon(&mock, true, "");
    let cwd = daemon.workdir("counted");
    let agent = crate::openai::new_agent(&daemon, &cwd);
    let socket = daemon.socket.clone();
    let id = agent.clone();
    let out = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(
            &socket,
            &["--json", "prompt", "--agent", &id, "count the files"],
        )
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = daemon
        .events(&agent)
        .iter()
        .find(|e| e["type"] == "turn/end")
        .unwrap()["data"]["usage"]
        .clone();
    let project = daemon.dir.path().join("claude/projects/-dsh-export");
    std::fs::create_dir_all(&project).unwrap();
    let path = project.join(format!("{agent}.jsonl"));
    std::fs::write(
        &path,
        export(&daemon, &[&agent, "--format", "claude-jsonl"]),
    )
    .unwrap();
    (daemon, usage, path)
}

#[tokio::test(flavor = "multi_thread")]
async fn ccusage_reports_dshs_token_totals() {
    let ccusage = ccusage();
    let (daemon, usage, path) = exported_session().await;
    assert_eq!(
        usage["inputTokens"],
        (1200 - 200) + (1500 - 1024),
        "{usage}"
    );
    let config = path.parent().unwrap().parent().unwrap().parent().unwrap();
    let out = Command::new(ccusage)
        .args(["session", "--json", "--offline"])
        .env("CLAUDE_CONFIG_DIR", config)
        .env("HOME", daemon.dir.path())
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let totals = &report["totals"];
    assert_eq!(totals["inputTokens"], usage["inputTokens"], "{report}");
    assert_eq!(totals["outputTokens"], usage["outputTokens"], "{report}");
    assert_eq!(
        totals["cacheReadTokens"], usage["cacheReadTokens"],
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_log_renders_the_export() {
    let renderer = claude_code_log();
    let (daemon, _, path) = exported_session().await;
    let html = daemon.dir.path().join("transcript.html");
    let out = Command::new(renderer)
        .arg("convert")
        .arg(&path)
        .arg("-o")
        .arg(&html)
        .env("HOME", daemon.dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for word in [
        "error", "Error", "invalid", "Invalid", "Warning", "warning", "skip",
    ] {
        assert!(
            !stderr.contains(word) && !stdout.contains(word),
            "{stdout}\n{stderr}"
        );
    }
    let html = std::fs::read_to_string(&html).unwrap();
    for shown in ["count the files", "echo counted", "There are 3 files."] {
        assert!(html.contains(shown), "{shown:?} is not in the rendering");
    }
}
