//! What a confined command (or a careless config) could try: links out of the workspace, a
//! workspace or extra root that is the home in disguise, `..`, leaving the process group.

use super::*;

/// Links inside the workspace lead nowhere writable: a symbolic link into the home is followed
/// to the home and refused; a hard link to another session's log cannot be made.
#[test]
fn links_in_the_workspace_do_not_reach_the_home() {
    let daemon = TestDaemon::start();
    let other = agent(&daemon, &daemon.workdir("victim"), &[], &["true"]);
    results(&daemon, &other);
    let log = dsh_tests::shell::locate(&daemon, &other).unwrap();
    let sessions = daemon.home.join("sessions");
    let commands = [
        &format!("ln -s '{}' ./s && echo linked", sessions.display()) as &str,
        "echo evil > ./s/planted",
        &format!("ln '{log}' ./hard"),
        "cat ./s/*/*/session.jsonl > ./copy && echo copied",
    ];
    let work = daemon.workdir("links");
    let id = agent(&daemon, &work, &["--sandbox", "workspace-write"], &commands);
    let got = results(&daemon, &id);
    assert!(got[0].content.contains("linked"), "{:?}", got[0]);
    assert!(
        got[1].is_error && got[1].content.contains("Permission denied"),
        "{:?}",
        got[1]
    );
    assert!(!sessions.join("planted").exists());
    assert!(got[2].is_error, "{:?}", got[2]);
    assert!(!work.join("hard").exists());
    // Reading through the link is fine (read anywhere).
    assert!(got[3].content.contains("copied"), "{:?}", got[3]);
}

/// A workspace that is the home, contains it, or is a link to it cannot be made writable: the
/// call is refused before anything runs.
#[test]
fn a_workspace_that_exposes_the_home_is_refused() {
    let daemon = TestDaemon::start();
    let link = daemon.dir.path().join("innocent");
    std::fs::create_dir_all(&daemon.home).unwrap();
    std::os::unix::fs::symlink(&daemon.home, &link).unwrap();
    for cwd in [
        daemon.dir.path().to_owned(),
        link.clone(),
        link.join("../home"),
    ] {
        let (code, doc) = run(
            &daemon,
            &[
                "--cwd",
                cwd.to_str().unwrap(),
                "--sandbox",
                "workspace-write",
                "--",
                "touch ./ran",
            ],
        );
        assert_eq!(code, Some(1), "{}: {doc}", cwd.display());
        assert_eq!(doc["error"]["kind"], "failed_precondition", "{doc}");
        assert!(
            doc["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot keep"),
            "{doc}"
        );
    }
    assert!(!daemon.home.join("ran").exists() && !daemon.dir.path().join("ran").exists());
    // Read-only does not write the workspace, so it may run there.
    let (code, doc) = run(
        &daemon,
        &[
            "--cwd",
            link.to_str().unwrap(),
            "--sandbox",
            "read-only",
            "--",
            "ls >/dev/null",
        ],
    );
    assert_eq!((code, &doc["exit_code"]), (Some(0), &json!(0)), "{doc}");
}

/// Extra roots: one spelled with `..` into the home stops dshd at start; one that is a link to
/// the home refuses the calls that would use it.
#[test]
fn extra_roots_cannot_expose_the_home() {
    let dir = dsh_tests::private_dir();
    let sneaky = dir.path().join("work/../home");
    let mut refused = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[sandbox]\nwritable_roots = [{:?}]\n",
                sneaky.to_str().unwrap()
            )),
            ..DaemonSpec::default()
        },
        dir,
    );
    assert!(
        !refused
            .wait_exit(std::time::Duration::from_secs(20))
            .success()
    );
    assert!(
        refused.log_text().contains("sandbox.writable_roots"),
        "{}",
        refused.log_text()
    );

    let dir = dsh_tests::private_dir();
    let link = dir.path().join("cache");
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("home"), &link).unwrap();
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[sandbox]\nwritable_roots = [{:?}]\n",
                link.to_str().unwrap()
            )),
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    let work = daemon.workdir("extra");
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        &["touch ./ran"],
    );
    let got = results(&daemon, &id);
    assert!(
        got[0].is_error && got[0].content.contains("cannot keep"),
        "{:?}",
        got[0]
    );
    assert!(!work.join("ran").exists());
}

/// A process that leaves its group and session (a double fork with `setsid`) keeps the sandbox:
/// Landlock domains are inherited and cannot be left.
#[test]
fn an_escaped_descendant_stays_confined() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("escape");
    let target = daemon.dir.path().join("user/escaped");
    let report = work.join("report");
    let command = format!(
        "(setsid bash -c 'touch {t} 2>/dev/null; echo $? > {r}' &) ; \
         for i in $(seq 200); do [ -s {r} ] && break; sleep 0.05; done; cat {r}",
        t = target.display(),
        r = report.display()
    );
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        &[&command],
    );
    let got = results(&daemon, &id);
    assert_eq!(
        std::fs::read_to_string(&report).unwrap().trim(),
        "1",
        "{:?}",
        got[0]
    );
    assert!(!target.exists());
}

/// Hooks are the user's own configuration and run unconfined, around a confined model call; the
/// hook file itself cannot be written by the model (a writable hook would be a way out).
#[test]
fn hooks_run_unconfined_and_their_files_are_protected() {
    let dir = dsh_tests::private_dir();
    std::fs::create_dir_all(dir.path().join("cfg")).unwrap();
    let hooks = dir.path().join("cfg/hooks.json");
    let marker = dir.path().join("user/hook-wrote");
    std::fs::create_dir_all(dir.path().join("user")).unwrap();
    let command = format!("touch {}", marker.display());
    std::fs::write(
        &hooks,
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}})
            .to_string(),
    )
    .unwrap();
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "[hooks]\nclaude_code = [{:?}]\n",
                hooks.to_str().unwrap()
            )),
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    let before = std::fs::read(&hooks).unwrap();
    // A workspace that holds the hook file cannot be made writable; one beside it can.
    let beside = daemon.workdir("beside");
    let id = agent(
        &daemon,
        &beside,
        &["--sandbox", "workspace-write"],
        &[
            &format!("echo '{{}}' > {}", hooks.display()),
            "touch ~/by-model",
        ],
    );
    let got = results(&daemon, &id);
    assert!(
        got[0].is_error && got[0].content.contains("Permission denied"),
        "{:?}",
        got[0]
    );
    assert!(got[1].is_error, "{:?}", got[1]);
    assert_eq!(std::fs::read(&hooks).unwrap(), before);
    assert!(marker.exists(), "the hook did not run unconfined");
    assert!(!daemon.dir.path().join("user/by-model").exists());
    let (code, doc) = run(
        &daemon,
        &[
            "--cwd",
            daemon.dir.path().join("cfg").to_str().unwrap(),
            "--sandbox",
            "workspace-write",
            "--",
            "true",
        ],
    );
    assert_eq!(code, Some(1), "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hooks.json"),
        "{doc}"
    );
}

/// The daemon's socket is reachable from inside the sandbox (Landlock cannot refuse connecting to
/// a named unix socket before ABI 9), so dshd itself tells a confined client apart: it may read
/// (`status`), but asking dshd to run something unconfined, to make an agent, or anything else
/// that acts is refused, directly and from an orphan that left the command's process tree.
#[test]
fn a_confined_command_cannot_ask_dshd_for_more() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("nested");
    let user = user_home(&daemon);
    let dshctl = format!(
        "'{}' --socket '{}'",
        dsh_tests::dshctl_bin().display(),
        daemon.socket.display()
    );
    let escaped = user.join("escaped");
    let orphan_out = work.join("orphan-out");
    let orphan_rc = work.join("orphan-rc");
    let commands = [
        format!("{dshctl} status >/dev/null && echo status-ok"),
        format!(
            "{dshctl} run --sandbox off -- touch '{}'",
            escaped.display()
        ),
        format!("{dshctl} agent new --sandbox off --cwd /"),
        // Double fork: the client's parent is gone, so it hangs straight off dshd.
        format!(
            "(setsid bash -c \"{dshctl} run --sandbox off -- touch '{e}' >'{o}' 2>&1; echo \\$? >'{r}'\" &) ; \
             for i in $(seq 400); do [ -s '{r}' ] && break; sleep 0.05; done; cat '{r}' '{o}'",
            e = escaped.display(),
            o = orphan_out.display(),
            r = orphan_rc.display()
        ),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let id = agent(&daemon, &work, &["--sandbox", "workspace-write"], &commands);
    let got = results(&daemon, &id);
    assert!(got[0].content.contains("status-ok"), "{:?}", got[0]);
    // `dshctl run` streams its output (`Shell.RunStream`).
    for (i, method) in [(1, "Shell.RunStream"), (2, "Agents.Create")] {
        assert!(got[i].is_error, "{method}: {:?}", got[i]);
        assert!(
            got[i].content.contains(&format!("{method} is refused"))
                && got[i].content.contains("sandbox workspace-write"),
            "{method}: {:?}",
            got[i]
        );
    }
    let orphan = std::fs::read_to_string(&orphan_out).unwrap();
    assert_ne!(
        std::fs::read_to_string(&orphan_rc).unwrap().trim(),
        "0",
        "{orphan}"
    );
    assert!(
        orphan.contains("Shell.RunStream is refused") && orphan.contains("orphaned"),
        "{orphan}"
    );
    assert!(!escaped.exists(), "a confined command escaped through dshd");
    let agents = daemon.dshctl_json(&["agent", "list"]);
    assert_eq!(
        agents["agents"].as_array().map(Vec::len),
        Some(1),
        "{agents}"
    );

    // An unconfined agent's command may still use dshd as any client does.
    let free = agent(
        &daemon,
        &daemon.workdir("free"),
        &[],
        &[&format!("{dshctl} run -- echo nested-ok")],
    );
    let got = results(&daemon, &free);
    assert!(got[0].content.contains("nested-ok"), "{:?}", got[0]);
}

/// No thread of dshd is in a confined command's Landlock domain (the launcher confines itself),
/// and Landlock lets a confined process trace only processes of its own domain; it also holds no
/// capability, root's included. None of dshd's threads can be attached to (`PTRACE_SEIZE`) or
/// have its memory read through `/proc`. Reading dshd's status is the control: the refusals are
/// the sandbox's.
#[test]
fn a_confined_command_cannot_trace_dshd() {
    let daemon = TestDaemon::start();
    let pid = daemon.child.id();
    let probe = format!(
        r#"python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
tids = os.listdir("/proc/{pid}/task")
attached = [t for t in tids if libc.ptrace(0x4206, int(t), 0, 0) == 0]
readable = []
for t in tids:
    try:
        open(f"/proc/{pid}/task/{{t}}/mem", "rb").close()
        readable.append(t)
    except OSError:
        pass
print(f"threads={{len(tids)}} attached={{attached}} readable={{readable}}")
PY"#
    );
    let work = daemon.workdir("tracer");
    let id = agent(
        &daemon,
        &work,
        &["--sandbox", "workspace-write"],
        &[&probe, &format!("cat /proc/{pid}/status | head -1")],
    );
    let got = results(&daemon, &id);
    assert!(
        got[0].content.contains("attached=[] readable=[]"),
        "{:?}",
        got[0]
    );
    // dshd has its worker threads.
    let threads: usize = got[0]
        .content
        .split("threads=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{:?}", got[0]));
    assert!(threads >= 2, "{:?}", got[0]);
    assert!(got[1].content.contains("dshd"), "{:?}", got[1]);
}
