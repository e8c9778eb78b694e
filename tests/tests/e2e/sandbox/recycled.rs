//! A client is placed by a handle the kernel cannot recycle. The attack this guards against: a
//! confined command holds dshd's accepts back (its open-file limit at 0, so the connection waits
//! in the backlog), connects from a child that then exits, and waits until an outside process
//! has that pid; dshd used to read the new owner's `/proc`, call the connection `Outside`, and
//! serve it `Shell.Run {sandbox off}`. The test drives that race for real: the freeze, the
//! connect-and-exit, the pid taken by an outside process, the thaw, and the unconfined call sent
//! over the held connection.

use std::time::Duration;

use super::*;

/// `takepid PID SECONDS`: forks until a child gets pid `PID` (asking the kernel for it first
/// through `ns_last_pid`, which only root may write, else cycling through the pid space), and
/// leaves that child running as `sleep 31350`, outside dshd's tree. Prints the pid; exits 1 if
/// the pid could not be had in time.
const TAKEPID: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    pid_t target = atoi(argv[1]);
    time_t end = time(0) + atoi(argv[2]);
    while (time(0) < end) {
        FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
        if (f) { fprintf(f, "%d", target - 1); fclose(f); }
        pid_t p = fork();
        if (p < 0) { perror("fork"); return 1; }
        if (p == 0) {
            if (getpid() == target) {
                /* Not the caller's pipes: it waits for their end. */
                freopen("/dev/null", "r", stdin);
                freopen("/dev/null", "w", stdout);
                freopen("/dev/null", "w", stderr);
                execlp("sleep", "sleep", "31350", (char *)0);
            }
            _exit(0);
        }
        if (p == target) { printf("%d\n", p); return 0; }
        waitpid(p, 0, 0);
    }
    return 1;
}
"#;

/// The confined job: once `freeze` exists, connects to dshd from a child that exits at once,
/// reaps it, writes its pid to `victim`, then relays `relay.sock` to the held connection.
fn attacker(socket: &Path) -> String {
    format!(
        r#"python3 - <<'PY'
import os, socket, threading, time
while not os.path.exists("freeze"):
    time.sleep(0.01)
held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
child = os.fork()
if child == 0:
    held.connect("{socket}")
    os._exit(0)
os.waitpid(child, 0)
with open("victim.tmp", "w") as f:
    f.write(str(child))
os.rename("victim.tmp", "victim")
relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
relay.bind("relay.sock")
relay.listen(1)
client, _ = relay.accept()
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
t = threading.Thread(target=pump, args=(held, client))
t.start()
pump(client, held)
t.join()
print("relayed", flush=True)
PY"#,
        socket = socket.display()
    )
}

#[test]
fn a_connection_whose_client_exited_is_not_served_as_the_recycled_pids_owner() {
    let daemon = TestDaemon::start();
    let dshd = rustix::process::Pid::from_raw(i32::try_from(daemon.child.id()).unwrap()).unwrap();
    let takepid = dsh_tests::compile_c(daemon.dir.path(), "takepid", TAKEPID);
    let work = daemon.workdir("attacker");
    let id = agent(&daemon, &work, &["--sandbox", "workspace-write"], &[]);
    let job =
        dsh_tests::shell::background(&daemon, &["--agent", &id, "--", &attacker(&daemon.socket)]);

    // The freeze: no descriptor for accept, so the connection waits in the backlog.
    let (soft, hard) = dsh_tests::open_file_limits(daemon.child.id());
    let limit = |current| rustix::process::Rlimit {
        current,
        maximum: hard,
    };
    let set = |current| {
        rustix::process::prlimit(
            Some(dshd),
            rustix::process::Resource::Nofile,
            limit(current),
        )
        .unwrap();
    };
    set(Some(0));
    std::fs::write(work.join("freeze"), "").unwrap();
    let victim = work.join("victim");
    let found = dsh_tests::eventually(Duration::from_secs(60), || victim.exists());
    let thaw = || set(soft);
    if !found {
        thaw();
        panic!(
            "the attacker never connected: {}",
            dsh_tests::shell::job_output(&daemon, &job)
        );
    }
    let pid: i32 = std::fs::read_to_string(&victim)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !dsh_tests::shell::alive(pid),
        "the connecting child {pid} is still alive"
    );

    // Somebody outside dshd's tree takes the pid while the connection waits.
    let taken = std::process::Command::new(&takepid)
        .args([&pid.to_string(), "120"])
        .output()
        .unwrap();
    thaw();
    assert!(
        taken.status.success(),
        "could not take pid {pid} within 120 s (pid_max {})",
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap_or_default()
            .trim()
    );
    let stranger = Stranger(rustix::process::Pid::from_raw(pid).unwrap());

    // The unconfined call, over the connection the confined command made.
    let relay = work.join("relay.sock");
    assert!(dsh_tests::eventually(Duration::from_secs(30), || relay.exists()));
    let pwned = daemon.dir.path().join("pwned");
    let out = dsh_tests::dshctl_at(
        &relay,
        &[
            "--json",
            "run",
            "--sandbox",
            "off",
            "--",
            &format!("echo pwned > '{}'", pwned.display()),
        ],
    );
    assert!(
        !pwned.exists(),
        "an unconfined command ran for a confined command's connection: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        daemon
            .log_text()
            .contains("dropped a connection whose client exited before it could be placed"),
        "{}",
        daemon.log_text()
    );
    // dshd serves everyone else as before.
    assert!(daemon.dshctl(&["status"]).status.success());
    drop(stranger);
    daemon.dshctl_json(&["job", "kill", &job]);
}

/// Kills the process that took the pid when the test ends, however it ends.
struct Stranger(rustix::process::Pid);

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, rustix::process::Signal::KILL);
    }
}
