//! What one launch is, and its encoding as the launcher's arguments:
//!
//! ```text
//! dsh-launch [--open-files N] [--abi N --kernel-abi N [--fs] [--net-off] [--writable PATH]...
//!             [--tmp PATH] [--protected PATH]... [--hidden PATH]...] -- PROGRAM [ARG]...
//! dsh-launch [...the same...] --file-op
//! ```
//!
//! `--file-op` takes the place of `-- PROGRAM`: the launcher performs one file operation read
//! from stdin instead of running a program (`file_op`).
//!
//! Paths and arguments are passed as they are (any bytes but NUL); nothing is quoted.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

/// One launch: the program, its arguments, and its confinement if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// `None`: only a new session, no confinement.
    pub confine: Option<Plan>,
    /// The soft open-file limit the program starts with (`None`: the launcher's own). dshd
    /// raises its own to the hard limit, and hands each command the one it was started with.
    pub open_files: Option<u64>,
    /// Perform one file operation (`file_op`) instead of running a program; `program` and
    /// `args` are then empty.
    pub file_op: bool,
    /// What to `exec` (a path: no `PATH` search is wanted).
    pub program: OsString,
    /// Its arguments, without `argv[0]`.
    pub args: Vec<OsString>,
}

/// A confined launch's Landlock, capability and seccomp settings, checked by dshd before it
/// spawns; the launcher checks the writable roots again on what it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The Landlock ABI whose rights are handled (a hard requirement).
    pub abi: u32,
    /// The running kernel's Landlock ABI: rights and scopes it has beyond `abi` that every
    /// confined command loses (`IOCTL_DEV` from 5, signal and abstract-socket scopes from 6).
    pub kernel_abi: u32,
    /// Filesystem confinement: read anywhere, write only under `writable`.
    pub fs: bool,
    /// Network confinement: no TCP bind or connect, no new sockets.
    pub net_off: bool,
    /// Writable roots, resolved (links followed).
    pub writable: Vec<PathBuf>,
    /// The private temporary directory, writable too, resolved. dshd made it in a private
    /// directory of its own, which may lie inside a protected one (the harness home's `run/`),
    /// so it is only refused when it contains a protected path.
    pub tmp: Option<PathBuf>,
    /// Paths that no writable root may contain or lie inside, resolved.
    pub protected: Vec<PathBuf>,
    /// Paths the command may not read (secrets: the model key, dshd's config and state), resolved.
    /// Reading is then granted entry by entry around them rather than on `/` in one rule.
    pub hidden: Vec<PathBuf>,
}

/// Arguments the launcher cannot read (dshd and the launcher disagree, or someone ran it by hand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad arguments: {}", self.0)
    }
}

impl std::error::Error for ParseError {}

const SEPARATOR: &str = "--";
const FILE_OP: &str = "--file-op";

impl Launch {
    /// The launcher's arguments for this launch (without `argv[0]`).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        if let Some(limit) = self.open_files {
            out.extend(["--open-files".into(), limit.to_string().into()]);
        }
        if let Some(plan) = &self.confine {
            out.extend(["--abi".into(), plan.abi.to_string().into()]);
            out.extend(["--kernel-abi".into(), plan.kernel_abi.to_string().into()]);
            if plan.fs {
                out.push("--fs".into());
            }
            if plan.net_off {
                out.push("--net-off".into());
            }
            for path in &plan.writable {
                out.extend(["--writable".into(), path.clone().into_os_string()]);
            }
            if let Some(tmp) = &plan.tmp {
                out.extend(["--tmp".into(), tmp.clone().into_os_string()]);
            }
            for path in &plan.protected {
                out.extend(["--protected".into(), path.clone().into_os_string()]);
            }
            for path in &plan.hidden {
                out.extend(["--hidden".into(), path.clone().into_os_string()]);
            }
        }
        if self.file_op {
            out.push(FILE_OP.into());
            return out;
        }
        out.push(SEPARATOR.into());
        out.push(self.program.clone());
        out.extend(self.args.iter().cloned());
        out
    }

    /// Reads what [`Self::to_args`] wrote.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, ParseError> {
        let bad = |what: String| ParseError(what);
        let mut args = args.into_iter();
        let mut plan = Plan {
            abi: 0,
            kernel_abi: 0,
            fs: false,
            net_off: false,
            writable: Vec::new(),
            tmp: None,
            protected: Vec::new(),
            hidden: Vec::new(),
        };
        let mut confined = false;
        let mut open_files = None;
        let mut file_op = false;
        let number = |value: Option<OsString>, flag: &str| -> Result<u64, ParseError> {
            value
                .as_deref()
                .and_then(OsStr::to_str)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("{flag} needs a number")))
        };
        let abi = |value, flag| {
            number(value, flag)
                .and_then(|n| u32::try_from(n).map_err(|_| bad(format!("{flag} is too large"))))
        };
        let path = |value: Option<OsString>, flag: &str| -> Result<PathBuf, ParseError> {
            value
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .ok_or_else(|| bad(format!("{flag} needs an absolute path")))
        };
        loop {
            let Some(arg) = args.next() else {
                return Err(bad(format!("no {SEPARATOR} before the program")));
            };
            match arg.to_str() {
                Some(SEPARATOR) => break,
                Some(FILE_OP) => {
                    // Always last: nothing follows a file operation's flag.
                    if args.next().is_some() {
                        return Err(bad(format!("{FILE_OP} must be the last argument")));
                    }
                    file_op = true;
                    break;
                }
                Some("--open-files") => {
                    open_files = Some(number(args.next(), "--open-files")?);
                    continue;
                }
                Some("--abi") => plan.abi = abi(args.next(), "--abi")?,
                Some("--kernel-abi") => plan.kernel_abi = abi(args.next(), "--kernel-abi")?,
                Some("--fs") => plan.fs = true,
                Some("--net-off") => plan.net_off = true,
                Some("--writable") => plan.writable.push(path(args.next(), "--writable")?),
                Some("--tmp") => plan.tmp = Some(path(args.next(), "--tmp")?),
                Some("--protected") => plan.protected.push(path(args.next(), "--protected")?),
                Some("--hidden") => plan.hidden.push(path(args.next(), "--hidden")?),
                _ => return Err(bad(format!("unknown argument {arg:?}"))),
            }
            confined = true;
        }
        let program = if file_op {
            OsString::new()
        } else {
            args.next()
                .ok_or_else(|| bad("no program after --".to_owned()))?
        };
        if confined && plan.abi == 0 {
            return Err(bad("a confined launch needs --abi".to_owned()));
        }
        Ok(Self {
            confine: confined.then_some(plan),
            open_files,
            file_op,
            program,
            args: args.collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::ffi::OsStringExt;

    use super::*;

    /// Whatever dshd encodes, the launcher reads back the same, odd bytes and look-alike flags
    /// in paths and arguments included.
    #[test]
    fn launches_round_trip() {
        let odd = OsString::from_vec(b"/tmp/a b\n\xff--fs".to_vec());
        let plans = [
            None,
            Some(Plan {
                abi: 4,
                kernel_abi: 7,
                fs: false,
                net_off: true,
                writable: Vec::new(),
                tmp: None,
                protected: Vec::new(),
                hidden: Vec::new(),
            }),
            Some(Plan {
                abi: 3,
                kernel_abi: 7,
                fs: true,
                net_off: false,
                writable: vec![PathBuf::from(&odd), "/work".into()],
                tmp: Some("/run/user/0/dsh-sandbox/x".into()),
                protected: vec!["/home/u/.dsh".into(), "/--".into()],
                hidden: vec!["/home/u/.dsh/config.toml".into(), PathBuf::from(&odd)],
            }),
        ];
        for confine in plans {
            let file_op = Launch {
                confine: confine.clone(),
                open_files: None,
                file_op: true,
                program: OsString::new(),
                args: Vec::new(),
            };
            assert_eq!(Launch::parse(file_op.to_args()).unwrap(), file_op);
            let launch = Launch {
                confine,
                open_files: Some(1024),
                file_op: false,
                program: "/bin/bash".into(),
                args: vec!["-c".into(), "--".into(), odd.clone(), "--abi".into()],
            };
            assert_eq!(Launch::parse(launch.to_args()).unwrap(), launch);
        }
    }

    #[test]
    fn bad_arguments_are_refused_naming_what_is_wrong() {
        let parse = |args: &[&str]| {
            Launch::parse(args.iter().map(OsString::from))
                .unwrap_err()
                .to_string()
        };
        assert!(parse(&["/bin/true"]).contains("unknown argument"));
        assert!(parse(&[]).contains("no --"));
        assert!(parse(&["--"]).contains("no program"));
        assert!(parse(&["--abi", "x", "--", "/bin/true"]).contains("--abi needs a number"));
        assert!(parse(&["--writable", "rel", "--", "/bin/true"]).contains("absolute"));
        assert!(parse(&["--fs", "--", "/bin/true"]).contains("needs --abi"));
        assert!(parse(&["--file-op", "--", "/bin/true"]).contains("last argument"));
    }
}
