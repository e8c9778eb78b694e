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
//! (the agent closed, or the one call of a command of no agent ended).

use std::io;
use std::sync::mpsc;

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

impl ConfinedSpawner {
    /// Starts a thread and restricts it to `plan`; refused (no thread is left) when the kernel
    /// cannot enforce the plan or a root fails its check when opened.
    pub(crate) fn start(plan: Plan) -> Result<Self, SandboxError> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready, restricted) = mpsc::sync_channel(1);
        let thread_plan = plan.clone();
        std::thread::Builder::new()
            .name("dsh-confined".to_owned())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let outcome = restrict_current_thread(&thread_plan);
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
            })
            .map_err(|e| SandboxError::Apply {
                reason: format!("cannot start a confined thread: {e}"),
            })?;
        let roots = restricted
            .recv()
            .map_err(|_| SandboxError::Apply {
                reason: "the confined thread ended before it was restricted".to_owned(),
            })?
            .map_err(|reason| SandboxError::Apply { reason })?;
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
