//! `execve`'s size limits, checked before anything is spawned.
//!
//! Without this check an oversized command or environment fails inside the kernel with `E2BIG`
//! ("Argument list too long"), which names neither the part that was too large nor the limit. The
//! check mirrors what Linux enforces (`fs/exec.c`):
//!
//! - **One string**: each argument and each environment string (`NAME=value`), with its
//!   terminating NUL, may be at most `MAX_ARG_STRLEN`, 32 pages. dsh uses 32 × 4 KiB =
//!   [`MAX_STRING_BYTES`] (131072) everywhere: that is the kernel's value on the usual 4 KiB pages,
//!   and on kernels with larger pages it is merely stricter than needed, so the same command
//!   behaves the same on every machine.
//! - **Everything together**: the program path (the kernel copies it too), every argument, every
//!   environment string (NULs included) and one pointer per argument and environment string must
//!   fit in a quarter of the stack soft limit (`RLIMIT_STACK`), at most 6 MiB (¾ of the kernel's
//!   8 MiB `_STK_LIM`) and at least 128 KiB (the historical `ARG_MAX`). The rlimit is read at every
//!   check, because the child inherits the daemon's current one. glibc's `sysconf(_SC_ARG_MAX)` is
//!   not used: it omits the 6 MiB cap.
//!
//! [`RESERVE_BYTES`] of the total are kept free for what the spawn path itself adds after the check
//! (the executor's owner marker), so a launch this module accepts never meets `E2BIG` for size.
//!
//! Other systems have no per-string limit but a smaller total (`ARG_MAX` is 256 KiB on FreeBSD and
//! 1 MiB on macOS); there the total is fixed at 256 KiB, a conservative common value.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use super::ExecError;

/// The most bytes one argument or environment string may take, terminating NUL included.
pub(crate) const MAX_STRING_BYTES: usize = 32 * 4096;

/// Bytes of the total kept free for what the spawn path adds after the check.
pub const RESERVE_BYTES: usize = 4096;

/// What a size error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchPart {
    /// The command string given to `bash -c`.
    Command,
    /// A key of the caller's `env` (layer 3).
    Env(String),
    /// A key of the managed snapshot (layer 4).
    Managed(String),
    /// A variable of the daemon's own environment that is passed on (layer 1).
    Inherited(String),
}

impl LaunchPart {
    /// The request field the part belongs to, for error messages that lead with it.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Env(_) => "env",
            Self::Managed(_) => "managed environment",
            Self::Inherited(_) => "daemon environment",
        }
    }
}

impl std::fmt::Display for LaunchPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Command => f.write_str("command"),
            Self::Env(key) => write!(f, "env key {key:?}"),
            Self::Managed(key) => write!(f, "managed key {key:?}"),
            Self::Inherited(key) => write!(f, "inherited variable {key:?}"),
        }
    }
}

/// Bytes `NAME=value` takes as an environment string, NUL included.
pub(crate) fn env_string_bytes(name: usize, value: usize) -> usize {
    name + 1 + value + 1
}

/// Refuses a single string (of `bytes`, NUL included) longer than [`MAX_STRING_BYTES`].
pub(crate) fn check_string(
    part: impl FnOnce() -> LaunchPart,
    bytes: usize,
) -> Result<(), ExecError> {
    if bytes > MAX_STRING_BYTES {
        return Err(ExecError::TooLong {
            part: part(),
            bytes,
            limit: MAX_STRING_BYTES,
        });
    }
    Ok(())
}

/// The total `execve` accepts right now for program path, arguments, environment and their
/// pointers, before [`RESERVE_BYTES`] is taken off.
#[cfg(target_os = "linux")]
pub fn total_limit() -> usize {
    const STK_LIM_THREE_QUARTERS: u64 = 6 * 1024 * 1024;
    const ARG_MAX: u64 = 128 * 1024;
    let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
    // `None` is RLIM_INFINITY: only the 6 MiB cap applies.
    let quarter = stack.map_or(STK_LIM_THREE_QUARTERS, |s| s / 4);
    let limit = quarter.clamp(ARG_MAX, STK_LIM_THREE_QUARTERS);
    usize::try_from(limit).unwrap_or(usize::MAX)
}

/// See the module docs: a conservative fixed total where the Linux rule does not apply.
#[cfg(not(target_os = "linux"))]
pub fn total_limit() -> usize {
    256 * 1024
}

/// What a launch adds to `shell -c command` and its environment: the variables dshd sets itself
/// (a confined command's `TMPDIR`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extra {
    /// Bytes of the added strings, NULs included.
    pub bytes: usize,
    /// How many strings (each also takes a pointer).
    pub strings: usize,
}

impl Extra {
    /// The same plus one `NAME=value` variable of `len` bytes (without the `=` and NUL), if any.
    pub(crate) fn plus_variable(mut self, len: Option<usize>) -> Self {
        if let Some(len) = len {
            self.bytes += len + 2;
            self.strings += 1;
        }
        self
    }

    /// The same plus these `argv` strings.
    pub(crate) fn plus_arguments<'a>(
        mut self,
        strings: impl IntoIterator<Item = &'a std::ffi::OsStr>,
    ) -> Self {
        for string in strings {
            self.bytes += string.len() + 1;
            self.strings += 1;
        }
        self
    }
}

/// Checks the whole launch (`shell -c command` with the base environment, then `env`, then
/// `managed`) against the total limit. Single strings are checked by the caller first; the layers
/// are already validated, so `env` and `managed` share no name (one is `DSH_*`, the other never),
/// and the base holds no `DSH_*` name.
pub(crate) fn check_total<'a>(
    shell: &Path,
    base: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    command: &str,
    env: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
    extra: Extra,
) -> Result<(), ExecError> {
    let shell_bytes = shell.as_os_str().len() + 1;
    // The kernel copies the program path, then argv: the path again (argv[0]), `-c`, the command.
    let mut strings = shell_bytes * 2 + "-c".len() + 1 + extra.bytes;
    let mut count = 3 + extra.strings;
    let mut largest = (LaunchPart::Command, command.len() + 1);
    strings += largest.1;
    let mut consider = |part: &dyn Fn() -> LaunchPart, bytes: usize| {
        if bytes > largest.1 {
            largest = (part(), bytes);
        }
    };

    for (name, value) in base {
        // A caller's entry replaces the inherited one of the same name.
        if name.to_str().is_some_and(|n| env.contains_key(n)) {
            continue;
        }
        let bytes = env_string_bytes(name.len(), value.len());
        strings += bytes;
        count += 1;
        consider(
            &|| LaunchPart::Inherited(name.to_string_lossy().into_owned()),
            bytes,
        );
    }
    for (key, value) in env {
        let bytes = env_string_bytes(key.len(), value.len());
        strings += bytes;
        count += 1;
        consider(&|| LaunchPart::Env(key.clone()), bytes);
    }
    for (key, value) in managed {
        let bytes = env_string_bytes(key.len(), value.len());
        strings += bytes;
        count += 1;
        consider(&|| LaunchPart::Managed(key.clone()), bytes);
    }

    let bytes = strings + count * size_of::<usize>();
    let limit = total_limit().saturating_sub(RESERVE_BYTES);
    if bytes > limit {
        let (largest, largest_bytes) = largest;
        return Err(ExecError::TooLarge {
            bytes,
            limit,
            largest,
            largest_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_total_follows_the_stack_limit_within_the_kernels_bounds() {
        let limit = total_limit();
        assert!(limit >= 128 * 1024, "{limit}");
        assert!(limit <= 6 * 1024 * 1024, "{limit}");
        let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
        if let Some(stack) = stack {
            let quarter = usize::try_from(stack / 4).unwrap();
            if (128 * 1024..=6 * 1024 * 1024).contains(&quarter) {
                assert_eq!(limit, quarter);
            }
        }
    }

    #[test]
    fn one_string_may_take_exactly_the_limit() {
        assert!(check_string(|| LaunchPart::Command, MAX_STRING_BYTES).is_ok());
        let err = check_string(|| LaunchPart::Command, MAX_STRING_BYTES + 1).unwrap_err();
        assert!(
            matches!(
                &err,
                ExecError::TooLong { part: LaunchPart::Command, bytes, limit }
                    if *bytes == MAX_STRING_BYTES + 1 && *limit == MAX_STRING_BYTES
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.starts_with("command "), "{text}");
        assert!(text.contains("131072"), "{text}");
    }

    #[test]
    fn parts_name_their_key_and_field() {
        assert_eq!(LaunchPart::Env("BIG".into()).to_string(), "env key \"BIG\"");
        assert_eq!(LaunchPart::Env("BIG".into()).field(), "env");
        assert_eq!(
            LaunchPart::Managed("DSH_X".into()).to_string(),
            "managed key \"DSH_X\""
        );
        assert_eq!(LaunchPart::Command.field(), "command");
    }
}
