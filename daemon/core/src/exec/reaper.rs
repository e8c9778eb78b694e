//! Keeping every process the executor starts from outliving its owner.
//!
//! A shell leads its own process group, and the group is killed when its owner ends (see
//! `process`). A descendant that called `setsid`, or whose parent died (a double fork), has left
//! that group, so the group kill misses it. Three pieces close the gap, without privileges:
//!
//! - **Owner marker.** Every shell gets `DSHD_OWNER=<scope>:<daemon>:<owner>` in its environment,
//!   which every descendant inherits whatever group or session it moves to. `scope` is a hash of the
//!   harness home, `daemon` is this process's pid and start time (so a recycled pid never passes
//!   for it), `owner` is one foreground call or background job. The name is reserved: it is
//!   removed from the ambient layer and refused in a caller's `env`.
//! - **Adopting orphans.** The composition root makes dshd a child subreaper
//!   ([`adopt_orphans`]), so a process whose parent dies is re-parented to dshd instead of init.
//!   When an owner ends, [`Owner::close`] kills every adopted process carrying that owner's marker
//!   and reaps it, and repeats until the owner's group is empty and nothing of it is left; a
//!   periodic [`sweep`] does the same for owners that ended without a close (a dropped future) and
//!   reaps adopted processes that exited on their own. Processes without our marker (one that
//!   cleared its environment) are killed when the executor shuts down.
//! - **Leftovers of a killed daemon.** After `kill -9` of dshd its processes are re-parented to
//!   init. The next daemon on the same home scans `/proc` before it reports ready
//!   ([`kill_leftovers`]) and kills every process whose marker names this scope and a daemon that
//!   is no longer running. Identity is the marker, never a recorded pid, so a process that merely
//!   reused a pid is never touched.
//!
//! Children become adopted only in a process that called [`adopt_orphans`] (dshd); elsewhere
//! (the unit tests) orphans go to init as before, and only the group kill applies. Linux re-parents
//! orphans to the subreaper's first live thread, but a process can also become the child of any
//! of dshd's threads (`clone(CLONE_PARENT)` from a shell that thread spawned), so every thread's
//! `children` list is read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

use super::env::OWNER_MARKER;
use crate::locks::{lock, read_lock, write_lock};
use crate::sandbox::SandboxPolicy;
use dsh_session::SessionId;

/// How long closing an owner keeps killing and reaping before it gives up (and logs).
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// Owners whose processes may live. An adopted process whose marker names an owner not in here
/// (and this daemon) is killed.
static LIVE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());
/// A command this daemon started: under which sandbox, and on whose behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOrigin {
    /// The sandbox it was started under ([`SandboxPolicy::UNCONFINED`] for unconfined ones).
    pub sandbox: SandboxPolicy,
    /// The agent it runs for: its model's calls and background jobs, and a client's `Shell.Run`
    /// naming it. `None`: a command of no agent (a hook, a client's `Shell.Run` without one).
    pub agent: Option<SessionId>,
}

/// Pids of the shells the executor spawned and has not reaped (tokio reaps those, never us), with
/// the sandbox each was started under and its agent (`lineage` tells clients of the socket apart
/// by them).
static SHELLS: Mutex<BTreeMap<i32, CommandOrigin>> = Mutex::new(BTreeMap::new());
/// Spawns hold it shared; reaping an unknown zombie holds it exclusively, so a shell that exits
/// the instant it is spawned is in [`SHELLS`] before anyone can mistake it for an orphan.
static SPAWN_GATE: RwLock<()> = RwLock::new(());
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);
static SELF_ID: OnceLock<Option<DaemonId>> = OnceLock::new();

/// Makes this process the child subreaper of everything it starts from now on. Called once by the
/// daemon's composition root, before the first spawn (the flag is inherited at fork time).
pub fn adopt_orphans() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

fn adopting() -> bool {
    matches!(rustix::process::child_subreaper(), Ok(Some(_)))
}

/// A process's identity that survives pid reuse: its pid and its start time (clock ticks since
/// boot, from `/proc/<pid>/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DaemonId {
    pub(super) pid: i32,
    pub(super) start: u64,
}

pub(super) fn self_id() -> Option<DaemonId> {
    *SELF_ID.get_or_init(|| {
        let pid = rustix::process::getpid().as_raw_pid();
        read_stat(pid).map(|s| DaemonId {
            pid,
            start: s.start,
        })
    })
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub(super) state: char,
    /// The parent's pid (field 4).
    pub(super) ppid: i32,
    /// The controlling terminal's device number, 0 for none (field 7).
    pub(super) tty: i64,
    /// Clock ticks since boot (field 22).
    pub(super) start: u64,
}

pub(super) fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses `pid (comm) state ppid … starttime …`; `comm` may contain spaces and parentheses, so
/// the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // `fields[0]` is field 3 of stat(5).
    let ppid = fields.get(1)?.parse().ok()?;
    let tty = fields.get(4)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        tty,
        start,
    })
}

/// A decoded owner marker.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Marker {
    scope: String,
    daemon: DaemonId,
    owner: u64,
}

fn format_marker(scope: &str, daemon: DaemonId, owner: u64) -> String {
    format!("{scope}:{}.{}:{owner}", daemon.pid, daemon.start)
}

fn parse_marker(value: &str) -> Option<Marker> {
    let mut parts = value.split(':');
    let (scope, daemon, owner) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (pid, start) = daemon.split_once('.')?;
    Some(Marker {
        scope: scope.to_owned(),
        daemon: DaemonId {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        },
        owner: owner.parse().ok()?,
    })
}

/// The marker in `/proc/<pid>/environ`, if the process carries one (and we may read it).
fn read_marker(pid: i32) -> Option<Marker> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{OWNER_MARKER}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(parse_marker)
}

/// A stable short name for a harness home: FNV-1a, so it is the same in every build.
pub(crate) fn scope_of(home: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in home.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = String::with_capacity(16);
    let _ = write!(out, "{hash:016x}");
    out
}

/// One foreground call or background job: the processes carrying its marker live while it does.
pub(crate) struct Owner {
    id: u64,
    marker: String,
}

impl Owner {
    /// A new live owner under `scope`.
    pub(crate) fn new(scope: &str) -> Self {
        let id = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        lock(&LIVE).insert(id);
        // Without our own stat (no /proc) the marker still separates owners; leftovers of such a
        // daemon cannot be recognised after a crash, which `kill_leftovers` tolerates.
        let daemon = self_id().unwrap_or(DaemonId {
            pid: rustix::process::getpid().as_raw_pid(),
            start: 0,
        });
        Self {
            id,
            marker: format_marker(scope, daemon, id),
        }
    }

    /// The value of [`OWNER_MARKER`] for this owner's shell.
    pub(crate) fn marker(&self) -> &str {
        &self.marker
    }

    /// Ends the owner: kills every adopted process carrying its marker, reaps what exits, and
    /// repeats until the group `pgid` (whose leader has been reaped) is empty and none is left,
    /// within [`CLOSE_BOUND`].
    pub(crate) async fn close(self, pgid: Pid) {
        lock(&LIVE).remove(&self.id);
        if !adopting() {
            return;
        }
        let deadline = Instant::now() + CLOSE_BOUND;
        loop {
            // The group first: a member that exits re-parents its children to us before it is
            // gone, so once the group is empty a sweep that follows sees them all. (Swept first,
            // a member exiting in between would leave its orphan unseen by this last look.)
            let group_left = rustix::process::test_kill_process_group(pgid).is_ok();
            let left = sweep();
            if left == 0 && !group_left {
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    owner = self.id,
                    pgid = pgid.as_raw_pid(),
                    left,
                    group_left,
                    "processes of a finished command are still alive"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // A close that never ran (the supervising future was dropped): the periodic sweep kills
        // whatever still carries this marker.
        lock(&LIVE).remove(&self.id);
    }
}

/// Held while a shell is spawned; [`Self::register`] records its pid before the gate opens.
pub(crate) struct SpawnGate(#[allow(dead_code)] RwLockReadGuard<'static, ()>);

impl SpawnGate {
    pub(crate) fn enter() -> Self {
        Self(read_lock(&SPAWN_GATE))
    }

    /// Records a spawned shell, its sandbox and agent; dropping the returned value forgets it
    /// (after it was reaped).
    pub(crate) fn register(&self, pid: Pid, origin: CommandOrigin) -> ShellRecord {
        lock(&SHELLS).insert(pid.as_raw_pid(), origin);
        ShellRecord(pid.as_raw_pid())
    }
}

/// The sandbox and agent of `pid` when it is a shell the executor spawned and has not reaped. A
/// shell being spawned at this moment is waited for (its record is made under the gate), so a
/// child that asks the instant it starts is never mistaken for a stranger.
pub(super) fn spawned_shell(pid: i32) -> Option<CommandOrigin> {
    if let Some(origin) = lock(&SHELLS).get(&pid) {
        return Some(origin.clone());
    }
    let _settled = write_lock(&SPAWN_GATE);
    lock(&SHELLS).get(&pid).cloned()
}

/// A spawned shell known to the executor, so no sweep reaps it in tokio's place.
pub(crate) struct ShellRecord(i32);

impl Drop for ShellRecord {
    fn drop(&mut self) {
        lock(&SHELLS).remove(&self.0);
    }
}

/// What one look at our adopted children found.
#[derive(Debug, Default)]
struct Adopted {
    /// Alive and to be killed (marked by an owner of ours that ended; any, when `all`).
    doomed: Vec<i32>,
    /// Exited, waiting to be reaped.
    zombies: Vec<i32>,
}

/// Our children that we did not spawn: the adopted ones, and those a command made ours.
///
/// Every thread's list is read, not only the main thread's: a child belongs to the thread that
/// forked it, and a command can make a process of its own a child of that thread (a tokio worker
/// or blocking thread) with `clone(CLONE_PARENT)`. Such a process never passes through the main
/// thread's list, and it is as much the command's as an orphan is. (Threads wait for each other's
/// children: `waitpid` in [`reap`] reaps them whichever thread they belong to.)
fn adopted_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut children = BTreeSet::new();
    for task in tasks.flatten() {
        // A thread that ended meanwhile has no list left: its children moved to another thread,
        // whose list is read too (or is read in the next pass).
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                list.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    let shells = lock(&SHELLS);
    children
        .into_iter()
        .filter(|p| !shells.contains_key(p))
        .collect()
}

fn survey(all: bool) -> Adopted {
    let me = self_id();
    // Exclusive with spawns: a shell being spawned is a child of ours before it is in
    // [`SHELLS`], and its owner may be newer than any snapshot of [`LIVE`] taken before it was
    // spawned. With no spawn under way, every child not in [`SHELLS`] is one we did not spawn,
    // and every owner whose process exists is in the snapshot.
    let _gate = write_lock(&SPAWN_GATE);
    let live = lock(&LIVE).clone();
    let mut found = Adopted::default();
    for pid in adopted_children() {
        match read_stat(pid) {
            Some(Stat { state: 'Z', .. }) => found.zombies.push(pid),
            Some(_) => {
                let ended = read_marker(pid)
                    .is_some_and(|m| Some(m.daemon) == me && !live.contains(&m.owner));
                if all || ended {
                    found.doomed.push(pid);
                }
            }
            None => {}
        }
    }
    found
}

fn kill(pid: i32) {
    if let Some(pid) = Pid::from_raw(pid) {
        // ESRCH: it is already gone, which is what we want.
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

/// Reaps adopted zombies. Exclusive with spawns, and re-checked against [`SHELLS`] under the
/// gate, so a shell tokio waits for is never reaped here.
fn reap(zombies: &[i32]) {
    let _gate = write_lock(&SPAWN_GATE);
    let shells = lock(&SHELLS);
    for &pid in zombies.iter().filter(|p| !shells.contains_key(p)) {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}

fn sweep_with(all: bool) -> usize {
    if !adopting() {
        return 0;
    }
    let found = survey(all);
    for &pid in &found.doomed {
        kill(pid);
    }
    if !found.zombies.is_empty() {
        reap(&found.zombies);
    }
    found.doomed.len()
}

/// One pass: kills adopted processes whose owner has ended and reaps adopted zombies. Returns how
/// many were killed (they become zombies for the next pass). A no-op unless [`adopt_orphans`] was
/// called.
pub(crate) fn sweep() -> usize {
    sweep_with(false)
}

/// Kills and reaps every adopted process, marked or not (executor shutdown), within the bound.
pub(crate) async fn kill_all_adopted() {
    if !adopting() {
        return;
    }
    let deadline = Instant::now() + CLOSE_BOUND;
    while sweep_with(true) > 0 || !adopted_children().is_empty() {
        if Instant::now() >= deadline {
            tracing::warn!("adopted processes still alive at shutdown");
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Kills every process left by an earlier daemon of this `scope` that is no longer running, and
/// waits (bounded) until they are gone. Returns how many were killed.
pub(crate) fn kill_leftovers(scope: &str) -> usize {
    let me = self_id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(marker) = read_marker(pid) else {
            continue;
        };
        if marker.scope != scope || Some(marker.daemon) == me || daemon_alive(marker.daemon) {
            continue;
        }
        kill(pid);
        killed.push(pid);
    }
    let deadline = Instant::now() + CLOSE_BOUND;
    // SIGKILL is delivered asynchronously; "gone" includes a zombie waiting for init.
    while killed
        .iter()
        .any(|&p| read_stat(p).is_some_and(|s| s.state != 'Z'))
    {
        if Instant::now() >= deadline {
            tracing::warn!("processes of an earlier dshd are still alive");
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    killed.len()
}

/// Whether the daemon named by a marker still runs: same pid *and* same start time.
fn daemon_alive(daemon: DaemonId) -> bool {
    daemon.start != 0 && read_stat(daemon.pid).is_some_and(|s| s.start == daemon.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 \
                    1000 100 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 1,
                tty: 0,
                start: 987_654
            })
        );
        assert_eq!(parse_stat("4242 (x) Z 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn markers_round_trip_and_reject_garbage() {
        let id = DaemonId { pid: 77, start: 12 };
        let text = format_marker("00ff", id, 9);
        assert_eq!(text, "00ff:77.12:9");
        assert_eq!(
            parse_marker(&text),
            Some(Marker {
                scope: "00ff".into(),
                daemon: id,
                owner: 9
            })
        );
        for bad in ["", "a:b", "a:1.2:3:4", "a:1:3", "a:x.2:3", "a:1.2:-1"] {
            assert_eq!(parse_marker(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn scope_is_stable_and_separates_homes() {
        assert_eq!(scope_of("/home/u/.dsh"), scope_of("/home/u/.dsh"));
        assert_ne!(scope_of("/home/u/.dsh"), scope_of("/home/v/.dsh"));
        assert_eq!(scope_of("").len(), 16);
    }

    #[test]
    fn a_daemon_is_alive_only_with_its_own_start_time() {
        let me = self_id().expect("/proc/self/stat is readable");
        assert!(daemon_alive(me));
        // The same pid with another start time is a recycled pid: not our daemon.
        assert!(!daemon_alive(DaemonId {
            pid: me.pid,
            start: me.start + 1
        }));
        assert!(!daemon_alive(DaemonId {
            pid: me.pid,
            start: 0
        }));
    }

    #[test]
    fn owners_are_live_until_closed_or_dropped() {
        let a = Owner::new("s");
        let b = Owner::new("s");
        assert_ne!(a.marker(), b.marker());
        let id = a.id;
        assert!(lock(&LIVE).contains(&id));
        drop(a);
        assert!(!lock(&LIVE).contains(&id));
    }
}
