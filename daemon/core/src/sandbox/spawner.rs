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
//! The thread runs no code but `Command::spawn`; it ends when its [`ConfinedSpawner`] is dropped
//! (the agent closed, or the one call of a command of no agent ended). One unrestricted thread is
//! kept waiting for the next plan ([`SPARE`]), so no call waits for a new thread to be scheduled.

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};

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

/// One spawn asked of the confined thread.
struct Request {
    command: Command,
    /// The caller's runtime: the child's pipes and exit are registered with its reactor.
    runtime: Handle,
    reply: mpsc::SyncSender<io::Result<Child>>,
}

/// A thread's assignment: the plan to restrict itself to, where to say how that went, and the
/// requests it serves from then on.
struct Assignment {
    plan: Plan,
    ready: mpsc::SyncSender<Result<Vec<RootId>, String>>,
    incoming: mpsc::Receiver<Request>,
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

/// The confined thread's life: restrict, then spawn on request until the spawner is dropped.
fn serve(
    Assignment {
        plan,
        ready,
        incoming,
    }: Assignment,
) {
    // Named for what it now is (`ps -L`, `/proc/<pid>/task/*/comm`); a name is not worth failing for.
    let _ = rustix::thread::set_name(c"dsh-confined");
    let outcome = restrict_current_thread(&plan);
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

impl ConfinedSpawner {
    /// Restricts a thread (the spare, else a new one) to `plan`; refused (no thread is left) when
    /// the kernel cannot enforce the plan or a root fails its check when opened.
    pub(crate) fn start(plan: Plan) -> Result<Self, SandboxError> {
        let apply = |reason: String| SandboxError::Apply { reason };
        let thread = match spare().take() {
            Some(thread) => thread,
            None => {
                new_thread().map_err(|e| apply(format!("cannot start a confined thread: {e}")))?
            }
        };
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready, restricted) = mpsc::sync_channel(1);
        let ended = || apply("the confined thread ended before it was restricted".to_owned());
        thread
            .send(Assignment {
                plan: plan.clone(),
                ready,
                incoming,
            })
            .map_err(|_| ended())?;
        // While that thread restricts itself: the next plan's thread.
        refill();
        let roots = restricted.recv().map_err(|_| ended())?.map_err(apply)?;
        Ok(Self {
            plan,
            roots,
            requests,
        })
    }

    /// What the thread is restricted to.
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
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
