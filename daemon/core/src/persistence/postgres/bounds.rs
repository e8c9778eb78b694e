//! Every wait on the database is bounded (CONTRACTS §4.7): a silent network partition or a
//! stopped server must fail a checkpoint, not hang it, and with it dshd's shutdown.
//!
//! Two layers. On the server, every connection starts with `statement_timeout`, `lock_timeout`
//! and `idle_in_transaction_session_timeout` (unless the connection string's `options` sets
//! them), so nothing the server does for dshd outlives the deadline, and a transaction left open
//! by a daemon that vanished releases its locks. On the client, a TCP user timeout and keepalives
//! (unless the string sets them) make the kernel give up on a peer that stopped answering, and a
//! deadline on every call covers what no server setting can: a server that does not run at all
//! (stopped, partitioned) and the wait for a connection.

use std::future::Future;
use std::time::Duration;

use super::Inner;
use crate::persistence::PersistenceError;

/// The shortest lease (`postgres.lease_ms`): the heartbeat renews every third of it, and a
/// renewal is one round trip that must fit.
pub const MIN_LEASE: Duration = Duration::from_millis(300);

/// How long a call may wait for the database unless configured (`postgres.timeout_ms`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// libpq's (and tokio-postgres's) keepalive idle time when none is set: two hours, far too long
/// to notice a vanished server.
const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// `config` with the bounds of `timeout` added where the connection string set none. A
/// transaction left idle is ended after `timeout` or `lease`, whichever is shorter: it may hold
/// a session's lease row (a `load` whose daemon vanished), and no other daemon should wait for
/// that row longer than a lease lasts.
pub(crate) fn bounded_config(
    config: &tokio_postgres::Config,
    timeout: Duration,
    lease: Duration,
) -> tokio_postgres::Config {
    let mut config = config.clone();
    let ms = timeout.as_millis().max(1);
    let idle = timeout.min(lease).as_millis().max(1);
    let given = config.get_options().unwrap_or_default().to_owned();
    let mut options = given.clone();
    for (setting, value) in [
        ("statement_timeout", ms),
        ("lock_timeout", ms),
        ("idle_in_transaction_session_timeout", idle),
    ] {
        if !given.contains(setting) {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {setting}={value}"));
        }
    }
    config.options(options);
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(timeout);
    }
    if config.get_keepalives() && config.get_keepalives_idle() == DEFAULT_KEEPALIVES_IDLE {
        // Probes start after a third of the deadline and give up within the next two thirds.
        let third = (timeout / 3).max(Duration::from_secs(1));
        config.keepalives_idle(third);
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval((third / 3).max(Duration::from_secs(1)));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
    }
    config
}

impl Inner {
    /// `work` within the call deadline. Past it the database counts as unavailable: the call
    /// answers [`PersistenceError::Unavailable`] saying so, and what `work` had started is
    /// dropped (a transaction it opened rolls back).
    pub(super) async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, PersistenceError>>,
    ) -> Result<T, PersistenceError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(answer) => answer,
            Err(_) => Err(self.down(format!(
                "no answer within {} ms (postgres.timeout_ms)",
                self.timeout.as_millis()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_added_unless_the_url_sets_them() {
        let timeout = Duration::from_millis(1500);
        let plain: tokio_postgres::Config = "host=db user=u".parse().unwrap();
        let bounded = bounded_config(&plain, timeout, Duration::from_millis(1000));
        assert_eq!(
            bounded.get_options(),
            Some(
                "-c statement_timeout=1500 -c lock_timeout=1500 \
                 -c idle_in_transaction_session_timeout=1000"
            )
        );
        assert_eq!(bounded.get_tcp_user_timeout(), Some(&timeout));
        assert_eq!(bounded.get_keepalives_idle(), Duration::from_secs(1));

        let own: tokio_postgres::Config =
            "host=db user=u options='-c lock_timeout=9s' tcp_user_timeout=7 keepalives_idle=60"
                .parse()
                .unwrap();
        let bounded = bounded_config(&own, timeout, Duration::from_secs(30));
        assert_eq!(
            bounded.get_options(),
            Some(
                "-c lock_timeout=9s -c statement_timeout=1500 \
                 -c idle_in_transaction_session_timeout=1500"
            )
        );
        assert_eq!(
            bounded.get_tcp_user_timeout(),
            Some(&Duration::from_secs(7))
        );
        assert_eq!(bounded.get_keepalives_idle(), Duration::from_secs(60));
    }
}
