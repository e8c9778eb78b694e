//! Foreground runs.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::*;
use crate::exec::{ExecError, default_secret_pattern};

#[tokio::test]
async fn exit_codes_and_separate_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let o = ex
        .run(spec("echo out; echo err >&2; exit 3", tmp.path()))
        .await
        .unwrap();
    assert_eq!(o.exit_code, Some(3));
    assert_eq!(o.signal, None);
    assert!(!o.timed_out && !o.aborted && !o.success());
    assert_eq!(o.stdout, "out\n");
    assert_eq!(o.stderr, "err\n");
    assert_eq!(o.render(), "out\n[stderr]\nerr\n[exit code: 3]");

    let o = ex.run(spec("true", tmp.path())).await.unwrap();
    assert!(o.success());
    assert_eq!(o.render(), "(no output)");
}

#[tokio::test]
async fn env_layers_reach_the_child() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        extra_scrub: vec!["MODEL_VAR".into()],
        ..config(tmp.path())
    });
    let mut s = spec("env -0", tmp.path());
    s.env = map(&[("TERM", "xterm"), ("CLAUDE_PROJECT_DIR", "/proj")]);
    s.managed = map(&[("DSH_HOME", "/managed/home"), ("DSH_SHELL", "1")]);
    let o = ex.run(s).await.unwrap();
    let env = parse_env0(&o.stdout);
    for gone in [
        "MY_API_KEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "DSH_FOO",
        "dsh_lower",
        "MODEL_VAR",
        // Absent from the snapshot means absent now, never inherited from an outer harness.
        "DSH_SESSION_ID",
    ] {
        assert!(!env.contains_key(gone), "{gone} reached the child");
    }
    assert_eq!(env["PLAIN"], "kept");
    assert_eq!(env["HOME"], "/home/tester");
    assert!(env.contains_key("PATH"));
    assert_eq!(env["NO_COLOR"], "1");
    assert_eq!(env["PAGER"], "cat");
    assert_eq!(env["GIT_PAGER"], "cat");
    assert_eq!(
        env["TERM"], "xterm",
        "trusted env overrides the terminal policy"
    );
    assert_eq!(env["CLAUDE_PROJECT_DIR"], "/proj");
    assert_eq!(env["DSH_HOME"], "/managed/home", "the snapshot wins");
    assert_eq!(env["DSH_SHELL"], "1");
    // HOME, PLAIN, TERM and PATH survive; NO_COLOR, PAGER and GIT_PAGER are added.
    assert_eq!(ex.child_env_len(), 7);
}

#[tokio::test]
async fn dsh_keys_in_env_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let mut s = spec("touch ran", tmp.path());
    s.env = map(&[("dsh_session_id", "forged")]);
    let err = ex.run(s).await.unwrap_err();
    assert!(
        matches!(&err, ExecError::DshKeyInEnv { key } if key == "dsh_session_id"),
        "{err:?}"
    );
    assert!(err.to_string().contains("dsh_session_id"));
    assert!(!tmp.path().join("ran").exists());
}

#[tokio::test]
async fn bad_cwd_and_missing_shell_are_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let missing = tmp.path().join("nope");
    let err = ex.run(spec("true", &missing)).await.unwrap_err();
    assert!(matches!(&err, ExecError::BadCwd { path, .. } if *path == missing));
    assert!(err.to_string().contains("nope"));
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(matches!(
        ex.run(spec("true", &file)).await,
        Err(ExecError::BadCwd { .. })
    ));
    assert!(matches!(
        ex.run(spec("a\0b", tmp.path())).await,
        Err(ExecError::NulInCommand)
    ));

    let ex = executor_with(ExecConfig {
        shell: tmp.path().join("no-such-shell"),
        ..config(tmp.path())
    });
    let err = ex.run(spec("true", tmp.path())).await.unwrap_err();
    assert!(matches!(err, ExecError::Spawn { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-shell"));
}

#[tokio::test]
async fn stdin_is_dev_null_or_the_given_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let o = ex
        .run(spec("readlink /proc/self/fd/0; cat; echo end", tmp.path()))
        .await
        .unwrap();
    assert_eq!(o.stdout, "/dev/null\nend\n");

    let mut s = spec("cat; echo '[done]'", tmp.path());
    s.stdin = Some(b"piped\n".to_vec());
    assert_eq!(ex.run(s).await.unwrap().stdout, "piped\n[done]\n");

    // A command that never reads a large stdin must not hang or fail the call (EPIPE ignored).
    let mut s = spec("exit 0", tmp.path());
    s.stdin = Some(vec![b'x'; 4 << 20]);
    assert!(ex.run(s).await.unwrap().success());
}

#[tokio::test]
async fn timeout_terminates_the_group_including_grandchildren() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let mut s = spec("sleep 31001 & echo $! > pid; wait", tmp.path());
    s.timeout = Some(Duration::from_millis(300));
    let o = ex.run(s).await.unwrap();
    assert!(o.timed_out && !o.aborted);
    assert_eq!(o.exit_code, None);
    assert_eq!(o.signal_name().as_deref(), Some("SIGTERM"));
    assert_eq!(o.timeout, Duration::from_millis(300));
    assert!(
        o.render()
            .ends_with("[timed out after 300ms]\n[killed by signal: SIGTERM]")
    );
    let pid = read_pid(&tmp.path().join("pid")).await;
    assert_dies(pid, "sleep 31001").await;
}

#[tokio::test]
async fn a_term_trapping_command_is_killed_after_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    // Ignored dispositions are inherited, so the grandchild ignores SIGTERM as well.
    let mut s = spec(
        "trap '' TERM; sleep 31002 & echo $! > pid; wait",
        tmp.path(),
    );
    s.timeout = Some(Duration::from_millis(200));
    let o = ex.run(s).await.unwrap();
    assert!(o.timed_out);
    assert_eq!(o.signal_name().as_deref(), Some("SIGKILL"));
    let pid = read_pid(&tmp.path().join("pid")).await;
    assert_dies(pid, "sleep 31002").await;
}

#[tokio::test]
async fn cancellation_aborts_and_kills_the_group() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let s = spec("sleep 31003 & echo $! > pid; wait", tmp.path());
    let cancel = s.cancel.clone();
    let pid_file = tmp.path().join("pid");
    let (o, pid) = tokio::join!(ex.run(s), async {
        let pid = read_pid(&pid_file).await;
        cancel.cancel();
        pid
    });
    let o = o.unwrap();
    assert!(o.aborted && !o.timed_out);
    assert_eq!(o.signal_name().as_deref(), Some("SIGTERM"));
    assert!(
        o.render()
            .ends_with("[aborted]\n[killed by signal: SIGTERM]")
    );
    assert_dies(pid, "sleep 31003").await;

    // A token cancelled before the call: nothing is spawned.
    let s = spec("touch ran", tmp.path());
    s.cancel.cancel();
    assert!(matches!(ex.run(s).await, Err(ExecError::Cancelled)));
    assert!(!tmp.path().join("ran").exists());
}

#[tokio::test]
async fn a_background_process_does_not_hang_the_call_and_dies_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    // Holds the pipes open: the drain bound ends the wait.
    let o = ex
        .run(spec("sleep 31004 & echo $! > pid; echo done", tmp.path()))
        .await
        .unwrap();
    assert!(o.success());
    assert_eq!(o.stdout, "done\n");
    assert_dies(read_pid(&tmp.path().join("pid")).await, "sleep 31004").await;

    // Does not hold the pipes: still killed with the group.
    let o = ex
        .run(spec(
            "sleep 31005 >/dev/null 2>&1 & echo $! > pid2",
            tmp.path(),
        ))
        .await
        .unwrap();
    assert!(o.success());
    assert_dies(read_pid(&tmp.path().join("pid2")).await, "sleep 31005").await;
}

#[tokio::test]
async fn a_self_kill_is_neither_timeout_nor_abort() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let o = ex.run(spec("kill -KILL $$", tmp.path())).await.unwrap();
    assert_eq!(o.signal_name().as_deref(), Some("SIGKILL"));
    assert!(!o.timed_out && !o.aborted);
    assert_eq!(o.render(), "(no output)\n[killed by signal: SIGKILL]");
}

#[tokio::test]
async fn dropping_a_run_kills_its_group() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = std::sync::Arc::new(executor(tmp.path()));
    let task = tokio::spawn({
        let ex = ex.clone();
        let s = spec("sleep 31006 & echo $! > pid; wait", tmp.path());
        async move { ex.run(s).await }
    });
    let pid = read_pid(&tmp.path().join("pid")).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_dies(pid, "sleep 31006").await;
}

#[tokio::test]
async fn large_output_keeps_the_tail_and_spills_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        output_cap_bytes: 1000,
        ..config(tmp.path())
    });
    let expected: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    let o = ex
        .run(kept_spec("seq 1 3000; seq 1 3000 >&2", tmp.path()))
        .await
        .unwrap();
    assert!(o.stdout_truncated && o.stderr_truncated);
    assert_eq!(o.stdout_bytes, expected.len() as u64);
    assert_eq!(o.stdout, expected[expected.len() - 1000..]);
    assert_eq!(o.stderr, expected[expected.len() - 1000..]);
    for spill in [o.stdout_spill.as_ref(), o.stderr_spill.as_ref()] {
        let spill = spill.unwrap();
        assert_eq!(std::fs::read_to_string(spill).unwrap(), expected);
        let mode = std::fs::metadata(spill).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(spill.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
    }
    assert_ne!(o.stdout_spill, o.stderr_spill);
    assert!(o.render().contains(&format!(
        "full output: {}]",
        o.stdout_spill.as_ref().unwrap().display()
    )));
}

#[tokio::test]
async fn output_exactly_at_the_cap_is_whole_and_the_spill_cap_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor_with(ExecConfig {
        output_cap_bytes: 1000,
        spill_cap_bytes: 4000,
        ..config(tmp.path())
    });
    let o = ex
        .run(spec("head -c 1000 /dev/zero | tr '\\0' a", tmp.path()))
        .await
        .unwrap();
    assert_eq!(o.stdout, "a".repeat(1000));
    assert!(!o.stdout_truncated && o.stdout_spill.is_none());

    let o = ex
        .run(kept_spec(
            "head -c 10000 /dev/zero | tr '\\0' b",
            tmp.path(),
        ))
        .await
        .unwrap();
    assert!(o.stdout_truncated && o.stdout_spill_capped);
    assert_eq!(o.stdout_bytes, 10_000);
    let spill = std::fs::read(o.stdout_spill.as_ref().unwrap()).unwrap();
    assert_eq!(spill, vec![b'b'; 4000]);
}

#[tokio::test]
async fn non_utf8_output_is_decoded_lossily() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let o = ex.run(spec("printf 'a\\377b'", tmp.path())).await.unwrap();
    assert_eq!(o.stdout, "a\u{fffd}b");
}

#[tokio::test]
async fn two_hundred_runs_leave_no_zombies() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let mut pids = Vec::new();
    for _ in 0..200 {
        let o = ex.run(spec("echo $$", tmp.path())).await.unwrap();
        pids.push(o.stdout.trim().parse::<i32>().unwrap());
    }
    // `run` reaps before it returns, so no poll is needed: none may be our zombie now.
    let me = i32::try_from(std::process::id()).unwrap();
    let zombies: Vec<i32> = pids
        .into_iter()
        .filter(|pid| proc_state(*pid) == Some(('Z', me)))
        .collect();
    assert!(zombies.is_empty(), "unreaped children: {zombies:?}");
}

#[tokio::test]
async fn timeouts_default_and_clamp() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    assert_eq!(ex.effective_timeout(None), Duration::from_secs(120));
    assert_eq!(
        ex.effective_timeout(Some(Duration::ZERO)),
        Duration::from_secs(120)
    );
    assert_eq!(
        ex.effective_timeout(Some(Duration::from_secs(5))),
        Duration::from_secs(5)
    );
    assert_eq!(
        ex.effective_timeout(Some(Duration::from_secs(100_000))),
        Duration::from_secs(600)
    );
}

#[test]
fn config_is_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = [
        ExecConfig {
            output_cap_bytes: 0,
            ..config(tmp.path())
        },
        ExecConfig {
            spill_cap_bytes: 10,
            ..config(tmp.path())
        },
        ExecConfig {
            kill_grace: Duration::ZERO,
            ..config(tmp.path())
        },
        ExecConfig {
            max_timeout: Duration::from_secs(1),
            ..config(tmp.path())
        },
        ExecConfig {
            secret_pattern: "(unclosed".into(),
            ..config(tmp.path())
        },
    ];
    for c in bad {
        let err = Executor::with_base_env(c, ambient()).unwrap_err();
        assert!(matches!(err, ExecError::InvalidConfig { .. }), "{err:?}");
    }
    assert!(default_secret_pattern().is_match("my_api_key"));
}

#[tokio::test]
async fn the_real_daemon_environment_is_scrubbed_too() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = Executor::new(config(tmp.path())).unwrap();
    assert!(ex.child_env_len() >= 4);
    let o = ex.run(spec("env -0", tmp.path())).await.unwrap();
    let env = parse_env0(&o.stdout);
    assert_eq!(env["TERM"], "dumb");
    assert!(env.keys().all(|k| !crate::exec::is_managed_name(k)));
    assert!(env.keys().all(|k| !default_secret_pattern().is_match(k)));
}
