//! The backend last selected with `Persistence.Use`, remembered across restarts in a small state
//! file under the home, `<home>/state/persistence.json`:
//!
//! ```json
//! {"backend":"sqlite","path":"/home/ada/.dsh/sessions.sqlite3"}
//! {"backend":"postgres","url":"postgresql://ada:secret@db/dsh"}
//! {"backend":"postgres"}
//! ```
//!
//! A PostgreSQL choice keeps the connection string given to `Persistence.Use` (the file is 0600
//! in a 0700 directory, like a credentials file), or none when the configured one was chosen.
//!
//! The file is replaced atomically (a temporary file in the same directory, fsynced, renamed over
//! the old one, then the directory fsynced), so a crash leaves the old choice or the new one,
//! never a mix. Which of flag, config file and this file decides the backend at start is
//! `Daemon::new`'s business; this module only reads and writes the file.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BackendKind;
use super::postgres::SecretUrl;

/// The directory under the home that holds daemon state (not configuration, not sessions);
/// confined commands may not read it.
pub const STATE_DIR: &str = "state";

/// The state file's name inside [`STATE_DIR`].
pub(crate) const FILE_NAME: &str = "persistence.json";

/// The largest state file read; the real one is a few hundred bytes.
const MAX_LEN: u64 = 64 * 1024;

/// A backend and its location, as selected with `Persistence.Use`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChoice {
    /// Which backend.
    pub kind: BackendKind,
    /// Its sessions root (JSONL) or database file (SQLite); absolute. Empty for PostgreSQL.
    pub path: PathBuf,
    /// The connection string given for PostgreSQL; `None`: the configured one (and always
    /// `None` for the file backends).
    pub url: Option<SecretUrl>,
}

/// Why the saved choice could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    /// The file exists but does not hold a choice.
    #[error(
        "{}: {message}; fix or remove this file (it records the last `dshctl persistence use`)",
        path.display()
    )]
    Invalid {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The home cannot be written (a read-only file system, or no permission).
    #[error("cannot {action} {}: {error}", path.display())]
    NotWritable {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// Any other file-system failure.
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
}

/// The file's shape.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// Where the choice of the daemon of `home` is kept.
pub(crate) fn state_file(home: &Path) -> PathBuf {
    home.join(STATE_DIR).join(FILE_NAME)
}

/// Reads the saved choice of `home`; `None` when nothing was ever saved.
pub fn load(home: &Path) -> Result<Option<BackendChoice>, ChoiceError> {
    let path = state_file(home);
    let io = |action, source| ChoiceError::Io {
        action,
        path: path.clone(),
        error: source,
    };
    let invalid = |message: String| ChoiceError::Invalid {
        path: path.clone(),
        message,
    };
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("open", e)),
    };
    let meta = file.metadata().map_err(|e| io("inspect", e))?;
    if !meta.is_file() {
        return Err(invalid("is not a regular file".to_owned()));
    }
    if meta.len() > MAX_LEN {
        return Err(invalid(format!(
            "is {} bytes, more than a saved choice can be ({MAX_LEN})",
            meta.len()
        )));
    }
    let saved: Saved = serde_json::from_reader(std::io::BufReader::new(file))
        .map_err(|e| invalid(format!("not a saved backend choice: {e}")))?;
    let kind = match saved.backend.as_str() {
        "jsonl" => BackendKind::Jsonl,
        "sqlite" => BackendKind::Sqlite,
        "postgres" => BackendKind::Postgres,
        other => {
            return Err(invalid(format!(
                "unknown backend {other:?}; expected \"jsonl\", \"sqlite\" or \"postgres\""
            )));
        }
    };
    if kind == BackendKind::Postgres {
        return Ok(Some(BackendChoice {
            kind,
            path: PathBuf::new(),
            url: saved.url.map(SecretUrl::new),
        }));
    }
    let Some(path) = saved.path else {
        return Err(invalid("no path".to_owned()));
    };
    if !path.is_absolute() {
        return Err(invalid(format!("path {} is not absolute", path.display())));
    }
    Ok(Some(BackendChoice {
        kind,
        path,
        url: None,
    }))
}

/// Saves `choice` as the choice of `home`, atomically and durably.
pub fn save(home: &Path, choice: &BackendChoice) -> Result<(), ChoiceError> {
    let path = state_file(home);
    let dir = home.join(STATE_DIR);
    let postgres = choice.kind == BackendKind::Postgres;
    let mut text = serde_json::to_vec(&Saved {
        backend: choice.kind.as_str().to_owned(),
        path: (!postgres).then(|| choice.path.clone()),
        url: choice.url.as_ref().map(|u| u.expose().to_owned()),
    })
    .map_err(|e| ChoiceError::Invalid {
        path: path.clone(),
        message: format!("cannot record {}: {e}", choice.path.display()),
    })?;
    text.push(b'\n');

    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| failed("create directory", &dir, e))?;
    // Failures name the state file, not the temporary one: that is the file the user knows.
    let tmp = dir.join(format!(
        ".{FILE_NAME}.{}.tmp",
        uuid::Uuid::now_v7().simple()
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| file.write_all(&text).and_then(|()| file.sync_all()))
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| failed("write", &path, e));
    if let Err(error) = written {
        // The temporary file is ours alone; leave nothing behind. It may not exist at all.
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    // The rename is durable only once the directory entry is.
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| failed("sync directory", &dir, e))
}

fn failed(action: &'static str, path: &Path, source: std::io::Error) -> ChoiceError {
    let path = path.to_owned();
    match source.kind() {
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => ChoiceError::NotWritable {
            action,
            path,
            error: source,
        },
        _ => ChoiceError::Io {
            action,
            path,
            error: source,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_saved_choice_is_read_back_and_replaces_the_previous_one() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        assert_eq!(load(&home).unwrap(), None, "nothing saved yet");
        let first = BackendChoice {
            kind: BackendKind::Sqlite,
            path: PathBuf::from("/data/s.sqlite3"),
            url: None,
        };
        save(&home, &first).unwrap();
        assert_eq!(load(&home).unwrap(), Some(first));
        let second = BackendChoice {
            kind: BackendKind::Jsonl,
            path: PathBuf::from("/data/sessions dir"),
            url: None,
        };
        save(&home, &second).unwrap();
        assert_eq!(load(&home).unwrap(), Some(second));
        for url in [Some(SecretUrl::new("postgresql://u:pw@db/x")), None] {
            let third = BackendChoice {
                kind: BackendKind::Postgres,
                path: PathBuf::new(),
                url,
            };
            save(&home, &third).unwrap();
            assert_eq!(load(&home).unwrap(), Some(third));
        }

        let dir = home.join(STATE_DIR);
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME], "temporary files are left behind");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&state_file(&home)), 0o600);
    }

    #[test]
    fn a_damaged_state_file_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        fs::create_dir(home.join(STATE_DIR)).unwrap();
        let path = state_file(home);
        for (text, expected) in [
            ("{\"backend\":\"sqlite\"", "not a saved backend choice"),
            (
                "{\"backend\":\"mysql\",\"path\":\"/x\"}",
                "unknown backend \"mysql\"",
            ),
            ("{\"backend\":\"jsonl\",\"path\":\"rel\"}", "not absolute"),
            (
                "{\"backend\":\"jsonl\",\"path\":\"/x\",\"extra\":1}",
                "unknown field",
            ),
        ] {
            fs::write(&path, text).unwrap();
            let err = load(home).unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(err, ChoiceError::Invalid { .. }),
                "{text}: {message}"
            );
            assert!(
                message.starts_with(&path.display().to_string()),
                "{message}"
            );
            assert!(message.contains(expected), "{text}: {message}");
        }
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(load(home).is_err(), "a directory is no state file");
    }
}
