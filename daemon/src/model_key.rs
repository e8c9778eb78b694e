//! Where dshd reads the model's API key from, once at start: a private file
//! (`model.api_key_file`), else a systemd credential (`$CREDENTIALS_DIRECTORY/<name>`, the unit's
//! `LoadCredential=`), else the environment variable `model.api_key_env`. A file or credential
//! keeps the key out of dshd's environment altogether; whichever it came from, the variable is
//! still scrubbed from every child.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::config::Config;

/// Where the key came from (never the key itself), for the log and `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `model.api_key_file`.
    File(PathBuf),
    /// A systemd credential of this name.
    Credential(String),
    /// The environment variable of this name.
    Env(String),
    /// No key anywhere; names the variable that was looked at.
    None(String),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Credential(name) => write!(f, "systemd credential {name}"),
            Self::Env(name) => write!(f, "environment variable {name}"),
            Self::None(name) => write!(f, "none (no api_key_file, credential or ${name})"),
        }
    }
}

/// Why the key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file can be read by others.
    #[error(
        "model.api_key_file: {path} is readable by {who} (mode {mode:o}); the key must be private: chmod 600 {path}"
    )]
    NotPrivate {
        /// The file.
        path: String,
        /// "its group" or "other users".
        who: &'static str,
        /// Its permission bits.
        mode: u32,
    },
    /// The file or credential cannot be read, or is empty.
    #[error("{what}: cannot read the API key from {path}: {reason}")]
    Unreadable {
        /// `model.api_key_file` or `model.api_key_credential`.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Reads the key as the module docs say; `credentials` is `$CREDENTIALS_DIRECTORY`.
pub fn read(
    config: &Config,
    credentials: Option<&Path>,
) -> Result<(Option<String>, KeySource), KeyError> {
    if let Some(path) = &config.api_key_file {
        let mode = std::fs::metadata(path)
            .map_err(|e| unreadable("model.api_key_file", path, e.to_string()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(KeyError::NotPrivate {
                path: path.display().to_string(),
                who: if mode & 0o007 != 0 {
                    "other users"
                } else {
                    "its group"
                },
                mode: mode & 0o777,
            });
        }
        let key = read_key("model.api_key_file", path)?;
        return Ok((Some(key), KeySource::File(path.clone())));
    }
    if let Some(dir) = credentials {
        let path = dir.join(&config.api_key_credential);
        if path.exists() {
            let key = read_key("model.api_key_credential", &path)?;
            return Ok((
                Some(key),
                KeySource::Credential(config.api_key_credential.clone()),
            ));
        }
    }
    let name = config.openai.api_key_env.clone();
    Ok(match std::env::var(&name) {
        Ok(key) if !key.is_empty() => (Some(key), KeySource::Env(name)),
        _ => (None, KeySource::None(name)),
    })
}

fn unreadable(what: &'static str, path: &Path, reason: String) -> KeyError {
    KeyError::Unreadable {
        what,
        path: path.display().to_string(),
        reason,
    }
}

/// The file's contents without the trailing newline; an empty key is an error.
fn read_key(what: &'static str, path: &Path) -> Result<String, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(what, path, e.to_string()))?;
    let key = text.trim_end_matches(['\n', '\r']).to_owned();
    if key.trim().is_empty() {
        return Err(unreadable(what, path, "it is empty".into()));
    }
    Ok(key)
}
