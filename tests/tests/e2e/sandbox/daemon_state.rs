//! State of dshd's that a command could reach and spoil for everyone else.

use super::*;

/// Landlock does not govern file modes, so a `read-only` command may `chmod` whatever it can
/// read. Taking away every file of dshd's it can find (the home's, the socket directory's, the
/// temporary directory's) changes nothing for another agent's commands: dshd keeps no file that
/// every shell reads (it used to point `BASH_ENV` at an open-file-limit startup file, after which
/// every command of every agent printed `Permission denied`). As an ordinary user, since root
/// reads a file of mode 000 anyway; started with a soft open-file limit below the hard one, where
/// dshd used to raise its own and write that file.
#[test]
#[ignore = "needs root"]
fn a_confined_command_chmodding_dshds_files_changes_nothing_for_other_agents() {
    dsh_tests::needs_root("run dshd as an ordinary user");
    let daemon = TestDaemon::start_with(DaemonSpec {
        user: Some(dsh_tests::NOBODY),
        open_file_soft_limit: Some(1024),
        ..DaemonSpec::default()
    });
    let run_dir = daemon.socket.parent().unwrap();
    let tmp = daemon.dir.path().join("tmp");
    let chmod = format!(
        "find \"$DSH_HOME\" '{}' '{}' -type f -print -exec chmod 000 {{}} + ; echo chmod-done",
        run_dir.display(),
        tmp.display()
    );
    let attacker = agent(
        &daemon,
        &daemon.workdir("attacker"),
        &["--sandbox", "read-only"],
        &[&chmod],
    );
    let got = results(&daemon, &attacker);
    assert!(got[0].content.contains("chmod-done"), "{:?}", got[0]);
    assert!(
        got[0].content.contains(run_dir.to_str().unwrap()),
        "the command found none of dshd's files: {:?}",
        got[0]
    );

    let victim = agent(
        &daemon,
        &daemon.workdir("victim"),
        &[],
        &["echo still-fine; ulimit -Sn", "echo \"[$BASH_ENV]\""],
    );
    let got = results(&daemon, &victim);
    assert_eq!(got[0].content, "still-fine\n1024\n", "{:?}", got[0]);
    assert!(!got[0].is_error, "{:?}", got[0]);
    assert_eq!(got[1].content, "[]\n", "{:?}", got[1]);
    assert!(daemon.dshctl(&["status"]).status.success());
}

/// dshd holds the model key in its environment and memory; it makes itself non-dumpable at start,
/// so the files that would show them belong to root and an agent's command of the same user
/// cannot read them: `/proc/<dshd>/environ` and `/proc/<dshd>/mem`, from an unconfined command,
/// with dshd run as an ordinary user (as root, a command could read them anyway; confined
/// commands lose the capabilities that allow it).
#[test]
#[ignore = "needs root"]
fn an_agents_command_cannot_read_dshds_environment_or_memory() {
    dsh_tests::needs_root("run dshd as an ordinary user");
    let daemon = TestDaemon::start_with(DaemonSpec {
        user: Some(dsh_tests::NOBODY),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-guard-secret".into())],
        ..DaemonSpec::default()
    });
    let pid = daemon.child.id();
    let probe = format!(
        "for f in environ mem; do if cat /proc/{pid}/$f >/dev/null 2>&1; then echo $f-readable; \
         else echo $f-refused; fi; done; grep -c sk-guard-secret /proc/{pid}/environ; \
         id -u; head -1 /proc/{pid}/status"
    );
    let id = agent(&daemon, &daemon.workdir("reader"), &[], &[&probe]);
    let got = results(&daemon, &id);
    let text = &got[0].content;
    assert!(
        text.contains("environ-refused") && text.contains("mem-refused"),
        "{text}"
    );
    assert!(!text.contains("sk-guard-secret\n1"), "{text}");
    // The control: it is an ordinary user's command, and it can see dshd at all.
    assert!(
        text.contains(&format!("{}\n", dsh_tests::NOBODY)) && text.contains("dshd"),
        "{text}"
    );
}

/// Fields of `/proc/<pid>/stat` after the command name: (nice, scheduling policy).
fn nice_and_policy(pid: u32) -> (i64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Field 19 of stat(5) is nice, field 41 policy; `fields[0]` is field 3.
    (fields[16].parse().unwrap(), fields[38].parse().unwrap())
}

/// A confined command cannot stop dshd, or another agent's unconfined command, without a signal:
/// no new resource limit (`prlimit --nofile=0` left dshd serving nothing, `--cpu` killed it), no
/// lower priority, idle scheduling, CPU affinity or I/O class on another process, nor on every
/// process of the user. What it does to itself still works: `ulimit`, `nice`, `chrt`, `taskset`
/// and `ionice` of a command it runs, reading another process's limits.
#[test]
fn a_confined_command_cannot_change_the_limits_or_priority_of_dshd_or_another_command() {
    let daemon = TestDaemon::start();
    let dshd = daemon.child.id();
    let limits_before = std::fs::read_to_string(format!("/proc/{dshd}/limits")).unwrap();
    let sched_before = nice_and_policy(dshd);
    // Another agent's unconfined command, still running.
    let cwd = daemon.workdir("other");
    let other = dsh_tests::shell::background(
        &daemon,
        &[
            "--cwd",
            cwd.to_str().unwrap(),
            "--",
            "echo $$ > pid; exec sleep 301",
        ],
    );
    let mut other_pid = 0;
    assert!(dsh_tests::eventually(
        std::time::Duration::from_secs(20),
        || {
            other_pid = std::fs::read_to_string(cwd.join("pid"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            other_pid != 0
        }
    ));
    let other_before = nice_and_policy(other_pid);
    let attacks = [dshd, other_pid]
        .iter()
        .map(|pid| {
            format!(
                "prlimit --pid {pid} --nofile=0: ; echo nofile=$?; \
                 prlimit --pid {pid} --cpu=1 ; echo cpu=$?; \
                 renice -n 19 -p {pid} ; echo renice=$?; \
                 chrt -i -p 0 {pid} ; echo chrt=$?; \
                 taskset -p 1 {pid} ; echo taskset=$?; \
                 ionice -c 3 -p {pid} ; echo ionice=$?"
            )
        })
        .chain(["renice -n 19 -u \"$(id -u)\" ; echo renice-user=$?".to_owned()])
        .collect::<Vec<_>>();
    // Reading is tried on dshd: the user's own process, so only the filter could refuse it
    // (an ordinary user may not read root's pid 1 anyway).
    let own = format!(
        "(ulimit -n 64 && ulimit -n); nice -n 5 true && echo nice-ok; \
         chrt -i 0 true && echo chrt-ok; taskset 1 true && echo taskset-ok; \
         ionice -c 3 true && echo ionice-ok; \
         prlimit --pid {dshd} --nofile --noheadings >/dev/null && echo read-ok"
    );
    for mode in ["read-only", "workspace-write"] {
        let mut commands: Vec<&str> = attacks.iter().map(String::as_str).collect();
        commands.push(&own);
        let id = agent(
            &daemon,
            &daemon.workdir(mode),
            &["--sandbox", mode],
            &commands,
        );
        let got = results(&daemon, &id);
        for attack in &got[..3] {
            for call in [
                "nofile",
                "cpu",
                "renice",
                "chrt",
                "taskset",
                "ionice",
                "renice-user",
            ] {
                let ok = format!("{call}=0\n");
                assert!(
                    !attack.content.contains(&ok),
                    "{mode}: {call} passed: {attack:?}"
                );
            }
        }
        assert!(got[0].content.contains("nofile=1"), "{:?}", got[0]);
        assert!(
            got[3].content.starts_with("64\n")
                && ["nice-ok", "chrt-ok", "taskset-ok", "ionice-ok", "read-ok"]
                    .iter()
                    .all(|ok| got[3].content.contains(ok)),
            "{mode}: a command can no longer change its own limits: {:?}",
            got[3]
        );
    }
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{dshd}/limits")).unwrap(),
        limits_before
    );
    assert_eq!(nice_and_policy(dshd), sched_before);
    assert_eq!(nice_and_policy(other_pid), other_before);
    assert!(daemon.dshctl(&["status"]).status.success());
    daemon.dshctl_json(&["job", "kill", &other]);
}
