//! PostgreSQL backend (CONTRACTS §4.7): one database for the sessions of every machine, with one
//! writer per session enforced by a lease row (see [`lease`]).
//!
//! The [`Persistence`] trait is synchronous and its callers run it on the blocking pool. The
//! client (`tokio-postgres`, pooled by `deadpool-postgres`) is async, so the backend owns a
//! one-worker runtime that drives its connections and the lease heartbeat; each call is sent
//! there and its answer awaited on a plain channel, which works from any thread, inside another
//! runtime or not.
//!
//! Every append and every repair is one transaction that first takes (or keeps) the session's
//! lease, which locks the lease row: appends to one session are serialised across machines, the
//! tail check and the inserts see the same log, and an append of a daemon that lost the lease
//! writes nothing. Nothing is written before a session's first append, and the database is not
//! even connected to before the first call: a database that is down when dshd starts does not
//! stop dshd from starting.

use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use super::{
    BackendKind, Page, PageQuery, Persistence, PersistenceError, SessionLocation, StoredSession,
    batch_start,
};
use crate::locks::lock;
use dsh_session::{Event, SessionHeader, SessionId};
use ops::Rows;

pub(crate) mod lease;
mod ops;
mod read;
pub(crate) mod schema;
pub(crate) mod target;
pub(crate) mod tls;

pub use lease::Holder;
pub use target::{SecretUrl, Target};
pub use tls::TlsMode;

/// How long a lease lasts without renewal unless configured (`postgres.lease_seconds`): a
/// crashed daemon's sessions can be resumed elsewhere this long after its last renewal.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The most connections one backend opens.
const POOL_SIZE: usize = 16;

/// How to reach the database and how this daemon holds sessions in it.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The database.
    pub target: Target,
    /// Who this daemon is, as leases name it.
    pub holder: Holder,
    /// How long a lease lasts without renewal; renewed every third of it.
    pub lease: Duration,
    /// `postgres.ca_file`: the CA certificates (PEM) a server's certificate must lead to, for
    /// `sslmode` `verify-ca` and `verify-full` (and `require`, when set).
    pub ca_file: Option<PathBuf>,
}

impl PostgresOptions {
    /// Options for `url`, held by this process, with the default lease.
    pub fn new(url: &str) -> Result<Self, PersistenceError> {
        Ok(Self {
            target: Target::parse(url)?,
            holder: Holder::this_process(),
            lease: DEFAULT_LEASE,
            ca_file: None,
        })
    }
}

/// The PostgreSQL backend.
#[derive(Debug)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
    /// Drives the connections and the heartbeat. `Option` only so that `Drop` can shut it down
    /// without blocking (a runtime dropped inside another runtime's worker would panic).
    runtime: Option<tokio::runtime::Runtime>,
}

#[derive(Debug)]
struct Inner {
    target: Target,
    pool: Pool,
    holder: Holder,
    lease: Duration,
    /// Sessions whose lease this backend holds (and renews).
    held: Mutex<HashSet<SessionId>>,
    /// Tests only: while set, the heartbeat renews nothing (a daemon cut off from the database).
    paused: std::sync::atomic::AtomicBool,
    /// Set once the schema is known to be current.
    migrated: tokio::sync::OnceCell<()>,
    /// Why the database could not be reached the last time it was tried; `None` after a success.
    unavailable: Mutex<Option<String>>,
}

impl PostgresBackend {
    /// A backend over the database of `options`. Connects to nothing: the first call does.
    pub fn open(options: PostgresOptions) -> Result<Self, PersistenceError> {
        if options.lease < Duration::from_millis(300) {
            return Err(PersistenceError::Config(
                "postgres.lease_seconds must be at least 0.3".to_owned(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dsh-postgres")
            .enable_all()
            .build()
            .map_err(|e| {
                PersistenceError::Config(format!("cannot start the PostgreSQL runtime: {e}"))
            })?;
        let tls = tls::connector(options.target.tls(), options.ca_file.as_deref())?;
        let manager = Manager::from_config(
            options.target.config().clone(),
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let connect = options
            .target
            .config()
            .get_connect_timeout()
            .copied()
            .unwrap_or(target::CONNECT_TIMEOUT);
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(connect))
            .wait_timeout(Some(connect.saturating_mul(2)))
            .build()
            .map_err(|e| PersistenceError::Config(format!("postgres: {e}")))?;
        let inner = Arc::new(Inner {
            target: options.target,
            pool,
            holder: options.holder,
            lease: options.lease,
            held: Mutex::new(HashSet::new()),
            paused: std::sync::atomic::AtomicBool::new(false),
            migrated: tokio::sync::OnceCell::new(),
            unavailable: Mutex::new(None),
        });
        runtime.spawn(lease::heartbeat(Arc::downgrade(&inner)));
        Ok(Self {
            inner,
            runtime: Some(runtime),
        })
    }

    /// The database, credentials removed.
    pub fn shown(&self) -> &str {
        self.inner.target.shown()
    }

    /// Who this backend's leases name.
    pub fn holder(&self) -> &Holder {
        &self.inner.holder
    }

    /// Runs `work` on the backend's runtime and waits for it, from any thread.
    fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, PersistenceError>> + Send + 'static,
    ) -> Result<T, PersistenceError> {
        let Some(runtime) = &self.runtime else {
            return Err(self.inner.down("the backend is shut down".to_owned()));
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(PersistenceError::Task {
                what: "postgres",
                message: "the PostgreSQL runtime stopped".to_owned(),
            })
        })
    }

    /// Stops (or resumes) renewing this backend's leases while it keeps working, as a daemon
    /// cut off from the database for a while would be: for tests of what another daemon sees.
    #[doc(hidden)]
    pub fn pause_heartbeat_for_tests(&self, paused: bool) {
        self.inner
            .paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Inner {
    fn path(&self) -> PathBuf {
        PathBuf::from(self.target.shown())
    }

    /// A connection, with the schema migrated (once per backend).
    async fn client(&self) -> Result<deadpool_postgres::Object, PersistenceError> {
        let mut client = self.pool.get().await.map_err(|e| self.pool_error(e))?;
        self.clear_down();
        if self.migrated.get().is_none() {
            let pg: &mut tokio_postgres::Client = &mut client;
            self.migrated
                .get_or_try_init(|| async {
                    match schema::migrate(pg).await {
                        Ok(schema::Outcome::Current) => Ok(()),
                        Ok(schema::Outcome::Newer(version)) => Err(PersistenceError::Config(format!(
                            "{} has dsh schema version {version}, newer than this dshd's ({}): use that dsh",
                            self.target.shown(),
                            schema::SCHEMA_VERSION
                        ))),
                        Err(e) => Err(self.pg(e)),
                    }
                })
                .await?;
        }
        Ok(client)
    }

    fn clear_down(&self) {
        let mut down = lock(&self.unavailable);
        if down.is_some() {
            tracing::info!(database = %self.target.shown(), "PostgreSQL is reachable again");
            *down = None;
        }
    }

    /// Records that the database is unreachable, and the error saying so.
    fn down(&self, reason: String) -> PersistenceError {
        let mut down = lock(&self.unavailable);
        if down.is_none() {
            tracing::warn!(database = %self.target.shown(), %reason, "PostgreSQL is unreachable");
        }
        *down = Some(reason.clone());
        PersistenceError::Unavailable {
            database: self.target.shown().to_owned(),
            reason,
        }
    }

    fn pool_error(&self, error: PoolError) -> PersistenceError {
        match error {
            PoolError::Backend(e) => self.pg(e),
            PoolError::Timeout(_) => self.down("timed out connecting".to_owned()),
            other => self.down(other.to_string()),
        }
    }

    /// Maps a client error: a lost or refused connection is [`PersistenceError::Unavailable`],
    /// anything the server answered is [`PersistenceError::Postgres`].
    fn pg(&self, error: tokio_postgres::Error) -> PersistenceError {
        if let Some(db) = error.as_db_error() {
            let code = db.code();
            let lost = code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::TOO_MANY_CONNECTIONS,
                ]
                .contains(code);
            let message = format!("{}: {}", db.severity(), db.message());
            return if lost {
                self.down(message)
            } else {
                PersistenceError::Postgres {
                    database: self.target.shown().to_owned(),
                    message,
                }
            };
        }
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        self.down(message)
    }

    fn corrupt(&self, line: usize, message: String) -> PersistenceError {
        PersistenceError::Corrupt {
            path: self.path(),
            line,
            message,
        }
    }
}

impl Persistence for PostgresBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    /// The database as shown (credentials removed): not a file.
    fn path(&self) -> PathBuf {
        self.inner.path()
    }

    /// The database (credentials removed); the session is the header's id. No per-session
    /// file: `path` is empty.
    fn locate(&self, _header: &SessionHeader) -> Option<SessionLocation> {
        Some(SessionLocation {
            kind: BackendKind::Postgres.as_str(),
            path: PathBuf::new(),
            database: Some(self.inner.target.shown().to_owned()),
        })
    }

    fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        let inner = self.inner.clone();
        let id = id.clone();
        self.run(async move { inner.stored_len(id).await })
    }

    fn append(&self, header: &SessionHeader, events: &[Event]) -> Result<(), PersistenceError> {
        let id = &header.id;
        if events.is_empty() {
            return Ok(());
        }
        let first = batch_start(id, events)?;
        header
            .validate()
            .map_err(|e| PersistenceError::Config(format!("session {id}: invalid header: {e}")))?;
        let header_json = serde_json::to_string(header)
            .map_err(|e| PersistenceError::Config(format!("session {id}: {e}")))?;
        let rows = Rows::of(events);
        let inner = self.inner.clone();
        let header = header.clone();
        self.run(async move { inner.append(header, header_json, first, rows).await })
    }

    fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let inner = self.inner.clone();
        let id = id.clone();
        self.run(async move { inner.load(id).await })
    }

    fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let inner = self.inner.clone();
        let id = id.clone();
        self.run(async move { inner.inspect(id).await })
    }

    fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        let inner = self.inner.clone();
        self.run(async move { inner.list().await })
    }

    fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        let inner = self.inner.clone();
        let id = id.clone();
        self.run(async move { inner.header(id).await })
    }

    fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        let inner = self.inner.clone();
        let query = query.clone();
        self.run(async move { inner.page(query).await })
    }

    fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        let inner = self.inner.clone();
        let id = id.clone();
        self.run(async move { inner.delete(id).await })
    }

    fn release(&self, id: &SessionId) {
        lock(&self.inner.held).remove(id);
        let inner = self.inner.clone();
        let wanted = id.clone();
        if let Err(error) = self.run(async move { lease::drop_lease(&inner, &wanted).await }) {
            tracing::warn!(session = %id, %error, "cannot release the session's lease; it expires on its own");
        }
    }

    fn creator(&self) -> Option<super::Creator> {
        Some(super::Creator {
            host: self.inner.holder.host.clone(),
            daemon: self.inner.holder.daemon.clone(),
        })
    }

    fn unavailable(&self) -> Option<String> {
        lock(&self.inner.unavailable).clone()
    }
}
