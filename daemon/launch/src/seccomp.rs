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
//! - Every confined mode: changing another process's resource limits, priority, scheduling, CPU
//!   affinity or I/O priority. Landlock scopes signals and tracing, but the kernel lets any
//!   process of the same user do these to any other, dshd and unconfined commands included: a
//!   `prlimit --nofile=0` or `--cpu` on dshd stops or kills it, `chrt -i` or `renice 19` on its
//!   threads starves it. The calls keep working on the caller itself (pid, or `who`, 0: its own
//!   process, or its own process group for `setpriority` and `ioprio_set`), so `ulimit`, `nice`,
//!   `ionice` and a program lowering its own priority work; reading another process's limits
//!   (`prlimit64` with no new limit) stays allowed. `PRIO_USER` and `IOPRIO_WHO_USER` (every
//!   process of the user) are refused whatever `who` says. Moving another process's memory
//!   (`migrate_pages`, `move_pages`) is not in this list: the kernel checks it as tracing, which
//!   the Landlock domain already refuses across domains.
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
/// `setpriority`'s `which` for every process of a user.
const PRIO_USER: u64 = 2;
/// `ioprio_set`'s `which` for every process of a user.
const IOPRIO_WHO_USER: u64 = 3;

/// The numbers of the calls filtered, on this architecture.
#[cfg(target_arch = "x86_64")]
mod nr {
    pub(super) const IOCTL: i64 = 16;
    pub(super) const SOCKET: i64 = 41;
    pub(super) const IO_URING_SETUP: i64 = 425;
    pub(super) const SETPRIORITY: i64 = 141;
    pub(super) const SCHED_SETPARAM: i64 = 142;
    pub(super) const SCHED_SETSCHEDULER: i64 = 144;
    pub(super) const SCHED_SETAFFINITY: i64 = 203;
    pub(super) const IOPRIO_SET: i64 = 251;
    pub(super) const PRLIMIT64: i64 = 302;
    pub(super) const SCHED_SETATTR: i64 = 314;
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
    pub(super) const SETPRIORITY: i64 = 140;
    pub(super) const SCHED_SETPARAM: i64 = 118;
    pub(super) const SCHED_SETSCHEDULER: i64 = 119;
    pub(super) const SCHED_SETAFFINITY: i64 = 122;
    pub(super) const IOPRIO_SET: i64 = 30;
    pub(super) const PRLIMIT64: i64 = 261;
    pub(super) const SCHED_SETATTR: i64 = 274;
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
    // Arguments are compared on their low 32 bits: `int`s and `pid_t`s to the kernel.
    let arg = |index, op, value| SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value);
    let rule = |conditions: Vec<Result<SeccompCondition, seccompiler::BackendError>>| {
        conditions
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .and_then(SeccompRule::new)
            .map_err(bad)
    };
    // Each rule refuses the call when all its conditions hold; a call with several rules is
    // refused when any holds; an empty list refuses the call whatever its arguments.
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        nr::IOCTL,
        vec![
            rule(vec![arg(1, SeccompCmpOp::Eq, TIOCSTI)])?,
            rule(vec![arg(1, SeccompCmpOp::Eq, TIOCLINUX)])?,
        ],
    );
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(nr::X32 | nr::IOCTL, Vec::new());
        rules.insert(nr::X32_IOCTL, Vec::new());
    }
    // Another process's limits, priority and scheduling: only the caller's own (0) may change.
    let others = || rule(vec![arg(0, SeccompCmpOp::Ne, 0)]);
    let other_processes = [
        // prlimit64(pid, resource, new, old): reading (new == NULL) is harmless.
        (
            nr::PRLIMIT64,
            vec![rule(vec![
                arg(0, SeccompCmpOp::Ne, 0),
                SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0),
            ])?],
        ),
        // setpriority(which, who, prio) and ioprio_set(which, who, ioprio): `who` 0 is the
        // caller's own process or group, but for a user's every process whatever `who` is.
        (
            nr::SETPRIORITY,
            vec![
                rule(vec![arg(1, SeccompCmpOp::Ne, 0)])?,
                rule(vec![arg(0, SeccompCmpOp::Eq, PRIO_USER)])?,
            ],
        ),
        (
            nr::IOPRIO_SET,
            vec![
                rule(vec![arg(1, SeccompCmpOp::Ne, 0)])?,
                rule(vec![arg(0, SeccompCmpOp::Eq, IOPRIO_WHO_USER)])?,
            ],
        ),
        (nr::SCHED_SETPARAM, vec![others()?]),
        (nr::SCHED_SETSCHEDULER, vec![others()?]),
        (nr::SCHED_SETAFFINITY, vec![others()?]),
        (nr::SCHED_SETATTR, vec![others()?]),
    ];
    for (call, refused) in other_processes {
        #[cfg(target_arch = "x86_64")]
        rules.insert(nr::X32 | call, refused.clone());
        rules.insert(call, refused);
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
                hidden: Vec::new(),
            };
            assert!(!filter(&plan).unwrap().is_empty());
        }
    }
}
