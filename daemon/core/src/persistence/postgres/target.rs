//! Which database: the connection string as configured (a secret: it may hold a password), its
//! parsed form, and the text shown for it everywhere else (credentials removed).

use std::fmt::Write as _;
use std::time::Duration;

use tokio_postgres::config::Host;

use crate::persistence::PersistenceError;

/// How long a connection attempt may take before the database counts as unavailable, unless the
/// connection string says otherwise (`connect_timeout`).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection string as given (it may hold a password): shown as `<redacted>` by `Debug`, so
/// no log line or error carries it by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The string itself, for connecting and for the private state file only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretUrl(<redacted>)")
    }
}

/// A database to connect to. `Debug` shows the redacted form only.
#[derive(Clone)]
pub struct Target {
    config: tokio_postgres::Config,
    shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Target").field(&self.shown).finish()
    }
}

impl Target {
    /// Parses a libpq connection string: a URL (`postgresql://user:secret@host/db`) or
    /// `key=value` pairs (`host=/run/postgresql dbname=dsh`). The error never repeats the
    /// string (it may hold a password).
    pub fn parse(url: &str) -> Result<Self, PersistenceError> {
        let mut config: tokio_postgres::Config = url.trim().parse().map_err(|e| {
            PersistenceError::Config(format!(
                "postgres.url is not a PostgreSQL connection string: {e}"
            ))
        })?;
        if config.get_hosts().is_empty() {
            // libpq's default: the local server's socket directory.
            config.host_path("/var/run/postgresql");
        }
        if config.get_user().is_none() {
            let user = std::env::var("USER").unwrap_or_else(|_| "postgres".to_owned());
            config.user(&user);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("dshd");
        }
        let shown = shown(&config);
        Ok(Self { config, shown })
    }

    /// The database as shown to people: a URL with user, hosts, ports and database name, never a
    /// password or any other parameter.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The parsed connection settings.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }
}

fn shown(config: &tokio_postgres::Config) -> String {
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let mut tcp = Vec::new();
    let mut sockets = Vec::new();
    for (n, host) in config.get_hosts().iter().enumerate() {
        let port = config
            .get_ports()
            .get(n)
            .or_else(|| config.get_ports().first())
            .copied();
        match host {
            Host::Tcp(name) => tcp.push(match port {
                Some(port) if port != 5432 => format!("{name}:{port}"),
                _ => name.clone(),
            }),
            Host::Unix(path) => sockets.push((path.display().to_string(), port)),
        }
    }
    let mut text = format!(
        "postgresql://{}@{}/{}",
        encode(user),
        tcp.join(","),
        encode(db)
    );
    let mut sep = '?';
    for (path, port) in sockets {
        let _ = write!(text, "{sep}host={}", encode(&path));
        sep = '&';
        if let Some(port) = port.filter(|p| *p != 5432) {
            let _ = write!(text, "&port={port}");
        }
    }
    text
}

/// Percent-encodes what would change the meaning of a URL part.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show() {
        for (url, expected) in [
            (
                "postgresql://ada:s3cret@db.example:6543/dsh?sslmode=disable",
                "postgresql://ada@db.example:6543/dsh",
            ),
            (
                "host=/tmp/pg port=5433 user=dsh password=hunter2 dbname=sessions",
                "postgresql://dsh@/sessions?host=/tmp/pg&port=5433",
            ),
            ("postgres://bob:pw@a,b/x", "postgresql://bob@a,b/x"),
        ] {
            let target = Target::parse(url).unwrap();
            assert_eq!(target.shown(), expected);
            let debug = format!("{target:?}");
            assert!(
                !debug.contains("s3cret") && !debug.contains("hunter2") && !debug.contains(":pw"),
                "{debug}"
            );
        }
        let err = Target::parse("postgresql://u:topsecret@h/d?bogus=1")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("postgres.url"), "{err}");
        assert!(!err.contains("topsecret"), "{err}");
    }
}
