//! The daemon's configuration: a TOML file plus command-line flags, folded into one validated
//! [`Config`]. Flags override the file; the file overrides built-in defaults. Every key is listed in
//! `docs/CONFIG.md`.
//!
//! Unknown keys and wrong types are refused with the file, the line and the dotted key, so a typo
//! never silently falls back to a default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::home::{self, Ambient, Explicit, HomeError, ResolvedHome};
use crate::socket;

/// Name of the config file looked up in the harness home when `--config` is not given.
pub const DEFAULT_FILE_NAME: &str = "config.toml";

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colour only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, for journald and log shippers.
    Json,
}

/// The command-line values that can override the file. `None` means "not given".
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--dsh-home DIR`.
    pub dsh_home: Option<OsString>,
    /// `--socket PATH`.
    pub socket: Option<OsString>,
    /// `--log-format text|json`.
    pub log_format: Option<LogFormat>,
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The harness home: absolute, normalised, not necessarily existing yet.
    pub home: ResolvedHome,
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
    /// Where to listen when the socket is not handed over by systemd.
    pub socket: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// How long in-flight calls may run after shutdown starts before they are abandoned.
    pub shutdown_timeout: Duration,
}

/// Why the configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key, or a value of the wrong type.
    #[error("{}:{line}: {}: {message}", path.display(), key_label(key))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text (0 when unknown).
        line: usize,
        /// Dotted key, e.g. `skills.local.dsh_home` ("" when the error is not about one key).
        key: String,
        /// What was wrong.
        message: String,
    },
    /// A value is well-typed but not acceptable.
    #[error("{origin}: {message}")]
    Value {
        /// Which flag or key.
        origin: String,
        /// What was wrong.
        message: String,
    },
    /// The harness home could not be resolved.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The default config file under the home names a different home.
    #[error(
        "{} sets dsh_home to {} but it was found in the home {}; remove the key, or pass the file with --config",
        file.display(),
        named.display(),
        home.display()
    )]
    HomeMismatch {
        /// The implicit config file.
        file: PathBuf,
        /// The home it names.
        named: PathBuf,
        /// The home it was found in.
        home: PathBuf,
    },
}

fn key_label(key: &str) -> String {
    if key.is_empty() {
        "invalid TOML".to_owned()
    } else {
        format!("key `{key}`")
    }
}

/// The file's shape. `deny_unknown_fields` everywhere: a misspelt key is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dsh_home: Option<String>,
    socket: Option<String>,
    log_format: Option<LogFormat>,
    shutdown_timeout_ms: Option<u64>,
    skills: Option<SkillsSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillsSection {
    local: Option<LocalSkillsSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalSkillsSection {
    dsh_home: Option<String>,
}

/// Default for [`Config::shutdown_timeout`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

impl Config {
    /// Builds the configuration from flags, the config file and the ambient environment.
    ///
    /// The file is `--config` when given (it must exist), else `<home>/config.toml` when that
    /// exists. `dsh_home` in a file counts as an explicit home only when the file was given with
    /// `--config`: a file found inside a home cannot move that home elsewhere.
    pub fn load(flags: &Flags, ambient: &Ambient) -> Result<Self, ConfigError> {
        let explicit_file = flags
            .config
            .as_ref()
            .map(|p| {
                home::absolutize(p.as_os_str(), "--config", ambient).map_err(ConfigError::from)
            })
            .transpose()?;
        let explicit_parsed = explicit_file
            .as_ref()
            .map(|path| read_file(path).map(|parsed| (path.clone(), parsed)))
            .transpose()?;

        let (home, file, parsed) = match explicit_parsed {
            Some((path, parsed)) => {
                let home = resolve_home(flags, &parsed, Some(&path), ambient)?;
                (home, Some(path), parsed)
            }
            None => {
                let home = resolve_home(flags, &FileConfig::default(), None, ambient)?;
                let candidate = home.path.join(DEFAULT_FILE_NAME);
                if candidate.is_file() {
                    let parsed = read_file(&candidate)?;
                    check_implicit_home(&candidate, &parsed, &home, ambient)?;
                    (home, Some(candidate), parsed)
                } else {
                    (home, None, FileConfig::default())
                }
            }
        };

        let socket = match (&flags.socket, &parsed.socket) {
            (Some(flag), _) => home::absolutize(flag, "--socket", ambient)?,
            (None, Some(value)) => home::absolutize(
                value.as_ref(),
                &key_origin(file.as_deref(), "socket"),
                ambient,
            )?,
            (None, None) => socket::default_path(&home.path, ambient.runtime_dir.as_deref()),
        };

        let shutdown_timeout = match parsed.shutdown_timeout_ms {
            Some(0) => {
                return Err(ConfigError::Value {
                    origin: key_origin(file.as_deref(), "shutdown_timeout_ms"),
                    message: "must be at least 1".into(),
                });
            }
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_SHUTDOWN_TIMEOUT,
        };

        Ok(Self {
            home,
            file,
            socket,
            log_format: flags.log_format.or(parsed.log_format).unwrap_or_default(),
            shutdown_timeout,
        })
    }
}

fn key_origin(file: Option<&Path>, key: &str) -> String {
    match file {
        Some(path) => format!("{key} in {}", path.display()),
        None => key.to_owned(),
    }
}

fn resolve_home(
    flags: &Flags,
    parsed: &FileConfig,
    file: Option<&Path>,
    ambient: &Ambient,
) -> Result<ResolvedHome, ConfigError> {
    let file_origin = key_origin(file, "dsh_home");
    let nested_origin = key_origin(file, "skills.local.dsh_home");
    let explicit = match (&flags.dsh_home, &parsed.dsh_home) {
        (Some(flag), _) => Some(Explicit {
            value: flag.as_os_str(),
            origin: "--dsh-home",
        }),
        (None, Some(value)) => Some(Explicit {
            value: value.as_ref(),
            origin: &file_origin,
        }),
        (None, None) => None,
    };
    let nested = parsed
        .skills
        .as_ref()
        .and_then(|s| s.local.as_ref())
        .and_then(|l| l.dsh_home.as_ref())
        .map(|value| Explicit {
            value: value.as_ref(),
            origin: &nested_origin,
        });
    Ok(home::resolve(explicit, nested, ambient)?)
}

fn check_implicit_home(
    file: &Path,
    parsed: &FileConfig,
    home: &ResolvedHome,
    ambient: &Ambient,
) -> Result<(), ConfigError> {
    let named = [
        parsed.dsh_home.as_ref().map(|v| (v, "dsh_home")),
        parsed
            .skills
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .and_then(|l| l.dsh_home.as_ref())
            .map(|v| (v, "skills.local.dsh_home")),
    ];
    for (value, key) in named.into_iter().flatten() {
        let path = home::absolutize(value.as_ref(), &key_origin(Some(file), key), ambient)?;
        if path != home.path {
            return Err(ConfigError::HomeMismatch {
                file: file.to_owned(),
                named: path,
                home: home.path.clone(),
            });
        }
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        line: e.line,
        key: e.key,
        message: e.message,
    })
}

/// A parse failure located in the text.
#[derive(Debug, PartialEq, Eq)]
struct ParseFailure {
    line: usize,
    key: String,
    message: String,
}

fn parse(text: &str) -> Result<FileConfig, ParseFailure> {
    let line_of = |span: Option<std::ops::Range<usize>>| {
        span.map_or(0, |s| {
            text.get(..s.start)
                .map_or(0, |before| before.matches('\n').count() + 1)
        })
    };
    let de = toml::Deserializer::parse(text).map_err(|e| ParseFailure {
        line: line_of(e.span()),
        key: String::new(),
        message: e.message().to_owned(),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        ParseFailure {
            line: line_of(inner.span()),
            key: if key == "." { String::new() } else { key },
            message: inner.message().to_owned(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ambient(dsh_home: Option<&str>) -> Ambient {
        Ambient {
            dsh_home: dsh_home.map(OsString::from),
            user_home: Some(PathBuf::from("/home/ada")),
            cwd: Some(PathBuf::from("/work")),
            runtime_dir: None,
        }
    }

    #[test]
    fn unknown_top_level_key_names_line_and_key() {
        let err = parse("log_format = \"json\"\n\nsokcet = \"/x\"\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.key, "sokcet");
        assert!(
            err.message.contains("unknown field `sokcet`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn unknown_nested_key_names_the_dotted_path() {
        let err = parse("[skills.local]\ndsh_home = \"/a\"\nroot = 1\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.key, "skills.local.root");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let err = parse("\nshutdown_timeout_ms = \"soon\"\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.key, "shutdown_timeout_ms");
        let err = parse("log_format = \"xml\"\n").unwrap_err();
        assert_eq!(err.key, "log_format");
        assert!(err.message.contains("xml"), "{}", err.message);
    }

    #[test]
    fn invalid_toml_names_the_line() {
        let err = parse("a = 1\nb = = 2\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.key, "");
    }

    #[test]
    fn error_display_has_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "bogus = 1\n").unwrap();
        let flags = Flags {
            config: Some(path.clone()),
            ..Flags::default()
        };
        let msg = Config::load(&flags, &ambient(None))
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(&format!(
                "{}:1: key `bogus`: unknown field `bogus`",
                path.display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "dsh_home = \"/file/home\"\nsocket = \"/file/s.sock\"\nlog_format = \"json\"\n",
        )
        .unwrap();
        let from_file = Config::load(
            &Flags {
                config: Some(path.clone()),
                ..Flags::default()
            },
            &ambient(Some("/env")),
        )
        .unwrap();
        assert_eq!(from_file.home.path, PathBuf::from("/file/home"));
        assert_eq!(from_file.socket, PathBuf::from("/file/s.sock"));
        assert_eq!(from_file.log_format, LogFormat::Json);

        let flagged = Config::load(
            &Flags {
                config: Some(path),
                dsh_home: Some("/flag/home".into()),
                socket: Some("/flag/s.sock".into()),
                log_format: Some(LogFormat::Text),
            },
            &ambient(Some("/env")),
        )
        .unwrap();
        assert_eq!(flagged.home.path, PathBuf::from("/flag/home"));
        assert_eq!(flagged.socket, PathBuf::from("/flag/s.sock"));
        assert_eq!(flagged.log_format, LogFormat::Text);
    }

    #[test]
    fn default_file_is_read_from_the_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("h");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("config.toml"), "shutdown_timeout_ms = 1500\n").unwrap();
        let cfg = Config::load(&Flags::default(), &ambient(Some(home.to_str().unwrap()))).unwrap();
        assert_eq!(cfg.file, Some(home.join("config.toml")));
        assert_eq!(cfg.shutdown_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn default_file_cannot_move_the_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("h");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("config.toml"), "dsh_home = \"/elsewhere\"\n").unwrap();
        let err =
            Config::load(&Flags::default(), &ambient(Some(home.to_str().unwrap()))).unwrap_err();
        assert!(matches!(err, ConfigError::HomeMismatch { .. }), "{err}");
    }

    #[test]
    fn conflicting_homes_in_the_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "dsh_home = \"/a\"\n[skills.local]\ndsh_home = \"/b\"\n",
        )
        .unwrap();
        let err = Config::load(
            &Flags {
                config: Some(path),
                ..Flags::default()
            },
            &ambient(None),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("resolves to /a") && msg.contains("resolves to /b"),
            "{msg}"
        );
    }

    #[test]
    fn explicit_empty_home_in_the_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "dsh_home = \"\"\n").unwrap();
        let err = Config::load(
            &Flags {
                config: Some(path),
                ..Flags::default()
            },
            &ambient(None),
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::Home(HomeError::Empty { .. })),
            "{err}"
        );
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let err = Config::load(
            &Flags {
                config: Some("/nonexistent/dsh.toml".into()),
                ..Flags::default()
            },
            &ambient(None),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/dsh.toml"), "{err}");
    }
}
