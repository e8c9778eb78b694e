//! A full disk under the home (a small tmpfs; mounting needs root, so these tests are ignored
//! unless run as root, as CI does): nothing that was acknowledged is lost. Children spawned while
//! the disk is full are saved once it has room; a close that cannot save fails and can be
//! retried; a shutdown that cannot save exits non-zero, names the session and leaves a readable
//! rescue copy.

use std::io::Write;
use std::process::Command;

use dsh_tests::private_dir;
use dsh_tests::shell::{children_of, spawn_call};

use super::*;

/// A tmpfs mounted at a path for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        Self(at.to_owned())
    }

    /// Fills the file system until a write fails with ENOSPC; returns the filler's path.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            match file.write_all(&chunk).and_then(|()| file.sync_all()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A daemon whose home is a fresh tmpfs of `size`, with its temporary directory (where rescue
/// copies go when the home is full) inside the test's directory.
fn daemon_on_tmpfs(size: &str) -> (TestDaemon, Tmpfs, PathBuf) {
    dsh_tests::needs_root("mount a small tmpfs as a full disk");
    let dir = private_dir();
    let fs = Tmpfs::mount(&dir.path().join("home"), size);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            env: vec![("TMPDIR".into(), tmp.clone().into())],
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    (daemon, fs, tmp)
}

#[test]
#[ignore = "needs root"]
fn children_spawned_on_a_full_disk_are_saved_once_it_has_room() {
    let (mut daemon, fs, _tmp) = daemon_on_tmpfs("1m");
    let cwd = daemon.workdir("p");
    let child = |n: u32| json!({"replies": [{"text": format!("child {n} done")}]});
    let parent = daemon.new_agent(
        &cwd,
        &json!({"replies": [
            {"tool_calls": [spawn_call("one", &child(1)), spawn_call("two", &child(2))]},
            {"text": "parent done"},
        ]}),
    );
    let filler = fs.fill();
    let first = daemon.prompt(&parent, "spawn two");
    assert_eq!(first.reason().0, "error", "{:?}", first.lines);
    std::fs::remove_file(filler).unwrap();
    daemon.prompt(&parent, "again").assert_completed();
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec::default());

    let children = children_of(&daemon, &parent);
    assert_eq!(
        children.len(),
        2,
        "children lost: {children:?}\n{}",
        daemon.log_text()
    );
    for child in &children {
        let events = daemon.events(child);
        assert_eq!(count(&events, "turn/end"), 1, "{child}: {events:?}");
        let resumed = daemon.agent_with_script(&["resume", child], &text_replies(&["more"]));
        assert_eq!(resumed["agent_id"], child.as_str(), "{resumed}");
        daemon.prompt(child, "and?").assert_completed();
    }
    let events = daemon.events(&parent);
    assert_eq!(count(&events, "turn/end"), 2, "{events:?}");
}

#[test]
#[ignore = "needs root"]
fn a_close_that_cannot_save_fails_and_a_retry_succeeds() {
    let (daemon, fs, _tmp) = daemon_on_tmpfs("1m");
    let cwd = daemon.workdir("p");
    // The second reply is larger than a page: the log's last page has room for a short append
    // even on a full tmpfs.
    let long = "two ".repeat(4096);
    let id = daemon.new_agent(&cwd, &text_replies(&["one", &long]));
    daemon.prompt(&id, "first").assert_completed();
    let filler = fs.fill();
    let second = daemon.prompt(&id, "second");
    assert_eq!(second.reason().0, "error", "{:?}", second.lines);

    let (kind, message) = refused(&daemon, &["agent", "close", &id]);
    assert_eq!(kind, "resource_exhausted", "{message}");
    assert!(
        message.contains("no space left on its file system") && message.contains(" free"),
        "{message}"
    );
    // Still live: it is listed, and nothing of the second turn is lost.
    let listed = daemon.dshctl_json(&["agent", "list"]);
    assert!(listed.to_string().contains(&id), "{listed}");

    std::fs::remove_file(filler).unwrap();
    let closed = daemon.dshctl(&["agent", "close", &id]);
    assert!(closed.status.success(), "{closed:?}");
    let events = daemon.events(&id);
    assert_eq!(count(&events, "turn/end"), 2, "{events:?}");
    assert_serving(&daemon);
}

#[test]
#[ignore = "needs root"]
fn a_shutdown_that_cannot_save_exits_non_zero_and_leaves_a_rescue_copy() {
    let (mut daemon, fs, tmp) = daemon_on_tmpfs("1m");
    let cwd = daemon.workdir("p");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    let _filler = fs.fill();
    let turn = daemon.prompt(&id, "first");
    assert_eq!(turn.reason().0, "error", "{:?}", turn.lines);

    let _ = daemon.dshctl(&["shutdown"]);
    let status = daemon.wait_exit(Duration::from_secs(20));
    let log = daemon.log_text();
    let rescue_dir = tmp.join(format!(
        "dsh-rescue-{}",
        rustix::process::geteuid().as_raw()
    ));
    let copy = the_rescue_copy(status, &log, &rescue_dir, &id);
    assert_eq!(types(&copy.events)[..2], ["turn/start", "user/message"]);
    assert_eq!(count(&copy.events, "turn/end"), 1, "{:?}", copy.events);
}
