//! The file tools `read`, `write` and `edit` end to end (issue 42): through the real `dshd`, a
//! scripted model, and the launcher confined by the agent's own sandbox plan. Every write test
//! checks the file system afterwards, so it fails if a write got through that should not have.
//! CI runs the suite as an ordinary user, and the sandbox test once more as root.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use dsh_tests::TestDaemon;
use dsh_tests::shell::{CallResult, bash_call, prompt, prompt_results};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn read(path: &str) -> Value {
    call("read", json!({"file_path": path}))
}

fn write(path: &str, content: &str) -> Value {
    call("write", json!({"file_path": path, "content": content}))
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    call(
        "edit",
        json!({"file_path": path, "old_string": old, "new_string": new}),
    )
}

fn bash(command: &str) -> Value {
    json!({"tool_calls": [bash_call(command)]})
}

/// An agent in `cwd` (created with `FLAGS`) whose one turn makes `steps`, one call each.
fn agent(daemon: &TestDaemon, cwd: &Path, flags: &[&str], steps: Vec<Value>) -> String {
    let mut replies = steps;
    replies.push(json!({"text": "done"}));
    daemon.new_agent_with(cwd, flags, &json!({ "replies": replies }))
}

fn results(daemon: &TestDaemon, id: &str) -> Vec<CallResult> {
    prompt_results(&prompt(daemon, id, "go"))
}

/// A turn reads a CRLF file, edits it and creates another: contents, mode and line endings are
/// as expected, and the session's log carries the diff and both hashes of each change.
#[test]
fn a_turn_reads_edits_and_writes_files() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("files");
    let a = work.join("a.txt");
    std::fs::write(&a, "alpha\r\nbeta\r\ngamma\r\n").unwrap();
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o750)).unwrap();
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        vec![
            read("a.txt"),
            edit("a.txt", "beta\n", "BETA\nbeta2\n"),
            write("b.txt", "new file\n"),
            read("b.txt"),
            write("b.txt", "rewritten"),
        ],
    );
    let got = results(&daemon, &id);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.iter().all(|r| !r.is_error), "{got:?}");
    assert_eq!(
        got[0].content,
        "     1\talpha\n     2\tbeta\n     3\tgamma\n"
    );
    assert_eq!(
        std::fs::read(&a).unwrap(),
        b"alpha\r\nBETA\r\nbeta2\r\ngamma\r\n"
    );
    let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    // The final newline of the file it replaced is kept.
    assert_eq!(std::fs::read(work.join("b.txt")).unwrap(), b"rewritten\n");

    let files: Vec<Value> = daemon
        .events(&id)
        .into_iter()
        .filter(|e| e["type"] == "tool/file")
        .map(|e| e["data"].clone())
        .collect();
    let kinds: Vec<&str> = files.iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["read", "edit", "edit", "read", "edit"], "{files:?}");
    let change = &files[1];
    assert_eq!(change["path"], a.to_str().unwrap());
    let diff = change["diff"].as_str().unwrap();
    assert!(diff.contains("-beta\r\n+BETA\r\n+beta2\r\n"), "{diff}");
    assert!(change["oldHash"].as_str().unwrap().starts_with("sha256:"));
    assert_ne!(change["oldHash"], change["newHash"]);
    assert!(files[2]["oldHash"].is_null(), "a new file: {:?}", files[2]);
    assert!(
        files[2]["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- /dev/null")
    );
}

/// `dshctl prompt` shows a change as its diff, plain through a pipe; `Watch` carries it.
#[test]
fn prompt_shows_the_diff() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("shown");
    std::fs::write(work.join("f"), "one\ntwo\n").unwrap();
    let id = agent(
        &daemon,
        &work,
        &[],
        vec![read("f"), edit("f", "two", "zwei")],
    );
    let out = daemon.dshctl(&["prompt", "--agent", &id, "go"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("-two\n") && text.contains("+zwei\n"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour through a pipe: {text:?}");

    // A watcher catching up from the start is shown the same change.
    let mut watch = std::process::Command::new(dsh_tests::dshctl_bin())
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["--json", "watch", &id, "--from", "0"])
        .env_remove("DSH_SOCKET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = dsh_tests::line_channel(watch.stdout.take().unwrap());
    let change = loop {
        let line = lines
            .recv_timeout(dsh_tests::agents::PATIENCE)
            .expect("dshctl watch showed no tool/file event");
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["type"] == "tool/file" && event["data"]["kind"] == "edit" {
            break event;
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        change["data"]["diff"]
            .as_str()
            .unwrap()
            .contains("-two\n+zwei\n"),
        "{change}"
    );
}

/// An edit without a read, and an edit of a file changed after it was read, are refused with a
/// message telling the model to read it; the file is left as it was.
#[test]
fn edits_need_a_fresh_read() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("stale");
    std::fs::write(work.join("f"), "one\n").unwrap();
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        vec![
            edit("f", "one", "1"),
            write("f", "overwritten"),
            read("f"),
            bash("echo two >> f"),
            edit("f", "one", "1"),
        ],
    );
    let got = results(&daemon, &id);
    for refused in [&got[0], &got[1]] {
        assert!(refused.is_error, "{refused:?}");
        assert!(
            refused.content.contains("read it with the read tool"),
            "{refused:?}"
        );
    }
    assert!(got[4].is_error, "{:?}", got[4]);
    assert!(
        got[4].content.contains("changed since you last read it"),
        "{:?}",
        got[4]
    );
    assert_eq!(
        std::fs::read_to_string(work.join("f")).unwrap(),
        "one\ntwo\n"
    );
}

/// The sandbox holds for file tools as for bash: a read-only agent writes nothing, and a
/// workspace-write agent writes nothing outside its workspace through a symbolic link, `..`,
/// `/proc/self/root` or a hard link (which is replaced in the workspace, never written through).
#[test]
fn file_tools_stay_inside_the_sandbox() {
    stay_inside_the_sandbox();
}

/// The same as root: where permission bits stop nobody, Landlock alone keeps file tools in.
#[test]
#[ignore = "needs root"]
fn file_tools_stay_inside_the_sandbox_as_root() {
    dsh_tests::needs_root("check the sandbox where permission bits stop nobody");
    stay_inside_the_sandbox();
}

fn stay_inside_the_sandbox() {
    let daemon = TestDaemon::start();
    let outside = daemon.workdir("outside");
    let target = outside.join("target");
    std::fs::write(&target, "untouched\n").unwrap();
    let work = daemon.workdir("ws");
    std::os::unix::fs::symlink(&target, work.join("link")).unwrap();
    std::fs::hard_link(&target, work.join("hard")).unwrap();
    let proc_path = format!("/proc/self/root{}", outside.join("via-proc").display());
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        vec![
            read("link"),
            write("link", "evil\n"),
            write("../outside/dotdot", "evil\n"),
            write(&proc_path, "evil\n"),
            read("hard"),
            write("hard", "replaced\n"),
        ],
    );
    let got = results(&daemon, &id);
    assert!(
        !got[0].is_error && got[0].content.contains("untouched"),
        "{:?}",
        got[0]
    );
    for denied in &got[1..4] {
        assert!(denied.is_error, "{denied:?}");
        assert!(denied.content.contains("permission denied"), "{denied:?}");
    }
    assert!(!got[5].is_error, "{:?}", got[5]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
    assert_eq!(
        std::fs::read_to_string(work.join("hard")).unwrap(),
        "replaced\n"
    );
    assert!(!outside.join("dotdot").exists() && !outside.join("via-proc").exists());
    let mut names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["target"], "no temporary file was left outside");

    let ro = daemon.workdir("ro");
    std::fs::write(ro.join("f"), "one\n").unwrap();
    let id = agent(
        &daemon,
        &ro,
        &["--sandbox", "read-only"],
        vec![write("new", "x"), read("f"), edit("f", "one", "1")],
    );
    let got = results(&daemon, &id);
    assert!(
        got[0].is_error && got[0].content.contains("permission denied"),
        "{:?}",
        got[0]
    );
    assert!(!got[1].is_error, "{:?}", got[1]);
    assert!(
        got[2].is_error && got[2].content.contains("permission denied"),
        "{:?}",
        got[2]
    );
    assert!(!ro.join("new").exists());
    assert_eq!(std::fs::read_to_string(ro.join("f")).unwrap(), "one\n");
}

/// A FIFO with no writer and `/dev/zero` are refused at once: the call returns an error (the
/// turn would hang otherwise, and the test with it).
#[test]
fn fifos_and_devices_are_refused_within_the_call() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("special");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        work.join("fifo"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        vec![read("fifo"), read("/dev/zero"), write("fifo", "x")],
    );
    let got = results(&daemon, &id);
    assert!(
        got[0].is_error && got[0].content.contains("FIFO"),
        "{:?}",
        got[0]
    );
    assert!(
        got[1].is_error && got[1].content.contains("character device"),
        "{:?}",
        got[1]
    );
    assert!(
        got[2].is_error && got[2].content.contains("FIFO"),
        "{:?}",
        got[2]
    );
}

/// The same file tools through the OpenAI-compatible provider (a local mock): the model's streamed
/// `read` and `edit` calls change the file, and the log carries the diff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_model_reads_and_edits_a_file() {
    use dsh_testkit::{DONE, End, Mock, Reply, finish, text_delta, tool_call_stream};
    let stream = |mut pieces: Vec<String>| {
        pieces.push(DONE.into());
        Reply::Stream {
            pieces,
            end: End::Complete,
        }
    };
    let mock = Mock::start(vec![
        stream(tool_call_stream(
            "call_1",
            "read",
            &["{\"file_path\": \"main.rs\"}"],
        )),
        stream(tool_call_stream(
            "call_2",
            "edit",
            &[
                "{\"file_path\": \"main.rs\", \"old_string\": \"old()\", ",
                "\"new_string\": \"new()\"}",
            ],
        )),
        stream(vec![text_delta("done"), finish("stop")]),
    ])
    .await;
    let daemon = TestDaemon::start_with(dsh_tests::DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 0\n",
            mock.base_url
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test-files".into())],
        ..dsh_tests::DaemonSpec::default()
    });
    let work = daemon.workdir("openai");
    std::fs::write(work.join("main.rs"), "fn main() {\n    old();\n}\n").unwrap();
    let id = crate::openai::new_agent(&daemon, &work);
    crate::turns::prompt(&daemon, &id, "go").await;
    assert_eq!(
        std::fs::read_to_string(work.join("main.rs")).unwrap(),
        "fn main() {\n    new();\n}\n"
    );
    let diff = daemon
        .events(&id)
        .into_iter()
        .find(|e| e["type"] == "tool/file" && e["data"]["kind"] == "edit")
        .map(|e| e["data"]["diff"].as_str().unwrap().to_owned())
        .unwrap();
    assert!(diff.contains("-    old();\n+    new();\n"), "{diff}");
}

/// A 2 GiB file (sparse after a text head) is read up to the cap and refused for edits, and
/// dshd's peak memory grows by a bounded amount, nowhere near the file's size.
#[test]
fn a_2_gib_file_keeps_dshd_bounded() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("huge");
    let path = work.join("huge.log");
    std::fs::write(&path, "a line of text\n".repeat(40_000)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        vec![
            call("read", json!({"file_path": "huge.log", "limit": 1_000_000})),
            edit("huge.log", "a line", "b line"),
        ],
    );
    let pid = daemon.child.id();
    let before = dsh_tests::bench::status_kib(pid, "VmHWM");
    let got = results(&daemon, &id);
    let after = dsh_tests::bench::status_kib(pid, "VmHWM");
    assert!(!got[0].is_error, "{:?}", got[0]);
    assert!(
        got[0].content.contains("[stopped after 262144 bytes"),
        "{}",
        &got[0].content[got[0].content.len() - 300..]
    );
    assert!(got[0].content.contains("larger than 8 MiB"), "{:?}", got[0]);
    assert!(
        got[1].is_error && got[1].content.contains("larger than 8 MiB"),
        "{:?}",
        got[1]
    );
    assert!(
        after.saturating_sub(before) < 100 * 1024,
        "dshd's peak grew from {before} KiB to {after} KiB"
    );
}

/// The README's file-tools tour with its script, `examples/scripts/edit.json`: it reads and edits
/// `notes.txt` in the agent's directory, and `dshctl prompt` shows the change as a diff.
#[test]
fn the_readme_edit_example_fixes_the_typo_and_shows_the_diff() {
    let daemon = TestDaemon::start();
    let tour = daemon.workdir("dsh-tour");
    std::fs::write(tour.join("notes.txt"), "teh quick brown fox\n").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scripts/edit.json");
    let script: Value = serde_json::from_slice(&std::fs::read(script).unwrap()).unwrap();
    let agent = daemon.new_agent(&tour, &script);
    let out = daemon.dshctl(&["prompt", "--agent", &agent, "fix the typo in notes.txt"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        std::fs::read_to_string(tour.join("notes.txt")).unwrap(),
        "the quick brown fox\n"
    );
    assert!(
        text.contains("-teh quick brown fox") && text.contains("+the quick brown fox"),
        "{text}"
    );
}
