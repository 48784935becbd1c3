//! Optional TLS from PEM certificate and key files (rustls, ring provider).
//!
//! Handshakes run in each connection's own task (see [`super::serve`]), so a
//! slow or hostile client never holds up the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::{Error as PemError, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client's address, for the audit log and login throttling, over plain TCP or TLS.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// In a request's extensions when its connection presented a client certificate that
/// `--metrics-client-ca` verified: a scraper, let into `/metrics` (and nowhere else) by it.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedClient;

/// Why TLS cannot be set up from the given files; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS certificate '{}': {reason}", .path.display())]
    ReadCertificate { path: PathBuf, reason: PemError },
    #[error("TLS certificate '{}' is not valid PEM: {reason}", .path.display())]
    InvalidPem { path: PathBuf, reason: PemError },
    #[error("TLS certificate '{}' holds no certificate", .path.display())]
    NoCertificate { path: PathBuf },
    #[error("cannot read a private key from '{}': {reason}", .path.display())]
    ReadKey { path: PathBuf, reason: PemError },
    #[error("TLS setup failed: {0}")]
    Setup(rustls::Error),
    #[error("the TLS certificate and key do not fit together: {0}")]
    Mismatch(rustls::Error),
    #[error("cannot read the scrapers' CA '{}' (--metrics-client-ca): {reason}", .path.display())]
    ReadClientCa { path: PathBuf, reason: PemError },
    #[error("the scrapers' CA '{}' (--metrics-client-ca) holds no usable CA certificate: {reason}", .path.display())]
    ClientCa { path: PathBuf, reason: String },
}

/// Reads the certificate chain and private key, saying which file is wrong and why.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    acceptor_with(cert, key, None)
}

/// [`acceptor`], asking clients for a certificate that `client_ca` (PEM, `--metrics-client-ca`) signed:
/// optional (browsers present none), and a connection that presents one is refused unless it verifies.
pub fn acceptor_with(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<TlsAcceptor, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|reason| TlsError::ReadCertificate { path: cert.to_owned(), reason })?
        .collect::<Result<_, _>>()
        .map_err(|reason| TlsError::InvalidPem { path: cert.to_owned(), reason })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.to_owned() });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|reason| TlsError::ReadKey { path: key.to_owned(), reason })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
    };
    let config = builder.with_single_cert(certs, key).map_err(TlsError::Mismatch)?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Verifies the certificates clients present against the CAs in `path`; presenting none is allowed.
fn client_verifier(
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path)
        .map_err(|reason| TlsError::ReadClientCa { path: path.to_owned(), reason })?
    {
        let cert = cert.map_err(|reason| TlsError::ReadClientCa { path: path.to_owned(), reason })?;
        roots.add(cert).map_err(|e| TlsError::ClientCa { path: path.to_owned(), reason: e.to_string() })?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::ClientCa { path: path.to_owned(), reason: e.to_string() })
}

/// A client certificate was presented (and so verified: the handshake refuses one that is not).
pub fn verified_client(stream: &TlsStream<TcpStream>) -> bool {
    stream.get_ref().1.peer_certificates().is_some_and(|certs| !certs.is_empty())
}

/// The TLS stream once the handshake is done; `None` (logged) if it failed or took too long.
pub async fn handshake(acceptor: &TlsAcceptor, tcp: TcpStream, peer: SocketAddr) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!(%peer, "TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem").unwrap();
        let err = acceptor(Path::new("/nonexistent/cert.pem"), &junk).err().unwrap().to_string();
        assert!(err.contains("/nonexistent/cert.pem"), "{err}");
        let err = acceptor(&junk, &junk).err().unwrap();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        assert_eq!(err.to_string(), format!("TLS certificate '{}' holds no certificate", junk.display()));
    }
}
