//! What the environment may not do, with real bash: run code before the command (startup files,
//! exported functions) or be too large for `execve`.

use std::ffi::OsString;

use super::*;
use crate::exec::{ExecError, LaunchPart, MAX_STRING_BYTES, RESERVE_BYTES, total_limit};

/// A startup file that forges a managed value and leaves a marker proving it was sourced.
fn forging_file(dir: &Path) -> (String, std::path::PathBuf) {
    let marker = dir.join("sourced");
    let file = dir.join("startup.sh");
    std::fs::write(
        &file,
        format!(
            "export DSH_SESSION_ID=forged\nexport DSH_HOME=/forged\ntouch '{}'\n",
            marker.display()
        ),
    )
    .unwrap();
    (file.display().to_string(), marker)
}

/// The daemon's environment with `BASH_ENV`, `ENV`, `SHELLOPTS` and an exported `echo` added.
fn executor_with_startup_vars(tmp: &Path) -> (Executor, std::path::PathBuf) {
    let (file, marker) = forging_file(tmp);
    let mut vars = ambient();
    vars.extend(
        [
            ("BASH_ENV", file.as_str()),
            ("ENV", file.as_str()),
            ("SHELLOPTS", "xtrace"),
            (
                "BASH_FUNC_echo%%",
                "() {  builtin echo forged-by-function\n}",
            ),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    let ex = Executor::with_base_env(config(tmp), vars).unwrap();
    (ex, marker)
}

/// `sh -i` is included because interactive POSIX shells read `ENV`.
const REPORT: &str = "echo \"id=$DSH_SESSION_ID home=$DSH_HOME\"; sh -i -c true </dev/null 2>/dev/null; bash -c 'echo \"nested=$DSH_SESSION_ID\"'";

#[tokio::test]
async fn startup_variables_in_the_daemon_environment_neither_run_nor_forge() {
    let tmp = tempfile::tempdir().unwrap();
    let (ex, marker) = executor_with_startup_vars(tmp.path());
    let mut s = spec(REPORT, tmp.path());
    s.managed = map(&[("DSH_SESSION_ID", "s1"), ("DSH_HOME", "/h")]);
    let o = ex.run(s.clone()).await.unwrap();
    assert_eq!(o.stdout, "id=s1 home=/h\nnested=s1\n", "{o:?}");
    // No xtrace from SHELLOPTS either.
    assert_eq!(o.stderr, "", "{o:?}");
    assert!(!marker.exists(), "the startup file was sourced");

    let job = ex.start(s, None).unwrap();
    ex.job_wait(&job).await.unwrap();
    assert_eq!(
        ex.job_output(&job).unwrap().stdout,
        "id=s1 home=/h\nnested=s1\n"
    );
    assert!(!marker.exists(), "the startup file was sourced by a job");
}

#[tokio::test]
async fn startup_variables_from_a_caller_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, marker) = forging_file(tmp.path());
    let ex = executor(tmp.path());
    for (key, value) in [
        ("BASH_ENV", file.as_str()),
        ("ENV", file.as_str()),
        ("BASH_FUNC_echo%%", "() {  builtin echo forged\n}"),
        ("SHELLOPTS", "xtrace"),
    ] {
        let mut s = spec("touch ran", tmp.path());
        s.env = map(&[(key, value)]);
        let err = ex.run(s.clone()).await.unwrap_err();
        assert!(
            matches!(&err, ExecError::ShellStartupKeyInEnv { key: k, .. } if k == key),
            "{key}: {err:?}"
        );
        let err = ex.start(s, None).unwrap_err();
        assert!(
            matches!(&err, ExecError::ShellStartupKeyInEnv { .. }),
            "{err:?}"
        );
    }
    assert!(!tmp.path().join("ran").exists());
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_command_may_take_exactly_one_execve_string() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let head = "echo ok; : ";
    // With its NUL, this command is exactly MAX_STRING_BYTES: the kernel takes it.
    let command = format!("{head}{}", "x".repeat(MAX_STRING_BYTES - 1 - head.len()));
    let o = ex.run(spec(&command, tmp.path())).await.unwrap();
    assert_eq!(o.stdout, "ok\n", "{o:?}");

    let err = ex
        .run(spec(&format!("{command}x"), tmp.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ExecError::TooLong { part: LaunchPart::Command, bytes, limit }
                if *bytes == MAX_STRING_BYTES + 1 && *limit == MAX_STRING_BYTES
        ),
        "{err:?}"
    );
    assert!(matches!(
        ex.start(spec(&format!("{command}x"), tmp.path()), None),
        Err(ExecError::TooLong { .. })
    ));
}

#[tokio::test]
async fn an_env_value_may_take_exactly_one_execve_string() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let value = "v".repeat(MAX_STRING_BYTES - "BIG=".len() - 1);
    let mut s = spec("printf %s \"$BIG\" | wc -c", tmp.path());
    s.env = map(&[("BIG", &value)]);
    let o = ex.run(s.clone()).await.unwrap();
    assert_eq!(o.stdout.trim(), value.len().to_string(), "{o:?}");

    s.env = map(&[("BIG", &format!("{value}v"))]);
    let err = ex.run(s.clone()).await.unwrap_err();
    assert!(
        matches!(&err, ExecError::TooLong { part: LaunchPart::Env(k), .. } if k == "BIG"),
        "{err:?}"
    );
    s.env.clear();
    s.managed = map(&[("DSH_BIG", &format!("{value}vvvv"))]);
    let err = ex.run(s).await.unwrap_err();
    assert!(
        matches!(&err, ExecError::TooLong { part: LaunchPart::Managed(k), .. } if k == "DSH_BIG"),
        "{err:?}"
    );
}

/// Over the total the launch is refused naming its largest part; just under it (by our count) the
/// kernel accepts it, which shows the count leaves out nothing the kernel charges.
#[tokio::test]
async fn the_total_is_checked_and_matches_what_the_kernel_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = executor(tmp.path());
    let entry = 100_000;
    let count = total_limit() / entry + 1;
    let mut env: std::collections::BTreeMap<String, String> = (0..count)
        .map(|i| (format!("FILL_{i:03}"), "f".repeat(entry)))
        .collect();
    env.insert("LARGEST".into(), "l".repeat(entry + 1000));
    let mut s = spec("echo ran", tmp.path());
    s.env = env;
    let err = ex.run(s.clone()).await.unwrap_err();
    let ExecError::TooLarge {
        bytes,
        limit,
        largest,
        largest_bytes,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*limit, total_limit() - RESERVE_BYTES);
    assert_eq!(*largest, LaunchPart::Env("LARGEST".into()));
    assert_eq!(*largest_bytes, "LARGEST=".len() + entry + 1000 + 1);
    assert!(err.to_string().contains("\"LARGEST\""), "{err}");

    // Drop whole entries, then trim one, until our count is a few bytes under the limit.
    let mut excess = bytes - limit;
    while excess > entry {
        let key = s
            .env
            .keys()
            .find(|k| k.starts_with("FILL_"))
            .unwrap()
            .clone();
        s.env.remove(&key);
        excess -= format!("{key}=").len() + entry + 1 + size_of::<usize>();
    }
    let value = s.env.get_mut("LARGEST").unwrap();
    value.truncate(value.len() - excess - 16);
    let o = ex.run(s).await.unwrap();
    assert_eq!(o.stdout, "ran\n", "{o:?}");
}
