use super::*;

#[test]
fn the_limit_leaves_room_for_other_files() {
    assert_eq!(max_connections(None, None), DEFAULT_MAX_CONNECTIONS);
    assert_eq!(max_connections(None, Some(1024)), 1024 - 128);
    assert_eq!(max_connections(Some(100), Some(1024)), 100);
    assert_eq!(max_connections(Some(5000), Some(1024)), 896);
    assert_eq!(max_connections(None, Some(1 << 20)), DEFAULT_MAX_CONNECTIONS);
    assert_eq!(max_connections(None, Some(10)), 1);
}

/// Over TLS: handshakes in the connection's task, the client's address reaches handlers, and
/// a connection stuck before its handshake is closed to make room.
#[tokio::test]
async fn tls_connections_are_served_and_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let acceptor = tls::acceptor(&cert, &key).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certified.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));

    let app = Router::new().route(
        "/peer",
        axum::routing::get(|ConnectInfo(PeerAddr(peer)): ConnectInfo<PeerAddr>| async move { peer.to_string() }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopping) = watch::channel(false);
    let limits = ConnectionLimits { max: 2, ..ConnectionLimits::default() };
    let server = tokio::spawn(serve(listener, Some(acceptor), app, limits, stopping));

    // Two connections that never start their handshake fill the limit.
    let mut stuck = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let me = tcp.local_addr().unwrap();
    let server_name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut stream = connector.connect(server_name, tcp).await.expect("handshake once the oldest made room");
    stream.write_all(b"GET /peer HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with(&me.to_string()), "{answer}");
    let mut buf = [0u8; 16];
    // Well within HANDSHAKE_TIMEOUT: closed to make room, not timed out.
    let read = tokio::time::timeout(Duration::from_secs(5), stuck[0].read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "the oldest stuck handshake was kept: {read:?}");

    stop.send(true).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(15), server).await.expect("stops in time");
    assert!(served.unwrap().is_ok());
    drop(stuck);
}
