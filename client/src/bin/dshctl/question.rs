//! The approval question `dshctl prompt` asks on a terminal (`allow call …? [y/N]`).
//!
//! The answer is read without blocking the turn's stream: while the question is open, events keep
//! arriving and are shown above it, and the question closes by itself when the request is decided
//! elsewhere (another terminal, the timeout, a cancel) or Ctrl-C cancels the turn. Reading a
//! blocked `read_line` on a thread could do neither: it would hold the terminal until Enter.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use dsh_proto::v1;
use tokio::sync::oneshot;

use crate::wire;

/// A pending `approval/request` of some agent of the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The agent whose call waits.
    pub agent: String,
    /// The waiting call.
    pub call_id: String,
}

impl Request {
    /// The request an `approval/request` or `approval/decision` event is about.
    pub fn of(event: &v1::Event) -> Self {
        Self {
            agent: event.session_id.clone(),
            call_id: wire::event_data(event)["callId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

/// How often the reader looks whether its question was closed.
const CLOSED_CHECK: Duration = Duration::from_millis(100);

/// The question on screen, and the thread reading its answer.
#[derive(Debug)]
struct Open {
    request: Request,
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
    waiting: VecDeque<Request>,
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

    /// Asks about `request` now, or after the questions before it.
    pub fn ask(&mut self, request: Request) {
        self.waiting.push_back(request);
        self.next();
    }

    /// `request` was decided (by anyone): its question closes, or it is not asked at all. True
    /// when it was the open question.
    pub fn decided(&mut self, request: &Request) -> bool {
        self.waiting.retain(|r| r != request);
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
        if self.open.is_some() && self.redraw {
            eprint!("\r\x1b[2K");
        }
    }

    /// Shows the open question again, below what was printed since [`hide`](Self::hide).
    pub fn show(&self) {
        if let Some(open) = &self.open
            && self.redraw
        {
            eprint!("{}", prompt(&open.request));
            let _ = std::io::stderr().flush();
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
        if let Some(request) = self.waiting.pop_front() {
            eprint!("{}", prompt(&request));
            let _ = std::io::stderr().flush();
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
                line,
                closed,
            });
        }
    }

    /// Takes the open question off the screen, with whatever was typed of its answer: left in
    /// the terminal, a half-typed `y` would be read by the shell after dshctl exits.
    fn close(&mut self) {
        if let Some(open) = self.open.take() {
            open.closed.store(true, Ordering::SeqCst);
        }
        let _ = rustix::termios::tcflush(std::io::stdin(), rustix::termios::QueueSelector::IFlush);
        if self.redraw {
            eprint!("\r\x1b[2K");
        } else {
            eprintln!();
        }
        let _ = std::io::stderr().flush();
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

fn prompt(request: &Request) -> String {
    format!("allow call {}? [y/N] ", request.call_id)
}
