//! dshd's open-file limit, and the one its commands get.
//!
//! A login session (and systemd's default `LimitNOFILE=1024:524288`) starts programs with a soft
//! limit of 1024, which `select()`-era programs rely on; the hard limit is there for servers to
//! raise the soft one to, as Go's runtime and most servers do. dshd raises its own at start, so a
//! few thousand idle connections of the user's own processes cannot exhaust it, and hands every
//! command it starts the soft limit it was started with (the launcher sets it before `exec`): a
//! command sees what any program of the user's would.

/// The soft and hard open-file limits now (`None`: unlimited).
pub fn limits() -> (Option<u64>, Option<u64>) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (limit.current, limit.maximum)
}

/// The current soft open-file limit (`None`: unlimited).
pub fn soft_limit() -> Option<u64> {
    limits().0
}

/// Raises the soft limit to the hard one. Returns the soft limit dshd was started with when it
/// raised it (what commands get back), `None` when there was nothing to raise or the raise failed
/// (logged; dshd then runs, and its commands start, with the limit it was given).
pub fn raise() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let (soft, hard) = limits();
    if soft == hard {
        return None;
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: hard,
            maximum: hard,
        },
    ) {
        Ok(()) => {
            tracing::info!(
                started_with = soft,
                now = hard,
                "raised the open-file limit to the hard limit; commands start with the one dshd was started with"
            );
            soft
        }
        Err(error) => {
            tracing::warn!(%error, soft, hard, "cannot raise the open-file limit");
            None
        }
    }
}
