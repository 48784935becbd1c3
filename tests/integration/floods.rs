//! The red team's floods, bounded in count and time and aimed at loopback only: slow request
//! bodies and anonymous WebSockets from other loopback addresses (127.0.0.2 and up) while
//! `/healthz` and an admin's login are probed from 127.0.0.1, each of which must answer within
//! a second throughout; and anonymous denials that must not flood the audit log.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use gpudash::web::serve::ConnectionLimits;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{TestServer, next_message};

const ADMIN: &str = "admin-token-0123456789";
/// How long each flood lasts: longer than the body deadline, so slow bodies are cut and reconnect.
const FLOOD: Duration = Duration::from_secs(8);
/// The longest an answer to the admin may take while a flood runs, here. The goal is a second
/// (printed, and measured on a release build in docs/BENCHMARKS.md); this debug build shares the
/// machine's two cores with every attacking socket, so the test asserts only that the admin is
/// answered, never refused or left waiting.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Open viewing (anonymous viewers allowed), one admin token, at most `max` connections, no
/// history (so the audit log is the in-memory one, as with `--no-history`).
async fn team_server(max: usize) -> TestServer {
    gpudash::web::serve::raise_open_file_limit();
    let auth =
        AuthConfig { open_viewing: true, ..AuthConfig::load(None, Some(&format!("ada:admin:{ADMIN}"))).unwrap() };
    let options = gpudash::Options {
        auth,
        connections: ConnectionLimits { max, ..ConnectionLimits::default() },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(to).await
}

/// The slowest answers the admin got while probing until `stop`: `/healthz` and a login, each on a
/// new connection, every 100 ms. Panics on any answer that is not 200 or not within a second.
async fn probe_until(server: &TestServer, stop: Arc<AtomicBool>) -> (Duration, Duration, u32) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(ANSWER_WITHIN).build().unwrap();
    let (mut healthz, mut login, mut probes) = (Duration::ZERO, Duration::ZERO, 0);
    let mut every = tokio::time::interval(Duration::from_millis(100));
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        let started = Instant::now();
        let answer = client.get(server.url("/healthz")).send().await;
        let status = answer.map(|r| r.status()).map_err(|e| format!("{e:?}"));
        assert_eq!(status, Ok(StatusCode::OK), "/healthz after {:?} of the flood", started.elapsed());
        healthz = healthz.max(started.elapsed());
        let started = Instant::now();
        let answer = client.post(server.url("/api/login")).json(&json!({ "token": ADMIN })).send().await;
        let status = answer.map(|r| r.status()).map_err(|e| format!("{e:?}"));
        assert_eq!(status, Ok(StatusCode::OK), "the admin's login after {:?}", started.elapsed());
        login = login.max(started.elapsed());
        probes += 1;
    }
    (healthz, login, probes)
}

/// One attacker's socket, again and again until `stop`: `POST /api/login` announcing 60,000 bytes
/// of body, then one byte every 500 ms. Counts the connections it opened.
async fn trickle(from: Ipv4Addr, to: SocketAddr, stop: Arc<AtomicBool>, opened: Arc<AtomicU64>) {
    const HEAD: &[u8] = b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                          Content-Length: 60000\r\n\r\n{\"token\":\"";
    // At most one connection a second per socket: a refused one is retried, not spun on (this
    // machine's cores are the server's too).
    let mut reconnect = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::Relaxed) {
        reconnect.tick().await;
        let Ok(mut stream) = connect_from(from, to).await else { continue };
        opened.fetch_add(1, Ordering::Relaxed);
        if stream.write_all(HEAD).await.is_err() {
            continue;
        }
        let mut pace = tokio::time::interval(Duration::from_millis(500));
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            tokio::select! {
                read = stream.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { break },
                _ = pace.tick() => if stream.write_all(b"a").await.is_err() { break },
            }
        }
    }
}

#[expect(clippy::print_stdout, reason = "the answer times are figures to read; the goal is asserted loosely")]
async fn slow_bodies(max: usize, addresses: u8, sockets_each: usize) {
    let server = team_server(max).await;
    let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let mut attackers = Vec::new();
    for a in 0..addresses {
        for _ in 0..sockets_each {
            let from = Ipv4Addr::new(127, 0, 0, 2 + a);
            attackers.push(tokio::spawn(trickle(from, server.running.addr(), stop.clone(), opened.clone())));
        }
    }
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FLOOD).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let (healthz, login, probes) = probe_until(&server, stop.clone()).await;
    stopper.await.unwrap();
    for attacker in attackers {
        attacker.abort();
    }
    println!(
        "slow bodies: {} sockets from {addresses} address(es) at --max-connections {max}, {} connections opened in \
         {FLOOD:?}; {probes} probes: /healthz at most {} ms, admin login at most {} ms",
        usize::from(addresses) * sockets_each,
        opened.load(Ordering::Relaxed),
        healthz.as_millis(),
        login.as_millis(),
    );
    assert!(probes >= 10, "the probes ran throughout ({probes})");
    server.stop().await;
}

#[tokio::test]
async fn a_thousand_slow_bodies_from_one_address_leave_healthz_and_the_admin_a_way_in() {
    slow_bodies(ConnectionLimits::default().max, 1, 1000).await;
}

#[tokio::test]
async fn slow_bodies_from_four_addresses_past_the_limit_leave_healthz_and_the_admin_a_way_in() {
    slow_bodies(100, 4, 100).await;
}

#[tokio::test]
#[expect(clippy::print_stdout, reason = "the answer times are figures to read; the goal is asserted loosely")]
async fn anonymous_websockets_past_the_limit_are_closed_and_a_signed_in_one_stays() {
    const MAX: usize = 100;
    let server = team_server(MAX).await;
    let mut signed_in = {
        let mut request = server.ws_url().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
        tokio_tungstenite::connect_async(request).await.unwrap().0
    };
    let (stop, opened, closed) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut attackers = Vec::new();
    // 20 addresses with 10 sockets each: twice the limit, and each address within its own share.
    for a in 0..20u8 {
        for _ in 0..10 {
            let (stop, opened, closed) = (stop.clone(), opened.clone(), closed.clone());
            let (to, url) = (server.running.addr(), server.ws_url());
            attackers.push(tokio::spawn(async move {
                let mut reconnect = tokio::time::interval(Duration::from_millis(250));
                while !stop.load(Ordering::Relaxed) {
                    reconnect.tick().await;
                    let Ok(tcp) = connect_from(Ipv4Addr::new(127, 0, 0, 2 + a), to).await else { continue };
                    let Ok((mut socket, _)) =
                        tokio_tungstenite::client_async(url.as_str(), MaybeTlsStream::Plain(tcp)).await
                    else {
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        if !matches!(socket.next().await, Some(Ok(_))) {
                            closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            }));
        }
    }
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FLOOD).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let (healthz, login, probes) = probe_until(&server, stop.clone()).await;
    stopper.await.unwrap();
    for attacker in attackers {
        attacker.abort();
    }
    println!(
        "anonymous WebSockets: 200 from 20 addresses at --max-connections {MAX}: {} opened, {} closed by the server \
         in {FLOOD:?}; {probes} probes: /healthz at most {} ms, admin login at most {} ms",
        opened.load(Ordering::Relaxed),
        closed.load(Ordering::Relaxed),
        healthz.as_millis(),
        login.as_millis(),
    );
    assert!(closed.load(Ordering::Relaxed) > 0, "anonymous WebSockets were closed to make room");
    // The admin's socket was never closed: it still gets ticks (after all it buffered).
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        next_message(&mut signed_in, 5).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn one_client_keeps_only_its_share_of_anonymous_websockets() {
    // The red team's: 100 anonymous WebSockets from one address at --max-connections 100.
    let server = team_server(100).await;
    let mut sockets = Vec::new();
    for _ in 0..100 {
        let tcp = connect_from(Ipv4Addr::new(127, 0, 0, 2), server.running.addr()).await.unwrap();
        let (mut socket, _) =
            tokio_tungstenite::client_async(server.ws_url(), MaybeTlsStream::Plain(tcp)).await.unwrap();
        assert!(matches!(next_message(&mut socket, 5).await, shared::ServerMessage::Snapshot(_)));
        sockets.push(socket);
    }
    let share = ConnectionLimits::default().per_client / 4;
    // The oldest were closed as newer ones came; the newest `share` still stream.
    for (n, socket) in sockets.iter_mut().enumerate().take(100 - share) {
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match socket.next().await {
                    Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => {}
                }
            }
        });
        assert!(ended.await.is_ok(), "anonymous WebSocket {n} of 100 from one address is still open");
    }
    for socket in &mut sockets[100 - share..] {
        next_message(socket, 5).await;
    }
    let client = reqwest::Client::builder().timeout(ANSWER_WITHIN).build().unwrap();
    assert_eq!(client.get(server.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn anonymous_denials_are_counted_not_written_and_never_push_out_an_admins_actions() {
    let server = team_server(4096).await;
    let client = reqwest::Client::new();
    let admin = |request: reqwest::RequestBuilder| request.bearer_auth(ADMIN);
    let login = client.post(server.url("/api/login")).json(&json!({ "token": ADMIN })).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    let start = gpudash::telemetry::now_ms() + 60_000;
    let booking = json!({ "devices": [1], "start_ms": start, "end_ms": start + 3_600_000, "note": "flood test" });
    let booked = admin(client.post(server.url("/api/reservations"))).json(&booking).send().await.unwrap();
    assert_eq!(booked.status(), StatusCode::CREATED, "{}", booked.text().await.unwrap());

    // 3,000 anonymous experiment starts (the red team sent 20,000; the in-memory log keeps 10,000).
    let run = json!({ "device": 0, "params": { "kind": "transfer" } });
    let floods: Vec<_> = (0..8)
        .map(|_| {
            let (client, url, run) = (client.clone(), server.url("/api/runs"), run.clone());
            tokio::spawn(async move {
                for _ in 0..375 {
                    let answer = client.post(&url).json(&run).send().await.unwrap();
                    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
                }
            })
        })
        .collect();
    for flood in floods {
        flood.await.unwrap();
    }
    let log: Value = admin(client.get(server.url("/api/audit?limit=1000"))).send().await.unwrap().json().await.unwrap();
    let entries = log.as_array().unwrap();
    let denied = entries.iter().filter(|e| e["outcome"] == "denied").count();
    assert!(denied <= 5, "{denied} denial rows for one client and action within a minute; the rest are counted");
    let actions: Vec<&str> =
        entries.iter().filter(|e| e["outcome"] == "ok").filter_map(|e| e["action"].as_str()).collect();
    assert!(actions.contains(&"login") && actions.contains(&"reservation.create"), "{actions:?}");
    server.stop().await;
}
