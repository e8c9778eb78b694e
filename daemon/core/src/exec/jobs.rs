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
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::outcome::{push_line, signal_name};
use super::output::Collector;
use crate::locks::lock;
use dsh_session::SessionId;

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

/// The most bytes of each stream one read of a job's output returns: a reader pages through a
/// long output (`more`) instead of getting it in one message.
pub(crate) const JOB_READ_LIMIT: usize = 64 * 1024;

/// One consuming read of a job's output: the next bytes of each stream, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutput {
    /// The job.
    pub id: JobId,
    /// Stdout from `stdout_offset` on (lossy UTF-8; a character is never split between reads).
    pub stdout: String,
    /// Stderr from `stderr_offset` on.
    pub stderr: String,
    /// Whole-stream byte offset of this read's first stdout byte.
    pub stdout_offset: u64,
    /// Same for stderr.
    pub stderr_offset: u64,
    /// Stdout bytes skipped before `stdout_offset` because no copy holds them, and why; a reader
    /// is told once, at the read that skips them.
    pub stdout_missing: Option<(u64, &'static str)>,
    /// Same for stderr.
    pub stderr_missing: Option<(u64, &'static str)>,
    /// More output is there already: read again for it.
    pub more: bool,
    /// The job's state when the read was taken. When `Finished` and not `more`, nothing more
    /// will come.
    pub state: JobState,
}

impl JobOutput {
    /// The text a model sees: the new stdout, `[stderr]` and the new stderr if any,
    /// `(no new output)` if neither, a note for bytes no copy holds, a note when more is waiting,
    /// and the status line.
    pub fn render(&self) -> String {
        let mut out = self.stdout.clone();
        if !self.stderr.is_empty() {
            push_line(&mut out, "[stderr]\n");
            out.push_str(&self.stderr);
        }
        if out.is_empty() {
            out.push_str("(no new output)");
        }
        for (stream, missing) in [
            ("stdout", self.stdout_missing),
            ("stderr", self.stderr_missing),
        ] {
            if let Some((bytes, why)) = missing {
                push_line(
                    &mut out,
                    &format!("[{bytes} bytes of {stream} before this were not kept: {why}]"),
                );
            }
        }
        if self.more {
            push_line(
                &mut out,
                "[more output is waiting: read the job's output again for the next part]",
            );
        }
        match &self.state {
            JobState::Running => push_line(&mut out, "[status: running]"),
            JobState::Finished(end) => push_line(&mut out, &end.status_line()),
        }
        out
    }

    /// Nothing more will come: the job ended and this read reached the end of its output.
    pub fn is_last(&self) -> bool {
        matches!(self.state, JobState::Finished(_)) && !self.more
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
    /// Whole-stream offsets of the next read (stdout, stderr).
    cursor: Mutex<(u64, u64)>,
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
            cursor: Mutex::new((0, 0)),
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

    /// A consuming read: the next bytes of each stream, at most [`JOB_READ_LIMIT`] of each.
    pub(crate) fn read(&self) -> JobOutput {
        // The state is sampled first: the task finishes the collectors before it publishes the
        // end, so a `Finished` read is guaranteed to see the last bytes.
        let state = self.state();
        let mut cursor = lock(&self.cursor);
        let read = |collector: &Mutex<Collector>, offset: u64| {
            let c = lock(collector);
            let read = c.read_from(offset, JOB_READ_LIMIT);
            let missing = (read.missing > 0).then(|| (read.missing, c.missing_reason()));
            (read, missing)
        };
        let (out, out_missing) = read(&self.stdout, cursor.0);
        let (err, err_missing) = read(&self.stderr, cursor.1);
        *cursor = (out.next, err.next);
        let more = out.more || err.more;
        // Once a finished job's output was read to the end nothing can want its spill files.
        if matches!(state, JobState::Finished(_)) && !more {
            lock(&self.stdout).release_spill();
            lock(&self.stderr).release_spill();
        }
        JobOutput {
            id: self.id.clone(),
            stdout: super::tap::lossy(&out.bytes).into_owned(),
            stderr: super::tap::lossy(&err.bytes).into_owned(),
            stdout_offset: out.start,
            stderr_offset: err.start,
            stdout_missing: out_missing,
            stderr_missing: err_missing,
            more,
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
    /// Adds a job, first forgetting the oldest finished jobs beyond `max_finished`.
    pub(crate) fn insert(&self, job: Arc<Job>, max_finished: usize) {
        let mut map = lock(&self.jobs);
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
        lock(&self.jobs).get(id).cloned()
    }

    /// Jobs matching `filter`, oldest first.
    pub(crate) fn select(&self, filter: impl Fn(&Job) -> bool) -> Vec<Arc<Job>> {
        let mut jobs: Vec<Arc<Job>> = lock(&self.jobs)
            .values()
            .filter(|j| filter(j))
            .cloned()
            .collect();
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
            stdout_offset: 0,
            stderr_offset: 0,
            stdout_missing: None,
            stderr_missing: None,
            more: false,
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
        assert!(o.is_last());
        o.stdout = "tail\n".into();
        o.stdout_missing = Some((10, "its spill file stopped at shell.spill_cap_bytes"));
        o.more = true;
        assert_eq!(
            o.render(),
            "tail\n[10 bytes of stdout before this were not kept: its spill file stopped at \
             shell.spill_cap_bytes]\n[more output is waiting: read the job's output again for \
             the next part]\n[status: completed, exit code: 0]"
        );
        assert!(!o.is_last());
    }
}
