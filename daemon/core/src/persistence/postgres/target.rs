//! Which database: the connection string as configured (a secret: it may hold a password), its
//! parsed form, and the text shown for it everywhere else (credentials removed).

use std::fmt::Write as _;
use std::time::Duration;

use tokio_postgres::config::Host;

use super::tls::TlsMode;
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
    tls: TlsMode,
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
        let (url, asked) = take_sslmode(url.trim())?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
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
        // libpq's default is `prefer`; like libpq, no TLS on Unix sockets (the server offers
        // none there, and asking costs a round trip per connection).
        let only_sockets = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        let tls = if only_sockets {
            TlsMode::Disable
        } else {
            asked.unwrap_or(TlsMode::Prefer)
        };
        config.ssl_mode(tls.client_mode());
        let shown = shown(&config);
        Ok(Self { config, shown, tls })
    }

    /// What `sslmode` asked for (`disable` when the database is reached through Unix sockets
    /// only).
    pub fn tls(&self) -> TlsMode {
        self.tls
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

/// Takes `sslmode` out of a connection string (URL or `key=value` pairs), since the client
/// library knows neither `verify-ca` nor `verify-full`: returns the rest and the mode asked for.
/// `sslrootcert` is refused with a pointer to `postgres.ca_file`.
fn take_sslmode(url: &str) -> Result<(String, Option<TlsMode>), PersistenceError> {
    let mut mode = None;
    let mut take = |pair: &str| -> Result<bool, PersistenceError> {
        let Some((key, value)) = pair.split_once('=') else {
            return Ok(false);
        };
        match key.trim() {
            "sslmode" => {
                let value = value.trim().trim_matches('\'');
                mode = Some(TlsMode::parse(value).ok_or_else(|| {
                    PersistenceError::Config(format!(
                        "postgres.url: sslmode {value:?} is not one of disable, prefer, \
                         require, verify-ca, verify-full"
                    ))
                })?);
                Ok(true)
            }
            "sslrootcert" => Err(PersistenceError::Config(
                "postgres.url: sslrootcert is not read from the connection string; set \
                 postgres.ca_file"
                    .to_owned(),
            )),
            _ => Ok(false),
        }
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    if !take(pair)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => url.to_owned(),
        }
    } else {
        // `key=value` pairs: the words taken are cut out and the rest kept byte for byte (a
        // quoted value keeps its spaces). Only a quoted value that itself holds ` sslmode=`
        // would be misread.
        let mut rest = String::with_capacity(url.len());
        let mut from = 0;
        for word in url.split_whitespace() {
            let start = word.as_ptr() as usize - url.as_ptr() as usize;
            if take(word)? {
                rest.push_str(&url[from..start]);
                from = start + word.len();
            }
        }
        rest.push_str(&url[from..]);
        rest
    };
    Ok((rest, mode))
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

    #[test]
    fn sslmode_is_read_in_both_forms_and_not_on_sockets_only() {
        use tokio_postgres::config::SslMode;
        for (url, mode, client) in [
            ("postgresql://u@db/x", TlsMode::Prefer, SslMode::Prefer),
            (
                "postgresql://u@db/x?sslmode=disable",
                TlsMode::Disable,
                SslMode::Disable,
            ),
            (
                "postgresql://u@db/x?sslmode=require&connect_timeout=3",
                TlsMode::Require,
                SslMode::Require,
            ),
            (
                "postgresql://u@db/x?application_name=a&sslmode=verify-ca",
                TlsMode::VerifyCa,
                SslMode::Require,
            ),
            (
                "host=db  password='a  b' sslmode=verify-full user=u",
                TlsMode::VerifyFull,
                SslMode::Require,
            ),
            // libpq ignores sslmode on Unix sockets; so does dsh.
            (
                "host=/run/postgresql sslmode=require",
                TlsMode::Disable,
                SslMode::Disable,
            ),
        ] {
            let target = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(target.tls(), mode, "{url}");
            assert_eq!(target.config().get_ssl_mode(), client, "{url}");
        }
        // What is left of the string is passed on unchanged: spaces in a quoted value stay.
        let target = Target::parse("host=db password='a  b' sslmode=verify-full user=u").unwrap();
        assert_eq!(target.config().get_password(), Some(&b"a  b"[..]));
        assert_eq!(target.config().get_user(), Some("u"));
        let target =
            Target::parse("postgresql://u@db/x?sslmode=require&connect_timeout=3").unwrap();
        assert_eq!(
            target.config().get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        for (url, wanted) in [
            ("postgresql://u@db/x?sslmode=verify", "sslmode \"verify\""),
            ("host=db sslmode=allow", "sslmode \"allow\""),
            (
                "postgresql://u@db/x?sslrootcert=/ca.pem",
                "postgres.ca_file",
            ),
        ] {
            let err = Target::parse(url).unwrap_err().to_string();
            assert!(
                err.starts_with("postgres.url") && err.contains(wanted),
                "{url}: {err}"
            );
        }
    }
}
