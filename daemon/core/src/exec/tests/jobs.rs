//! Background jobs, owner kills, shutdown and drop.

use std::sync::Arc;

use super::*;
use crate::exec::{ExecError, JobId, JobState};
use dsh_session::SessionId;

#[tokio::test]
async fn reads_are_consuming_and_never_repeat_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = ex
        .start(
            spec(
                "printf first; printf e1 >&2; \
                 while [ ! -e go ]; do sleep 0.01; done; printf second",
                tmp.path(),
            ),
            None,
        )
        .unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    eventually("the first output", || {
        let r = ex.job_output(&id).unwrap();
        assert_eq!(r.state, JobState::Running);
        assert_eq!((r.stdout_missing, r.stderr_missing), (None, None));
        out.push_str(&r.stdout);
        err.push_str(&r.stderr);
        out == "first" && err == "e1"
    })
    .await;
    let r = ex.job_output(&id).unwrap();
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    assert_eq!(r.render(), "(no new output)\n[status: running]");

    std::fs::write(tmp.path().join("go"), b"").unwrap();
    let end = ex.job_wait(&id).await.unwrap();
    assert_eq!(end.exit_code, Some(0));
    assert!(!end.killed);
    let r = ex.job_output(&id).unwrap();
    assert_eq!(r.stdout, "second");
    assert_eq!(r.stderr, "");
    assert_eq!(r.render(), "second\n[status: completed, exit code: 0]");
    let r = ex.job_output(&id).unwrap();
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    assert!(matches!(r.state, JobState::Finished(_)));
}

#[tokio::test]
async fn a_job_keeps_the_environment_it_was_started_with() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let mut s = spec(
        "echo \"$DSH_SESSION_ID|$EXTRA|${DSH_FOO-absent}|$(cat)\"",
        tmp.path(),
    );
    s.managed = map(&[("DSH_SESSION_ID", "session-a")]);
    s.env = map(&[("EXTRA", "x")]);
    s.stdin = Some(b"in".to_vec());
    let id = ex.start(s, None).unwrap();
    ex.job_wait(&id).await.unwrap();
    assert_eq!(
        ex.job_output(&id).unwrap().stdout,
        "session-a|x|absent|in\n"
    );

    let mut s = spec("true", tmp.path());
    s.env = map(&[("DSH_SESSION_ID", "forged")]);
    assert!(matches!(
        ex.start(s, None),
        Err(ExecError::DshKeyInEnv { .. })
    ));
}

#[tokio::test]
async fn kill_reports_killed_and_only_the_first_kill_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = ex
        .start(spec("sleep 32001 & echo $! > pid; wait", tmp.path()), None)
        .unwrap();
    let pid = read_pid(&tmp.path().join("pid")).await;
    assert!(ex.job_kill(&id).unwrap());
    assert!(!ex.job_kill(&id).unwrap());
    let end = ex.job_wait(&id).await.unwrap();
    assert!(end.killed);
    assert_eq!(end.signal, Some(15));
    assert!(!ex.job_kill(&id).unwrap());
    assert!(
        ex.job_output(&id)
            .unwrap()
            .render()
            .ends_with("[status: killed, signal: SIGTERM]")
    );
    assert_dies(pid, "sleep 32001").await;
}

#[tokio::test]
async fn a_finished_job_cannot_be_killed_and_reports_its_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = ex
        .start(spec("printf abc; printf err >&2; exit 4", tmp.path()), None)
        .unwrap();
    let end = ex.job_wait(&id).await.unwrap();
    assert_eq!(
        (end.exit_code, end.signal, end.killed),
        (Some(4), None, false)
    );
    assert!(!ex.job_kill(&id).unwrap());
    let r = ex.job_output(&id).unwrap();
    assert_eq!(
        r.render(),
        "abc\n[stderr]\nerr\n[status: completed, exit code: 4]"
    );
}

#[tokio::test]
async fn a_term_trapping_job_is_killed_after_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = ex
        .start(
            spec(
                "trap '' TERM; sleep 32002 & echo $! > pid; wait",
                tmp.path(),
            ),
            None,
        )
        .unwrap();
    let pid = read_pid(&tmp.path().join("pid")).await;
    assert!(ex.job_kill(&id).unwrap());
    let end = ex.job_wait(&id).await.unwrap();
    assert!(end.killed);
    assert_eq!(end.signal, Some(9));
    assert_dies(pid, "sleep 32002").await;
}

#[tokio::test]
async fn the_spec_token_kills_a_job() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let s = spec("echo $$ > pid; exec sleep 32003", tmp.path());
    let cancel = s.cancel.clone();
    let id = ex.start(s, None).unwrap();
    read_pid(&tmp.path().join("pid")).await;
    cancel.cancel();
    let end = ex.job_wait(&id).await.unwrap();
    assert!(end.killed);
    assert!(!ex.job_kill(&id).unwrap());
}

/// A reader that falls behind the memory window still gets every byte, in order and in bounded
/// pages, from the spill file; once it has read the end the spill file is gone.
#[tokio::test]
async fn a_reader_that_falls_behind_pages_through_every_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        output_cap_bytes: 100,
        ..config(tmp.path())
    });
    let total = 3 * super::super::jobs::JOB_READ_LIMIT + 7;
    let id = ex
        .start(
            spec(
                &format!("head -c {total} /dev/zero | tr '\\0' z"),
                tmp.path(),
            ),
            None,
        )
        .unwrap();
    ex.job_wait(&id).await.unwrap();
    let mut got = String::new();
    let mut reads = 0;
    loop {
        let r = ex.job_output(&id).unwrap();
        assert_eq!(r.stdout_offset, got.len() as u64, "in order, without gaps");
        assert_eq!(r.stdout_missing, None);
        assert!(r.stdout.len() <= super::super::jobs::JOB_READ_LIMIT);
        got.push_str(&r.stdout);
        reads += 1;
        if r.is_last() {
            break;
        }
        assert!(
            r.render().contains("[more output is waiting"),
            "{}",
            r.render()
        );
    }
    assert_eq!(got, "z".repeat(total));
    assert_eq!(reads, 4);
    assert!(
        super::spills::spill_files(tmp.path()).is_empty(),
        "the end was read"
    );
    let again = ex.job_output(&id).unwrap();
    assert!(again.stdout.is_empty() && again.is_last());
}

#[tokio::test]
async fn owners_jobs_are_killed_together() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let (a, b) = (SessionId::new_v7(), SessionId::new_v7());
    let a1 = ex
        .start(spec("exec sleep 32004", tmp.path()), Some(a.clone()))
        .unwrap();
    let a2 = ex
        .start(spec("exec sleep 32005", tmp.path()), Some(a.clone()))
        .unwrap();
    let b1 = ex
        .start(spec("exec sleep 32006", tmp.path()), Some(b.clone()))
        .unwrap();
    let listed: Vec<JobId> = ex.list_jobs(Some(&a)).into_iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![a1.clone(), a2.clone()]);
    assert_eq!(ex.job_info(&b1).unwrap().owner, Some(b.clone()));

    assert_eq!(ex.kill_jobs_of(&a), 2);
    assert!(ex.job_wait(&a1).await.unwrap().killed);
    assert!(ex.job_wait(&a2).await.unwrap().killed);
    assert_eq!(ex.job_info(&b1).unwrap().state, JobState::Running);
    assert_eq!(ex.kill_jobs_of(&a), 0);
    assert_eq!(ex.kill_jobs_of(&b), 1);
    assert!(ex.job_wait(&b1).await.unwrap().killed);
    assert_eq!(ex.list_jobs(None).len(), 3);
}

#[tokio::test]
async fn unknown_jobs_and_failed_starts_are_typed() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = JobId::new();
    assert!(matches!(ex.job_output(&id), Err(ExecError::UnknownJob(j)) if j == id));
    assert!(matches!(ex.job_kill(&id), Err(ExecError::UnknownJob(_))));
    assert!(matches!(
        ex.start(spec("true", &tmp.path().join("missing")), None),
        Err(ExecError::BadCwd { .. })
    ));
    assert!(ex.list_jobs(None).is_empty());
}

#[test]
fn start_outside_a_runtime_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    assert!(matches!(
        ex.start(spec("true", tmp.path()), None),
        Err(ExecError::NoRuntime)
    ));
}

#[tokio::test]
async fn finished_jobs_are_forgotten_beyond_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        max_finished_jobs: 2,
        ..config(tmp.path())
    });
    let mut ids = Vec::new();
    for _ in 0..4 {
        let id = ex.start(spec("true", tmp.path()), None).unwrap();
        ex.job_wait(&id).await.unwrap();
        ids.push(id);
    }
    // Inserting the fourth forgot the oldest of the three finished ones.
    assert!(matches!(
        ex.job_output(&ids[0]),
        Err(ExecError::UnknownJob(_))
    ));
    assert!(ex.job_output(&ids[1]).is_ok());
    assert!(ex.job_output(&ids[3]).is_ok());
}

#[tokio::test]
async fn shutdown_terminates_every_job_and_run_and_refuses_new_work() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = Arc::new(executor(tmp.path()));
    let plain = ex
        .start(spec("sleep 32010 & echo $! > p1; wait", tmp.path()), None)
        .unwrap();
    let trapping = ex
        .start(
            spec("trap '' TERM; sleep 32011 & echo $! > p2; wait", tmp.path()),
            Some(SessionId::new_v7()),
        )
        .unwrap();
    let foreground = tokio::spawn({
        let ex = ex.clone();
        let s = spec("sleep 32012 & echo $! > p3; wait", tmp.path());
        async move { ex.run(s).await }
    });
    let p1 = read_pid(&tmp.path().join("p1")).await;
    let p2 = read_pid(&tmp.path().join("p2")).await;
    let p3 = read_pid(&tmp.path().join("p3")).await;

    ex.shutdown().await;

    // Every shell was reaped before shutdown returned.
    for id in [&plain, &trapping] {
        match ex.job_info(id).unwrap().state {
            JobState::Finished(end) => assert!(end.killed),
            JobState::Running => panic!("{id} still running after shutdown"),
        }
    }
    let fg = foreground.await.unwrap().unwrap();
    assert!(fg.aborted);
    for (pid, needle) in [
        (p1, "sleep 32010"),
        (p2, "sleep 32011"),
        (p3, "sleep 32012"),
    ] {
        assert_dies(pid, needle).await;
    }
    assert!(matches!(
        ex.start(spec("true", tmp.path()), None),
        Err(ExecError::ShuttingDown)
    ));
    assert!(matches!(
        ex.run(spec("true", tmp.path())).await,
        Err(ExecError::ShuttingDown)
    ));
}

#[tokio::test]
async fn dropping_the_executor_kills_its_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    ex.start(spec("sleep 32020 & echo $! > pid; wait", tmp.path()), None)
        .unwrap();
    let pid = read_pid(&tmp.path().join("pid")).await;
    drop(ex);
    assert_dies(pid, "sleep 32020").await;
}

/// Where live process `pid` runs, placed through a pidfd as dshd places a client.
fn provenance(pid: i32) -> crate::exec::Provenance {
    let fd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    crate::exec::place(pid, std::os::fd::AsFd::as_fd(&fd))
        .unwrap()
        .provenance
}

/// A process that has exited is not placed, whoever has its pid now: its pidfd says it is gone.
#[test]
fn a_process_that_exited_is_not_placed() {
    let mut child = std::process::Command::new("sleep")
        .arg("32021")
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let fd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    let live = crate::exec::place(pid, std::os::fd::AsFd::as_fd(&fd));
    child.kill().unwrap();
    child.wait().unwrap();
    // A child of this process that the executor did not spawn, as in the test below.
    let orphan = crate::exec::Provenance::Unknown(crate::exec::UnknownReason::Orphan);
    assert_eq!(live.map(|p| p.provenance), Some(orphan));
    assert_eq!(crate::exec::place(pid, std::os::fd::AsFd::as_fd(&fd)), None);
    // Also while it is a zombie nobody reaped: exited is exited.
    let mut zombie = std::process::Command::new("true").spawn().unwrap();
    let zpid = i32::try_from(zombie.id()).unwrap();
    let zfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(zpid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    let mut fds = [rustix::event::PollFd::new(
        &zfd,
        rustix::event::PollFlags::IN,
    )];
    rustix::event::poll(&mut fds, None).unwrap();
    assert_eq!(
        crate::exec::place(zpid, std::os::fd::AsFd::as_fd(&zfd)),
        None
    );
    zombie.wait().unwrap();
}

/// A job's shell and what it starts are placed as descendants of an unconfined command; a child
/// the executor did not spawn hangs off this process unrecorded (as an adopted orphan would) and
/// cannot be placed; init and this process itself are outside.
#[tokio::test]
async fn provenance_places_commands_their_children_and_strangers() {
    use crate::exec::{CommandOrigin, Provenance, UnknownReason};
    use crate::sandbox::SandboxPolicy;
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let id = ex
        .start(
            spec(
                "echo $$ > shell; sleep 32002 & echo $! > pid; wait",
                tmp.path(),
            ),
            None,
        )
        .unwrap();
    let child = read_pid(&tmp.path().join("pid")).await;
    let shell = read_pid(&tmp.path().join("shell")).await;
    let unconfined = Provenance::Command(CommandOrigin {
        sandbox: SandboxPolicy::UNCONFINED,
        agent: None,
    });
    assert_eq!(provenance(shell), unconfined);
    assert_eq!(provenance(child), unconfined);
    assert!(!unconfined.is_confined());

    let mut stranger = std::process::Command::new("sleep")
        .arg("32003")
        .spawn()
        .unwrap();
    let placed = provenance(i32::try_from(stranger.id()).unwrap());
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    assert_eq!(placed, Provenance::Unknown(UnknownReason::Orphan));
    assert!(placed.is_confined());

    assert_eq!(provenance(1), Provenance::Outside);
    assert_eq!(
        provenance(i32::try_from(std::process::id()).unwrap()),
        Provenance::Outside
    );
    assert!(ex.job_kill(&id).unwrap());
    ex.job_wait(&id).await.unwrap();
    assert_dies(child, "sleep 32002").await;
}

/// A job's shell and its children are placed with the agent the job runs for, and see only that
/// agent's jobs; a command of no agent sees only jobs of no agent, and what cannot be placed none.
#[tokio::test]
async fn provenance_carries_the_agent_a_command_runs_for() {
    use crate::exec::{Provenance, UnknownReason};
    use dsh_session::SessionId;
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let (mine, theirs) = (SessionId::new_v7(), SessionId::new_v7());
    let id = ex
        .start(
            spec("sleep 32004 & echo $! > pid; wait", tmp.path()),
            Some(mine.clone()),
        )
        .unwrap();
    let child = read_pid(&tmp.path().join("pid")).await;
    let placed = provenance(child);
    let Provenance::Command(origin) = &placed else {
        panic!("{placed:?}");
    };
    assert_eq!(origin.agent.as_ref(), Some(&mine));
    assert!(placed.may_see_jobs_of(Some(&mine)));
    assert!(!placed.may_see_jobs_of(Some(&theirs)));
    assert!(!placed.may_see_jobs_of(None));
    assert!(!placed.is_outside());

    let no_agent = Provenance::Command(crate::exec::CommandOrigin {
        sandbox: crate::sandbox::SandboxPolicy::UNCONFINED,
        agent: None,
    });
    assert!(no_agent.may_see_jobs_of(None) && !no_agent.may_see_jobs_of(Some(&mine)));
    let unknown = Provenance::Unknown(UnknownReason::Orphan);
    assert!(!unknown.may_see_jobs_of(None) && !unknown.may_see_jobs_of(Some(&mine)));
    assert!(Provenance::Outside.may_see_jobs_of(Some(&theirs)) && Provenance::Outside.is_outside());
    assert!(ex.job_kill(&id).unwrap());
    ex.job_wait(&id).await.unwrap();
}
