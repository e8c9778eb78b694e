//! The approval question `dshctl prompt` asks on a terminal: the command as it will run, then
//! `allow call …? [y/N]`.
//!
//! The answer is read without blocking the turn's stream: while the question is open, events keep
//! arriving and are shown above it, and the question closes by itself when the request is decided
//! elsewhere (another terminal, the timeout, a cancel) or Ctrl-C cancels the turn. Reading a
//! blocked `read_line` on a thread could do neither: it would hold the terminal until Enter.
//!
//! The command is shown in [`safe::exact`]'s form, redrawn with the question each time: a
//! command's own escape sequences could otherwise have redrawn it as another command, and
//! the person answers what the question shows.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::oneshot;

use crate::safe::{self, Control, Terminal};

/// A pending `approval/request` of some agent of the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The agent whose call waits.
    pub agent: String,
    /// The waiting call.
    pub call_id: String,
}

impl Request {
    /// The request of `agent`'s call `call_id`.
    pub fn new(agent: &str, call_id: &str) -> Self {
        Self {
            agent: agent.to_owned(),
            call_id: call_id.to_owned(),
        }
    }
}

/// How often the reader looks whether its question was closed.
const CLOSED_CHECK: Duration = Duration::from_millis(100);

/// A request, with the command it would run (empty for a tool that runs none).
#[derive(Debug, Clone)]
struct Asked {
    request: Request,
    command: String,
}

/// The question on screen, and the thread reading its answer.
#[derive(Debug)]
struct Open {
    request: Request,
    /// The question as drawn.
    text: String,
    /// The answer line (empty at end of input).
    line: oneshot::Receiver<std::io::Result<String>>,
    /// Set when the question closes: the reader stops without reading.
    closed: Arc<AtomicBool>,
}

/// The questions of a turn: one open on the terminal at a time, the others waiting their turn.
#[derive(Debug)]
pub struct Questions {
    /// The question on screen.
    open: Option<Open>,
    /// Requests that came while another was open, in order.
    waiting: VecDeque<Asked>,
    /// stderr is a terminal: the question line can be erased and redrawn.
    redraw: bool,
}

impl Questions {
    /// Questions asked on stdin's terminal.
    pub fn on_stdin() -> anyhow::Result<Self> {
        Ok(Self {
            open: None,
            waiting: VecDeque::new(),
            redraw: std::io::stderr().is_terminal(),
        })
    }

    /// Whether a question is on screen.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Asks about `request` (an `approval/request` for `command`) now, or after the questions
    /// before it.
    pub fn ask(&mut self, request: Request, command: String) {
        self.waiting.push_back(Asked { request, command });
        self.next();
    }

    /// `request` was decided (by anyone): its question closes, or it is not asked at all. True
    /// when it was the open question.
    pub fn decided(&mut self, request: &Request) -> bool {
        self.waiting.retain(|asked| asked.request != *request);
        if self.open.as_ref().is_some_and(|o| o.request == *request) {
            self.close();
            self.next();
            return true;
        }
        false
    }

    /// Closes every question (the turn is being cancelled).
    pub fn close_all(&mut self) {
        self.waiting.clear();
        if self.open.is_some() {
            self.close();
        }
    }

    /// Erases the question line before something else is printed; [`show`](Self::show) puts it
    /// back.
    pub fn hide(&self) {
        if let Some(open) = &self.open
            && self.redraw
        {
            erase(&open.text);
        }
    }

    /// Shows the open question again, below what was printed since [`hide`](Self::hide).
    pub fn show(&self) {
        if let Some(open) = &self.open
            && self.redraw
        {
            draw(&open.text);
        }
    }

    /// The answer to the open question once a line is typed: the request and whether it is
    /// allowed (`y` or `yes`; anything else, and end of input, denies). Pending while no question
    /// is open. Cancel-safe: the line is still taken by the next call.
    pub async fn answer(&mut self) -> anyhow::Result<(Request, bool)> {
        let Some(open) = self.open.as_mut() else {
            return std::future::pending().await;
        };
        let line = (&mut open.line)
            .await
            .context("the terminal's reader stopped")?
            .context("cannot read the answer from the terminal")?;
        let line = line.trim().to_ascii_lowercase();
        let allow = matches!(line.as_str(), "y" | "yes");
        let Some(open) = self.open.take() else {
            return std::future::pending().await;
        };
        Ok((open.request, allow))
    }

    /// Opens the next waiting question, if none is open.
    pub fn next(&mut self) {
        if self.open.is_some() {
            return;
        }
        if let Some(Asked { request, command }) = self.waiting.pop_front() {
            let text = question(&request, &command);
            draw(&text);
            let closed = Arc::new(AtomicBool::new(false));
            let (tx, line) = oneshot::channel();
            let stop = Arc::clone(&closed);
            std::thread::spawn(move || {
                if let Some(line) = read_line(&stop) {
                    let _ = tx.send(line);
                }
            });
            self.open = Some(Open {
                request,
                text,
                line,
                closed,
            });
        }
    }

    /// Takes the open question off the screen, with whatever was typed of its answer: left in
    /// the terminal, a half-typed `y` would be read by the shell after dshctl exits.
    fn close(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        open.closed.store(true, Ordering::SeqCst);
        let _ = rustix::termios::tcflush(std::io::stdin(), rustix::termios::QueueSelector::IFlush);
        if self.redraw {
            erase(&open.text);
        } else {
            eprintln!();
        }
    }
}

/// Reads one line from stdin once one is there, or `None` when `closed` is set first. A
/// terminal in canonical mode is readable only once a whole line (or end of input) is typed, so
/// the read never blocks; polling, rather than a blocked read, lets the question close.
fn read_line(closed: &AtomicBool) -> Option<std::io::Result<String>> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    let timeout = Timespec {
        tv_sec: 0,
        tv_nsec: i64::try_from(CLOSED_CHECK.as_nanos()).unwrap_or(100_000_000),
    };
    loop {
        if closed.load(Ordering::SeqCst) {
            return None;
        }
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => break,
            Err(e) => return Some(Err(e.into())),
        }
    }
    if closed.load(Ordering::SeqCst) {
        return None;
    }
    let mut buf = [0_u8; 1024];
    Some(
        rustix::io::read(&stdin, &mut buf)
            .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
            .map_err(Into::into),
    )
}

/// Whether dshctl runs in its terminal's foreground: a background job (`dshctl prompt ... &`)
/// must not ask, its read would stop it (SIGTTIN) or take the shell's input.
pub fn in_the_foreground() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal()
        && rustix::termios::tcgetpgrp(&stdin).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// The question about `request`: the command it would run, in [`safe::exact`]'s form (its
/// further lines indented under the first), a note when that form escaped something, then
/// `allow call ID? [y/N] `.
fn question(request: &Request, command: &str) -> String {
    let mut text = String::new();
    if !command.is_empty() {
        let shown = safe::exact(command);
        text.push_str("  $ ");
        text.push_str(&shown.text.replace('\n', "\n    "));
        text.push('\n');
        if shown.escaped {
            text.push_str(
                "  (shown escaped: it holds control or invisible characters; \\\\ is one \\)\n",
            );
        }
    }
    text.push_str(&format!(
        "allow call {}? [y/N] ",
        safe::exact(&request.call_id).text
    ));
    text
}

/// Draws `question` on stderr.
fn draw(question: &str) {
    let mut err = safe::stderr();
    let _ = write!(err, "{question}").and_then(|()| err.flush());
}

/// Erases `question`, drawn last on stderr's terminal, with whatever was typed after it on its
/// line: every line it takes at the terminal's width, from its last up.
fn erase(question: &str) {
    let mut err = safe::stderr();
    let mut result = err.control(Control::EraseLine);
    for _ in 1..rows(question, terminal_width()) {
        result = result.and_then(|()| err.control(Control::EraseLineAbove));
    }
    let _ = result.and_then(|()| err.flush());
}

/// How many terminal lines `text` takes at `width` columns (a line exactly as wide as the
/// terminal takes one: the cursor waits at its end).
fn rows(text: &str, width: usize) -> usize {
    let width = width.max(1);
    text.split('\n')
        .map(|line| {
            unicode_width::UnicodeWidthStr::width(line)
                .div_ceil(width)
                .max(1)
        })
        .sum()
}

/// The width of stderr's terminal (80 when it cannot be read).
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|&columns| columns > 0)
        .unwrap_or(80)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            agent: "a".into(),
            call_id: "c1".into(),
        }
    }

    #[test]
    fn the_question_shows_the_command_as_it_runs() {
        assert_eq!(
            question(&request(), "cat <<'EOF'\nhi\nEOF"),
            "  $ cat <<'EOF'\n    hi\n    EOF\nallow call c1? [y/N] "
        );
        assert_eq!(question(&request(), ""), "allow call c1? [y/N] ");
        let spoof = question(&request(), "rm -rf ~ #\r\x1b[Kls -la");
        assert!(
            spoof.starts_with("  $ rm -rf ~ #\\r\\x1b[Kls -la\n  (shown escaped: "),
            "{spoof}"
        );
        let call = Request {
            call_id: "c1\r\x1b[2Kallow call c2".into(),
            ..request()
        };
        assert_eq!(
            question(&call, ""),
            "allow call c1\\r\\x1b[2Kallow call c2? [y/N] "
        );
    }

    #[test]
    fn a_question_takes_a_line_per_width_of_each_of_its_lines() {
        assert_eq!(rows("allow call c1? [y/N] ", 80), 1);
        assert_eq!(rows(&"x".repeat(80), 80), 1);
        assert_eq!(rows(&"x".repeat(81), 80), 2);
        assert_eq!(rows("  $ ls\n\nallow?", 80), 3);
        // Wide characters take two columns each.
        assert_eq!(rows(&"漢".repeat(41), 80), 2);
    }
}
