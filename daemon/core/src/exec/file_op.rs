//! One file operation run through the launcher (`dsh-launch --file-op`), confined by the same
//! plan as the caller's commands and under the same limits: the request goes in on stdin, the
//! reply comes back on stdout, the process is timed out, cancelled and killed like a command.

use std::sync::{Arc, Mutex};

use super::output::Collector;
use super::process;
use super::tap::OutputStream;
use super::{CommandSpec, ExecError, Executor};
use crate::locks::lock;

/// What stderr keeps of a file operation: the launcher writes one line when it refuses.
const STDERR_CAP: usize = 4096;

/// How one file operation's process ended, with what it wrote.
#[derive(Debug)]
pub(crate) struct FileOpRun {
    /// The launcher's exit status, when it exited by itself.
    pub exit_code: Option<i32>,
    /// It ran out of time (the executor's limits, as for a command).
    pub timed_out: bool,
    /// It was cancelled (the turn or the daemon stopped).
    pub aborted: bool,
    /// The reply's bytes, when they fit the cap (`None`: the reply was larger).
    pub stdout: Option<Vec<u8>>,
    /// What the launcher said on stderr (a refusal before the operation).
    pub stderr: String,
}

impl Executor {
    /// Runs the file operation whose encoded request is `spec.stdin` in the foreground, as
    /// [`Self::run`] runs a command (the same timeout, cancellation and confinement), keeping at
    /// most `reply_cap` bytes of the reply. `spec.command` is unused.
    pub(crate) async fn run_file_op(
        &self,
        mut spec: CommandSpec,
        reply_cap: usize,
    ) -> Result<FileOpRun, ExecError> {
        let _tracked = self.admit(&spec)?;
        let timeout = self.effective_timeout(spec.timeout);
        let out = Arc::new(Mutex::new(Collector::new(
            OutputStream::Stdout,
            reply_cap,
            self.spill.clone(),
        )));
        let err = Arc::new(Mutex::new(Collector::new(
            OutputStream::Stderr,
            STDERR_CAP,
            self.spill.clone(),
        )));
        let stdin = spec.stdin.take();
        let owner = spec.spill_owner.take();
        let (spawned, leftover) = self.spawn_as(&spec, stdin, owner.as_ref(), true)?;
        let ended = process::supervise(
            spawned,
            out.clone(),
            err.clone(),
            self.limits(Some(timeout)),
            &spec.cancel,
            &self.stop,
        )
        .await;
        leftover.finish_later();
        let mut out = lock(&out);
        let mut err = lock(&err);
        // Nothing reads past the cap: a spill of an oversized reply is of no use to anyone.
        out.release_spill();
        err.release_spill();
        let stdout = out.snapshot();
        let stderr = err.snapshot();
        Ok(FileOpRun {
            exit_code: ended.exit_code,
            timed_out: ended.timed_out,
            aborted: ended.aborted,
            stdout: (!stdout.truncated).then_some(stdout.bytes),
            stderr: String::from_utf8_lossy(&stderr.bytes).into_owned(),
        })
    }
}
