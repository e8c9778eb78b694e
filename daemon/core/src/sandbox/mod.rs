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
pub use plan::KNOWN_ABI;
pub(crate) use plan::{MIN_FS_ABI, MIN_NET_ABI};

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;

/// What a confined command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SandboxMode {
    /// No filesystem confinement.
    #[default]
    Off,
    /// Read anywhere; write under the agent's cwd, the configured extra roots and a private
    /// temporary directory.
    WorkspaceWrite,
    /// Read anywhere; write nowhere but a private temporary directory.
    ReadOnly,
}

impl SandboxMode {
    /// Every mode, loosest first.
    pub const ALL: [Self; 3] = [Self::Off, Self::WorkspaceWrite, Self::ReadOnly];

    /// The name used in config, requests and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::WorkspaceWrite => "workspace-write",
            Self::ReadOnly => "read-only",
        }
    }

    /// Higher is stricter.
    fn strictness(self) -> u8 {
        match self {
            Self::Off => 0,
            Self::WorkspaceWrite => 1,
            Self::ReadOnly => 2,
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of a closed vocabulary's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; expected one of: {expected}")]
pub struct UnknownName {
    /// What was being named ("sandbox mode", "network").
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// The accepted names, comma-separated.
    pub expected: &'static str,
}

impl FromStr for SandboxMode {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "sandbox mode",
                given: s.to_owned(),
                expected: "off, workspace-write, read-only",
            })
    }
}

/// Whether a confined command may use TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Network {
    /// No network confinement.
    #[default]
    On,
    /// TCP bind and connect refused (Landlock network rules); abstract unix sockets too where the
    /// kernel scopes them (Landlock ABI 6 and a configured `sandbox.landlock_abi` of 6 or more).
    Off,
}

impl Network {
    /// The name used in config, requests and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Network {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            _ => Err(UnknownName {
                what: "network setting",
                given: s.to_owned(),
                expected: "on, off",
            }),
        }
    }
}

/// How an agent's bash calls (foreground and background) are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SandboxPolicy {
    /// What they may write.
    pub mode: SandboxMode,
    /// Whether they may use TCP.
    pub network: Network,
}

/// A child asked for a policy looser than its parent's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sandbox {child} is looser than the parent's {parent}; a child agent gets its parent's sandbox or a stricter one"
)]
pub struct LooserPolicy {
    /// The parent's policy.
    pub parent: SandboxPolicy,
    /// What the child asked for.
    pub child: SandboxPolicy,
}

impl SandboxPolicy {
    /// No confinement at all: mode `off`, network `on`.
    pub const UNCONFINED: Self = Self {
        mode: SandboxMode::Off,
        network: Network::On,
    };

    /// True when a command under this policy runs through the helper.
    pub fn is_confined(&self) -> bool {
        self.mode != SandboxMode::Off || self.network == Network::Off
    }

    /// True when `self` allows nothing `other` does not: a mode at least as strict, and no network
    /// where `other` has none.
    pub fn at_least_as_strict_as(&self, other: &Self) -> bool {
        self.mode.strictness() >= other.mode.strictness()
            && (self.network == Network::Off || other.network == Network::On)
    }

    /// The policy a child of an agent under `self` runs with: `requested`, or `self` when none was
    /// asked for; a looser request is refused.
    pub fn child(&self, requested: Option<Self>) -> Result<Self, LooserPolicy> {
        match requested {
            None => Ok(*self),
            Some(child) if child.at_least_as_strict_as(self) => Ok(child),
            Some(child) => Err(LooserPolicy {
                parent: *self,
                child,
            }),
        }
    }

    /// The lowest Landlock ABI that enforces every promise of this policy: 3 for the filesystem
    /// modes (truncation is a write only from ABI 3 on), 4 for network off (TCP rules); 0 when
    /// nothing is confined.
    pub fn min_abi(&self) -> u32 {
        let fs = if self.mode == SandboxMode::Off {
            0
        } else {
            MIN_FS_ABI
        };
        let net = if self.network == Network::Off {
            MIN_NET_ABI
        } else {
            0
        };
        fs.max(net)
    }
}

impl SandboxPolicy {
    /// The one line a model reads under a command that failed with "Permission denied" while
    /// confined, so it learns the policy from the refusal instead of guessing (`None` when
    /// nothing is confined).
    pub fn refusal_note(&self) -> Option<String> {
        let writes = match self.mode {
            SandboxMode::Off => None,
            SandboxMode::WorkspaceWrite => Some(
                "writes outside the agent's working directory, the configured extra roots and $TMPDIR are refused",
            ),
            SandboxMode::ReadOnly => Some("writes anywhere but $TMPDIR are refused"),
        };
        let network = (self.network == Network::Off).then_some("TCP connections are refused");
        let what: Vec<&str> = writes.into_iter().chain(network).collect();
        (!what.is_empty()).then(|| format!("[sandbox: {self}: {}]", what.join("; ")))
    }
}

impl fmt::Display for SandboxPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, network {}", self.mode, self.network)
    }
}

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
    /// Paths relative to the workspace that are protected too (`hooks.project_hooks`' files).
    pub protected_in_workspace: Vec<PathBuf>,
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
