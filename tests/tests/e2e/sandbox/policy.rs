//! The modes and the network switch as the issue's acceptance states them, children and jobs,
//! the configured default, bad names, and refusing what the kernel cannot enforce.

use std::collections::BTreeMap;
use std::net::TcpListener;

use dsh_tests::shell::{key_values, read_to_end, session_results, spawn_call};
use tonic::Code;

use super::*;

#[test]
fn workspace_write_writes_the_workspace_only_and_keeps_the_managed_environment() {
    let daemon = TestDaemon::start();
    // Another session with a transcript on disk, to attack.
    let other = agent(&daemon, &daemon.workdir("other"), &[], &["true"]);
    results(&daemon, &other);
    let other_log = dsh_tests::shell::locate(&daemon, &other).unwrap();
    let before = std::fs::read(&other_log).unwrap();

    let work = daemon.workdir("ww");
    let commands = [
        "touch ./inside && echo inside-ok",
        "touch ~/outside",
        &format!("echo forged >> '{other_log}'"),
        &format!("truncate -s 0 '{other_log}'"),
        "cat /etc/hostname >/dev/null && echo read-ok",
        "env | grep -E '^(DSH_|DSHD_OWNER=)' | sort",
    ];
    let id = agent(&daemon, &work, &["--sandbox", "workspace-write"], &commands);
    let got = results(&daemon, &id);
    assert!(got[0].content.contains("inside-ok"), "{:?}", got[0]);
    assert!(work.join("inside").exists());
    for (i, what) in [(1, "~/outside"), (2, "append"), (3, "truncate")] {
        assert!(got[i].is_error, "{what}: {:?}", got[i]);
        assert!(
            got[i].content.contains("Permission denied"),
            "{what}: {:?}",
            got[i]
        );
    }
    assert!(!daemon.dir.path().join("user/outside").exists());
    assert_eq!(
        std::fs::read(&other_log).unwrap(),
        before,
        "the other log changed"
    );
    assert!(got[4].content.contains("read-ok"), "{:?}", got[4]);
    // The one-line note on a refused write names the policy (docs/CONFIG.md).
    assert!(
        got[1]
            .content
            .contains("[sandbox: workspace-write, network on"),
        "{:?}",
        got[1]
    );

    // The managed values are those of an unconfined call of the same agent (Shell.Run with
    // `--sandbox off`), apart from the per-call id; the owner marker is there in both.
    let confined = key_values(&got[5].content);
    let (_, open) = run(
        &daemon,
        &[
            "--agent",
            &id,
            "--sandbox",
            "off",
            "--",
            "env | grep -E '^(DSH_|DSHD_OWNER=)' | sort",
        ],
    );
    let open = key_values(open["stdout"].as_str().unwrap());
    let stable = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .filter(|(k, _)| !["DSH_TOOL_CALL_ID", "DSH_TURN", "DSHD_OWNER"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert!(confined.contains_key("DSHD_OWNER") && confined.contains_key("DSH_SESSION_ID"));
    assert_eq!(stable(&confined), stable(&open));
    assert_eq!(confined["DSH_SESSION_ID"], id);
}

#[test]
fn read_only_writes_nowhere_but_its_private_temporary_directory() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("ro");
    let outside = daemon.dir.path().join("outside-ro");
    let commands = [
        "touch ./inside",
        "mkdir ./dir",
        &format!("touch '{}'", outside.display()),
        "touch \"$TMPDIR/scratch\" && echo \"tmp-ok $TMPDIR\"",
        "cat \"$TMPDIR/scratch\" && echo still-there",
    ];
    let id = agent(&daemon, &work, &["--sandbox", "read-only"], &commands);
    let got = results(&daemon, &id);
    for r in &got[..3] {
        assert!(
            r.is_error && r.content.contains("Permission denied"),
            "{r:?}"
        );
    }
    assert!(!work.join("inside").exists() && !work.join("dir").exists() && !outside.exists());
    // A private place of dshd's own (no XDG_RUNTIME_DIR here: under the home's `run/`).
    assert!(
        got[3].content.contains(&format!(
            "tmp-ok {}",
            daemon.home.join("run/sandbox/").display()
        )),
        "{:?}",
        got[3]
    );
    // The directory is the agent's: it lasts across its calls, and goes when it closes.
    assert!(got[4].content.contains("still-there"), "{:?}", got[4]);
    let tmp = got[3].content.split_whitespace().nth(1).unwrap().to_owned();
    assert!(Path::new(&tmp).join("scratch").exists());
    daemon.dshctl_json(&["agent", "close", &id]);
    assert!(!Path::new(&tmp).exists(), "{tmp} outlived its agent");

    // One still live when dshd stops goes with the daemon.
    let live = agent(
        &daemon,
        &work,
        &["--sandbox", "read-only"],
        &["touch \"$TMPDIR/scratch\" && echo \"tmp-ok $TMPDIR\""],
    );
    let got = results(&daemon, &live);
    let tmp = got[0].content.split_whitespace().nth(1).unwrap().to_owned();
    assert!(Path::new(&tmp).join("scratch").exists(), "{:?}", got[0]);
    let mut daemon = daemon;
    assert!(daemon.dshctl(&["shutdown"]).status.success());
    assert!(
        daemon
            .wait_exit(std::time::Duration::from_secs(30))
            .success()
    );
    assert!(!Path::new(&tmp).exists(), "{tmp} outlived dshd");
}

#[test]
fn network_off_refuses_tcp_and_network_on_allows_it() {
    let daemon = TestDaemon::start();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let bind =
        "python3 -c 'import socket; socket.socket().bind((\"127.0.0.1\", 0)); print(\"bound\")'";
    let (code, off) = run(&daemon, &["--network", "off", "--", &connect]);
    // `run --json` exits with the command's status.
    assert_eq!(code, Some(1), "{off}");
    assert_eq!(off["exit_code"], 1, "{off}");
    assert!(
        off["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{off}"
    );
    let work = daemon.workdir("net");
    let (code, on) = run(
        &daemon,
        &[
            "--cwd",
            work.to_str().unwrap(),
            "--network",
            "on",
            "--sandbox",
            "workspace-write",
            "--",
            &connect,
        ],
    );
    assert_eq!((code, &on["exit_code"]), (Some(0), &json!(0)), "{on}");
    assert!(on["stdout"].as_str().unwrap().contains("connected"));
    // A model's calls: an agent with network off can neither connect nor bind.
    let id = agent(&daemon, &work, &["--network", "off"], &[&connect, bind]);
    for r in results(&daemon, &id) {
        assert!(
            r.is_error && r.content.contains("Permission denied"),
            "{r:?}"
        );
    }
}

/// A child gets its parent's sandbox or a stricter one: spawning with `off` is refused, over
/// dshctl and over gRPC, and a child the model spawns is confined like its parent.
#[tokio::test]
async fn a_child_of_a_confined_parent_cannot_be_looser() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("parent");
    let child_script =
        json!({"replies": [{"tool_calls": [bash_call("touch ~/by-child")]}, {"text": "ok"}]});
    let script = json!({"replies": [
        {"tool_calls": [spawn_call("try", &child_script)]}, {"text": "done"}]});
    let parent = scripted_agent(&daemon, &work, &["--sandbox", "workspace-write"], &script);
    for looser in [
        &["--sandbox", "off"][..],
        &["--sandbox", "off", "--network", "off"][..],
    ] {
        let mut args = vec!["--json", "agent", "spawn", "--parent", &parent];
        args.extend_from_slice(looser);
        let out = daemon.dshctl(&args);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("looser than the parent's"),
            "{out:?}"
        );
    }
    let mut agents = daemon.client().await.agents();
    let status = agents
        .spawn(dsh_proto::v1::SpawnAgentRequest {
            parent_agent_id: parent.clone(),
            model: None,
            sandbox: Some(dsh_proto::v1::SandboxPolicy {
                mode: "off".into(),
                network: String::new(),
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().starts_with("sandbox: "), "{status:?}");
    // Stricter is fine; nothing given inherits.
    let stricter = daemon.dshctl_json(&["agent", "spawn", "--parent", &parent, "--network", "off"]);
    assert_eq!(
        stricter["sandbox"],
        json!({"mode": "workspace-write", "network": "off"})
    );
    let same = daemon.dshctl_json(&["agent", "spawn", "--parent", &parent]);
    assert_eq!(
        same["sandbox"],
        json!({"mode": "workspace-write", "network": "on"})
    );

    results(&daemon, &parent);
    assert!(
        !daemon.dir.path().join("user/by-child").exists(),
        "the child wrote outside"
    );
    // The model's child is the one that ran a call (the two above never took a turn).
    let child_results: Vec<_> = dsh_tests::shell::children_of(&daemon, &parent)
        .iter()
        .flat_map(|child| session_results(&daemon, child))
        .collect();
    assert_eq!(child_results.len(), 1, "{child_results:?}");
    assert!(
        child_results[0].content.contains("Permission denied"),
        "{child_results:?}"
    );
}

/// A background job is confined like a foreground call, whether the model starts it or a client
/// starts it for the agent.
#[test]
fn background_jobs_are_confined() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("jobs");
    let escape = "touch ~/from-job; echo status=$?";
    let id = agent(&daemon, &work, &["--sandbox", "workspace-write"], &[]);
    let job = dsh_tests::shell::background(&daemon, &["--agent", &id, "--", escape]);
    let mut out = String::new();
    read_to_end(&daemon, &job, &mut out);
    assert!(out.contains("status=1"), "{out}");

    let script = json!({"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": escape, "run_in_background": true}}]},
        {"text": "started"}]});
    let confined = {
        let script = daemon.write_script(&script);
        daemon.dshctl_json(&[
            "agent",
            "new",
            "--cwd",
            work.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
            "--sandbox",
            "read-only",
        ])["agent_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let started = results(&daemon, &confined);
    let job = started[0]
        .content
        .split_whitespace()
        .nth(3)
        .unwrap()
        .trim_end_matches('.')
        .to_owned();
    let mut out = String::new();
    read_to_end(&daemon, &job, &mut out);
    assert!(out.contains("status=1"), "{out}");
    assert!(!daemon.dir.path().join("user/from-job").exists());
}

#[test]
fn the_configured_default_applies_to_new_agents_and_bad_names_are_refused() {
    let daemon = daemon_with("mode = \"read-only\"\nnetwork = \"off\"");
    let id = agent(&daemon, &daemon.workdir("d"), &[], &[]);
    let info = daemon.dshctl_json(&["agent", "show", &id]);
    assert_eq!(
        info["sandbox"],
        json!({"mode": "read-only", "network": "off"})
    );
    // Shell.Run of no agent stays unconfined: the caller is the user.
    let (code, doc) = run(&daemon, &["--", "touch ./made-by-user"]);
    assert_eq!((code, &doc["exit_code"]), (Some(0), &json!(0)), "{doc}");
    assert!(daemon.dir.path().join("made-by-user").exists());

    let bad = TestDaemon::spawn(
        DaemonSpec {
            config: Some("[sandbox]\nmode = \"strict\"\n".into()),
            ..DaemonSpec::default()
        },
        dsh_tests::private_dir(),
    );
    let mut bad = bad;
    let status = bad.wait_exit(std::time::Duration::from_secs(20));
    assert!(!status.success());
    assert!(
        bad.log_text().contains("sandbox.mode"),
        "{}",
        bad.log_text()
    );
}

#[tokio::test]
async fn an_unknown_mode_in_a_request_is_an_invalid_argument_naming_the_field() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let status = client
        .agents()
        .create(dsh_proto::v1::CreateAgentRequest {
            cwd: daemon.workdir("bad").to_str().unwrap().into(),
            model: None,
            sandbox: Some(dsh_proto::v1::SandboxPolicy {
                mode: "strict".into(),
                network: String::new(),
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("sandbox.mode: "), "{status:?}");
    let status = client
        .shell()
        .run(dsh_proto::v1::RunRequest {
            command: "true".into(),
            sandbox: Some(dsh_proto::v1::SandboxPolicy {
                mode: String::new(),
                network: "maybe".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("sandbox.network: "),
        "{status:?}"
    );
}

/// Fail closed: a policy the kernel cannot enforce refuses the call with what is missing and
/// how to run unconfined; nothing runs, from `Shell.Run` or from an agent; running unconfined
/// deliberately still works. The kernel here has Landlock, so dshd is started with none: under a
/// seccomp filter (installed by a wrapper before it execs dshd) that answers the Landlock system
/// calls `ENOSYS`, as a kernel built without it does. Where the kernel's ABI is not the newest
/// this dsh knows, a configured `landlock_abi` above it is refused the same way.
#[test]
fn an_unenforceable_policy_refuses_the_call_and_nothing_runs() {
    let dir = dsh_tests::private_dir();
    let wrapper = dir.path().join("no-landlock.py");
    std::fs::write(&wrapper, NO_LANDLOCK).unwrap();
    let daemon = TestDaemon::start_with(DaemonSpec {
        wrapper: vec!["python3".into(), wrapper.into()],
        ..DaemonSpec::default()
    });
    assert_eq!(kernel_abi(&daemon), 0, "the filter did not hide Landlock");
    refused_and_nothing_runs(&daemon, "this kernel has no Landlock");
    drop(daemon);

    let probe = TestDaemon::start();
    let above = kernel_abi(&probe) + 1;
    drop(probe);
    if above <= u64::from(dsh_core::KNOWN_ABI) {
        let daemon = daemon_with(&format!("landlock_abi = {above}"));
        refused_and_nothing_runs(&daemon, &format!("needs Landlock ABI {above}"));
    }
}

/// Execs its arguments with the Landlock system calls (444-446, the same on every architecture)
/// failing with `ENOSYS`; everything else allowed.
const NO_LANDLOCK: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def op(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)
LD_NR, JGE, JGT, RET = 0x20, 0x35, 0x25, 0x06
ALLOW, ERRNO_ENOSYS = 0x7FFF0000, 0x00050000 | 38
program = b"".join([
    op(LD_NR, 0),
    op(JGE, 444, 0, 2),
    op(JGT, 446, 1, 0),
    op(RET, ERRNO_ENOSYS),
    op(RET, ALLOW),
])
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
fprog = Fprog(len(program) // 8, program)
if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
    sys.exit("no-landlock: prctl: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"#;

/// A confined command refused with `needle` (and what to do) by `daemon`, from `Shell.Run` and
/// from an agent's bash call, with nothing run; the same command unconfined runs.
fn refused_and_nothing_runs(daemon: &TestDaemon, needle: &str) {
    let work = daemon.workdir("closed");
    let (code, doc) = run(
        daemon,
        &[
            "--cwd",
            work.to_str().unwrap(),
            "--sandbox",
            "workspace-write",
            "--",
            "touch ran",
        ],
    );
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["error"]["kind"], "failed_precondition", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    for needle in [
        needle,
        "needs Landlock ABI",
        "nothing was run",
        "sandbox mode \"off\"",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    let id = agent(daemon, &work, &["--sandbox", "read-only"], &["touch ran"]);
    let got = results(daemon, &id);
    assert!(
        got[0].is_error && got[0].content.contains("cannot be enforced"),
        "{:?}",
        got[0]
    );
    assert!(!work.join("ran").exists(), "a refused command ran");
    let (code, doc) = run(
        daemon,
        &[
            "--cwd",
            work.to_str().unwrap(),
            "--sandbox",
            "off",
            "--",
            "touch ran",
        ],
    );
    assert_eq!(code, Some(0), "{doc}");
    assert!(work.join("ran").exists());
}
