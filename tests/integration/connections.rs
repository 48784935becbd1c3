//! Connection limits: idle sockets past `--max-connections` are closed (oldest first) while
//! `/healthz` keeps answering; slow request heads and idle keep-alives time out; signed-in
//! WebSockets count against the limit but are never closed to make room (the floods of slow
//! bodies and anonymous WebSockets are in `floods.rs`).

use std::time::Duration;

use gpudash::telemetry::simulator::Simulator;
use gpudash::web::serve::ConnectionLimits;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::browser::eventually;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{TestServer, next_message};

const ADMIN: &str = "admin-token-0123456789";

async fn limited_server(max: usize, header_timeout: Duration) -> TestServer {
    let options = gpudash::Options {
        connections: ConnectionLimits { max, header_timeout, ..ConnectionLimits::default() },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await
}

/// Whether the server closes `stream` within `secs` (reads until end of file or a reset).
async fn closed_within(stream: &mut TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), read_to_end).await.is_ok()
}

async fn healthz_answers(server: &TestServer) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let response = client.get(server.url("/healthz")).send().await.expect("/healthz answers within 5 s");
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn idle_connections_past_the_limit_are_closed_oldest_first_and_healthz_answers() {
    const MAX: usize = 64;
    const OPENED: usize = 100;
    // Long enough that no connection here closes for being slow: only the limit closes them.
    let server = limited_server(MAX, Duration::from_secs(120)).await;
    let mut idle = Vec::new();
    for _ in 0..OPENED {
        idle.push(TcpStream::connect(server.running.addr()).await.unwrap());
    }
    // The first 36 made room for the last 36.
    for (n, stream) in idle.iter_mut().take(OPENED - MAX).enumerate() {
        assert!(closed_within(stream, 10).await, "idle connection {n} (of the oldest) still open past the limit");
    }
    healthz_answers(&server).await;
    healthz_answers(&server).await;
    // The newest are still served: a request on one of them is answered.
    let newest = idle.last_mut().unwrap();
    newest.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), newest.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn a_trickling_request_head_and_an_idle_keep_alive_are_closed_after_the_header_timeout() {
    let server = limited_server(64, Duration::from_secs(1)).await;
    let mut trickling = TcpStream::connect(server.running.addr()).await.unwrap();
    trickling.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let (mut reader, mut writer) = trickling.split();
    let trickle = async {
        // One header byte every 100 ms: each read is "progress", the head never completes.
        for _ in 0..300 {
            if writer.write_all(b"X").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let closed = async {
        let mut buf = [0u8; 256];
        matches!(reader.read(&mut buf).await, Ok(0) | Err(_))
    };
    let closed = tokio::select! {
        closed = closed => closed,
        () = trickle => false,
    };
    assert!(closed, "a head trickled for 30 s was still being read");

    let mut keep_alive = TcpStream::connect(server.running.addr()).await.unwrap();
    keep_alive.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = keep_alive.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    assert!(closed_within(&mut keep_alive, 10).await, "an idle keep-alive connection stayed open");
    server.stop().await;
}

#[tokio::test]
async fn signed_in_websockets_count_against_the_limit_and_are_never_closed_to_make_room() {
    const MAX: usize = 16;
    let options = gpudash::Options {
        auth: gpudash::auth::AuthConfig::load(None, Some(&format!("ada:admin:{ADMIN}"))).unwrap(),
        connections: ConnectionLimits { max: MAX, header_timeout: Duration::from_secs(120), ..Default::default() },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await;
    let mut sockets = Vec::new();
    for _ in 0..MAX {
        let mut request = server.ws_url().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
        let (mut socket, _): (crate::support::Socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        assert!(matches!(next_message(&mut socket, 5).await, shared::ServerMessage::Snapshot(_)));
        sockets.push(socket);
    }
    let mut one_more = TcpStream::connect(server.running.addr()).await.unwrap();
    assert!(closed_within(&mut one_more, 10).await, "a connection past {MAX} open WebSockets was kept");
    for socket in &mut sockets {
        // Ticks keep coming on every WebSocket (a close frame or a closed socket fails here).
        for _ in 0..2 {
            next_message(socket, 5).await;
        }
    }
    // A WebSocket that closes gives its place back.
    sockets.pop().unwrap().close(None).await.unwrap();
    let healthz = server.url("/healthz");
    eventually(10, "/healthz once a WebSocket closed", || async {
        reqwest::get(&healthz).await.ok().filter(|r| r.status() == StatusCode::OK)
    })
    .await;
    drop(sockets);
    server.stop().await;
}
