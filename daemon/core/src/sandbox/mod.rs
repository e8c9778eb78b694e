//! Confining model commands with Landlock: the policy vocabulary, what the kernel offers, and the
//! plan of one confined launch (`docs/CONFIG.md`, "Sandbox").
//!
//! - [`SandboxPolicy`]: a filesystem [`SandboxMode`] and a [`Network`] switch, per agent. Children
//!   get their parent's policy or a stricter one ([`SandboxPolicy::check_child`]).
//! - [`LandlockSupport`]: the Landlock ABI of the running kernel, probed once without side effects.
//! - `plan`: what one confined launch needs (ABI, writable roots, protected paths), checked
//!   before anything is spawned.
//!
//! dshd itself never confines anything: the plan goes to the launcher (crate `dsh-launch`) that
//! every command is started through, which drops its privileges, takes the Landlock domain and
//! a seccomp filter itself, then `exec`s the command. So no thread of dshd ever shares a
//! command's domain.

pub(crate) mod plan;
pub(crate) use dsh_session::LooserPolicy;
pub use dsh_session::{Network, SandboxMode, SandboxPolicy, UnknownName};
pub use plan::KNOWN_ABI;

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockSupport {
    /// Landlock is not built into the kernel (`ENOSYS`).
    NotImplemented,
    /// Landlock is built in but not enabled at boot (`EOPNOTSUPP`).
    NotEnabled,
    /// Landlock with this ABI version.
    Abi(u32),
}

impl LandlockSupport {
    /// The running kernel's support, probed once per process. The probe asks the kernel for its
    /// ABI version and restricts nothing.
    pub fn probe() -> Self {
        static PROBED: OnceLock<LandlockSupport> = OnceLock::new();
        *PROBED.get_or_init(|| {
            // No flags and no `no_new_privs`: `apply` only reports the status, with no syscall
            // that changes this process.
            match landlock::RestrictSelf::default()
                .no_new_privs(false)
                .apply()
            {
                Ok(status) => Self::from_status(status.landlock),
                Err(error) => {
                    tracing::warn!(%error, "cannot probe Landlock; treating it as unavailable");
                    Self::NotImplemented
                }
            }
        })
    }

    fn from_status(status: landlock::LandlockStatus) -> Self {
        match status {
            landlock::LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => {
                let abi = kernel_abi.unwrap_or(effective_abi as i32);
                Self::Abi(u32::try_from(abi).unwrap_or(0))
            }
            landlock::LandlockStatus::NotEnabled => Self::NotEnabled,
            // `NotImplemented` and whatever a later crate version adds: nothing usable.
            _ => Self::NotImplemented,
        }
    }

    /// The ABI version, 0 without Landlock.
    pub fn abi(self) -> u32 {
        match self {
            Self::Abi(abi) => abi,
            Self::NotImplemented | Self::NotEnabled => 0,
        }
    }
}

impl fmt::Display for LandlockSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotImplemented => {
                f.write_str("this kernel has no Landlock (not built in: CONFIG_SECURITY_LANDLOCK)")
            }
            Self::NotEnabled => f.write_str(
                "Landlock is disabled on this kernel (add landlock to the lsm= boot parameter)",
            ),
            Self::Abi(abi) => {
                write!(f, "this kernel offers Landlock ABI {abi}")?;
                // What confined commands keep on this kernel that a newer one takes away.
                if *abi < 5 {
                    f.write_str(
                        "; below 5 confined commands keep device ioctls on files they open",
                    )?;
                }
                if *abi < 6 {
                    f.write_str(
                        "; below 6 confined commands can signal dshd and the user's other processes",
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// The executor's sandbox settings.
#[derive(Debug, Clone, Default)]
pub struct SandboxSettings {
    /// Extra writable roots of `workspace-write` (`sandbox.writable_roots`), absolute. One that
    /// does not exist when a call starts is skipped.
    pub writable_roots: Vec<PathBuf>,
    /// Paths no confined command may write, whatever its roots: the harness home, the session
    /// stores, spill directory, socket directory, config and hook files. A writable root that
    /// holds one, or lies inside one, refuses the call.
    pub protected: Vec<PathBuf>,
    /// Paths no confined command may read (dshd's config and state, the model key file, the
    /// PostgreSQL URL file, systemd's user configuration and credentials, `sandbox.hidden`).
    /// They are protected too: a writable root may neither hold nor lie inside one.
    pub hidden: Vec<PathBuf>,
    /// The Landlock ABI whose rights are handled (`sandbox.landlock_abi`); `None`: the lowest
    /// each policy needs ([`SandboxPolicy::min_abi`]).
    pub landlock_abi: Option<u32>,
    /// Where private temporary directories may be made, in order of preference: the first that
    /// is (or can be made) a directory of this user's, mode 0700 and no link, is used; one that
    /// is not is logged and skipped. dshd lists `sandbox.tmp_root` if set, then
    /// `$XDG_RUNTIME_DIR/dsh-sandbox`, then `<home>/run/sandbox`.
    pub tmp_roots: Vec<PathBuf>,
}

/// How to run unconfined deliberately, for messages.
const UNCONFINED_HINT: &str = "to run unconfined deliberately, use sandbox mode \"off\" with network \"on\" (dshctl agent new --sandbox off --network on, Shell.Run's sandbox, or sandbox.mode/sandbox.network in the config)";

/// Why a confined command was not started. Nothing ran in every case.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce the policy.
    #[error(
        "the sandbox ({policy}) cannot be enforced: it needs Landlock ABI {needed} ({why}), but {support}; nothing was run; {UNCONFINED_HINT}"
    )]
    Unsupported {
        /// The policy asked for.
        policy: SandboxPolicy,
        /// The ABI it needs.
        needed: u32,
        /// What the ABI is needed for.
        why: String,
        /// What the kernel has.
        support: LandlockSupport,
    },
    /// A writable root would expose a protected path.
    #[error(
        "the sandbox cannot keep {} read-only: it {relation} the writable root {}; nothing was run; use read-only, or work in a directory apart from it",
        protected.display(), root.display()
    )]
    Exposed {
        /// The writable root (resolved).
        root: PathBuf,
        /// The protected path (resolved).
        protected: PathBuf,
        /// "lies inside" or "contains".
        relation: &'static str,
    },
    /// The workspace cannot be opened.
    #[error("sandbox workspace {}: {error}; nothing was run", path.display())]
    Workspace {
        /// The agent's cwd.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The private temporary directory cannot be made.
    #[error("sandbox temporary directory {}: {error}; nothing was run", path.display())]
    Tmp {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
