//! Running `dshctl` on a terminal: a pseudo-terminal made by Python's `pty` module (the workspace
//! forbids the `unsafe` a Rust `forkpty` needs), relaying the screen to us as it is written, with
//! the moment each piece arrived, and our input (a typed answer, a Ctrl-C) to the terminal.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The relay: forks the command on a new pseudo-terminal (80 columns; it is the command's
/// controlling terminal, so Ctrl-C typed on it interrupts the command), copies what the command
/// writes to our stdout and our stdin to the terminal, and exits with the command's status (128+N
/// for a signal).
const RELAY: &str = r#"
import fcntl, os, pty, select, signal, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    # Ctrl-C must interrupt the command as it would at a terminal, even when we were started
    # with SIGINT ignored (a background job of a shell without job control): exec keeps that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
reading_stdin = True
while True:
    ready, _, _ = select.select([fd] + ([0] if reading_stdin else []), [], [])
    if fd in ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        os.write(1, data)
    if 0 in ready:
        data = os.read(0, 1024)
        if data:
            os.write(fd, data)
        else:
            reading_stdin = False
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
sys.exit(128 - code if code < 0 else code)
"#;

/// A command running on a pseudo-terminal.
#[derive(Debug)]
pub struct Pty {
    child: Child,
    input: Option<ChildStdin>,
    pieces: mpsc::Receiver<(Instant, Vec<u8>)>,
    /// Every byte the command wrote to the terminal so far, as it wrote them.
    raw: Vec<u8>,
    /// Everything shown so far (carriage returns removed).
    screen: String,
    /// The moment each complete line of `screen` arrived (when its newline did), in order.
    line_times: Vec<Instant>,
}

impl Pty {
    /// Starts `program ARGS...` on a new terminal, with `env` added to ours. Fails the test, with
    /// the install command, when `python3` is missing.
    pub fn spawn(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new("python3");
        command
            .arg("-c")
            .arg(RELAY)
            .arg(program)
            .args(args)
            .env_remove("DSH_SOCKET")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!("cannot run python3 for a pseudo-terminal ({e}); install it: apt-get install python3")
        });
        let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, pieces) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0_u8; 65536];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
        Self {
            input: child.stdin.take(),
            child,
            pieces,
            raw: Vec::new(),
            screen: String::new(),
            line_times: Vec::new(),
        }
    }

    /// Reads what arrives until `done(screen)` holds; fails the test with the screen after
    /// `limit`.
    pub fn wait_for(&mut self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(&self.screen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.pieces.recv_timeout(left) {
                Ok((at, bytes)) => self.add(at, &bytes),
                Err(_) => panic!("waited {limit:?} for {what}; the screen:\n{}", self.screen),
            }
        }
    }

    /// Reads until the command closes the terminal (it exited).
    pub fn read_to_end(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.pieces.recv_timeout(left) {
                Ok((at, bytes)) => self.add(at, &bytes),
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "the command did not end within {limit:?}; the screen:\n{}",
                        self.screen
                    )
                }
            }
        }
    }

    fn add(&mut self, at: Instant, bytes: &[u8]) {
        self.raw.extend_from_slice(bytes);
        let text = String::from_utf8_lossy(bytes).replace('\r', "");
        for _ in text.matches('\n') {
            self.line_times.push(at);
        }
        self.screen.push_str(&text);
    }

    /// Everything shown so far.
    pub fn screen(&self) -> &str {
        &self.screen
    }

    /// The bytes the terminal received so far, exactly (the terminal's own output processing
    /// turns each newline into a carriage return and a newline).
    pub fn bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The complete lines shown so far, each with the moment it arrived.
    ///
    /// A line that was erased (`\r\x1b[2K`, a spinner giving way to output) shows only what was
    /// written after its last erasure, as on a real terminal.
    pub fn lines(&self) -> Vec<(Instant, &str)> {
        self.line_times
            .iter()
            .copied()
            .zip(self.screen.split('\n'))
            .map(|(at, line)| (at, line.rsplit("\x1b[2K").next().unwrap_or(line)))
            .collect()
    }

    /// Types `bytes` on the terminal (`b"\x03"` is Ctrl-C).
    pub fn type_in(&mut self, bytes: &[u8]) {
        let input = self
            .input
            .as_mut()
            .unwrap_or_else(|| panic!("input closed"));
        input
            .write_all(bytes)
            .and_then(|()| input.flush())
            .unwrap_or_else(|e| panic!("type on the terminal: {e}"));
    }

    /// Waits for the command's exit status (after [`read_to_end`](Self::read_to_end)).
    pub fn wait(mut self) -> ExitStatus {
        drop(self.input.take());
        self.child
            .wait()
            .unwrap_or_else(|e| panic!("wait for the terminal's command: {e}"))
    }
}
