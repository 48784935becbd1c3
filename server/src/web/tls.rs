//! Optional TLS from PEM certificate and key files (rustls, ring provider).
//!
//! Handshakes run in each connection's own task (see [`super::serve`]), so a
//! slow or hostile client never holds up the others.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client's address, for the audit log and login throttling, over plain TCP or TLS.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// Reads the certificate chain and private key, saying which file is wrong and why.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read TLS certificate '{}': {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate '{}' is not valid PEM: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS certificate '{}' holds no certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read a private key from '{}': {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the TLS certificate and key do not fit together: {e}"))?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
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
        let err = acceptor(Path::new("/nonexistent/cert.pem"), &junk).err().unwrap();
        assert!(err.contains("/nonexistent/cert.pem"), "{err}");
        let err = acceptor(&junk, &junk).err().unwrap();
        assert!(err.contains("junk.pem") && err.contains("no certificate"), "{err}");
    }
}
