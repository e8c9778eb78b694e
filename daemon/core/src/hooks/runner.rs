//! Running hook commands through the executor.
//!
//! Every hook is `bash -c <command>` started by [`Executor::run`]: the same scrubbed environment as
//! the bash tool (no `DSH_*` from outside, no secrets; hooks get no managed snapshot — they learn
//! about the session from their payload), its own process group, the session cwd, the payload on
//! stdin (then closed; a hook that does not read it is fine), and its timeout. On timeout or when
//! the caller's token is cancelled the executor kills the whole group, grandchildren included.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use super::job::{Job, RunEnd};
use crate::exec::{CommandSpec, Executor};

/// Runs one hook; never fails (a hook that cannot start ends with a `failure`).
pub(super) async fn run_one(executor: &Executor, job: Job) -> RunEnd {
    if job.http.is_some() {
        return super::http::run(job, executor).await;
    }
    let started = Instant::now();
    let spec = CommandSpec {
        command: job.command,
        cwd: job.cwd,
        timeout: Some(job.timeout),
        env: job.env,
        managed: BTreeMap::new(),
        stdin: Some(job.stdin.to_vec()),
        cancel: job.cancel,
        // The daemon decodes a hook's output and nothing reads it afterwards.
        spill_owner: None,
        // Hooks are the user's own configuration and run unconfined (docs/CONFIG.md, Sandbox).
        sandbox: None,
        // A hook's output is decoded, not shown.
        output: None,
    };
    match executor.run(spec).await {
        Ok(o) => {
            let failure = if o.timed_out {
                Some(format!("timed out after {}ms", o.timeout.as_millis()))
            } else if o.aborted {
                Some("cancelled".to_owned())
            } else {
                o.signal_name().map(|s| format!("killed by signal {s}"))
            };
            RunEnd {
                exit_code: o.exit_code,
                stdout: o.stdout,
                stderr: o.stderr,
                failure,
                duration: started.elapsed(),
            }
        }
        Err(e) => RunEnd {
            failure: Some(format!("could not run the hook: {e}")),
            duration: started.elapsed(),
            ..RunEnd::default()
        },
    }
}

/// Runs `jobs` concurrently and returns their ends in the order of `jobs`.
///
/// The tasks belong to a `JoinSet` owned by this future: if the caller drops it (e.g. its own
/// task is aborted), the set aborts the tasks, their executor calls are dropped, and the executor
/// kills their process groups. No hook outlives the call that started it.
pub(super) async fn run_all(executor: &Arc<Executor>, jobs: Vec<Job>) -> Vec<RunEnd> {
    let n = jobs.len();
    let mut set = JoinSet::new();
    for (i, job) in jobs.into_iter().enumerate() {
        let executor = executor.clone();
        set.spawn(async move { (i, run_one(&executor, job).await) });
    }
    let mut ends: Vec<Option<RunEnd>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, end)) => {
                if let Some(slot) = ends.get_mut(i) {
                    *slot = Some(end);
                }
            }
            Err(e) => tracing::error!("hook task failed: {e}"),
        }
    }
    ends.into_iter()
        .map(|end| {
            end.unwrap_or_else(|| RunEnd {
                failure: Some("the hook task failed".to_owned()),
                ..RunEnd::default()
            })
        })
        .collect()
}

/// The record's stderr summary: trimmed stderr, then the failure note in brackets, cut to
/// `max_chars` characters plus `…`; `None` when there is nothing to say.
pub(super) fn summarize(end: &RunEnd, note: Option<&str>, max_chars: usize) -> Option<String> {
    let mut text = end.stderr.trim().to_owned();
    if let Some(note) = note {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push('[');
        text.push_str(note);
        text.push(']');
    }
    if text.is_empty() {
        return None;
    }
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => {
            text.truncate(cut);
            text.push('…');
            Some(text)
        }
        None => Some(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(stderr: &str) -> RunEnd {
        RunEnd {
            exit_code: Some(1),
            stderr: stderr.to_owned(),
            ..RunEnd::default()
        }
    }

    #[test]
    fn summaries_are_bounded_in_characters() {
        assert_eq!(summarize(&end("  \n"), None, 500), None);
        assert_eq!(
            summarize(&end(" oops \n"), None, 500).as_deref(),
            Some("oops")
        );
        let long = "é".repeat(600);
        let s = summarize(&end(&long), None, 500).unwrap();
        assert_eq!(s.chars().count(), 501);
        assert!(s.ends_with("é…"));
        assert_eq!(
            summarize(&end(&"x".repeat(41)), None, 40).unwrap(),
            format!("{}…", "x".repeat(40))
        );
        assert_eq!(
            summarize(&end(&"x".repeat(40)), None, 40).unwrap(),
            "x".repeat(40)
        );
        assert_eq!(
            summarize(&end("err"), Some("exit code 1"), 500).as_deref(),
            Some("err\n[exit code 1]")
        );
        assert_eq!(
            summarize(&end(""), Some("timed out after 5ms"), 500).as_deref(),
            Some("[timed out after 5ms]")
        );
    }
}
