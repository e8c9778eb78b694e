//! The seccomp filter of a confined command: what Landlock does not cover.
//!
//! - Every confined mode: `ioctl` `TIOCSTI` (push input into a terminal) and `TIOCLINUX` (the
//!   console's selection and more) fail with `EACCES`. The request is compared on its low 32
//!   bits, as the kernel reads it (`unsigned int`), so high bits set cannot slip past.
//! - Network off: `socket()` fails with `EACCES` for every family (no new unix-socket
//!   connections, no UDP, no raw sockets: Landlock's network rules cover TCP only), and so does
//!   `io_uring_setup` (io_uring can make sockets without `socket()`). `socketpair` keeps working:
//!   an unconnected pair reaches nothing outside the command.
//!
//! On x86_64 the filter also refuses the x32 numbers of the same calls (x32 shares the x86_64
//! audit architecture, with bit 30 set in the number, so an exact-number filter would miss them).
//! seccompiler compares numbers for equality only, so the x32 ABI as a whole is not refused;
//! most distribution kernels do not enable it.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::Plan;

/// `EACCES`: what a refused call returns, as Landlock's refusals do ("Permission denied").
const EACCES: u32 = 13;
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

/// The numbers of the calls filtered, on this architecture.
#[cfg(target_arch = "x86_64")]
mod nr {
    pub(super) const IOCTL: i64 = 16;
    pub(super) const SOCKET: i64 = 41;
    pub(super) const IO_URING_SETUP: i64 = 425;
    /// Bit 30: the x32 ABI's numbers.
    pub(super) const X32: i64 = 0x4000_0000;
    /// x32's own `ioctl` (its 16 is not callable).
    pub(super) const X32_IOCTL: i64 = X32 | 514;
}
#[cfg(target_arch = "aarch64")]
mod nr {
    pub(super) const IOCTL: i64 = 29;
    pub(super) const SOCKET: i64 = 198;
    pub(super) const IO_URING_SETUP: i64 = 425;
}

/// Elsewhere there is no filter to build: confined commands are refused.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn filter(_plan: &Plan) -> Result<BpfProgram, String> {
    Err(format!(
        "seccomp filter: {} is not supported (x86_64 and aarch64 are)",
        std::env::consts::ARCH
    ))
}

/// Installs the filter for `plan` on this process (one thread, `no_new_privs` already set).
pub(crate) fn apply(plan: &Plan) -> Result<(), String> {
    let program = filter(plan)?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot install seccomp filter: {e}"))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn filter(plan: &Plan) -> Result<BpfProgram, String> {
    let bad = |e: seccompiler::BackendError| format!("seccomp filter: {e}");
    let request = |value| {
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .and_then(|c| SeccompRule::new(vec![c]))
    };
    let terminal = vec![
        request(TIOCSTI).map_err(bad)?,
        request(TIOCLINUX).map_err(bad)?,
    ];
    // An empty list: the call is refused whatever its arguments.
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(nr::IOCTL, terminal);
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(nr::X32 | nr::IOCTL, Vec::new());
        rules.insert(nr::X32_IOCTL, Vec::new());
    }
    if plan.net_off {
        for call in [nr::SOCKET, nr::IO_URING_SETUP] {
            rules.insert(call, Vec::new());
            #[cfg(target_arch = "x86_64")]
            rules.insert(nr::X32 | call, Vec::new());
        }
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(EACCES),
        arch,
    )
    .map_err(bad)?;
    BpfProgram::try_from(filter).map_err(bad)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Both shapes compile on this architecture.
    #[test]
    fn the_filters_compile() {
        for net_off in [false, true] {
            let plan = Plan {
                abi: 4,
                kernel_abi: 7,
                fs: false,
                net_off,
                writable: Vec::new(),
                tmp: None,
                protected: Vec::new(),
            };
            assert!(!filter(&plan).unwrap().is_empty());
        }
    }
}
