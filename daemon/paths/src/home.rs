//! Harness-home resolution (CONTRACTS §3).
//!
//! The harness home is the daemon's deployment directory: config, sessions, skills and `run/`. It is
//! resolved once at start and the same value feeds `DSH_HOME` for every bash child and skill
//! discovery. Resolution is pure: the ambient facts it needs (the `$DSH_HOME` value, the user's home
//! directory, the current directory) are passed in, so tests never touch process-global state.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// The environment variable that names the harness home.
pub const HOME_ENV: &str = "DSH_HOME";

/// Name of the default harness home directory under the user's home.
pub const DEFAULT_DIR_NAME: &str = ".dsh";

/// Why a harness home (or another user-given path) could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HomeError {
    /// An explicitly given value was empty or only whitespace. Treating it as "the current
    /// directory" would silently scatter sessions wherever the daemon happened to start.
    #[error("{origin} is empty; give a directory, or leave it out to use $DSH_HOME or ~/.dsh")]
    Empty {
        /// Where the value came from, e.g. "--dsh-home" or "dsh_home in /x/config.toml".
        origin: String,
    },
    /// `~` was used but the user's home directory is unknown.
    #[error("{origin} starts with '~' but the user's home directory is unknown (set HOME)")]
    NoUserHome {
        /// Where the value came from.
        origin: String,
    },
    /// Nothing was configured and the user's home directory is unknown.
    #[error(
        "cannot choose a harness home: DSH_HOME is not set and the user's home directory is unknown (set HOME or DSH_HOME, or pass --dsh-home)"
    )]
    NoDefault,
    /// A relative value cannot be made absolute because the current directory is unknown.
    #[error("{origin} is relative but the current directory is unknown")]
    NoCwd {
        /// Where the value came from.
        origin: String,
    },
    /// `dsh_home` and `skills.local.dsh_home` name different directories.
    #[error(
        "two harness homes are configured: {first_origin} resolves to {} but {second_origin} resolves to {}; \
         one home feeds both DSH_HOME and skill discovery, so make them equal or remove one",
        first.display(),
        second.display()
    )]
    Conflict {
        /// The top-level value's origin.
        first_origin: String,
        /// The top-level value, resolved.
        first: PathBuf,
        /// The nested value's origin.
        second_origin: String,
        /// The nested value, resolved.
        second: PathBuf,
    },
}

/// The ambient facts resolution needs, captured once.
#[derive(Debug, Clone, Default)]
pub struct Ambient {
    /// The value of `$DSH_HOME`, if set.
    pub dsh_home: Option<OsString>,
    /// The user's home directory, for `~` and the default.
    pub user_home: Option<PathBuf>,
    /// The current directory, for relative values.
    pub cwd: Option<PathBuf>,
    /// The user's runtime directory, where the default socket lives: `$XDG_RUNTIME_DIR`, or when
    /// it is unset or blank, `/run/user/<uid>` if that directory exists and is the user's (what
    /// systemd's user manager, and so `dshd.service`, has as `$XDG_RUNTIME_DIR`). A client
    /// started without the variable (some editors' agent launchers strip it) finds the daemon
    /// the user service started.
    pub runtime_dir: Option<OsString>,
    /// The value of `$XDG_CONFIG_HOME` (systemd's user configuration lives under it, or under
    /// `~/.config`): what confined commands may not read.
    pub config_home: Option<OsString>,
    /// The value of `$CREDENTIALS_DIRECTORY`: systemd's credentials for the unit, which confined
    /// commands may not read.
    pub credentials_dir: Option<OsString>,
}

impl Ambient {
    /// Reads the facts from this process.
    pub fn from_process() -> Self {
        Self {
            dsh_home: std::env::var_os(HOME_ENV),
            user_home: user_home_dir(),
            cwd: std::env::current_dir().ok(),
            runtime_dir: std::env::var_os("XDG_RUNTIME_DIR")
                .filter(|v| !is_blank(v))
                .or_else(user_runtime_dir),
            config_home: std::env::var_os("XDG_CONFIG_HOME"),
            credentials_dir: std::env::var_os("CREDENTIALS_DIRECTORY"),
        }
    }
}

/// `/run/user/<uid>` when it is a directory of this process's uid (the uid read from
/// `/proc/self`, which the process owns), else `None`.
fn user_runtime_dir() -> Option<OsString> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let dir = PathBuf::from(format!("/run/user/{uid}"));
    let meta = std::fs::metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid).then(|| dir.into_os_string())
}

/// The user's home directory: `$HOME` when set and not blank, else the password database.
pub fn user_home_dir() -> Option<PathBuf> {
    match std::env::var_os("HOME") {
        Some(home) if !is_blank(&home) => Some(PathBuf::from(home)),
        // std asks the password database (getpwuid_r) when HOME is unset.
        _ => std::env::home_dir(),
    }
}

/// An explicitly given value and where it came from (used in error messages).
#[derive(Debug, Clone)]
pub struct Explicit<'a> {
    /// The raw value as given.
    pub value: &'a OsStr,
    /// Where it came from, e.g. "--dsh-home".
    pub origin: &'a str,
}

/// A resolved harness home and the rule that chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedHome {
    /// Absolute, lexically normalised path. It need not exist.
    pub path: PathBuf,
    /// Which rule chose it, for logs and errors.
    pub source: HomeSource,
}

/// Which precedence rule chose the harness home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HomeSource {
    /// A flag or config key (the origin string says which).
    Explicit(String),
    /// The ambient `$DSH_HOME`.
    Environment,
    /// `~/.dsh`.
    Default,
}

/// Resolves the harness home: the explicit value beats a non-blank `$DSH_HOME`, which beats
/// `~/.dsh`. When `nested` (the `skills.local.dsh_home` key) is given too, both must resolve to the
/// same directory; alone, it counts as the explicit value.
pub fn resolve(
    explicit: Option<Explicit<'_>>,
    nested: Option<Explicit<'_>>,
    ambient: &Ambient,
) -> Result<ResolvedHome, HomeError> {
    let top = explicit
        .map(|e| absolutize(e.value, e.origin, ambient).map(|p| (p, e.origin)))
        .transpose()?;
    let inner = nested
        .map(|e| absolutize(e.value, e.origin, ambient).map(|p| (p, e.origin)))
        .transpose()?;
    match (top, inner) {
        (Some((first, first_origin)), Some((second, second_origin))) if first != second => {
            Err(HomeError::Conflict {
                first_origin: first_origin.to_owned(),
                first,
                second_origin: second_origin.to_owned(),
                second,
            })
        }
        (Some((path, origin)), _) | (None, Some((path, origin))) => Ok(ResolvedHome {
            path,
            source: HomeSource::Explicit(origin.to_owned()),
        }),
        (None, None) => match ambient.dsh_home.as_deref() {
            Some(value) if !is_blank(value) => Ok(ResolvedHome {
                path: absolutize(value, "$DSH_HOME", ambient)?,
                source: HomeSource::Environment,
            }),
            _ => {
                let home = ambient.user_home.as_ref().ok_or(HomeError::NoDefault)?;
                Ok(ResolvedHome {
                    path: absolutize(home.join(DEFAULT_DIR_NAME).as_os_str(), "~/.dsh", ambient)?,
                    source: HomeSource::Default,
                })
            }
        },
    }
}

/// Turns a user-given path into an absolute, lexically normalised one: a leading `~` or `~/` is the
/// user's home, a relative path is joined to the current directory, and `.`, `..`, repeated and
/// trailing separators are folded without touching the file system (links are never followed).
/// `~user` forms are not expanded; they are ordinary relative names.
pub fn absolutize(value: &OsStr, origin: &str, ambient: &Ambient) -> Result<PathBuf, HomeError> {
    if is_blank(value) {
        return Err(HomeError::Empty {
            origin: origin.to_owned(),
        });
    }
    let bytes = value.as_encoded_bytes();
    let no_user_home = || HomeError::NoUserHome {
        origin: origin.to_owned(),
    };
    let expanded = if bytes == b"~" {
        ambient.user_home.clone().ok_or_else(no_user_home)?
    } else if let Some(rest) = value.to_str().and_then(|s| s.strip_prefix("~/")) {
        ambient
            .user_home
            .as_ref()
            .ok_or_else(no_user_home)?
            .join(rest)
    } else if bytes.starts_with(b"~/") {
        // Non-UTF-8 tail: split on the byte level through Path, which keeps the OS encoding.
        let rest = Path::new(value)
            .strip_prefix("~")
            .unwrap_or(Path::new(value));
        ambient
            .user_home
            .as_ref()
            .ok_or_else(no_user_home)?
            .join(rest)
    } else {
        PathBuf::from(value)
    };
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        ambient
            .cwd
            .as_ref()
            .ok_or_else(|| HomeError::NoCwd {
                origin: origin.to_owned(),
            })?
            .join(expanded)
    };
    Ok(normalize(&absolute))
}

/// Folds `.`, `..` and redundant separators of an absolute path without consulting the file
/// system. `..` at the root stays at the root, as the kernel does.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

fn is_blank(value: &OsStr) -> bool {
    value.as_encoded_bytes().iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ambient(dsh_home: Option<&str>) -> Ambient {
        Ambient {
            dsh_home: dsh_home.map(OsString::from),
            user_home: Some(PathBuf::from("/home/ada")),
            cwd: Some(PathBuf::from("/work/proj")),
            runtime_dir: None,
            config_home: None,
            credentials_dir: None,
        }
    }

    fn explicit(value: &str) -> Option<Explicit<'_>> {
        Some(Explicit {
            value: OsStr::new(value),
            origin: "--dsh-home",
        })
    }

    fn path_of(r: Result<ResolvedHome, HomeError>) -> PathBuf {
        r.unwrap().path
    }

    #[test]
    fn explicit_beats_environment_beats_default() {
        let env = ambient(Some("/from/env"));
        let r = resolve(explicit("/from/flag"), None, &env).unwrap();
        assert_eq!(r.path, PathBuf::from("/from/flag"));
        assert_eq!(r.source, HomeSource::Explicit("--dsh-home".into()));

        let r = resolve(None, None, &env).unwrap();
        assert_eq!(r.path, PathBuf::from("/from/env"));
        assert_eq!(r.source, HomeSource::Environment);

        let r = resolve(None, None, &ambient(None)).unwrap();
        assert_eq!(r.path, PathBuf::from("/home/ada/.dsh"));
        assert_eq!(r.source, HomeSource::Default);
    }

    #[test]
    fn blank_environment_counts_as_unset() {
        for blank in ["", "   ", "\t\n"] {
            let r = resolve(None, None, &ambient(Some(blank))).unwrap();
            assert_eq!(
                r.path,
                PathBuf::from("/home/ada/.dsh"),
                "DSH_HOME={blank:?}"
            );
            assert_eq!(r.source, HomeSource::Default);
        }
    }

    #[test]
    fn tilde_expansion() {
        let env = ambient(None);
        assert_eq!(
            path_of(resolve(explicit("~"), None, &env)),
            PathBuf::from("/home/ada")
        );
        assert_eq!(
            path_of(resolve(explicit("~/x/y"), None, &env)),
            PathBuf::from("/home/ada/x/y")
        );
        assert_eq!(
            path_of(resolve(None, None, &ambient(Some("~/envhome")))),
            PathBuf::from("/home/ada/envhome")
        );
        // `~user` is not expanded: it is a relative name under the current directory.
        assert_eq!(
            path_of(resolve(explicit("~bob/.dsh"), None, &env)),
            PathBuf::from("/work/proj/~bob/.dsh")
        );
        // A `~` elsewhere is an ordinary character.
        assert_eq!(
            path_of(resolve(explicit("/a/~/b"), None, &env)),
            PathBuf::from("/a/~/b")
        );
    }

    #[test]
    fn tilde_without_user_home_is_an_error() {
        let env = Ambient {
            user_home: None,
            ..ambient(None)
        };
        assert_eq!(
            resolve(explicit("~/x"), None, &env),
            Err(HomeError::NoUserHome {
                origin: "--dsh-home".into()
            })
        );
        assert_eq!(resolve(None, None, &env), Err(HomeError::NoDefault));
    }

    #[test]
    fn relative_values_are_made_absolute_against_cwd() {
        let env = ambient(Some("./ambient"));
        assert_eq!(
            path_of(resolve(explicit("rel/home"), None, &env)),
            PathBuf::from("/work/proj/rel/home")
        );
        assert_eq!(
            path_of(resolve(None, None, &env)),
            PathBuf::from("/work/proj/ambient")
        );
    }

    #[test]
    fn lexical_normalisation() {
        let env = ambient(None);
        let cases = [
            ("/tmp/x/", "/tmp/x"),
            ("/tmp//x///", "/tmp/x"),
            ("/tmp/./x/.", "/tmp/x"),
            ("/tmp/a/../x", "/tmp/x"),
            ("/../../x", "/x"),
            ("../sibling", "/work/sibling"),
            ("~/../other", "/home/other"),
        ];
        for (input, want) in cases {
            assert_eq!(
                path_of(resolve(explicit(input), None, &env)),
                PathBuf::from(want),
                "{input}"
            );
        }
    }

    #[test]
    fn explicit_empty_value_is_refused() {
        for empty in ["", "  "] {
            let err = resolve(explicit(empty), None, &ambient(Some("/env"))).unwrap_err();
            assert_eq!(
                err,
                HomeError::Empty {
                    origin: "--dsh-home".into()
                }
            );
            assert!(err.to_string().contains("--dsh-home is empty"), "{err}");
        }
    }

    #[test]
    fn nested_home_must_agree() {
        let env = ambient(None);
        let nested = |v| {
            Some(Explicit {
                value: OsStr::new(v),
                origin: "skills.local.dsh_home",
            })
        };
        // Same directory after normalisation: fine.
        let r = resolve(explicit("/h/a"), nested("/h/b/../a/"), &env).unwrap();
        assert_eq!(r.path, PathBuf::from("/h/a"));
        // Alone, the nested value is the explicit home.
        let r = resolve(None, nested("/h/n"), &ambient(Some("/env"))).unwrap();
        assert_eq!(r.path, PathBuf::from("/h/n"));
        assert_eq!(
            r.source,
            HomeSource::Explicit("skills.local.dsh_home".into())
        );
        // Different: refused, naming both.
        let err = resolve(explicit("/h/a"), nested("/h/b"), &env).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("--dsh-home resolves to /h/a"), "{msg}");
        assert!(
            msg.contains("skills.local.dsh_home resolves to /h/b"),
            "{msg}"
        );
    }

    #[test]
    fn non_utf8_values_do_not_panic() {
        use std::os::unix::ffi::OsStrExt;
        let env = ambient(None);
        let raw = OsStr::from_bytes(b"/tmp/\xff\xfe/home");
        let r = resolve(
            Some(Explicit {
                value: raw,
                origin: "--dsh-home",
            }),
            None,
            &env,
        )
        .unwrap();
        assert_eq!(r.path.as_os_str(), raw);
        let tilde = OsStr::from_bytes(b"~/\xff");
        let r = resolve(
            Some(Explicit {
                value: tilde,
                origin: "--dsh-home",
            }),
            None,
            &env,
        )
        .unwrap();
        assert_eq!(r.path.as_os_str().as_encoded_bytes(), b"/home/ada/\xff");
    }
}
