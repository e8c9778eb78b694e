//! TLS to PostgreSQL as `sslmode` asks: a server of its own with TLS on, a CA and a certificate
//! for `localhost` made for the test (`dsh_testkit::postgres::TlsFiles`), and a second CA that
//! signed nothing of the server's.

use std::path::PathBuf;

use dsh_testkit::postgres::{PgServer, TlsFiles};

use super::*;
use crate::persistence::postgres::{PostgresBackend, PostgresOptions};

struct TlsServer {
    server: PgServer,
    db: String,
    /// The CA that signed the server's certificate.
    right_ca: PathBuf,
    /// A CA that signed nothing the server presents.
    wrong_ca: PathBuf,
    _dir: Scratch,
}

fn tls_server() -> TlsServer {
    let files = TlsFiles::generate();
    let server = PgServer::start_tls(&files);
    let db = server.fresh_database();
    let dir = scratch();
    let right_ca = dir.dir.join("right-ca.pem");
    let wrong_ca = dir.dir.join("wrong-ca.pem");
    fs::write(&right_ca, &files.ca_cert).unwrap();
    fs::write(&wrong_ca, TlsFiles::generate().ca_cert).unwrap();
    TlsServer {
        server,
        db,
        right_ca,
        wrong_ca,
        _dir: dir,
    }
}

impl TlsServer {
    fn backend(&self, host: &str, sslmode: &str, ca: Option<&PathBuf>) -> PostgresBackend {
        let mut options = PostgresOptions::new(&self.server.tcp_url(host, &self.db, sslmode))
            .unwrap_or_else(|e| panic!("sslmode={sslmode}: {e}"));
        options.ca_file = ca.cloned();
        PostgresBackend::open(options).unwrap_or_else(|e| panic!("sslmode={sslmode}: {e}"))
    }

    /// How many of dshd's connections to the server use TLS, and how many do not.
    fn dshd_connections(&self) -> (u64, u64) {
        let out = self.server.sql(
            "postgres",
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'dshd'",
        );
        let (tls, plain) = out.trim().split_once('|').unwrap();
        (tls.parse().unwrap(), plain.parse().unwrap())
    }
}

/// One append and its read back: the connection works.
async fn round_trip(backend: &PostgresBackend, name: &str) -> Result<(), PersistenceError> {
    let h = header(name);
    backend.append(&h, &turn(0, 1)).await?;
    assert_eq!(backend.inspect(&h.id).await?.events, turn(0, 1));
    backend.release(&h.id).await;
    Ok(())
}

#[tokio::test]
async fn sslmode_require_and_verify_connect_over_tls_and_a_wrong_ca_is_refused_naming_tls() {
    let t = tls_server();

    // `require` with no CA file: encrypted, the certificate not checked (libpq's meaning).
    let require = t.backend("localhost", "require", None);
    round_trip(&require, "require").await.unwrap();
    let (tls, plain) = t.dshd_connections();
    assert!(
        tls >= 1 && plain == 0,
        "require must use TLS: {tls} TLS, {plain} plain"
    );
    drop(require);

    // `verify-full` with the CA that signed the certificate, at the host it names.
    let full = t.backend("localhost", "verify-full", Some(&t.right_ca));
    round_trip(&full, "verify-full").await.unwrap();
    drop(full);

    // `verify-ca` checks the chain only: 127.0.0.1 is not a name of the certificate.
    let ca_only = t.backend("127.0.0.1", "verify-ca", Some(&t.right_ca));
    round_trip(&ca_only, "verify-ca").await.unwrap();
    drop(ca_only);

    // `verify-full` with a CA that signed nothing of the server's: refused, and the error says
    // it was the TLS handshake and the certificate.
    let wrong = t.backend("localhost", "verify-full", Some(&t.wrong_ca));
    let error = round_trip(&wrong, "wrong-ca").await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PersistenceError::Unavailable { .. }),
        "{error:?}"
    );
    assert!(
        text.contains("TLS") && text.contains("certificate"),
        "the error does not name TLS and the certificate: {text}"
    );
    assert_eq!(
        wrong.unavailable().as_deref().map(|r| r.contains("TLS")),
        Some(true),
        "status must report why"
    );

    // `verify-full` at a host the certificate does not name, with the right CA: refused too.
    let wrong_name = t.backend("127.0.0.1", "verify-full", Some(&t.right_ca));
    let text = round_trip(&wrong_name, "wrong-name")
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("TLS"), "{text}");

    // `disable` on the same server: plain.
    let plain = t.backend("localhost", "disable", None);
    round_trip(&plain, "disable").await.unwrap();
    assert!(t.dshd_connections().1 >= 1, "disable must not use TLS");
}

#[test]
fn verifying_modes_need_a_readable_ca_file() {
    let dir = scratch();
    // Opening connects to nothing: no server is needed to see these refused.
    let mut options =
        PostgresOptions::new("postgresql://dsh@localhost:1/dsh?sslmode=verify-full").unwrap();
    let text = PostgresBackend::open(options.clone())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("postgres.ca_file") && text.contains("verify-full"),
        "{text}"
    );
    options.ca_file = Some(dir.dir.join("missing.pem"));
    let text = PostgresBackend::open(options.clone())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("postgres.ca_file") && text.contains("missing.pem"),
        "{text}"
    );
    let empty = dir.dir.join("empty.pem");
    fs::write(&empty, "not a certificate\n").unwrap();
    options.ca_file = Some(empty);
    let text = PostgresBackend::open(options).unwrap_err().to_string();
    assert!(text.contains("holds no PEM certificate"), "{text}");
}
