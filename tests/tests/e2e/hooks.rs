//! Hooks end to end (CONTRACTS §8): the real `dshd` with `[hooks]` in a `--config` file, real bash
//! hook scripts, the keyless scripted model, and `dshctl` to drive and inspect it.
//!
//! Hooks record what they saw in files of the test's private directory; the tests then compare
//! that with what `dshctl` reports. Nothing waits on time: a turn is over when `dshctl prompt`
//! returns, and anything else is polled for with a generous bound (`dsh_tests::eventually`).
//! Long-running hooks use distinctive `sleep` arguments so `/proc/<pid>/cmdline` tells them apart
//! from an unrelated process that reused the pid.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

#[path = "hooks/approvals.rs"]
mod approvals;
#[path = "hooks/background.rs"]
mod background;
#[path = "hooks/compaction.rs"]
mod compaction;
#[path = "hooks/config.rs"]
mod config;
#[path = "hooks/decisions.rs"]
mod decisions;
#[path = "hooks/examples.rs"]
mod examples;
#[path = "hooks/files.rs"]
mod files;
#[path = "hooks/http.rs"]
mod http;
#[path = "hooks/lifecycle.rs"]
mod lifecycle;
#[path = "hooks/patterns.rs"]
mod patterns;
#[path = "hooks/payload.rs"]
mod payload;
#[path = "hooks/permissions.rs"]
mod permissions;
#[path = "hooks/process.rs"]
mod process;
#[path = "hooks/sandboxed.rs"]
mod sandboxed;
#[path = "hooks/semantics.rs"]
mod semantics;
#[path = "hooks/transcripts.rs"]
mod transcripts;
#[path = "hooks/upstream.rs"]
mod upstream;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsh_core::{test_support::alive, test_support::keys};
use dsh_tests::{DaemonSpec, TestDaemon, dshctl_bin, eventually, private_dir};
use serde_json::{Value, json};
use tempfile::TempDir;

/// How long to wait for an observable condition before failing.
const PATIENCE: Duration = Duration::from_secs(30);

/// A directory of the test: paths in it, quoted for hook commands, and their contents.
struct Dir(PathBuf);

impl Dir {
    /// `<dir>/name`.
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `<dir>/name`, single-quoted for a hook command (temporary paths have no quotes).
    fn q(&self, name: &str) -> String {
        format!("'{}'", self.path(name).display())
    }

    /// Writes an executable hook script `<dir>/name` (its first line says how it runs) and
    /// returns the command that runs it.
    fn script(&self, name: &str, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.q(name)
    }
}

/// A daemon configured with hook files, and a private directory holding the session's working
/// directory (`proj/`), the hook files, the config, the model scripts and whatever hooks write.
struct World {
    /// Declared first so the daemon is killed before its files are removed.
    daemon: TestDaemon,
    dir: Dir,
    _tmp: TempDir,
    /// The sessions' working directory, `<dir>/proj`.
    cwd: PathBuf,
    scripts: AtomicUsize,
}

/// What to configure.
#[derive(Default)]
struct Setup {
    /// Claude Code hook files (their JSON), in order.
    claude_code: Vec<Value>,
    /// Claude Code hook files used where they are (e.g. a plugin's `hooks/hooks.json`), after
    /// those of `claude_code`.
    claude_code_files: Vec<PathBuf>,
    /// Codex hook files, in order.
    codex: Vec<Value>,
    /// Codex hook files used where they are, after those of `codex`.
    codex_files: Vec<PathBuf>,
    /// More lines for the `[hooks]` table, e.g. `stop_continuation_cap = 2`; later tables may
    /// follow it (`[model]` ...).
    hooks_toml: String,
    /// Extra environment entries for the daemon.
    env: Vec<(String, String)>,
}

/// Which hook dialect a test configures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    ClaudeCode,
    Codex,
}

impl Dialect {
    const ALL: [Dialect; 2] = [Dialect::ClaudeCode, Dialect::Codex];

    /// The plugin name its context and feedback are logged under.
    fn plugin(self) -> &'static str {
        match self {
            Self::ClaudeCode => "hooks-claude-code",
            Self::Codex => "hooks-codex",
        }
    }
}

impl Setup {
    fn claude_code(file: Value) -> Self {
        Self {
            claude_code: vec![file],
            ..Self::default()
        }
    }

    /// One hook file, of `dialect`.
    fn dialect(dialect: Dialect, file: Value) -> Self {
        match dialect {
            Dialect::ClaudeCode => Self::claude_code(file),
            Dialect::Codex => Self {
                codex: vec![file],
                ..Self::default()
            },
        }
    }
}

impl World {
    /// Writes the hook files `setup` gives for the world's directory and starts the daemon.
    fn new(setup: impl FnOnce(&Dir) -> Setup) -> Self {
        let tmp = private_dir();
        let dir = Dir(tmp.path().to_path_buf());
        let cwd = dir.path("proj");
        std::fs::create_dir(&cwd).unwrap();
        let setup = setup(&dir);
        let write = |prefix: &str, files: &[Value]| -> Vec<String> {
            files
                .iter()
                .enumerate()
                .map(|(i, file)| {
                    let path = dir.path(&format!("{prefix}-{i}.json"));
                    std::fs::write(&path, serde_json::to_vec_pretty(file).unwrap()).unwrap();
                    path.display().to_string()
                })
                .collect()
        };
        let mut claude_code = write("claude-code", &setup.claude_code);
        claude_code.extend(
            setup
                .claude_code_files
                .iter()
                .map(|p| p.display().to_string()),
        );
        let mut codex = write("codex", &setup.codex);
        codex.extend(setup.codex_files.iter().map(|p| p.display().to_string()));
        let config = dir.path("config.toml");
        std::fs::write(
            &config,
            format!(
                "[hooks]\nclaude_code = {}\ncodex = {}\n{}\n",
                toml_list(&claude_code),
                toml_list(&codex),
                setup.hooks_toml
            ),
        )
        .unwrap();
        let daemon = TestDaemon::start_with(DaemonSpec {
            env: setup
                .env
                .iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..spec(&config)
        });
        Self {
            daemon,
            dir,
            _tmp: tmp,
            cwd,
            scripts: AtomicUsize::new(0),
        }
    }

    /// `<dir>/name`.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path(name)
    }

    /// `<dir>/name`, quoted for a hook command.
    fn q(&self, name: &str) -> String {
        self.dir.q(name)
    }

    /// The contents of `<dir>/name`; fails the test when it does not exist.
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_else(|e| panic!("{name}: {e}; daemon log:\n{}", self.daemon.log_text()))
    }

    /// Writes the scripted model's `script` to a new file and returns its path.
    fn script(&self, script: &Value) -> PathBuf {
        let n = self.scripts.fetch_add(1, Ordering::SeqCst);
        let path = self.path(&format!("script-{n}.json"));
        std::fs::write(&path, script.to_string()).unwrap();
        path
    }

    /// Creates an agent in `<dir>/proj` replaying `script`; returns its id.
    fn agent(&self, script: &Value) -> String {
        self.agent_with(&[], script)
    }

    /// [`agent`](Self::agent) with more `agent new` arguments.
    fn agent_with(&self, args: &[&str], script: &Value) -> String {
        let file = self.script(script);
        let mut full = vec![
            "agent",
            "new",
            "--cwd",
            self.cwd.to_str().unwrap(),
            "--script",
            file.to_str().unwrap(),
        ];
        full.extend_from_slice(args);
        let info = self.daemon.dshctl_json(&full);
        info["agent_id"].as_str().unwrap().to_owned()
    }

    /// Runs one turn with `dshctl --json prompt` and returns its event lines.
    fn prompt(&self, agent: &str, text: &str) -> Turn {
        let out = self
            .daemon
            .dshctl(&["--json", "prompt", "--agent", agent, text]);
        Turn::parse(&out.stdout, &String::from_utf8_lossy(&out.stderr))
    }

    /// Starts `dshctl --json prompt` without waiting for the turn (see [`Turn::wait`]).
    fn prompt_in_background(&self, agent: &str, text: &str) -> Child {
        Command::new(dshctl_bin())
            .arg("--socket")
            .arg(&self.daemon.socket)
            .args(["--json", "prompt", "--agent", agent, text])
            .env_remove("DSH_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The session's events (`dshctl session events`), each `{type, sessionId, seq, time, data}`.
    fn events(&self, session: &str) -> Vec<Value> {
        self.daemon.events(session)
    }

    /// `dshctl session locate`: the transcript path, or `None` when the backend keeps no file.
    fn locate(&self, session: &str) -> Option<String> {
        let doc = self.daemon.dshctl_json(&["session", "locate", session]);
        doc["location"]["path"].as_str().map(str::to_owned)
    }

    /// Waits for a hook to write a pid (one full line) to `<dir>/name` and returns it.
    fn pid(&self, name: &str) -> i32 {
        let path = self.path(name);
        let mut pid = None;
        let found = eventually(PATIENCE, || {
            pid = std::fs::read_to_string(&path)
                .ok()
                .filter(|s| s.ends_with('\n'))
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        });
        assert!(
            found,
            "no pid in {name}; daemon log:\n{}",
            self.daemon.log_text()
        );
        pid.unwrap()
    }
}

/// The `dshd` arguments for a config file.
fn spec(config: &Path) -> DaemonSpec {
    DaemonSpec {
        args: vec!["--config".into(), config.into()],
        ..DaemonSpec::default()
    }
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// One turn as `dshctl --json prompt` printed it.
struct Turn {
    lines: Vec<Value>,
}

impl Turn {
    fn parse(stdout: &[u8], stderr: &str) -> Self {
        let text = String::from_utf8_lossy(stdout);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}; {stderr}"))
            })
            .collect();
        assert!(
            lines.last().is_some_and(|l| l["type"] == "turn/end"),
            "the prompt stream did not end with turn/end: {text}\n{stderr}"
        );
        Self { lines }
    }

    /// Waits for a background `dshctl prompt` (bounded) and parses its output.
    fn wait(child: Child) -> Self {
        let pid = child.id();
        let mut child = Some(child);
        let mut output = None;
        let done = eventually(PATIENCE, || {
            if let Some(c) = child.as_mut()
                && c.try_wait().unwrap().is_some()
            {
                output = Some(child.take().unwrap().wait_with_output().unwrap());
            }
            output.is_some()
        });
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(done, "dshctl prompt (pid {pid}) did not finish");
        let out = output.unwrap();
        Self::parse(&out.stdout, &String::from_utf8_lossy(&out.stderr))
    }

    /// The `data` of the turn's `turn/end`.
    fn end(&self) -> &Value {
        &self.lines.last().unwrap()["data"]
    }

    /// `completed`, `blocked`, `aborted`, `error`.
    fn kind(&self) -> &str {
        self.end()["reason"]["kind"].as_str().unwrap()
    }

    /// The reason's detail: the abort cause, the error message, or the hook's reason.
    fn message(&self) -> String {
        dsh_tests::agents::reason_detail(&self.end()["reason"])
    }

    /// The turn's answer (the `assistant/message` its `turn/end` names).
    fn text(&self) -> String {
        dsh_tests::agents::answer(&self.lines)
    }

    /// The prompted agent's lines of type `kind` (a child's are left out).
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        let agent = &self.lines.last().unwrap()["sessionId"];
        self.lines
            .iter()
            .filter(|l| l["type"] == kind && l["sessionId"] == *agent)
            .collect()
    }

    /// The `data` of the prompted agent's `tool/result` lines.
    fn tool_results(&self) -> Vec<&Value> {
        self.of_type("tool/result")
            .into_iter()
            .map(|l| &l["data"])
            .collect()
    }
}

/// `{"hooks": {event: [{"matcher": m, "hooks": [{"type": "command", "command": c}]}]}}` for each
/// `(event, matcher, command)`, one group each, in order.
fn hook_file(entries: &[(&str, Option<&str>, &str)]) -> Value {
    let mut events = serde_json::Map::new();
    for (event, matcher, command) in entries {
        let mut group = json!({"hooks": [{"type": "command", "command": command}]});
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        events
            .entry(*event)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(group);
    }
    json!({ "hooks": events })
}

/// A scripted model reply with one bash call.
fn bash_reply(text: &str, command: &str) -> Value {
    json!({"text": text, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

/// Events of `kind` (e.g. `assistant/message`).
fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The `user/message` events written by a plugin (hook context, Stop reasons).
fn plugin_messages(events: &[Value]) -> Vec<&Value> {
    of_type(events, "user/message")
        .into_iter()
        .filter(|e| e["data"]["message"]["source"]["kind"] == "plugin")
        .collect()
}

fn seq(event: &Value) -> u64 {
    event["seq"].as_u64().unwrap()
}

/// Parses one JSON document (e.g. a saved payload).
fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// Parses JSON lines.
fn parse_lines(text: &str) -> Vec<Value> {
    text.lines().filter(|l| !l.is_empty()).map(parse).collect()
}

/// Fails the test unless `pid` (running `needle`) goes away within the patience bound.
fn assert_gone(pid: i32, needle: &str) {
    assert!(
        eventually(PATIENCE, || !alive(pid, needle)),
        "process {pid} ({needle}) is still running"
    );
}
