//! Which persistence backend is active: the choice at start (flag, config file, saved choice,
//! default), switching at runtime (`Persistence.Use`) with the choice saved for the next start,
//! and the configured backends that are not active, so their sessions never vanish from view.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Config, PostgresConfig, PostgresUrl, ValueSource};
use dsh_core::{
    BackendChoice, BackendKind, ChoiceError, LeaseHolder, Order, PageQuery, Persistence,
    PersistenceError, PersistenceHandle, PostgresOptions, PostgresTarget, SecretUrl, SessionId,
    check_sqlite_location, open_backend, open_postgres, same_location, save_backend_choice,
};

/// The active backend and the choices around it; what `Persistence.Use` and `ListSessions` need.
#[derive(Debug)]
pub struct Backends {
    /// The swappable handle every consumer asks at the time of use.
    persistence: Arc<PersistenceHandle>,
    /// The harness home, where the choice is saved.
    home: PathBuf,
    /// The configured JSONL root (`jsonl.root`).
    jsonl_root: PathBuf,
    /// The configured SQLite database (`sqlite.path`).
    sqlite_path: PathBuf,
    /// The configured PostgreSQL database (`[postgres]`).
    postgres: PostgresConfig,
    /// The backend choice saved under the home (read at start, written by
    /// [`use_backend`](Self::use_backend)). Held for the whole of a `use_backend`, so concurrent
    /// swaps are serialised and the saved choice is always the one made last.
    saved_choice: tokio::sync::Mutex<Option<BackendChoice>>,
}

impl Backends {
    /// The backends of `config`, with `persistence` active and `saved` the choice read at start.
    pub fn new(
        config: &Config,
        persistence: Arc<PersistenceHandle>,
        saved: Option<BackendChoice>,
    ) -> Self {
        Self {
            persistence,
            home: config.home.path.clone(),
            jsonl_root: config.jsonl_root.clone(),
            sqlite_path: config.sqlite_path.clone(),
            postgres: config.postgres.clone(),
            saved_choice: tokio::sync::Mutex::new(saved),
        }
    }

    /// The active backend's handle.
    pub fn handle(&self) -> &Arc<PersistenceHandle> {
        &self.persistence
    }

    /// Makes the backend of `kind` at `path` (the configured one when `None`) the active one, and
    /// saves the choice under the home so that the next start uses it too.
    ///
    /// Selecting the active backend again (the same location, however spelled) changes nothing:
    /// no new connection, no new generation, so running checkpoints carry on undisturbed. A new
    /// backend is checked first, reading only: a location that cannot hold it (a device, a
    /// directory where a database should be; for a `path` given, also a name in a missing
    /// directory), an unreadable root or a foreign database is refused, and so is a choice that
    /// cannot be saved; then nothing changes.
    pub async fn use_backend(
        &self,
        kind: BackendKind,
        path: Option<PathBuf>,
    ) -> Result<Selected, UseError> {
        if kind == BackendKind::Postgres {
            return self.use_postgres(None).await;
        }
        // A location from the request must be usable as it is; the configured one may lie in a
        // directory dshd creates itself (the home, which need not exist yet), as at start.
        let explicit = path.is_some();
        let path =
            path.unwrap_or_else(|| configured_path(kind, &self.jsonl_root, &self.sqlite_path));
        let mut saved = self.saved_choice.lock().await;
        let active = self.persistence.backend();
        // `same_location` and `check_sqlite_location` look at one path (a `stat`, a
        // `realpath`): done here, like the other checks of a request.
        let (backend, changed) = if active.kind() == kind && same_location(&active.path(), &path) {
            (active, false)
        } else {
            if explicit && kind == BackendKind::Sqlite {
                check_sqlite_location(&path)?;
            }
            let backend = open_backend(kind, path)?;
            read_first_page(&*backend).await?;
            (backend, true)
        };
        let chosen = BackendChoice {
            kind,
            path: backend.path(),
            url: None,
        };
        self.settle(&mut saved, chosen, backend, changed).await
    }

    /// Makes the PostgreSQL database at `url` (the configured one when `None`) the active
    /// backend, like [`use_backend`](Self::use_backend): the database must answer (a first page
    /// is read from it) before anything changes; the same database selected again changes
    /// nothing.
    pub async fn use_postgres(&self, url: Option<SecretUrl>) -> Result<Selected, UseError> {
        let options = postgres_options(&self.postgres, url.as_ref())?;
        if url.is_some() && options.target.config().get_password().is_some() {
            return Err(UseError::PasswordInUrl);
        }
        let mut saved = self.saved_choice.lock().await;
        let active = self.persistence.backend();
        let (backend, changed) = if active.kind() == BackendKind::Postgres
            && active.path() == std::path::Path::new(options.target.shown())
        {
            (active, false)
        } else {
            let backend = open_postgres(options)?;
            read_first_page(&*backend).await?;
            (backend, true)
        };
        let chosen = BackendChoice {
            kind: BackendKind::Postgres,
            path: PathBuf::new(),
            url,
        };
        self.settle(&mut saved, chosen, backend, changed).await
    }

    /// Saves `chosen` (if it is not the saved choice already), then swaps `backend` in if it
    /// `changed`.
    async fn settle(
        &self,
        saved: &mut Option<BackendChoice>,
        chosen: BackendChoice,
        backend: Arc<dyn Persistence>,
        changed: bool,
    ) -> Result<Selected, UseError> {
        if saved.as_ref() != Some(&chosen) {
            let home = self.home.clone();
            let record = chosen.clone();
            tokio::task::spawn_blocking(move || save_backend_choice(&home, &record))
                .await
                .map_err(|e| join_error(&e))??;
            *saved = Some(chosen);
        }
        if changed {
            self.persistence.swap(backend.clone());
        }
        Ok(Selected { backend, changed })
    }

    /// The configured backends other than the active one — `jsonl.root`, `sqlite.path` and the
    /// saved choice — each with how many of its sessions neither the active backend holds nor a
    /// live agent owns (`live`), so that sessions stored in a backend that is not active do not
    /// silently disappear from view. Reads only; a backend that cannot be read says why instead.
    /// Costs a read of every other backend's headers and one header lookup in the active backend
    /// per session found there.
    pub async fn other_backends(&self, live: HashSet<SessionId>) -> Vec<OtherBackend> {
        let mut candidates = vec![
            (BackendKind::Jsonl, self.jsonl_root.clone()),
            (BackendKind::Sqlite, self.sqlite_path.clone()),
        ];
        // A PostgreSQL database is not counted: reading every header of a shared database on
        // every first page would cost more than the listing itself.
        if let Some(saved) = self
            .saved_choice
            .lock()
            .await
            .clone()
            .filter(|saved| saved.kind != BackendKind::Postgres)
        {
            candidates.push((saved.kind, saved.path));
        }
        let active = self.persistence.backend();
        let mut seen: Vec<(BackendKind, PathBuf)> = vec![(active.kind(), active.path())];
        let mut others = Vec::new();
        for (kind, path) in candidates {
            let known = seen
                .iter()
                .any(|(k, p)| *k == kind && same_location(p, &path));
            if known {
                continue;
            }
            seen.push((kind, path.clone()));
            let unlisted = unlisted_in(active.as_ref(), kind, &path, &live).await;
            others.push(OtherBackend {
                kind,
                path,
                unlisted,
            });
        }
        others
    }
}

/// How many sessions of the backend of `kind` at `path` neither `active` holds nor a live agent
/// owns.
async fn unlisted_in(
    active: &dyn Persistence,
    kind: BackendKind,
    path: &Path,
    live: &HashSet<SessionId>,
) -> Result<usize, PersistenceError> {
    let headers = open_backend(kind, path.to_owned())?.list().await?;
    let mut unlisted = 0;
    for header in headers {
        if !live.contains(&header.id) && active.header(&header.id).await?.is_none() {
            unlisted += 1;
        }
    }
    Ok(unlisted)
}

/// What [`Backends::use_backend`] made active.
#[derive(Debug)]
pub struct Selected {
    /// The active backend now.
    pub backend: Arc<dyn Persistence>,
    /// False when it was active already (nothing was swapped).
    pub changed: bool,
}

/// Why [`Backends::use_backend`] refused; the active backend and the saved choice are unchanged.
#[derive(Debug, thiserror::Error)]
pub enum UseError {
    /// The backend asked for is unusable.
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    /// The choice could not be saved for the next start.
    #[error("the backend was not changed")]
    Choice(#[from] ChoiceError),
    /// The connection string holds a password, which would be saved in the home with the choice.
    #[error(
        "url: the connection string holds a password, and the choice is saved in the home, where dsh keeps no secret; put the URL in a private file named by postgres.url_file (or use a password-less login: peer, certificate) and run `dshctl persistence use postgres` without --url; nothing was changed"
    )]
    PasswordInUrl,
}

/// Reads a first page of `backend` before it is made active: the store answers (and a JSONL
/// backend builds the index its listings will use).
async fn read_first_page(backend: &dyn Persistence) -> Result<(), PersistenceError> {
    backend
        .list_page(&PageQuery {
            after: None,
            limit: 1,
            order: Order::NewestFirst,
            cwd: None,
            host: None,
        })
        .await?;
    Ok(())
}

/// A configured backend that is not the active one.
#[derive(Debug)]
pub struct OtherBackend {
    /// Which backend.
    pub kind: BackendKind,
    /// Its root or database file.
    pub path: PathBuf,
    /// How many of its sessions the active listing lacks, or why it could not be read.
    pub unlisted: Result<usize, PersistenceError>,
}

/// Why the backend active at start was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartSource {
    /// `--persistence`.
    Flag,
    /// `persistence` in the config file.
    ConfigFile,
    /// The choice saved by the last `Persistence.Use`.
    Saved,
    /// Nothing said otherwise: JSONL.
    Default,
}

impl StartSource {
    /// For the log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Flag => "the --persistence flag",
            Self::ConfigFile => "`persistence` in the config file",
            Self::Saved => "the choice saved by `dshctl persistence use`",
            Self::Default => "the default",
        }
    }
}

/// The backend to start with. `--persistence` wins, then `persistence` in the config file, then
/// the choice the last `Persistence.Use` saved, then the default (JSONL). The flag and the file
/// are the operator's explicit word, so a runtime choice never overrides them; it replaces only
/// the built-in default. A flagged or configured backend is at its configured location; a saved
/// one where it was selected.
pub fn startup_backend(
    config: &Config,
    saved: Option<&BackendChoice>,
) -> (BackendChoice, StartSource) {
    let configured = BackendChoice {
        kind: config.persistence,
        path: configured_path(config.persistence, &config.jsonl_root, &config.sqlite_path),
        url: None,
    };
    match (config.persistence_source, saved) {
        (ValueSource::Flag, _) => (configured, StartSource::Flag),
        (ValueSource::File, _) => (configured, StartSource::ConfigFile),
        (ValueSource::Default, Some(saved)) => (saved.clone(), StartSource::Saved),
        (ValueSource::Default, None) => (configured, StartSource::Default),
    }
}

/// Opens the backend of `choice` (nothing is read or connected to yet).
pub fn open_choice(
    config: &Config,
    choice: &BackendChoice,
) -> Result<Arc<dyn Persistence>, PersistenceError> {
    match choice.kind {
        BackendKind::Postgres => {
            let options = postgres_options(&config.postgres, choice.url.as_ref())?;
            if choice.url.is_some() && options.target.config().get_password().is_some() {
                // Saved by a dshd that still accepted one; used, but not kept quiet about.
                tracing::warn!(
                    "the saved persistence choice holds a PostgreSQL password in the home's state \
                     directory: move the URL to a private file named by postgres.url_file and run \
                     `dshctl persistence use postgres` without --url"
                );
            }
            open_postgres(options)
        }
        kind => open_backend(kind, choice.path.clone()),
    }
}

/// The options of the PostgreSQL database at `url`, or the configured one: `postgres.url`, or
/// the contents of `postgres.url_file` (read now). Errors name the field and never the URL.
fn postgres_options(
    config: &PostgresConfig,
    url: Option<&SecretUrl>,
) -> Result<PostgresOptions, PersistenceError> {
    let text = match (url, &config.url) {
        (Some(url), _) => url.expose().to_owned(),
        (None, Some(PostgresUrl::Inline(url))) => url.expose().to_owned(),
        (None, Some(PostgresUrl::File(path))) => std::fs::read_to_string(path)
            .map_err(|e| {
                PersistenceError::Config(format!(
                    "postgres.url_file: cannot read {}: {e}",
                    path.display()
                ))
            })?
            .trim()
            .to_owned(),
        (None, None) => {
            return Err(PersistenceError::Config(
                "no PostgreSQL database is configured: give its URL (dshctl persistence use postgres --url URL) or set postgres.url".to_owned(),
            ));
        }
    };
    Ok(PostgresOptions {
        target: PostgresTarget::parse(&text)?,
        holder: LeaseHolder::this_process(),
        lease: config.lease,
        timeout: config.timeout,
        ca_file: config.ca_file.clone(),
    })
}

fn join_error(error: &tokio::task::JoinError) -> PersistenceError {
    PersistenceError::Task {
        what: "persistence",
        message: error.to_string(),
    }
}

/// The configured location of a backend of `kind` (`jsonl.root`, `sqlite.path`).
fn configured_path(kind: BackendKind, jsonl_root: &Path, sqlite_path: &Path) -> PathBuf {
    match kind {
        BackendKind::Jsonl => jsonl_root.to_owned(),
        BackendKind::Sqlite => sqlite_path.to_owned(),
        BackendKind::Postgres => PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{BackendName, Flags};
    use crate::daemon::Daemon;
    use dsh_core::home::Ambient;
    use dsh_core::load_backend_choice;
    use tokio_util::sync::CancellationToken;

    fn ambient() -> Ambient {
        Ambient {
            dsh_home: None,
            user_home: Some(PathBuf::from("/nonexistent-user-home")),
            cwd: Some(PathBuf::from("/")),
            runtime_dir: None,
            config_home: None,
            credentials_dir: None,
        }
    }

    /// A config for `home`; `file` is the text of a config file given with `--config`.
    fn config(home: &Path, flag: Option<BackendName>, file: Option<&str>) -> Config {
        let config_file = file.map(|text| {
            let path = home.with_extension("toml");
            std::fs::write(&path, text).unwrap();
            path
        });
        Config::load(
            &Flags {
                config: config_file,
                dsh_home: Some(home.as_os_str().to_owned()),
                persistence: flag,
                ..Flags::default()
            },
            &ambient(),
        )
        .unwrap()
    }

    #[test]
    fn the_flag_and_the_config_file_win_over_the_saved_choice() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let saved = BackendChoice {
            kind: BackendKind::Sqlite,
            path: PathBuf::from("/elsewhere/chosen.sqlite3"),
            url: None,
        };
        let default = config(&home, None, None);
        assert_eq!(
            startup_backend(&default, Some(&saved)),
            (saved.clone(), StartSource::Saved)
        );
        assert_eq!(
            startup_backend(&default, None),
            (
                BackendChoice {
                    kind: BackendKind::Jsonl,
                    path: home.join("sessions"),
                    url: None,
                },
                StartSource::Default
            )
        );
        let flagged = config(&home, Some(BackendName::Jsonl), None);
        assert_eq!(
            startup_backend(&flagged, Some(&saved)),
            (
                BackendChoice {
                    kind: BackendKind::Jsonl,
                    path: home.join("sessions"),
                    url: None,
                },
                StartSource::Flag
            )
        );
        // The file names the same kind as the saved choice: its own location still wins.
        let filed = config(&home, None, Some("persistence = \"sqlite\"\n"));
        assert_eq!(
            startup_backend(&filed, Some(&saved)),
            (
                BackendChoice {
                    kind: BackendKind::Sqlite,
                    path: home.join("sessions.sqlite3"),
                    url: None,
                },
                StartSource::ConfigFile
            )
        );
    }

    fn daemon(home: &Path) -> Daemon {
        let config = config(home, None, None);
        Daemon::new(
            &config,
            home.join("run/dshd.sock"),
            CancellationToken::new(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn selecting_the_active_backend_again_changes_nothing_and_the_choice_survives_a_restart()
    {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let first = daemon(&home);
        let db = home.join("sessions.sqlite3");

        let selected = first
            .backends
            .use_backend(BackendKind::Sqlite, None)
            .await
            .unwrap();
        assert!(selected.changed);
        assert_eq!(selected.backend.path(), db);
        let (active, generation) = first.backends.handle().current();
        assert_eq!(generation, 1);

        // The same file under another spelling (a link to its directory): no swap at all.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        let again = first
            .backends
            .use_backend(BackendKind::Sqlite, Some(link.join("sessions.sqlite3")))
            .await
            .unwrap();
        assert!(!again.changed);
        let (still, generation) = first.backends.handle().current();
        assert_eq!(generation, 1, "re-selecting swapped the backend");
        assert!(Arc::ptr_eq(&active, &still));

        // Refused: nothing changes, and the saved choice stays.
        let err = first
            .backends
            .use_backend(BackendKind::Sqlite, Some(PathBuf::from("/dev/null")))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                UseError::Persistence(PersistenceError::BadLocation { .. })
            ),
            "{err:?}"
        );
        assert_eq!(first.backends.handle().current().1, 1);
        assert_eq!(
            load_backend_choice(&home).unwrap(),
            Some(BackendChoice {
                kind: BackendKind::Sqlite,
                path: db.clone(),
                url: None,
            })
        );
        drop(first);

        // A restart without flag or config file starts where the last Use left off.
        let second = daemon(&home);
        assert_eq!(second.backends.handle().kind(), BackendKind::Sqlite);
        assert_eq!(second.backends.handle().backend().path(), db);
        let others = second.backends.other_backends(HashSet::new()).await;
        assert_eq!(others.len(), 1, "{others:?}");
        assert_eq!(others[0].kind, BackendKind::Jsonl);
        assert_eq!(others[0].unlisted.as_ref().ok(), Some(&0));
    }
}
