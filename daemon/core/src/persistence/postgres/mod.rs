//! PostgreSQL backend (CONTRACTS §4.7): one database for the sessions of every machine, with one
//! writer per session enforced by a lease row (see [`lease`]).
//!
//! The client (`tokio-postgres`, pooled by `deadpool-postgres`) runs on the caller's runtime
//! (dshd's): its connections and the lease heartbeat are tasks there, and each call is awaited
//! where it is made. Every wait is bounded (see [`bounds`]): the server's own timeouts and a TCP
//! user timeout on every connection, and a deadline on every call, past which the call answers
//! [`PersistenceError::Unavailable`].
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use super::{
    BackendKind, Metas, Page, PageQuery, Persistence, PersistenceError, SessionLocation,
    StoredSession, batch_start,
};
use crate::locks::lock;
use dsh_session::{Event, SessionHeader, SessionId};
use ops::Rows;

pub(crate) mod bounds;
pub(crate) mod lease;
mod meta;
mod ops;
mod read;
pub(crate) mod schema;
pub(crate) mod target;
pub(crate) mod tls;

pub use lease::Holder;
pub use target::{SecretUrl, Target};
pub use tls::TlsMode;

pub use bounds::{DEFAULT_TIMEOUT, MIN_LEASE};

/// How long a lease lasts without renewal unless configured (`postgres.lease_ms`): a crashed
/// daemon's sessions can be resumed elsewhere this long after its last renewal.
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
    /// How long a lease lasts without renewal; renewed every third of it. At least
    /// [`MIN_LEASE`] (config checks it: `postgres.lease_ms`).
    pub lease: Duration,
    /// `postgres.timeout_ms`: the most any call waits for the database (a connection, a
    /// statement, a lock), and the server-side timeouts set on every connection unless the URL
    /// sets them.
    pub timeout: Duration,
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
            timeout: DEFAULT_TIMEOUT,
            ca_file: None,
        })
    }
}

/// The PostgreSQL backend.
#[derive(Debug)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
    /// Whether the lease heartbeat runs: started on the runtime of the first call when the
    /// backend was opened outside one.
    beating: AtomicBool,
}

#[derive(Debug)]
struct Inner {
    target: Target,
    pool: Pool,
    holder: Holder,
    lease: Duration,
    /// The deadline of every call.
    timeout: Duration,
    /// Sessions whose lease this backend holds (and renews).
    held: Mutex<HashSet<SessionId>>,
    /// Tests only: while set, the heartbeat renews nothing (a daemon cut off from the database).
    paused: AtomicBool,
    /// Set once the schema is known to be current.
    migrated: tokio::sync::OnceCell<()>,
    /// Why the database could not be reached the last time it was tried; `None` after a success.
    unavailable: Mutex<Option<String>>,
}

impl PostgresBackend {
    /// A backend over the database of `options`. Connects to nothing: the first call does.
    pub fn open(options: PostgresOptions) -> Result<Self, PersistenceError> {
        if options.lease < MIN_LEASE {
            // Config refuses a shorter `postgres.lease_ms`; this guards other callers, since the
            // heartbeat's period is a third of the lease.
            return Err(PersistenceError::Config(format!(
                "postgres.lease_ms must be at least {}",
                MIN_LEASE.as_millis()
            )));
        }
        let tls = tls::connector(options.target.tls(), options.ca_file.as_deref())?;
        let config =
            bounds::bounded_config(options.target.config(), options.timeout, options.lease);
        let manager = Manager::from_config(
            config,
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
            .unwrap_or(target::CONNECT_TIMEOUT)
            .min(options.timeout);
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(connect))
            .wait_timeout(Some(options.timeout))
            .build()
            .map_err(|e| PersistenceError::Config(format!("postgres: {e}")))?;
        let inner = Arc::new(Inner {
            target: options.target,
            pool,
            holder: options.holder,
            lease: options.lease,
            timeout: options.timeout,
            held: Mutex::new(HashSet::new()),
            paused: AtomicBool::new(false),
            migrated: tokio::sync::OnceCell::new(),
            unavailable: Mutex::new(None),
        });
        let backend = Self {
            inner,
            beating: AtomicBool::new(false),
        };
        // On dshd's runtime now, so Status learns within one beat that the database is down even
        // before anything is stored; outside a runtime, on the first call's.
        if tokio::runtime::Handle::try_current().is_ok() {
            backend.beat();
        }
        Ok(backend)
    }

    /// Starts the lease heartbeat on the current runtime, once. It ends when the backend is
    /// dropped.
    fn beat(&self) {
        if !self.beating.swap(true, Ordering::SeqCst) {
            tokio::spawn(lease::heartbeat(Arc::downgrade(&self.inner)));
        }
    }

    /// The database, credentials removed.
    pub fn shown(&self) -> &str {
        self.inner.target.shown()
    }

    /// Who this backend's leases name.
    pub fn holder(&self) -> &Holder {
        &self.inner.holder
    }

    /// Runs `work` on the caller's runtime within the call deadline: past it, the database is
    /// unavailable (what `work` had done is rolled back with its connection's transaction).
    async fn run<T>(
        &self,
        work: impl Future<Output = Result<T, PersistenceError>>,
    ) -> Result<T, PersistenceError> {
        self.beat();
        self.inner.bounded(work).await
    }

    /// Stops (or resumes) renewing this backend's leases while it keeps working, as a daemon
    /// cut off from the database for a while would be: for tests of what another daemon sees.
    #[doc(hidden)]
    pub fn pause_heartbeat_for_tests(&self, paused: bool) {
        self.inner.paused.store(paused, Ordering::SeqCst);
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

#[async_trait::async_trait]
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

    async fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        self.run(self.inner.stored_len(id)).await
    }

    async fn append(
        &self,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<(), PersistenceError> {
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
        self.run(self.inner.append(header, header_json, first, rows))
            .await
    }

    async fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        self.run(self.inner.load(id)).await
    }

    async fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        self.run(self.inner.inspect(id)).await
    }

    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        self.run(self.inner.list()).await
    }

    async fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        self.run(self.inner.header(id)).await
    }

    async fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        self.run(self.inner.page(query)).await
    }

    async fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        self.run(self.inner.delete(id)).await
    }

    async fn metas(&self, ids: &[SessionId]) -> Result<Metas, PersistenceError> {
        self.run(self.inner.metas(ids)).await
    }

    /// A connection (the schema checked on it) with the header read prepared: what the first
    /// `Locate` of a stored session would otherwise wait for.
    async fn warm(&self) {
        let warmed = self
            .run(async {
                let client = self.inner.client().await?;
                let stmt = client
                    .prepare_cached(read::HEADER)
                    .await
                    .map_err(|e| self.inner.pg(e))?;
                // Run once, for an id no session has: a server process plans a statement and
                // loads the table's and index's catalog entries at its first execution, which
                // would otherwise fall to the first `Locate`.
                client
                    .query_opt(&stmt, &[&""])
                    .await
                    .map_err(|e| self.inner.pg(e))?;
                Ok(())
            })
            .await;
        if let Err(error) = warmed {
            tracing::debug!(%error, "cannot ready the PostgreSQL backend; the first call will try again");
        }
    }

    async fn release(&self, id: &SessionId) {
        lock(&self.inner.held).remove(id);
        if let Err(error) = self.run(lease::drop_lease(&self.inner, id)).await {
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
