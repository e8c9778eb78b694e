//! Running hook commands through the executor.
//!
//! Every hook is `bash -c <command>` started by [`Executor::run`]: the same scrubbed environment as
//! the bash tool (no `DSH_*` from outside, no secrets; hooks get no managed snapshot — they learn
//! about the session from their payload), its own process group, the session cwd, the payload on
//! stdin (then closed; a hook that does not read it is fine), and its timeout. On timeout or when
//! the caller's token is cancelled the executor kills the whole group, grandchildren included.
//!
//! A hook of a confined agent is placed first (`sandboxing.rs`, on the blocking pool: it looks at
//! the file system): as the user, or under the agent's own policy and workspace, through the
//! launcher exactly like the agent's bash calls (with a private temporary directory of its own).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use super::job::{Confined, Job, RunEnd};
use super::sandboxing::{Hook, Placement};
use crate::exec::{CommandSpec, Executor, SandboxRequest};

/// Runs one hook; never fails (a hook that cannot start ends with a `failure`).
pub(super) async fn run_one(executor: &Arc<Executor>, job: Job) -> RunEnd {
    let started = Instant::now();
    let placement = place(executor, &job).await;
    let confined = match placement {
        Placement::Refused(reason) => {
            return RunEnd {
                failure: Some(reason),
                duration: started.elapsed(),
                ..RunEnd::default()
            };
        }
        Placement::User => None,
        Placement::Sandbox(reason) => job.reach.as_ref().map(|reach| {
            (
                SandboxRequest {
                    policy: reach.policy,
                    workspace: reach.workspace.clone(),
                },
                Confined {
                    policy: reach.policy,
                    reason,
                },
            )
        }),
    };
    if job.http.is_some() {
        return super::http::run(job, executor).await;
    }
    let (sandbox, confined) = confined.unzip();
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
        sandbox,
        // A hook's output is decoded, not shown.
        output: None,
        // Hooks are dshd's configuration, not the agent's work: they run in dshd's environment.
        base_env: None,
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
                sandbox: confined,
            }
        }
        Err(e) => RunEnd {
            failure: Some(format!("could not run the hook: {e}")),
            duration: started.elapsed(),
            sandbox: confined,
            ..RunEnd::default()
        },
    }
}

/// Where `job` runs: as the user unless its agent is confined (then decided on the blocking
/// pool). A decision that cannot be made confines a command and refuses an HTTP hook.
async fn place(executor: &Arc<Executor>, job: &Job) -> Placement {
    let Some(reach) = job.reach.clone() else {
        return Placement::User;
    };
    let executor = executor.clone();
    let http = job.http.is_some();
    let (file, command, cwd, env) = (
        job.file.clone(),
        job.command.clone(),
        job.cwd.clone(),
        job.env.clone(),
    );
    let placed = tokio::task::spawn_blocking(move || {
        let vars = |name: &str| variable(&executor, &env, &cwd, name);
        reach.place(&Hook {
            file: &file,
            http,
            command: &command,
            cwd: &cwd,
            vars: &vars,
        })
    })
    .await;
    placed.unwrap_or_else(|e| {
        let why = format!("where the hook may run could not be decided ({e})");
        if http {
            Placement::Refused(why)
        } else {
            Placement::Sandbox(why)
        }
    })
}

/// The value a hook's shell will have for `name`, when dsh knows it: the hook's own variables,
/// `PWD` (its cwd), then what every command gets from dshd's environment.
fn variable(
    executor: &Executor,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    name: &str,
) -> Option<String> {
    if let Some(value) = env.get(name) {
        return Some(value.clone());
    }
    if name == "PWD" {
        return Some(cwd.to_string_lossy().into_owned());
    }
    let value = executor.command_var(name).ok().flatten()?;
    Some(value.to_string_lossy().into_owned())
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
