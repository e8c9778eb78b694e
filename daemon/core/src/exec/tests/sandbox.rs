//! Confined commands in process: the launcher's confinement reaches the command and nothing
//! else. These need a kernel with Landlock (ABI 4 or newer); without one they fail with
//! what is missing rather than pass.

use std::path::{Path, PathBuf};

use super::{config, executor_with, spec};
use crate::exec::{Executor, SandboxRequest};
use crate::sandbox::{LandlockSupport, Network, SandboxMode, SandboxPolicy};
use dsh_session::SessionId;

fn landlock_or_fail() {
    let support = LandlockSupport::probe();
    assert!(
        support.abi() >= 4,
        "these tests need Landlock ABI 4 or newer (Linux 6.7+ with landlock in the lsm= list); \
         {support}"
    );
}

/// An executor whose confined commands may not write `home` and keep temporaries in `tmp/sb`.
fn confined_executor(tmp: &Path, home: &Path) -> Executor {
    landlock_or_fail();
    let mut config = config(tmp);
    config.sandbox.protected = vec![home.to_owned()];
    config.sandbox.tmp_roots = vec![tmp.join("sb")];
    executor_with(config)
}

fn workspace_write(cwd: &Path, owner: Option<SessionId>, command: &str) -> super::CommandSpec {
    super::CommandSpec {
        sandbox: Some(SandboxRequest {
            policy: SandboxPolicy {
                mode: SandboxMode::WorkspaceWrite,
                network: Network::On,
            },
            workspace: cwd.to_owned(),
        }),
        spill_owner: owner,
        ..spec(command, cwd)
    }
}

fn dirs(tmp: &Path) -> (PathBuf, PathBuf) {
    let (work, home) = (tmp.join("work"), tmp.join("home"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    (work, home)
}

/// The command is confined; the process that spawned it (here, the test; in dshd, the daemon) is
/// not, before or after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_is_confined_and_the_daemon_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, home) = dirs(tmp.path());
    let ex = confined_executor(tmp.path(), &home);
    let out = ex
        .run(workspace_write(
            &work,
            None,
            "touch inside && touch \"$TMPDIR/scratch\" && echo wrote; touch ../home/x",
        ))
        .await
        .unwrap();
    assert!(out.stdout.contains("wrote"), "{out:?}");
    assert!(out.stderr.contains("Permission denied"), "{out:?}");
    assert!(!home.join("x").exists());
    assert!(work.join("inside").exists());
    std::fs::write(home.join("by-the-daemon"), "x").expect("the spawning process stays free");
    let free = ex
        .run(spec("touch ../home/unconfined", &work))
        .await
        .unwrap();
    assert!(free.success(), "{free:?}");
}

/// Each call is confined to the directories its launcher opened: a workspace removed and made
/// again between two calls is writable on the second, and still nothing else is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_made_again_is_writable_on_the_next_call() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, home) = dirs(tmp.path());
    let ex = confined_executor(tmp.path(), &home);
    let agent = SessionId::new_v7();
    let first = ex
        .run(workspace_write(&work, Some(agent.clone()), "touch one"))
        .await
        .unwrap();
    assert!(first.success(), "{first:?}");
    std::fs::remove_dir_all(&work).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let second = ex
        .run(workspace_write(
            &work,
            Some(agent.clone()),
            "touch two && touch ../home/x",
        ))
        .await
        .unwrap();
    assert!(work.join("two").exists(), "{second:?}");
    assert!(second.stderr.contains("Permission denied"), "{second:?}");
    ex.release_sandbox_of(&agent);
}

/// A confined executor and two workspaces `a` and `b` side by side under `tmp`.
fn two_workspaces(tmp: &Path) -> (Executor, PathBuf, PathBuf) {
    let (_, home) = dirs(tmp);
    let (a, b) = (tmp.join("a"), tmp.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    (confined_executor(tmp, &home), a, b)
}

/// Two agents calling at once, each with its own workspace: each writes its own and not the
/// other's, whichever spawned first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_agents_each_get_their_own_confinement() {
    let tmp = tempfile::tempdir().unwrap();
    let (ex, a, b) = two_workspaces(tmp.path());
    let (agent_a, agent_b) = (SessionId::new_v7(), SessionId::new_v7());
    for round in 0..5 {
        let cmd = |other: &str| format!("touch mine{round}; touch ../{other}/theirs{round}");
        let (in_a, in_b) = tokio::join!(
            ex.run(workspace_write(&a, Some(agent_a.clone()), &cmd("b"))),
            ex.run(workspace_write(&b, Some(agent_b.clone()), &cmd("a"))),
        );
        for (dir, out) in [(&a, in_a.unwrap()), (&b, in_b.unwrap())] {
            assert!(dir.join(format!("mine{round}")).exists(), "{out:?}");
            assert!(out.stderr.contains("Permission denied"), "{out:?}");
            assert!(!dir.join(format!("theirs{round}")).exists(), "{out:?}");
        }
    }
}

/// Commands of no agent, in turn in two workspaces (one removed and made again): each writes its
/// own workspace and nothing else, and gets a new, empty temporary directory, removed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_of_no_agent_each_get_their_own_confinement() {
    let tmp = tempfile::tempdir().unwrap();
    let (ex, a, b) = two_workspaces(tmp.path());
    let mut tmps = Vec::new();
    let rounds = [(&a, "b"), (&b, "a"), (&a, "b"), (&b, "a"), (&b, "a")];
    for (round, (dir, other)) in rounds.into_iter().enumerate() {
        if round == 4 {
            std::fs::remove_dir_all(&b).unwrap();
            std::fs::create_dir_all(&b).unwrap();
        }
        let out = ex
            .run(workspace_write(
                dir,
                None,
                &format!(
                    "test -z \"$(ls -A \"$TMPDIR\")\" && touch \"$TMPDIR/x\" mine{round} && \
                     echo \"$TMPDIR\"; touch ../{other}/theirs{round}"
                ),
            ))
            .await
            .unwrap();
        assert!(
            dir.join(format!("mine{round}")).exists(),
            "{round}: {out:?}"
        );
        assert!(out.stderr.contains("Permission denied"), "{round}: {out:?}");
        tmps.push(PathBuf::from(out.stdout.trim()));
    }
    tmps.sort();
    tmps.dedup();
    assert_eq!(tmps.len(), rounds.len(), "{tmps:?}");
    for leftover in &tmps {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while leftover.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{leftover:?} was kept"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    for round in 0..rounds.len() {
        for dir in [&a, &b] {
            assert!(!dir.join(format!("theirs{round}")).exists());
        }
    }
}

/// A place for temporary directories that is not this user's private directory (a link to one
/// planted there, a directory with another mode made by someone else) is skipped for the next;
/// the calls run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_temporary_root_is_skipped_for_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, home) = dirs(tmp.path());
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let planted = tmp.path().join("planted");
    std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
    landlock_or_fail();
    let mut config = config(tmp.path());
    config.sandbox.protected = vec![home.clone()];
    config.sandbox.tmp_roots = vec![planted.clone(), tmp.path().join("sb")];
    let ex = executor_with(config);
    let out = ex
        .run(workspace_write(
            &work,
            None,
            "touch \"$TMPDIR/x\" && echo \"$TMPDIR\"",
        ))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout
            .starts_with(tmp.path().join("sb").to_str().unwrap()),
        "{out:?}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}
