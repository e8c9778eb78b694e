//! One writer per session across machines: a lease row per live session (`leases`), naming the
//! daemon that holds it and renewed by that daemon's heartbeat.
//!
//! A row lease rather than an advisory lock on a held connection (DECISIONS.md, "PostgreSQL"):
//! an advisory lock lives and dies with one connection, so a network blip would silently hand a
//! live session to another daemon, and a crashed daemon's lock lingers for as long as the server
//! takes to notice the dead connection (TCP keepalive, not something dsh configures). A row lease
//! survives reconnects, expires after exactly the configured time, and is read with the session in
//! the same transaction, which makes it a fence: every append takes or keeps the lease in its own
//! transaction, so an append of a daemon that lost the lease writes nothing.
//!
//! Times are the database's (`now()`), never a machine's clock: the daemons' clocks need not
//! agree.

use std::sync::Weak;
use std::time::Duration;

use super::Inner;
use crate::locks::lock;
use crate::persistence::PersistenceError;
use dsh_session::SessionId;

/// Who holds a lease: a daemon instance on a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// A fresh id per dshd process (UUID v7), so a restarted daemon is another holder.
    pub daemon: String,
    /// The machine's host name.
    pub host: String,
    /// The daemon's process id on that machine.
    pub pid: u32,
}

impl Holder {
    /// This process: one daemon id for its whole life, this machine's host name, this pid.
    pub fn this_process() -> Self {
        static DAEMON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        Self {
            daemon: DAEMON
                .get_or_init(|| uuid::Uuid::now_v7().to_string())
                .clone(),
            host: host_name(),
            pid: std::process::id(),
        }
    }
}

/// This machine's host name (`uname -n`).
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The lease rule, written once for [`take`] and the append's single statement: takes or keeps
/// the lease of session `$1` for daemon `$2` (host `$3`, pid `$4`) for `$5` ms, once per row of
/// the `FROM` clause given (none: once), when no one holds it, this daemon does, or the holder's
/// lease has expired. Returns a row when granted; the lease row stays locked until the
/// transaction ends.
macro_rules! take_lease {
    ($from:literal) => {
        concat!(
            "INSERT INTO leases AS l (session_id, daemon, host, pid, expires_at) \
             SELECT $1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond' ",
            $from,
            " ON CONFLICT (session_id) DO UPDATE SET daemon = EXCLUDED.daemon, \
                 host = EXCLUDED.host, pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at \
             WHERE l.daemon = EXCLUDED.daemon OR l.expires_at < now() \
             RETURNING 1"
        )
    };
}
pub(super) use take_lease;

/// Takes the lease of `id` for this daemon, or keeps it, inside `tx`: granted when no one holds
/// it, when this daemon does, or when the holder's lease has expired. The lease row stays locked
/// until `tx` ends, so appends to the session are serialised. Refused with
/// [`PersistenceError::Leased`] naming the holder otherwise.
pub(super) async fn take(
    inner: &Inner,
    tx: &deadpool_postgres::Transaction<'_>,
    id: &SessionId,
) -> Result<(), PersistenceError> {
    let holder = &inner.holder;
    let ms = lease_ms(inner.lease);
    let pid = i64::from(holder.pid);
    let stmt = tx
        .prepare_cached(take_lease!(""))
        .await
        .map_err(|e| inner.pg(e))?;
    let granted = tx
        .query_opt(
            &stmt,
            &[&id.as_str(), &holder.daemon, &holder.host, &pid, &ms],
        )
        .await
        .map_err(|e| inner.pg(e))?;
    if granted.is_some() {
        return Ok(());
    }
    Err(refusal(inner, tx, id).await)
}

/// [`PersistenceError::Leased`] naming who holds the lease of `id` and for how long still, read
/// after this daemon was refused it.
pub(super) async fn refusal(
    inner: &Inner,
    client: &impl deadpool_postgres::GenericClient,
    id: &SessionId,
) -> PersistenceError {
    let row = match client
        .query_opt(
            "SELECT host, pid, \
                 GREATEST(0, EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint \
             FROM leases WHERE session_id = $1",
            &[&id.as_str()],
        )
        .await
    {
        Ok(Some(row)) => row,
        // Let go of between the refusal and this read (outside a transaction): the caller's next
        // attempt may well be granted.
        Ok(None) => {
            return PersistenceError::Config(format!(
                "session {id}: its lease changed hands while this dshd asked for it; try again"
            ));
        }
        Err(e) => return inner.pg(e),
    };
    let pid: i64 = row.get(1);
    let remaining: i64 = row.get(2);
    PersistenceError::Leased {
        id: id.clone(),
        host: row.get(0),
        pid: u32::try_from(pid).unwrap_or(0),
        expires_in: Duration::from_millis(u64::try_from(remaining).unwrap_or(0)),
    }
}

/// Lets go of the lease of `id` if this daemon holds it.
pub(super) async fn drop_lease(inner: &Inner, id: &SessionId) -> Result<(), PersistenceError> {
    let client = inner.client().await?;
    client
        .execute(
            "DELETE FROM leases WHERE session_id = $1 AND daemon = $2",
            &[&id.as_str(), &inner.holder.daemon],
        )
        .await
        .map_err(|e| inner.pg(e))?;
    Ok(())
}

/// Renews every lease the backend holds, every third of the lease time, until the backend is
/// gone. A renewal that fails (the database is unreachable) is retried at the next beat; a lease
/// that expired meanwhile is renewed only if no one took it (the next append finds out).
pub(super) async fn heartbeat(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(inner) => inner.lease / 3,
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.paused.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        let held: Vec<String> = lock(&inner.held)
            .iter()
            .map(|id| id.as_str().to_owned())
            .collect();
        if held.is_empty() {
            // Nothing to renew: still try the database, so that `unavailable` (Status, doctor)
            // says within one beat that it went away or came back.
            if let Err(error) = inner.bounded(probe(&inner)).await {
                tracing::debug!(%error, "PostgreSQL probe failed");
            }
            continue;
        }
        if let Err(error) = inner.bounded(renew(&inner, &held)).await {
            tracing::warn!(%error, sessions = held.len(), "cannot renew the sessions' leases; retrying");
        }
    }
}

async fn probe(inner: &Inner) -> Result<(), PersistenceError> {
    let client = inner.client().await?;
    client
        .simple_query("SELECT 1")
        .await
        .map_err(|e| inner.pg(e))?;
    Ok(())
}

async fn renew(inner: &Inner, held: &[String]) -> Result<(), PersistenceError> {
    let client = inner.client().await?;
    let renewed = client
        .execute(
            "UPDATE leases SET expires_at = now() + $3::float8 * interval '1 millisecond' \
             WHERE daemon = $1 AND session_id = ANY($2::text[])",
            &[&inner.holder.daemon, &held, &lease_ms(inner.lease)],
        )
        .await
        .map_err(|e| inner.pg(e))?;
    if usize::try_from(renewed).unwrap_or(0) < held.len() {
        tracing::warn!(
            held = held.len(),
            renewed,
            "some sessions' leases were taken by another dshd after they expired; their next checkpoint will fail"
        );
    }
    Ok(())
}

pub(super) fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}
