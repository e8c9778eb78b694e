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
fn a_confined_command_chmodding_dshds_files_changes_nothing_for_other_agents() {
    if !dsh_tests::root_or_skip("run dshd as an ordinary user") {
        return;
    }
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
