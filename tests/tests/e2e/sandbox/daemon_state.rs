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
