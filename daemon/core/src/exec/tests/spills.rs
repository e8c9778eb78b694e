//! How long spill files live: only while something can still read them, and never past their
//! total cap.

use super::*;
use dsh_session::SessionId;

pub(super) fn spill_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("spill"))
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

fn small(tmp: &Path) -> Executor {
    executor_with(ExecConfig {
        output_cap_bytes: 100,
        ..config(tmp)
    })
}

const BIG: &str = "head -c 1000 /dev/zero | tr '\\0' x";

#[tokio::test]
async fn a_call_for_no_agent_leaves_no_spill_file_and_names_none() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = small(tmp.path());
    for _ in 0..20 {
        let o = ex.run(spec(BIG, tmp.path())).await.unwrap();
        assert!(o.stdout_truncated && o.stdout_spill.is_none(), "{o:?}");
    }
    assert!(spill_files(tmp.path()).is_empty());
    assert_eq!(ex.spill_bytes(), 0);
}

#[tokio::test]
async fn an_agents_spills_stay_readable_until_it_is_released() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = small(tmp.path());
    let (agent, other) = (SessionId::new_v7(), SessionId::new_v7());
    let run = |owner: &SessionId| {
        let spec = CommandSpec {
            spill_owner: Some(owner.clone()),
            ..spec(BIG, tmp.path())
        };
        let ex = &ex;
        async move { ex.run(spec).await.unwrap() }
    };
    let o = run(&agent).await;
    let path = o.stdout_spill.clone().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 1000]);
    run(&other).await;
    assert_eq!(spill_files(tmp.path()).len(), 2);
    assert_eq!(ex.spill_bytes(), 2000);
    assert_eq!(ex.release_spills_of(&agent), 1);
    assert!(!path.exists());
    assert_eq!(
        spill_files(tmp.path()).len(),
        1,
        "only the agent's own went"
    );
    assert_eq!(ex.spill_bytes(), 1000);
}

#[tokio::test]
async fn a_finished_jobs_spills_go_with_the_read_that_returns_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        output_cap_bytes: 2000,
        spill_cap_bytes: 4000,
        ..config(tmp.path())
    });
    // More than the memory window in total, but read as it comes, so the reader misses nothing.
    let id = ex
        .start(
            spec(
                "for i in 1 2 3; do head -c 1000 /dev/zero | tr '\\0' y; while [ ! -e go$i ]; do sleep 0.01; done; done",
                tmp.path(),
            ),
            None,
        )
        .unwrap();
    let mut seen = 0;
    for i in 1..=3 {
        while seen < i * 1000 {
            seen += ex.job_output(&id).unwrap().stdout.len();
            tokio::task::yield_now().await;
        }
        std::fs::write(tmp.path().join(format!("go{i}")), "").unwrap();
    }
    ex.job_wait(&id).await.unwrap();
    assert_eq!(
        spill_files(tmp.path()).len(),
        1,
        "3000 bytes > the 2000-byte window"
    );
    let last = ex.job_output(&id).unwrap();
    assert!(last.is_last());
    assert!(spill_files(tmp.path()).is_empty());
    assert_eq!(ex.spill_bytes(), 0);
}

#[tokio::test]
async fn past_the_total_cap_a_stream_keeps_no_full_copy_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        output_cap_bytes: 100,
        spill_cap_bytes: 1000,
        spill_total_cap_bytes: 2500,
        ..config(tmp.path())
    });
    let owner = SessionId::new_v7();
    let kept = || CommandSpec {
        spill_owner: Some(owner.clone()),
        ..spec(BIG, tmp.path())
    };
    for _ in 0..2 {
        assert!(ex.run(kept()).await.unwrap().stdout_spill.is_some());
    }
    let o = ex.run(kept()).await.unwrap();
    assert!(o.stdout_spill.is_none() && o.spill_no_room, "{o:?}");
    assert!(
        o.render().contains("shell.spill_total_cap_bytes"),
        "{}",
        o.render()
    );
    assert_eq!(
        spill_files(tmp.path()).len(),
        2,
        "the refused spill was removed"
    );
    ex.release_spills_of(&owner);
    assert!(ex.run(kept()).await.unwrap().stdout_spill.is_some());
}
