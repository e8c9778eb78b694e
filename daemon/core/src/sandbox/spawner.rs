//! A thread confined to one plan, on which confined commands are spawned.
//!
//! Landlock restricts the thread that asks, and every process that thread starts inherits the
//! domain. So instead of starting a helper that confines itself and then `exec`s the shell (a
//! second `execve` per call, hundreds of microseconds), dshd keeps a thread per plan that has
//! restricted itself once and does nothing but spawn: the shell is an ordinary child of dshd,
//! started the same way as an unconfined one (`posix_spawn`, same pid, group, environment and
//! pipes), and is confined from its first instruction. No `unsafe` is needed: no `pre_exec`, and
//! the `landlock` crate wraps the syscalls.
//!
//! The thread runs no code but `Command::spawn`. An agent's thread ends when its
//! [`ConfinedSpawner`] is dropped (the agent closed); a command of no agent is handed over with
//! its plan and the thread ends once it has spawned it ([`spawn_once`]). One unrestricted thread
//! is kept waiting for the next plan ([`SPARE`]), so no call waits for a new thread to be
//! scheduled.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};

use tokio::process::{Child, Command};
use tokio::runtime::Handle;

use super::SandboxError;
use super::domain::{RootId, restrict_current_thread};
use super::plan::Plan;

/// The confined thread's stack: it only builds `posix_spawn`'s arguments.
const STACK_BYTES: usize = 256 * 1024;

/// A thread restricted to one [`Plan`], spawning commands that inherit its confinement.
#[derive(Debug)]
pub(crate) struct ConfinedSpawner {
    /// What the thread is restricted to; a call whose plan differs needs another spawner.
    plan: Plan,
    /// The writable roots as the thread opened them: a root made again at the same path is a
    /// different directory, which this domain does not grant.
    roots: Vec<RootId>,
    /// Requests to the thread; dropping it ends the thread.
    requests: mpsc::Sender<Request>,
}

/// Where a confined command is spawned.
#[derive(Debug)]
pub(crate) enum Spawner {
    /// On an agent's kept thread.
    Kept(Arc<ConfinedSpawner>),
    /// On a thread restricted for this command alone (a command of no agent): see [`spawn_once`].
    Once(Plan),
}

impl Spawner {
    /// Spawns `command` confined: refused (nothing runs) when the confinement cannot be applied,
    /// else the spawn's own outcome. Blocks as `Command::spawn` does; must be called within a
    /// tokio runtime.
    pub(crate) fn spawn(&self, command: Command) -> Result<io::Result<Child>, SandboxError> {
        match self {
            Self::Kept(thread) => Ok(thread.spawn(command)),
            Self::Once(plan) => spawn_once(plan.clone(), command),
        }
    }
}

/// One spawn asked of the confined thread.
struct Request {
    command: Command,
    /// The caller's runtime: the child's pipes and exit are registered with its reactor.
    runtime: Handle,
    reply: mpsc::SyncSender<io::Result<Child>>,
}

/// A thread's assignment: the plan to restrict itself to, and what to do then.
struct Assignment {
    plan: Plan,
    work: Work,
}

/// What a thread does once restricted.
enum Work {
    /// Say how restricting went, then serve requests until the spawner is dropped (an agent's
    /// thread).
    Serve {
        ready: mpsc::SyncSender<Result<Vec<RootId>, String>>,
        incoming: mpsc::Receiver<Request>,
    },
    /// Spawn one command and end (a command of no agent): one hand-off there and one back.
    Once {
        command: Command,
        runtime: Handle,
        reply: mpsc::SyncSender<Result<io::Result<Child>, String>>,
    },
}

/// An unrestricted thread already running and waiting for its assignment. Taking it, rather than
/// starting a thread, keeps a new thread's first turn on a CPU off the call's path: the kernel
/// queues a new thread behind the running ones, which cost milliseconds on a loaded machine,
/// while a sleeping thread that is woken runs at once. Refilled after each use.
static SPARE: Mutex<Option<mpsc::Sender<Assignment>>> = Mutex::new(None);

/// Starts a thread that waits for its assignment.
fn new_thread() -> io::Result<mpsc::Sender<Assignment>> {
    let (assign, assigned) = mpsc::channel::<Assignment>();
    std::thread::Builder::new()
        .name("dsh-spare".to_owned())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            // No assignment: the spare was dropped unused.
            if let Ok(assignment) = assigned.recv() {
                serve(assignment);
            }
        })?;
    Ok(assign)
}

/// The confined thread's life: restrict, then do its work.
fn serve(Assignment { plan, work }: Assignment) {
    // Named for what it now is (`ps -L`, `/proc/<pid>/task/*/comm`); a name is not worth failing for.
    let _ = rustix::thread::set_name(c"dsh-confined");
    let outcome = restrict_current_thread(&plan);
    match work {
        Work::Serve { ready, incoming } => {
            let confined = outcome.is_ok();
            // The caller waits for this; if it is gone there is nothing to serve.
            if ready.send(outcome).is_err() || !confined {
                return;
            }
            for mut request in incoming {
                let _entered = request.runtime.enter();
                // The caller waits on `reply`; if it went away, dropping the child kills it.
                let _ = request.reply.send(request.command.spawn());
            }
        }
        Work::Once {
            mut command,
            runtime,
            reply,
        } => {
            let spawned = outcome.map(|_| {
                let _entered = runtime.enter();
                command.spawn()
            });
            // As above: a child nobody waits for is killed when dropped.
            let _ = reply.send(spawned);
        }
    }
}

fn spare() -> MutexGuard<'static, Option<mpsc::Sender<Assignment>>> {
    SPARE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes sure a spare thread is waiting (best effort: without one the next call starts its own).
fn refill() {
    let mut slot = spare();
    if slot.is_none() {
        *slot = new_thread().ok();
    }
}

/// Hands `assignment` to a thread (the spare, else a new one).
fn assign(assignment: Assignment) -> Result<(), SandboxError> {
    let thread = match spare().take() {
        Some(thread) => thread,
        None => new_thread().map_err(|e| apply(format!("cannot start a confined thread: {e}")))?,
    };
    thread.send(assignment).map_err(|_| ended())?;
    // While that thread restricts itself: the next plan's thread.
    refill();
    Ok(())
}

fn apply(reason: String) -> SandboxError {
    SandboxError::Apply { reason }
}

fn ended() -> SandboxError {
    apply("the confined thread ended before it was restricted".to_owned())
}

/// Spawns `command` confined to `plan` on a thread of its own, which ends once it has: for a
/// command of no agent, whose plan (its own temporary directory) no other call shares. Refused
/// (nothing runs) as [`ConfinedSpawner::start`] is; otherwise the spawn's own outcome. Blocks as
/// `Command::spawn` does; must be called within a tokio runtime.
pub(crate) fn spawn_once(plan: Plan, command: Command) -> Result<io::Result<Child>, SandboxError> {
    let runtime = Handle::try_current().map_err(|e| apply(e.to_string()))?;
    let (reply, answer) = mpsc::sync_channel(1);
    assign(Assignment {
        plan,
        work: Work::Once {
            command,
            runtime,
            reply,
        },
    })?;
    answer.recv().map_err(|_| ended())?.map_err(apply)
}

impl ConfinedSpawner {
    /// Restricts a thread (the spare, else a new one) to `plan`; refused (no thread is left) when
    /// the kernel cannot enforce the plan or a root fails its check when opened.
    pub(crate) fn start(plan: Plan) -> Result<Self, SandboxError> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready, restricted) = mpsc::sync_channel(1);
        assign(Assignment {
            plan: plan.clone(),
            work: Work::Serve { ready, incoming },
        })?;
        let roots = restricted.recv().map_err(|_| ended())?.map_err(apply)?;
        Ok(Self {
            plan,
            roots,
            requests,
        })
    }

    /// Whether commands of `plan` may be spawned here: the same plan, and each writable root
    /// still the directory this thread's domain grants.
    pub(crate) fn serves(&self, plan: &Plan) -> bool {
        self.plan == *plan
            && self.roots.len() == plan.writable.len()
            && plan
                .writable
                .iter()
                .zip(&self.roots)
                .all(|(path, id)| RootId::at(path) == Some(*id))
    }

    /// Spawns `command` on the confined thread. Blocks for as long as the spawn takes, as
    /// `Command::spawn` itself does. Must be called within a tokio runtime.
    pub(crate) fn spawn(&self, command: Command) -> io::Result<Child> {
        let runtime = Handle::try_current().map_err(io::Error::other)?;
        let (reply, answer) = mpsc::sync_channel(1);
        let gone = || io::Error::other("the confined spawning thread has ended");
        self.requests
            .send(Request {
                command,
                runtime,
                reply,
            })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}
