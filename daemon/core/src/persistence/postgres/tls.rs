//! TLS to the database (rustls, the TLS stack dsh already links for the model API), as libpq's
//! `sslmode` asks:
//!
//! - `disable`: never;
//! - `prefer` (libpq's default): when the server offers it, without checking its certificate;
//! - `require`: always; the certificate is checked against `postgres.ca_file` when one is set
//!   (as libpq does when it finds a root certificate), otherwise not at all;
//! - `verify-ca`: always, and the server's certificate must be signed by `postgres.ca_file`;
//! - `verify-full`: as `verify-ca`, and the certificate must name the host connected to.
//!
//! As in libpq, `sslmode` does not apply to Unix sockets: a database reached only through sockets
//! is never asked for TLS (PostgreSQL offers none there).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::persistence::PersistenceError;

/// What `sslmode` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// `disable`.
    Disable,
    /// `prefer`.
    Prefer,
    /// `require`.
    Require,
    /// `verify-ca`.
    VerifyCa,
    /// `verify-full`.
    VerifyFull,
}

impl TlsMode {
    /// The mode named `value` in a connection string.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// Its name in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether the server's certificate must lead to a CA of `postgres.ca_file`.
    pub fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyFull)
    }

    /// The nearest mode the client library knows: it has no `verify-*`, the verifier below
    /// does that part.
    pub(super) fn client_mode(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode;
        match self {
            Self::Disable => SslMode::Disable,
            Self::Prefer => SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => SslMode::Require,
        }
    }
}

/// The TLS connector for `mode`, trusting the CA certificates in `ca_file` (PEM) when given.
/// Errors name `postgres.ca_file` or `sslmode`.
pub(crate) fn connector(
    mode: TlsMode,
    ca_file: Option<&Path>,
) -> Result<MakeRustlsConnect, PersistenceError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = ca_file.map(read_roots).transpose()?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, roots) {
        (TlsMode::VerifyCa | TlsMode::VerifyFull, None) => {
            return Err(PersistenceError::Config(format!(
                "postgres.url: sslmode={} needs postgres.ca_file, the certificate of the CA that \
                 signed the server's",
                mode.as_str()
            )));
        }
        (TlsMode::Disable | TlsMode::Prefer, _) | (TlsMode::Require, None) => Arc::new(Lenient {
            chain: None,
            algorithms: provider.signature_verification_algorithms,
        }),
        (TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull, Some(roots)) => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| PersistenceError::Config(format!("postgres.ca_file: {e}")))?;
            if mode == TlsMode::VerifyFull {
                webpki
            } else {
                Arc::new(Lenient {
                    chain: Some(webpki),
                    algorithms: provider.signature_verification_algorithms,
                })
            }
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PersistenceError::Config(format!("postgres TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The CA certificates of `path`, every one of them usable.
fn read_roots(path: &Path) -> Result<RootCertStore, PersistenceError> {
    let shown = || path.display();
    let bytes = std::fs::read(path).map_err(|e| {
        PersistenceError::Config(format!("postgres.ca_file: cannot read {}: {e}", shown()))
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert
            .map_err(|e| PersistenceError::Config(format!("postgres.ca_file: {}: {e}", shown())))?;
        roots.add(cert).map_err(|e| {
            PersistenceError::Config(format!(
                "postgres.ca_file: {}: not a CA certificate: {e}",
                shown()
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(PersistenceError::Config(format!(
            "postgres.ca_file: {} holds no PEM certificate",
            shown()
        )));
    }
    Ok(roots)
}

/// The verifier of every mode but `verify-full` (which is webpki's own): with `chain`
/// (`verify-ca`, or `require` with a CA file) the chain must lead to a trusted CA but the name in
/// the certificate is not compared with the host (webpki checks the chain first, so a name error
/// means the chain was good); without it (`prefer`, `require` without a CA file) the certificate
/// is not checked at all, libpq's meaning of these modes. Either way the handshake's signatures
/// are checked against the certificate presented.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
