//! Faults of the network between a daemon and its database, made on a test server: every server
//! process stopped (a partition: nothing is answered, nothing is closed), and a path to the
//! server that never tells it that the client has gone.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::process::{Pid, Signal, kill_process};

use super::{PgServer, USER};

/// Every process of a server, stopped (`SIGSTOP`) by [`PgServer::pause`]; continued when
/// dropped or [`resume`](Self::resume)d.
#[derive(Debug)]
pub struct Paused {
    pids: Vec<Pid>,
}

impl PgServer {
    /// Stops every process of the server (the postmaster first, so it starts no new one, then
    /// each of its children): connections stay open and nothing on them is answered, as when the
    /// network to the server is cut without a word.
    pub fn pause(&self) -> Paused {
        let pidfile = self.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()));
        let postmaster: i32 = text.lines().next().unwrap().trim().parse().unwrap();
        let postmaster = Pid::from_raw(postmaster).unwrap();
        kill_process(postmaster, Signal::STOP).unwrap();
        let mut pids = vec![postmaster];
        pids.extend(children_of(postmaster));
        for pid in &pids[1..] {
            let _ = kill_process(*pid, Signal::STOP);
        }
        Paused { pids }
    }

    /// A socket directory whose `.s.PGSQL.<port>` leads to this server and never closes a
    /// connection to it: when a client goes away (killed, partitioned), the server is not told,
    /// as when the network between them fails silently. Its connection string is
    /// [`SilentPath::url`].
    pub fn silent_path(&self) -> SilentPath {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join(format!(".s.PGSQL.{}", self.port)))
            .unwrap_or_else(|e| panic!("bind the silent path: {e}"));
        let upstream = self.dir.join(format!(".s.PGSQL.{}", self.port));
        let held = Arc::new(Mutex::new(Vec::new()));
        let kept = held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = UnixStream::connect(&upstream) else {
                    continue;
                };
                relay(client, server, &kept);
            }
        });
        SilentPath {
            dir,
            port: self.port,
            _held: held,
        }
    }
}

impl Paused {
    /// Continues every stopped process.
    pub fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        for pid in self.pids.iter().rev() {
            let _ = kill_process(*pid, Signal::CONT);
        }
    }
}

/// The pids whose parent is `parent` (`/proc/<pid>/stat`, field 4).
fn children_of(parent: Pid) -> Vec<Pid> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: fields start after the last `)`.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent.as_raw_nonzero().get()) {
            children.extend(Pid::from_raw(pid));
        }
    }
    children
}

/// A path to the server that hides a client's departure from it (see
/// [`PgServer::silent_path`]). Dropping it closes what it kept open.
#[derive(Debug)]
pub struct SilentPath {
    dir: tempfile::TempDir,
    port: u16,
    /// The server ends of connections whose clients have gone, kept open.
    _held: Arc<Mutex<Vec<UnixStream>>>,
}

impl SilentPath {
    /// The key-value connection string of database `db` through this path.
    pub fn url(&self, db: &str) -> String {
        format!(
            "host={} port={} user={USER} dbname={db}",
            self.dir.path().display(),
            self.port
        )
    }

    /// The socket directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Copies bytes both ways between `client` and `server`. When the client goes, the server's end
/// is kept open in `held` (and what the server still sends is read and dropped), so the server
/// waits for a client that will never speak again.
fn relay(client: UnixStream, server: UnixStream, held: &Arc<Mutex<Vec<UnixStream>>>) {
    let (Ok(client_out), Ok(server_in), Ok(server_keep)) =
        (client.try_clone(), server.try_clone(), server.try_clone())
    else {
        return;
    };
    held.lock().unwrap().push(server_keep);
    std::thread::spawn(move || copy(client, server_in));
    std::thread::spawn(move || copy_or_drop(server, client_out));
}

/// Client to server, until the client goes; the server is not told.
fn copy(mut from: UnixStream, mut to: UnixStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// Server to client; once the client has gone, what the server sends is read and dropped.
fn copy_or_drop(mut from: UnixStream, mut to: UnixStream) {
    let mut buf = [0u8; 16 * 1024];
    let mut gone = false;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            return;
        }
        if !gone && to.write_all(&buf[..n]).is_err() {
            gone = true;
        }
    }
}
