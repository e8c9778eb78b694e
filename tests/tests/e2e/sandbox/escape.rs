//! A command that works to escape (issue 24): every command in a session of its own with no
//! terminal, and a confined one with no privileges, no device nodes or device ioctls, no signals
//! to dshd and, with network off, no new sockets. Each test runs the attack and checks both its
//! error and that nothing happened.

use std::os::fd::OwnedFd;

use rustix::fs::OFlags;
use rustix::pty::OpenptFlags;

use super::*;

/// The confined policies, as `dshctl agent new` flags: both filesystem modes, and network off
/// alone.
const CONFINED: [&[&str]; 3] = [
    &["--sandbox", "workspace-write"],
    &["--sandbox", "read-only"],
    &["--network", "off"],
];

/// Prints `sid=<its session> pid=<its pid> tty=<open or refused>` for the shell it runs in.
const SESSION_PROBE: &str = r#"read -r _ _ _ _ _ sid _ < /proc/$$/stat; if : </dev/tty 2>/dev/null; then t=open; else t=refused; fi; echo "sid=$sid pid=$$ tty=$t""#;

fn assert_own_session(what: &str, out: &str) {
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("{what}: no {name} in {out:?}"))
            .to_owned()
    };
    assert_eq!(field("sid="), field("pid="), "{what}: {out}");
    assert_eq!(field("tty="), "refused", "{what}: {out}");
}

/// Every command, confined or not, leads a session of its own and has no terminal: a model's
/// call, a background job, `Shell.Run` of no agent, and a hook.
#[test]
fn every_command_leads_its_own_session_without_a_terminal() {
    let dir = dsh_tests::private_dir();
    std::fs::create_dir_all(dir.path().join("cfg")).unwrap();
    let hooks = dir.path().join("cfg/hooks.json");
    let hook_out = dir.path().join("hook-out");
    let hook = format!("{SESSION_PROBE} > '{}'", hook_out.display());
    std::fs::write(
        &hooks,
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}]}})
            .to_string(),
    )
    .unwrap();
    let (master, _) = pty();
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[hooks]\nclaude_code = [{:?}]\n",
                hooks.to_str().unwrap()
            )),
            wrapper: with_terminal(&master, None),
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    let work = daemon.workdir("session");
    for flags in [&[][..], CONFINED[0]] {
        let id = agent(&daemon, &work, flags, &[SESSION_PROBE]);
        let got = results(&daemon, &id);
        assert_own_session(&format!("a model's call {flags:?}"), &got[0].content);
        let job = dsh_tests::shell::background(&daemon, &["--agent", &id, "--", SESSION_PROBE]);
        let mut out = String::new();
        dsh_tests::shell::read_to_end(&daemon, &job, &mut out);
        assert_own_session(&format!("a job {flags:?}"), &out);
    }
    let (code, doc) = run(&daemon, &["--", SESSION_PROBE]);
    assert_eq!(code, Some(0), "{doc}");
    assert_own_session("Shell.Run", doc["stdout"].as_str().unwrap());
    assert_own_session("a hook", &std::fs::read_to_string(&hook_out).unwrap());
}

/// A new pseudo-terminal: its master and the path of its other end.
fn pty() -> (OwnedFd, String) {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let path = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    (master, path.into_string().unwrap())
}

/// A wrapper that gives dshd the terminal of `master` as its controlling terminal (a new session
/// that opens it), as `dshd &` from an interactive shell has. For another user, the system's
/// python3 (the one on root's `PATH` may live in root's home).
fn with_terminal(master: &OwnedFd, user: Option<u32>) -> Vec<std::ffi::OsString> {
    let path = rustix::pty::ptsname(master, Vec::new()).unwrap();
    vec![
        if user.is_some() {
            "/usr/bin/python3"
        } else {
            "python3"
        }
        .into(),
        "-c".into(),
        "import fcntl, os, sys, termios\n\
         os.setsid()\n\
         fd = os.open(sys.argv[1], os.O_RDWR)\n\
         fcntl.ioctl(fd, termios.TIOCSCTTY, 0)\n\
         os.execv(sys.argv[2], sys.argv[2:])"
            .into(),
        path.into_string().unwrap().into(),
    ]
}

/// Whatever is waiting to be read from `fd` (non-blocking).
fn pending(fd: &OwnedFd) -> Vec<u8> {
    rustix::fs::fcntl_setfl(fd, OFlags::NONBLOCK | OFlags::RDWR).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = rustix::io::read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    all
}

/// `TIOCSTI` pushes bytes into a terminal's input as if typed. From a confined command, into
/// dshd's own terminal (`/dev/tty`, which no command has any more) and into another terminal
/// (by its path, which root could reach), it fails and nothing arrives; an unconfined command
/// has no `/dev/tty` either.
#[test]
fn no_command_can_type_into_a_terminal() {
    type_into_a_terminal(None);
}

/// The same with dshd run by an ordinary user, who may push input into the terminal it controls.
#[test]
#[ignore = "needs root"]
fn no_command_can_type_into_a_terminal_as_an_ordinary_user() {
    dsh_tests::needs_root("run dshd as an ordinary user");
    type_into_a_terminal(Some(dsh_tests::NOBODY));
}

fn type_into_a_terminal(user: Option<u32>) {
    let (master, own) = pty();
    let (other_master, other) = pty();
    if let Some(user) = user {
        for path in [&own, &other] {
            std::os::unix::fs::chown(path, Some(user), Some(user)).unwrap();
        }
    }
    // Held open so the terminals' input queues are there to read.
    let own_slave = rustix::fs::open(
        &*own,
        OFlags::RDWR | OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let other_slave = rustix::fs::open(
        &*other,
        OFlags::RDWR | OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let daemon = TestDaemon::start_with(DaemonSpec {
        wrapper: with_terminal(&master, user),
        user,
        ..DaemonSpec::default()
    });
    let inject = |paths: &[&str]| {
        format!(
            r#"python3 - <<'PY'
import fcntl, os, termios
for path in {paths:?}:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    except OSError as e:
        print(f"{{path}}: open refused {{e.errno}}")
        continue
    try:
        for b in b"touch /tmp/typed\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))
        print(f"{{path}}: injected")
    except OSError as e:
        print(f"{{path}}: ioctl refused {{e.errno}}")
PY"#
        )
    };
    let work = daemon.workdir("tty");
    let confined = inject(&["/dev/tty", &own, &other]);
    for flags in &CONFINED[..2] {
        let id = agent(&daemon, &work, flags, &[&confined]);
        let got = results(&daemon, &id);
        assert!(
            !got[0].content.contains("injected"),
            "{flags:?}: {:?}",
            got[0]
        );
        assert_eq!(
            got[0].content.matches("refused").count(),
            3,
            "{flags:?}: {:?}",
            got[0]
        );
        // The same from `Shell.Run --sandbox`.
        let mut args = vec!["--cwd", work.to_str().unwrap()];
        args.extend_from_slice(flags);
        args.extend(["--", confined.as_str()]);
        let (code, doc) = run(&daemon, &args);
        let stdout = doc["stdout"].as_str().unwrap_or_default();
        assert!(
            code == Some(0) && !stdout.contains("injected"),
            "{flags:?}: {doc}"
        );
        assert_eq!(stdout.matches("refused").count(), 3, "{flags:?}: {doc}");
    }
    let free = agent(&daemon, &work, &[], &[&inject(&["/dev/tty"])]);
    let got = results(&daemon, &free);
    assert!(
        got[0].content.contains("/dev/tty: open refused"),
        "{:?}",
        got[0]
    );
    for (what, fd) in [
        ("dshd's terminal", &own_slave),
        ("dshd's terminal (echo)", &master),
        ("another terminal", &other_slave),
        ("another terminal (echo)", &other_master),
    ] {
        assert_eq!(
            String::from_utf8_lossy(&pending(fd)),
            "",
            "bytes arrived in {what}"
        );
    }
}

/// Device nodes let root reach any disk or memory behind the sandbox's back. No confined mode
/// may make one, not even in its own workspace or temporary directory.
#[test]
#[ignore = "needs root"]
fn no_confined_command_makes_a_device_node() {
    dsh_tests::needs_root("make device nodes");
    let daemon = TestDaemon::start();
    let work = daemon.workdir("mknod");
    let command = r#"cd "${TMPDIR:-.}"; mknod ./char c 1 3 && echo char-made; mknod ./block b 7 0 && echo block-made; echo done"#;
    for flags in CONFINED {
        let id = agent(&daemon, &work, flags, &[command]);
        let got = results(&daemon, &id);
        assert!(
            got[0].content.contains("done")
                && !got[0].content.contains("-made")
                && got[0].content.matches("Permission denied").count() == 2,
            "{flags:?}: {:?}",
            got[0]
        );
    }
    assert!(!work.join("char").exists() && !work.join("block").exists());
}

/// A confined command holds no capability, whoever runs dshd: every set is empty, and with
/// `no_new_privs` set no program it runs can gain one.
#[test]
fn a_confined_command_holds_no_privilege() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("caps");
    for flags in CONFINED {
        let id = agent(
            &daemon,
            &work,
            flags,
            &["grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status"],
        );
        let got = results(&daemon, &id);
        let text = &got[0].content;
        assert!(text.contains("NoNewPrivs:\t1"), "{flags:?}: {text}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert!(
                text.contains(&format!("{set}:\t0000000000000000")),
                "{flags:?}: {set}: {text}"
            );
        }
        if rustix::process::geteuid().is_root() {
            assert!(
                text.contains("CapBnd:\t0000000000000000"),
                "{flags:?}: {text}"
            );
        }
    }
}

/// dshd is out of a confined command's reach: it cannot stop or kill it (Landlock's signal
/// scope), nor read its environment or memory; `dshctl status` still answers afterwards.
#[test]
fn a_confined_command_cannot_stop_or_read_dshd() {
    stop_or_read_dshd(None);
}

/// The same with dshd run by an ordinary user, whose processes may signal each other.
#[test]
#[ignore = "needs root"]
fn a_confined_command_cannot_stop_or_read_dshd_as_an_ordinary_user() {
    dsh_tests::needs_root("run dshd as an ordinary user");
    stop_or_read_dshd(Some(dsh_tests::NOBODY));
}

fn stop_or_read_dshd(user: Option<u32>) {
    let daemon = TestDaemon::start_with(DaemonSpec {
        user,
        ..DaemonSpec::default()
    });
    let pid = daemon.child.id();
    let work = daemon.workdir("signals");
    let commands = [
        format!("kill -STOP {pid}; rc=$?; kill -CONT {pid} 2>/dev/null; echo stop=$rc"),
        format!(
            "cat /proc/{pid}/environ >/dev/null && echo environ-read; head -c1 /proc/{pid}/mem >/dev/null && echo mem-read; echo done"
        ),
        format!("kill -KILL {pid}; echo kill=$?"),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    for flags in CONFINED {
        let id = agent(&daemon, &work, flags, &commands);
        let got = results(&daemon, &id);
        assert!(got[0].content.contains("stop=1"), "{flags:?}: {:?}", got[0]);
        assert!(
            got[1].content.contains("done") && !got[1].content.contains("-read"),
            "{flags:?}: {:?}",
            got[1]
        );
        assert!(got[2].content.contains("kill=1"), "{flags:?}: {:?}", got[2]);
        assert!(
            daemon.dshctl(&["status"]).status.success(),
            "{flags:?}: dshd stopped answering"
        );
    }
}

/// Network off: no new socket of any family (a unix socket to a listening one, UDP), while
/// `socketpair` works; network on keeps both.
#[test]
fn network_off_refuses_new_sockets_but_not_socket_pairs() {
    new_sockets(None);
}

/// The same with dshd run by an ordinary user.
#[test]
#[ignore = "needs root"]
fn network_off_refuses_new_sockets_as_an_ordinary_user() {
    dsh_tests::needs_root("run dshd as an ordinary user");
    new_sockets(Some(dsh_tests::NOBODY));
}

fn new_sockets(user: Option<u32>) {
    let daemon = TestDaemon::start_with(DaemonSpec {
        user,
        ..DaemonSpec::default()
    });
    let listening = daemon.dir.path().join("listening.sock");
    let listener = std::os::unix::net::UnixListener::bind(&listening).unwrap();
    if let Some(user) = user {
        std::os::unix::fs::chown(&listening, Some(user), Some(user)).unwrap();
    }
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    let probe = format!(
        r#"python3 - <<'PY'
import socket
def attempt(what, f):
    try:
        f(); print(f"{{what}}=ok")
    except OSError as e:
        print(f"{{what}}=refused:{{e.errno}}")
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect({listening:?})
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", {port}))
def pair():
    a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"
attempt("unix", unix); attempt("udp", udp); attempt("pair", pair)
PY"#,
        listening = listening.to_str().unwrap()
    );
    let work = daemon.workdir("sockets");
    let off = agent(&daemon, &work, &["--network", "off"], &[&probe]);
    let got = results(&daemon, &off);
    for expected in ["unix=refused:13", "udp=refused:13", "pair=ok"] {
        assert!(
            got[0].content.contains(expected),
            "{expected}: {:?}",
            got[0]
        );
    }
    let on = agent(&daemon, &work, &["--sandbox", "workspace-write"], &[&probe]);
    let got = results(&daemon, &on);
    for expected in ["unix=ok", "udp=ok", "pair=ok"] {
        assert!(
            got[0].content.contains(expected),
            "{expected}: {:?}",
            got[0]
        );
    }
    drop(listener);
}
