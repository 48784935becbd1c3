//! The red team's floods, bounded in time and aimed at loopback only, shared by the integration
//! test (`tests/integration/floods.rs`, the server in process) and `gpudash-load floods` (a
//! release server in a process of its own): sockets trickling request bodies and anonymous
//! WebSockets from loopback addresses other than 127.0.0.1, while `/healthz` and an admin's login
//! are probed from 127.0.0.1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::MaybeTlsStream;

/// How often one attacking socket reconnects at most: a refused one is retried, not spun on
/// (the machine's cores are the server's too).
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// Counts shared by an attack's tasks.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections the attackers opened (refused ones included: the kernel accepts, gpudash closes).
    pub opened: AtomicU64,
    /// WebSockets the server closed under the attackers.
    pub closed: AtomicU64,
}

/// A TCP connection to `to` from the loopback address `from`.
pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(to).await
}

/// One attacker's socket, again and again until `stop`: `POST /api/login` announcing 60,000
/// bytes of body, then one byte every 500 ms.
pub async fn trickle(from: Ipv4Addr, to: SocketAddr, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    const HEAD: &[u8] = b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                          Content-Length: 60000\r\n\r\n{\"token\":\"";
    let mut reconnect = tokio::time::interval(RECONNECT_EVERY);
    while !stop.load(Ordering::Relaxed) {
        reconnect.tick().await;
        let Ok(mut stream) = connect_from(from, to).await else { continue };
        counts.opened.fetch_add(1, Ordering::Relaxed);
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

/// One anonymous WebSocket from `from`, reading until the server closes it, again until `stop`.
pub async fn anonymous_socket(from: Ipv4Addr, to: SocketAddr, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let url = format!("ws://{to}/ws");
    let mut reconnect = tokio::time::interval(RECONNECT_EVERY / 4);
    while !stop.load(Ordering::Relaxed) {
        reconnect.tick().await;
        let Ok(tcp) = connect_from(from, to).await else { continue };
        let Ok((mut socket, _)) = tokio_tungstenite::client_async(url.as_str(), MaybeTlsStream::Plain(tcp)).await
        else {
            continue;
        };
        counts.opened.fetch_add(1, Ordering::Relaxed);
        while !stop.load(Ordering::Relaxed) {
            if !matches!(socket.next().await, Some(Ok(_))) {
                counts.closed.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
}

/// What the admin's probes saw.
#[derive(Debug, Default)]
pub struct Probes {
    pub healthz: Vec<Duration>,
    pub login: Vec<Duration>,
    /// "GET /healthz after 3.2 s: connection closed" and the like.
    pub failures: Vec<String>,
}

impl Probes {
    /// "p50 / p99 / max" in ms of one series.
    pub fn summary(times: &[Duration]) -> String {
        let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms.get(((ms.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(0.0);
        format!("{:.1} / {:.1} / {:.1} ms", at(0.5), at(0.99), at(1.0))
    }
}

/// Probes `base` (`http://127.0.0.1:PORT`) every 100 ms until `stop`: `GET /healthz` and a login
/// with `token`, each on a new connection, each given `within` to answer 200.
pub async fn probe(base: &str, token: &str, within: Duration, stop: Arc<AtomicBool>) -> Probes {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(within).build();
    let Ok(client) = client else {
        return Probes { failures: vec!["cannot build an HTTP client".to_owned()], ..Probes::default() };
    };
    let started = Instant::now();
    let mut probes = Probes::default();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    let login = format!("{{\"token\":\"{token}\"}}");
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        let at = Instant::now();
        match client.get(format!("{base}/healthz")).send().await {
            Ok(answer) if answer.status() == 200 => probes.healthz.push(at.elapsed()),
            other => probes.failures.push(format!("GET /healthz after {:?}: {other:?}", started.elapsed())),
        }
        let at = Instant::now();
        let request = client.post(format!("{base}/api/login")).header("content-type", "application/json");
        match request.body(login.clone()).send().await {
            Ok(answer) if answer.status() == 200 => probes.login.push(at.elapsed()),
            other => probes.failures.push(format!("admin login after {:?}: {other:?}", started.elapsed())),
        }
    }
    probes
}

/// Runs `attackers` until `length` has passed while probing; returns what the probes saw.
pub async fn while_probing(
    base: &str,
    token: &str,
    within: Duration,
    length: Duration,
    attackers: Vec<tokio::task::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
) -> Probes {
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(length).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let probes = probe(base, token, within, stop).await;
    let _ = stopper.await;
    for attacker in attackers {
        attacker.abort();
    }
    probes
}
