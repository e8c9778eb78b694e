//! The socket's safety end to end: what dshd refuses to bind (a lock file that is a link, a socket
//! directory others can write or that another user owns, a linked directory), what dshctl refuses
//! to talk to (a socket served by another uid), and how dshd bounds its connections.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_tests::{daemon_command, dshctl_at, eventually, private_dir, require_root, wait_child};

const NOBODY: u32 = 65534;

/// Starts dshd on `socket` (home in `dir`), expects it to exit non-zero, and returns its stderr.
fn refused_start(dir: &tempfile::TempDir, socket: &Path) -> String {
    let mut child = daemon_command(dir)
        .arg("--dsh-home")
        .arg(dir.path().join("home"))
        .arg("--socket")
        .arg(socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(10)).expect("dshd did not exit");
    assert!(!status.success(), "dshd started on {}", socket.display());
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!socket.exists(), "a refused dshd left a socket behind");
    stderr
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown_to_nobody(path: &Path) {
    let id = Some(rustix::process::Uid::from_raw(NOBODY));
    let gid = Some(rustix::process::Gid::from_raw(NOBODY));
    rustix::fs::chown(path, id, gid).unwrap();
}

#[test]
fn a_symlink_at_the_lock_file_leaves_its_target_untouched_and_dshd_refuses_to_start() {
    let dir = private_dir();
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, "the user's own file\n").unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    chmod(&run, 0o700);
    let socket = run.join("dshd.sock");
    let lock = run.join("dshd.sock.lock");
    std::os::unix::fs::symlink(&precious, &lock).unwrap();

    let err = refused_start(&dir, &socket);
    assert!(
        err.contains(&format!(
            "lock file {} is a symbolic link; refusing to follow it",
            lock.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("rm {}", lock.display())), "{err}");
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "the user's own file\n"
    );
    assert!(std::fs::symlink_metadata(&lock).unwrap().is_symlink());
}

#[test]
fn a_socket_directory_others_can_write_is_refused_with_the_fix() {
    let dir = private_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    chmod(&run, 0o777);
    let err = refused_start(&dir, &run.join("dshd.sock"));
    assert!(
        err.contains(&format!(
            "socket directory {} is writable by group and others (mode 0777)",
            run.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("chmod 700 {}", run.display())),
        "{err}"
    );
    assert!(!run.join("dshd.sock.lock").exists(), "{err}");

    // The fix it names works.
    chmod(&run, 0o700);
    let mut daemon = dsh_tests::TestDaemon::spawn(dsh_tests::DaemonSpec::default(), dir);
    daemon.wait_ready();
    daemon.signal_and_wait(rustix::process::Signal::TERM, Duration::from_secs(5));
}

#[test]
fn a_socket_directory_owned_by_another_user_is_refused_with_the_fix() {
    require_root("this test");
    let dir = private_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    chmod(&run, 0o700);
    chown_to_nobody(&run);
    let err = refused_start(&dir, &run.join("dshd.sock"));
    assert!(
        err.contains(&format!(
            "socket directory {} belongs to uid {NOBODY}, not to you (uid 0)",
            run.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("rm -r {}", run.display())), "{err}");
    assert!(!run.join("dshd.sock.lock").exists(), "{err}");
}

#[test]
fn a_symlinked_socket_directory_is_refused() {
    let dir = private_dir();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    chmod(&real, 0o700);
    let link = dir.path().join("run");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = refused_start(&dir, &link.join("dshd.sock"));
    assert!(
        err.contains(&format!(
            "socket directory {} is a symbolic link (to {})",
            link.display(),
            real.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "{err}");
}

/// A python3 that another user can run (a pyenv shim under /root cannot be).
fn system_python() -> PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("this test needs a python3 in /usr/bin, /usr/local/bin or /bin")
}

/// Listens on argv[1] and, for each of int(argv[3]) connections, records on its own line of argv[2]
/// how many bytes the client sent before closing ("timeout" if it never closed).
const RECORDING_LISTENER: &str = r#"
import socket, sys
path, report, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(8)
lines = []
for _ in range(count):
    conn, _ = server.accept()
    conn.settimeout(20)
    received = 0
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            received += len(data)
        lines.append(str(received))
    except socket.timeout:
        lines.append("timeout")
    conn.close()
with open(report + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
import os
os.rename(report + ".tmp", report)
"#;

#[test]
fn dshctl_refuses_a_socket_served_by_another_uid_and_sends_it_nothing() {
    require_root("this test");
    let dir = private_dir();
    chmod(dir.path(), 0o755); // nobody must reach its own directory inside
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chmod(&theirs, 0o700);
    chown_to_nobody(&theirs);
    let socket = theirs.join("dshd.sock");
    let report = theirs.join("received");
    let mut listener = Command::new("setpriv")
        .args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
        ])
        .arg(system_python())
        .arg("-c")
        .arg(RECORDING_LISTENER)
        .arg(&socket)
        .arg(&report)
        .arg("2")
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || socket.exists()),
        "the listener run as nobody never bound {}",
        socket.display()
    );

    let out = dshctl_at(&socket, &["status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "refusing to talk to {}: it is served by uid {NOBODY}, not by you (uid 0)",
            socket.display()
        )),
        "{stderr}"
    );
    let out = dshctl_at(&socket, &["--json", "status"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "foreign_server", "{doc}");

    let status = wait_child(&mut listener, Duration::from_secs(30)).expect("listener still runs");
    assert!(status.success());
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "0\n0\n",
        "dshctl sent bytes to a server of another uid"
    );
}
