//! Background jobs: ids, the table of jobs, consuming output reads, and their text for a model.
//!
//! A job is a supervised shell like a foreground command (same environment rules, own process
//! group, same end-of-life group kill) but without a timeout; it ends by itself, by
//! [`super::Executor::job_kill`], by its owner's jobs being killed, by the cancellation token of the
//! spec it was started with, or by executor shutdown. Its output is read incrementally: each read
//! returns only bytes not returned before. Finished jobs stay readable until more than
//! `max_finished_jobs` have piled up; then the oldest finished ones are forgotten.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::outcome::{push_line, signal_name};
use super::output::{Collector, decode_tail};
use super::process::lock;
use crate::session::SessionId;

/// Longest job id accepted from outside, in bytes.
const MAX_JOB_ID_BYTES: usize = 64;

/// A background job's id: `job-` followed by a UUID v7, so ids never repeat, also across restarts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(String);

/// Why a string is not a job id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid job id {value:?}: expected job-<uuid>")]
pub struct JobIdError {
    /// The offending value (cut to a bounded length).
    pub value: String,
}

impl JobId {
    pub(crate) fn new() -> Self {
        Self(format!("job-{}", uuid::Uuid::now_v7().hyphenated()))
    }

    /// Accepts an id from outside (a model, an RPC client). The UUID part is normalised to its
    /// lower-case hyphenated form.
    pub fn parse(value: &str) -> Result<Self, JobIdError> {
        let bad = || JobIdError {
            value: value.chars().take(MAX_JOB_ID_BYTES).collect(),
        };
        if value.len() > MAX_JOB_ID_BYTES {
            return Err(bad());
        }
        let uuid = value
            .strip_prefix("job-")
            .and_then(|rest| uuid::Uuid::try_parse(rest).ok())
            .ok_or_else(bad)?;
        Ok(Self(format!("job-{}", uuid.hyphenated())))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for JobId {
    type Err = JobIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobEnd {
    /// Exit status when the shell exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the shell.
    pub signal: Option<i32>,
    /// The job was killed on request (job kill, owner kill, its token, shutdown).
    pub killed: bool,
    /// Wall time from spawn to the end of capture.
    pub duration: Duration,
}

impl JobEnd {
    /// `[status: completed, exit code: N]` or `[status: killed, signal: SIGX]`: a job that died
    /// of a signal (even one it sent itself) counts as killed, and so does one that was asked to
    /// die and then exited (e.g. after trapping SIGTERM); a non-zero exit is still completed.
    pub fn status_line(&self) -> String {
        match (self.signal, self.killed) {
            (Some(signal), _) => format!("[status: killed, signal: {}]", signal_name(signal)),
            (None, true) => match self.exit_code {
                Some(code) => format!("[status: killed, exit code: {code}]"),
                None => "[status: killed]".to_owned(),
            },
            (None, false) => format!(
                "[status: completed, exit code: {}]",
                self.exit_code.unwrap_or(0)
            ),
        }
    }
}

/// Whether a job is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// The shell has not ended yet.
    Running,
    /// The shell ended and its output is complete.
    Finished(JobEnd),
}

/// One consuming read of a job's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutput {
    /// The job.
    pub id: JobId,
    /// Stdout produced since the previous read (lossy UTF-8).
    pub stdout: String,
    /// Stderr produced since the previous read (lossy UTF-8).
    pub stderr: String,
    /// Stdout bytes this reader missed because it fell behind the memory window.
    pub stdout_dropped: u64,
    /// Same for stderr.
    pub stderr_dropped: u64,
    /// Full stdout on disk, if it outgrew the memory window.
    pub stdout_spill: Option<PathBuf>,
    /// Full stderr on disk, if it outgrew the memory window.
    pub stderr_spill: Option<PathBuf>,
    /// The job's state when the read was taken. When `Finished`, nothing more will come.
    pub state: JobState,
}

impl JobOutput {
    /// The text a model sees: the new stdout, `[stderr]` and the new stderr if any,
    /// `(no new output)` if neither, a note when output was dropped, and the status line.
    pub fn render(&self) -> String {
        let mut out = self.stdout.clone();
        if !self.stderr.is_empty() {
            push_line(&mut out, "[stderr]\n");
            out.push_str(&self.stderr);
        }
        if out.is_empty() {
            out.push_str("(no new output)");
        }
        let dropped = self.stdout_dropped + self.stderr_dropped;
        if dropped > 0 {
            let spills: Vec<String> = [&self.stdout_spill, &self.stderr_spill]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect();
            let full = if spills.is_empty() {
                "unavailable".to_owned()
            } else {
                spills.join(", ")
            };
            push_line(
                &mut out,
                &format!(
                    "[{dropped} bytes of output were dropped from memory; full output: {full}]"
                ),
            );
        }
        match &self.state {
            JobState::Running => push_line(&mut out, "[status: running]"),
            JobState::Finished(end) => push_line(&mut out, &end.status_line()),
        }
        out
    }
}

/// A job's facts, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job.
    pub id: JobId,
    /// The session that started it, if any.
    pub owner: Option<SessionId>,
    /// The command line it runs.
    pub command: String,
    /// Running or finished.
    pub state: JobState,
    /// When it was started (wall clock).
    pub started_at: SystemTime,
}

/// One job's shared state: written by its supervising task, read by callers.
pub(crate) struct Job {
    pub id: JobId,
    pub owner: Option<SessionId>,
    pub command: String,
    pub started: Instant,
    /// `started` on the wall clock, for listings.
    pub started_at: SystemTime,
    pub stdout: Arc<Mutex<Collector>>,
    pub stderr: Arc<Mutex<Collector>>,
    /// Whole-stream offsets of the next read (stdout, stderr), and whether the reader ever fell
    /// behind the memory window (then only the spill files hold what it missed, so they stay).
    cursor: Mutex<(u64, u64, bool)>,
    /// Cancelled to kill the job; a child of the executor's stop token.
    pub kill: CancellationToken,
    kill_requested: AtomicBool,
    /// `Some` once the job has ended; published after the collectors are finished.
    pub end: watch::Sender<Option<JobEnd>>,
}

impl Job {
    pub(crate) fn new(
        owner: Option<SessionId>,
        command: String,
        stdout: Collector,
        stderr: Collector,
        kill: CancellationToken,
    ) -> Self {
        Self {
            id: JobId::new(),
            owner,
            command,
            started: Instant::now(),
            started_at: SystemTime::now(),
            stdout: Arc::new(Mutex::new(stdout)),
            stderr: Arc::new(Mutex::new(stderr)),
            cursor: Mutex::new((0, 0, false)),
            kill,
            kill_requested: AtomicBool::new(false),
            end: watch::channel(None).0,
        }
    }

    fn state(&self) -> JobState {
        match *self.end.borrow() {
            Some(end) => JobState::Finished(end),
            None => JobState::Running,
        }
    }

    /// Requests the kill. True only for the first request made while the job runs.
    pub(crate) fn request_kill(&self) -> bool {
        if self.end.borrow().is_some() || self.kill.is_cancelled() {
            return false;
        }
        if self.kill_requested.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.kill.cancel();
        true
    }

    /// A consuming read.
    pub(crate) fn read(&self) -> JobOutput {
        // The state is sampled first: the task finishes the collectors before it publishes the
        // end, so a `Finished` read is guaranteed to carry the last bytes.
        let state = self.state();
        let mut cursor = self.cursor.lock().unwrap_or_else(PoisonError::into_inner);
        let out = lock(&self.stdout).read_since(cursor.0);
        let err = lock(&self.stderr).read_since(cursor.1);
        let missed = cursor.2 || out.dropped > 0 || err.dropped > 0;
        *cursor = (out.next, err.next, missed);
        // A read of a finished job returns everything that is left. If the reader never fell
        // behind, it now has every byte and nothing can want the spill files: they go now (and
        // this read names none). Otherwise they stay until the job is forgotten.
        let spill = |collector: &Mutex<Collector>| {
            let mut c = lock(collector);
            if matches!(state, JobState::Finished(_)) && !missed {
                c.release_spill();
            }
            c.spill_info().0
        };
        let (out_spill, err_spill) = (spill(&self.stdout), spill(&self.stderr));
        JobOutput {
            id: self.id.clone(),
            stdout: decode_tail(&out.bytes, out.dropped > 0),
            stderr: decode_tail(&err.bytes, err.dropped > 0),
            stdout_dropped: out.dropped,
            stderr_dropped: err.dropped,
            stdout_spill: out_spill,
            stderr_spill: err_spill,
            state,
        }
    }

    pub(crate) fn info(&self) -> JobInfo {
        JobInfo {
            id: self.id.clone(),
            owner: self.owner.clone(),
            command: self.command.clone(),
            state: self.state(),
            started_at: self.started_at,
        }
    }
}

/// Every job the executor knows, running or finished.
#[derive(Default)]
pub(crate) struct JobTable {
    jobs: Mutex<HashMap<JobId, Arc<Job>>>,
}

impl JobTable {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a job, first forgetting the oldest finished jobs beyond `max_finished`.
    pub(crate) fn insert(&self, job: Arc<Job>, max_finished: usize) {
        let mut map = self.map();
        let mut finished: Vec<(Instant, JobId)> = map
            .values()
            .filter(|j| j.end.borrow().is_some())
            .map(|j| (j.started, j.id.clone()))
            .collect();
        if finished.len() > max_finished {
            finished.sort();
            for (_, id) in finished.iter().take(finished.len() - max_finished) {
                if let Some(job) = map.remove(id) {
                    // Forgotten: nothing can read its output any more.
                    lock(&job.stdout).release_spill();
                    lock(&job.stderr).release_spill();
                }
            }
        }
        map.insert(job.id.clone(), job);
    }

    pub(crate) fn get(&self, id: &JobId) -> Option<Arc<Job>> {
        self.map().get(id).cloned()
    }

    /// Jobs matching `filter`, oldest first.
    pub(crate) fn select(&self, filter: impl Fn(&Job) -> bool) -> Vec<Arc<Job>> {
        let mut jobs: Vec<Arc<Job>> = self.map().values().filter(|j| filter(j)).cloned().collect();
        jobs.sort_by_key(|j| j.started);
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_round_trip_and_reject_garbage() {
        let id = JobId::new();
        assert!(id.as_str().starts_with("job-"));
        assert_eq!(JobId::parse(id.as_str()).unwrap(), id);
        assert_eq!(id.as_str().parse::<JobId>().unwrap(), id);
        let upper = id.as_str().to_uppercase().replacen("JOB-", "job-", 1);
        assert_eq!(JobId::parse(&upper).unwrap(), id);
        for bad in [
            "",
            "job-",
            "job-1",
            "bash-1",
            "job-../../etc",
            &"x".repeat(1000),
        ] {
            let err = JobId::parse(bad).unwrap_err();
            assert!(err.value.len() <= MAX_JOB_ID_BYTES);
        }
        assert_ne!(JobId::new(), JobId::new());
    }

    fn end(exit_code: Option<i32>, signal: Option<i32>, killed: bool) -> JobEnd {
        JobEnd {
            exit_code,
            signal,
            killed,
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(
            end(Some(0), None, false).status_line(),
            "[status: completed, exit code: 0]"
        );
        assert_eq!(
            end(Some(3), None, false).status_line(),
            "[status: completed, exit code: 3]"
        );
        assert_eq!(
            end(None, Some(15), true).status_line(),
            "[status: killed, signal: SIGTERM]"
        );
        assert_eq!(
            end(None, Some(9), false).status_line(),
            "[status: killed, signal: SIGKILL]"
        );
        assert_eq!(
            end(Some(0), None, true).status_line(),
            "[status: killed, exit code: 0]"
        );
        assert_eq!(end(None, None, true).status_line(), "[status: killed]");
    }

    #[test]
    fn job_output_rendering() {
        let mut o = JobOutput {
            id: JobId::new(),
            stdout: "a".into(),
            stderr: "b\n".into(),
            stdout_dropped: 0,
            stderr_dropped: 0,
            stdout_spill: None,
            stderr_spill: None,
            state: JobState::Running,
        };
        assert_eq!(o.render(), "a\n[stderr]\nb\n[status: running]");
        o.stdout.clear();
        o.stderr.clear();
        o.state = JobState::Finished(end(Some(0), None, false));
        assert_eq!(
            o.render(),
            "(no new output)\n[status: completed, exit code: 0]"
        );
        o.stdout = "tail\n".into();
        o.stdout_dropped = 10;
        o.stdout_spill = Some("/s/out.log".into());
        assert_eq!(
            o.render(),
            "tail\n[10 bytes of output were dropped from memory; full output: /s/out.log]\n\
             [status: completed, exit code: 0]"
        );
    }
}
