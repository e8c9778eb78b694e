//! The result of a foreground command and its text for a model (CONTRACTS §6).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::Signal;

use super::output::{StreamSnapshot, decode_tail};
use super::process::Ended;

/// How a foreground command ended, with its captured output.
///
/// `exit_code`, `signal`, `timed_out` and `aborted` are distinct facts: a timed-out command usually
/// also has `signal == Some(SIGTERM)` (or `SIGKILL` when it ignored the first signal); a command
/// that kills itself has a signal but is neither timed out nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// Exit status when the shell exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the shell, if it was killed.
    pub signal: Option<i32>,
    /// The call's timeout fired (the group was then terminated).
    pub timed_out: bool,
    /// The call was cancelled (its token, or executor shutdown) before the command ended.
    pub aborted: bool,
    /// The effective timeout the command ran under (after defaulting and clamping).
    pub timeout: Duration,
    /// Stdout, decoded lossily; only the tail when `stdout_truncated`.
    pub stdout: String,
    /// Stderr, decoded lossily; only the tail when `stderr_truncated`.
    pub stderr: String,
    /// Stdout was longer than the memory cap.
    pub stdout_truncated: bool,
    /// Stderr was longer than the memory cap.
    pub stderr_truncated: bool,
    /// Bytes written to stdout in total.
    pub stdout_bytes: u64,
    /// Bytes written to stderr in total.
    pub stderr_bytes: u64,
    /// Private 0600 file holding stdout from byte 0, when it was truncated and the spill worked.
    pub stdout_spill: Option<PathBuf>,
    /// Same for stderr.
    pub stderr_spill: Option<PathBuf>,
    /// The stdout spill stopped at the spill cap (it holds only the head of the stream).
    pub stdout_spill_capped: bool,
    /// Same for stderr.
    pub stderr_spill_capped: bool,
    /// A truncated stream kept no full copy because the spill files together already held
    /// `shell.spill_total_cap_bytes`.
    pub spill_no_room: bool,
    /// Wall time from spawn to the end of capture.
    pub duration: Duration,
}

impl CommandOutcome {
    pub(crate) fn from_parts(
        ended: Ended,
        timeout: Duration,
        stdout: StreamSnapshot,
        stderr: StreamSnapshot,
        duration: Duration,
    ) -> Self {
        Self {
            exit_code: ended.exit_code,
            signal: ended.signal,
            timed_out: ended.timed_out,
            aborted: ended.aborted,
            timeout,
            stdout: decode_tail(&stdout.bytes, stdout.truncated),
            stderr: decode_tail(&stderr.bytes, stderr.truncated),
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            stdout_bytes: stdout.total,
            stderr_bytes: stderr.total,
            stdout_spill: stdout.spill,
            stderr_spill: stderr.spill,
            stdout_spill_capped: stdout.spill_capped,
            stderr_spill_capped: stderr.spill_capped,
            spill_no_room: stdout.spill_no_room || stderr.spill_no_room,
            duration,
        }
    }

    /// The name of [`Self::signal`], e.g. `SIGKILL`.
    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }

    /// Exited normally with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.signal.is_none() && !self.timed_out && !self.aborted
    }

    /// The text a model sees: stdout, then `[stderr]` and stderr if any, `(no output)` if both are
    /// empty, then one marker per line: truncation notes, `[timed out after Nms]`, `[aborted]`, and
    /// last either `[killed by signal: SIGX]` or `[exit code: N]` (non-zero only).
    pub fn render(&self) -> String {
        let mut out = self.stdout.clone();
        if self.stdout_truncated {
            push_line(
                &mut out,
                &truncation_note(
                    "stdout",
                    self.stdout_bytes,
                    self.stdout_spill.as_deref(),
                    self.stdout_spill_capped,
                    self.spill_no_room,
                ),
            );
        }
        if !self.stderr.is_empty() || self.stderr_truncated {
            push_line(&mut out, "[stderr]\n");
            out.push_str(&self.stderr);
            if self.stderr_truncated {
                push_line(
                    &mut out,
                    &truncation_note(
                        "stderr",
                        self.stderr_bytes,
                        self.stderr_spill.as_deref(),
                        self.stderr_spill_capped,
                        self.spill_no_room,
                    ),
                );
            }
        }
        if out.is_empty() {
            out.push_str("(no output)");
        }
        if self.timed_out {
            push_line(
                &mut out,
                &format!("[timed out after {}ms]", self.timeout.as_millis()),
            );
        }
        if self.aborted {
            push_line(&mut out, "[aborted]");
        }
        if let Some(signal) = self.signal {
            push_line(
                &mut out,
                &format!("[killed by signal: {}]", signal_name(signal)),
            );
        } else if let Some(code) = self.exit_code.filter(|c| *c != 0) {
            push_line(&mut out, &format!("[exit code: {code}]"));
        }
        out
    }
}

/// Appends `line`, starting a new line first unless `out` is empty or already ends with one.
pub(crate) fn push_line(out: &mut String, line: &str) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(line);
}

fn truncation_note(
    stream: &str,
    total: u64,
    spill: Option<&Path>,
    capped: bool,
    no_room: bool,
) -> String {
    let head = format!("[{stream} truncated: {total} bytes in total, only the end is shown");
    match (spill, capped) {
        (None, _) if no_room => {
            format!("{head}; no full copy: the spill files are full (shell.spill_total_cap_bytes)]")
        }
        (Some(path), false) => format!("{head}; full output: {}]", path.display()),
        (Some(path), true) => format!(
            "{head}; the beginning (up to the spill limit) is in {}]",
            path.display()
        ),
        (None, _) => format!("{head}; full output unavailable]"),
    }
}

/// The conventional name of signal number `signal` (`SIGTERM`), or `signal N` when it has none
/// (real-time signals).
pub fn signal_name(signal: i32) -> String {
    const NAMES: &[(Signal, &str)] = &[
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ILL, "SIGILL"),
        (Signal::TRAP, "SIGTRAP"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::KILL, "SIGKILL"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
        (Signal::CHILD, "SIGCHLD"),
        (Signal::CONT, "SIGCONT"),
        (Signal::STOP, "SIGSTOP"),
        (Signal::TSTP, "SIGTSTP"),
        (Signal::TTIN, "SIGTTIN"),
        (Signal::TTOU, "SIGTTOU"),
        (Signal::URG, "SIGURG"),
        (Signal::XCPU, "SIGXCPU"),
        (Signal::XFSZ, "SIGXFSZ"),
        (Signal::VTALARM, "SIGVTALRM"),
        (Signal::PROF, "SIGPROF"),
        (Signal::WINCH, "SIGWINCH"),
        (Signal::IO, "SIGIO"),
        (Signal::SYS, "SIGSYS"),
        #[cfg(any(target_os = "linux", target_os = "android"))]
        (Signal::STKFLT, "SIGSTKFLT"),
        #[cfg(any(target_os = "linux", target_os = "android"))]
        (Signal::POWER, "SIGPWR"),
    ];
    NAMES
        .iter()
        .find(|(s, _)| s.as_raw() == signal)
        .map_or_else(
            || format!("signal {signal}"),
            |(_, name)| (*name).to_owned(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(stdout: &str, stderr: &str, exit_code: Option<i32>) -> CommandOutcome {
        CommandOutcome {
            exit_code,
            signal: None,
            timed_out: false,
            aborted: false,
            timeout: Duration::from_secs(120),
            stdout: stdout.into(),
            stderr: stderr.into(),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_bytes: stdout.len() as u64,
            stderr_bytes: stderr.len() as u64,
            stdout_spill: None,
            stderr_spill: None,
            stdout_spill_capped: false,
            stderr_spill_capped: false,
            spill_no_room: false,
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn stdout_only_success_has_no_marker() {
        assert_eq!(outcome("hi\n", "", Some(0)).render(), "hi\n");
        assert_eq!(outcome("hi", "", Some(0)).render(), "hi");
    }

    #[test]
    fn stderr_section_gets_a_separator_only_when_needed() {
        assert_eq!(
            outcome("out\n", "err\n", Some(0)).render(),
            "out\n[stderr]\nerr\n"
        );
        assert_eq!(
            outcome("out", "err", Some(0)).render(),
            "out\n[stderr]\nerr"
        );
        assert_eq!(outcome("", "err\n", Some(0)).render(), "[stderr]\nerr\n");
    }

    #[test]
    fn empty_output_says_so() {
        assert_eq!(outcome("", "", Some(0)).render(), "(no output)");
        assert_eq!(
            outcome("", "", Some(3)).render(),
            "(no output)\n[exit code: 3]"
        );
    }

    #[test]
    fn non_zero_exit_marker_is_last() {
        assert_eq!(
            outcome("a\n", "b", Some(2)).render(),
            "a\n[stderr]\nb\n[exit code: 2]"
        );
    }

    #[test]
    fn timeout_and_signal_markers() {
        let mut o = outcome("partial\n", "", None);
        o.timed_out = true;
        o.timeout = Duration::from_millis(1500);
        o.signal = Some(Signal::KILL.as_raw());
        assert_eq!(
            o.render(),
            "partial\n[timed out after 1500ms]\n[killed by signal: SIGKILL]"
        );
        assert_eq!(o.signal_name().as_deref(), Some("SIGKILL"));
        assert!(!o.success());
    }

    #[test]
    fn abort_marker_precedes_the_signal() {
        let mut o = outcome("", "", None);
        o.aborted = true;
        o.signal = Some(Signal::TERM.as_raw());
        assert_eq!(
            o.render(),
            "(no output)\n[aborted]\n[killed by signal: SIGTERM]"
        );
    }

    #[test]
    fn truncation_mentions_the_spill() {
        let mut o = outcome("tail", "", Some(0));
        o.stdout_truncated = true;
        o.stdout_bytes = 100_000;
        o.stdout_spill = Some("/tmp/s/out.log".into());
        assert_eq!(
            o.render(),
            "tail\n[stdout truncated: 100000 bytes in total, only the end is shown; \
             full output: /tmp/s/out.log]"
        );
        o.stdout_spill_capped = true;
        assert!(
            o.render()
                .contains("the beginning (up to the spill limit) is in /tmp/s/out.log")
        );
        o.stdout_spill = None;
        assert!(o.render().ends_with("full output unavailable]"));
    }

    #[test]
    fn stderr_truncation_follows_stderr() {
        let mut o = outcome("", "e", Some(1));
        o.stderr_truncated = true;
        o.stderr_bytes = 70_000;
        assert_eq!(
            o.render(),
            "[stderr]\ne\n[stderr truncated: 70000 bytes in total, only the end is shown; \
             full output unavailable]\n[exit code: 1]"
        );
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(40), "signal 40");
    }
}
