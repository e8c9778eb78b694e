//! The bridge's stdin and stdout. An editor hands them over as a pipe (`posix_spawn` with
//! `pipe()`, Python) or a stream socket (libuv's `socketpair()`, Node and Zed-style hosts): those
//! are read and written on the runtime's own thread, registered with its reactor, so a message
//! crosses no thread inside the bridge. Anything else (a terminal, a file) goes through tokio's
//! stdin and stdout, which do blocking reads and writes on the blocking pool.
//!
//! Non-blocking mode belongs to the open file, which the editor's end of a pipe does not share;
//! it is put back as it was when the bridge is done, for whoever holds the same file after us
//! (a wrapper script that `exec`s nothing, say).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, OFlags};
use tokio::io::{AsyncRead, AsyncWrite};

/// Where requests are read from.
pub type Input = Box<dyn AsyncRead + Unpin + Send>;
/// Where answers and updates are written.
pub type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// The process's stdin and stdout, on the reactor when they are pipes or stream sockets, and
/// what puts their files back as they were when dropped. Must be called inside the runtime.
pub fn open() -> (Input, Output, Restore) {
    let mut restore = Restore(Vec::new());
    let input: Input = match on_reactor(std::io::stdin().as_fd(), &mut restore.0) {
        Some(Reactor::Pipe(fd)) => match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
            Ok(pipe) => Box::new(pipe),
            Err(_) => Box::new(tokio::io::stdin()),
        },
        Some(Reactor::Socket(socket)) => Box::new(socket),
        None => Box::new(tokio::io::stdin()),
    };
    let output: Output = match on_reactor(std::io::stdout().as_fd(), &mut restore.0) {
        Some(Reactor::Pipe(fd)) => match tokio::net::unix::pipe::Sender::from_owned_fd(fd) {
            Ok(pipe) => Box::new(pipe),
            Err(_) => Box::new(tokio::io::stdout()),
        },
        Some(Reactor::Socket(socket)) => Box::new(socket),
        None => Box::new(tokio::io::stdout()),
    };
    (input, output, restore)
}

/// The files whose status flags were changed, with the flags they had; restored on drop.
pub struct Restore(Vec<(OwnedFd, OFlags)>);

impl Drop for Restore {
    fn drop(&mut self) {
        for (fd, flags) in &self.0 {
            // Best effort: the bridge is exiting either way.
            let _ = rustix::fs::fcntl_setfl(fd, *flags);
        }
    }
}

/// A standard stream the reactor can serve.
enum Reactor {
    /// A pipe (FIFO): a duplicate of the descriptor.
    Pipe(OwnedFd),
    /// A stream socket, already non-blocking.
    Socket(tokio::net::UnixStream),
}

/// `fd` as the reactor can serve it, or `None` when it is neither a pipe nor a stream socket.
/// The flags `fd`'s open file had are pushed to `restore` before they change.
fn on_reactor(fd: BorrowedFd<'_>, restore: &mut Vec<(OwnedFd, OFlags)>) -> Option<Reactor> {
    let kind = FileType::from_raw_mode(rustix::fs::fstat(fd).ok()?.st_mode);
    if !matches!(kind, FileType::Fifo | FileType::Socket) {
        return None;
    }
    if kind == FileType::Socket
        && rustix::net::sockopt::socket_type(fd).ok()? != rustix::net::SocketType::STREAM
    {
        return None;
    }
    let flags = rustix::fs::fcntl_getfl(fd).ok()?;
    let keep = rustix::io::fcntl_dupfd_cloexec(fd, 3).ok()?;
    let own = rustix::io::fcntl_dupfd_cloexec(fd, 3).ok()?;
    restore.push((keep, flags));
    match kind {
        FileType::Socket => {
            let socket = std::os::unix::net::UnixStream::from(own);
            socket.set_nonblocking(true).ok()?;
            tokio::net::UnixStream::from_std(socket)
                .ok()
                .map(Reactor::Socket)
        }
        _ => Some(Reactor::Pipe(own)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_and_stream_sockets_are_served_on_the_reactor_and_restored() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let (read, _write) = std::io::pipe().unwrap();
        let mut restore = Vec::new();
        let Some(Reactor::Pipe(fd)) = on_reactor(read.as_fd(), &mut restore) else {
            panic!("a pipe is not served on the reactor");
        };
        let _pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).unwrap();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(matches!(
            on_reactor(a.as_fd(), &mut restore),
            Some(Reactor::Socket(_))
        ));
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(on_reactor(file.as_fd(), &mut restore).is_none());
        assert_eq!(restore.len(), 2);
        assert!(
            rustix::fs::fcntl_getfl(&read)
                .unwrap()
                .contains(OFlags::NONBLOCK)
        );
        drop(Restore(restore));
        assert!(
            !rustix::fs::fcntl_getfl(&read)
                .unwrap()
                .contains(OFlags::NONBLOCK)
        );
        assert!(
            !rustix::fs::fcntl_getfl(&a)
                .unwrap()
                .contains(OFlags::NONBLOCK)
        );
    }
}
