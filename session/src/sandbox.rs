//! The sandbox vocabulary sessions and clients share: what a confined command may write
//! ([`SandboxMode`]), whether it may use the network ([`Network`]), the two together
//! ([`SandboxPolicy`], with the rule that a child is never looser than its parent). How a policy
//! is enforced (Landlock, seccomp, the launcher) is the daemon's business, not this crate's.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Serialises a name-bearing setting as its name and reads it back through `FromStr`, so the JSON
/// and the command line spell it the same way.
macro_rules! serde_by_name {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                name.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_by_name!(SandboxMode);
serde_by_name!(Network);

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

/// How an agent's bash calls (foreground and background) are confined. As JSON (a
/// `session/settings` event): `{"mode": "workspace-write", "network": "off"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn policy(mode: SandboxMode, network: Network) -> SandboxPolicy {
        SandboxPolicy { mode, network }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for mode in SandboxMode::ALL {
            assert_eq!(mode.as_str().parse::<SandboxMode>().unwrap(), mode);
        }
        for network in [Network::On, Network::Off] {
            assert_eq!(network.as_str().parse::<Network>().unwrap(), network);
        }
        let err = "readonly".parse::<SandboxMode>().unwrap_err();
        assert!(err.to_string().contains("workspace-write"), "{err}");
        assert!("yes".parse::<Network>().is_err());
    }

    /// Every pair of policies: a child may tighten either dimension and loosen none.
    #[test]
    fn children_get_the_parents_policy_or_a_stricter_one() {
        let all: Vec<SandboxPolicy> = SandboxMode::ALL
            .into_iter()
            .flat_map(|m| [policy(m, Network::On), policy(m, Network::Off)])
            .collect();
        let rank = |m: SandboxMode| SandboxMode::ALL.iter().position(|x| *x == m).unwrap();
        for parent in &all {
            assert_eq!(parent.child(None).unwrap(), *parent);
            for child in &all {
                let looser = rank(child.mode) < rank(parent.mode)
                    || (child.network == Network::On && parent.network == Network::Off);
                let got = parent.child(Some(*child));
                assert_eq!(got.is_err(), looser, "{parent} -> {child}");
                if let Err(e) = got {
                    assert!(e.to_string().contains("looser"), "{e}");
                }
            }
        }
        let ww = policy(SandboxMode::WorkspaceWrite, Network::On);
        assert!(ww.child(Some(SandboxPolicy::UNCONFINED)).is_err());
    }
}
