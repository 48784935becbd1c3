//! Starting a dashboard for a test, and small HTTP/WebSocket helpers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::Duration;

use futures_util::StreamExt;
use gpudash::Running;
use gpudash::telemetry::simulator::Simulator;
use gpudash::telemetry::{ActivitySink, GpuSource, XidSink};
use shared::processes::GpuProcess;
use shared::topology::Topology;
use shared::{Details, DeviceInfo, DeviceSample, HostInfo, ServerMessage};
use tokio_tungstenite::tungstenite::Message;

pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A dashboard on a free loopback port.
pub struct TestServer {
    pub running: Running,
    pub base: String,
}

impl TestServer {
    /// `count` simulated GPUs sampled every `interval_ms`.
    pub async fn simulated(count: u32, interval_ms: u64) -> Self {
        Self::with_source(Box::new(Simulator::new(count, interval_ms)), interval_ms).await
    }

    /// Simulated GPUs with history in `dir`.
    pub async fn with_history(count: u32, interval_ms: u64, dir: &Path) -> Self {
        let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).expect("open store");
        let options =
            gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(interval_ms)) };
        Self::with_options(Box::new(Simulator::new(count, interval_ms)), options).await
    }

    /// Any source, with options beyond the sampling period.
    pub async fn with_options(source: Box<dyn GpuSource>, options: gpudash::Options) -> Self {
        let listener = gpudash::web::serve::listen("127.0.0.1:0".parse().unwrap()).expect("bind loopback");
        let running = gpudash::start_with(listener, source, options).await.expect("start");
        let base = format!("http://{}", running.addr());
        Self { running, base }
    }

    pub async fn with_source(source: Box<dyn GpuSource>, interval_ms: u64) -> Self {
        Self::on("127.0.0.1:0", source, interval_ms).await
    }

    /// On a given address, e.g. to come back on the port a previous server had.
    pub async fn on(addr: &str, source: Box<dyn GpuSource>, interval_ms: u64) -> Self {
        let listener = gpudash::web::serve::listen(addr.parse().expect("an address")).expect("bind loopback");
        let running = gpudash::start(listener, source, Duration::from_millis(interval_ms)).await.expect("start");
        let base = format!("http://{}", running.addr());
        Self { running, base }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.running.addr())
    }

    pub async fn stop(self) {
        self.running.shutdown().await.expect("clean shutdown");
    }
}

/// The simulator with a test's own processes among its own: `edit` changes the processes of
/// every details read (given the read's time, ms since the epoch), e.g. adds one to look for or
/// leaves a GPU free. Everything else is the simulator's, the XIDs its faults raise included.
pub struct WithProcesses<F> {
    simulator: Simulator,
    edit: F,
}

impl<F: Fn(u64, &mut Vec<GpuProcess>) + Send + Sync + 'static> WithProcesses<F> {
    pub fn new(simulator: Simulator, edit: F) -> Self {
        Self { simulator, edit }
    }
}

impl<F: Fn(u64, &mut Vec<GpuProcess>) + Send + Sync + 'static> GpuSource for WithProcesses<F> {
    fn host(&self) -> HostInfo {
        self.simulator.host()
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.simulator.devices()
    }

    fn sample(&self, timestamp_ms: u64) -> Vec<DeviceSample> {
        self.simulator.sample(timestamp_ms)
    }

    fn details(&self, timestamp_ms: u64) -> Details {
        let mut details = self.simulator.details(timestamp_ms);
        (self.edit)(timestamp_ms, &mut details.processes);
        details
    }

    fn watch_xids(&self, sink: XidSink, stop: Arc<AtomicBool>) -> Option<JoinHandle<()>> {
        self.simulator.watch_xids(sink, stop)
    }

    fn watch_activity(&self, sink: ActivitySink, stop: Arc<AtomicBool>) -> Option<JoinHandle<()>> {
        self.simulator.watch_activity(sink, stop)
    }

    fn details_period(&self, interval: Duration) -> Duration {
        self.simulator.details_period(interval)
    }

    fn topology(&self) -> Option<Topology> {
        self.simulator.topology()
    }
}

/// `gpus` simulated GPUs sampled every `interval_ms`, running the scripted `faults`
/// (`job:0:ana:6@1s+2s`, …: telemetry/src/simulator/faults).
pub fn scripted(gpus: u32, interval_ms: u64, faults: &[&str]) -> Simulator {
    faults.iter().fold(Simulator::new(gpus, interval_ms), |sim, fault| {
        sim.with_fault(fault.parse().unwrap_or_else(|e| panic!("the fault '{fault}': {e}")))
    })
}

pub async fn connect(url: &str) -> Socket {
    tokio_tungstenite::connect_async(url).await.expect("WebSocket connect").0
}

/// The next telemetry message, failing the test after `secs` seconds.
pub async fn next_message(socket: &mut Socket, secs: u64) -> ServerMessage {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(secs), socket.next())
            .await
            .expect("a message in time")
            .expect("socket open")
            .expect("valid frame");
        match frame {
            Message::Text(text) => return serde_json::from_str(&text).expect("a ServerMessage"),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// The `gpudash` binary `cargo build -p gpudash` puts beside this test's own executable (tests
/// that start the real binary: as a server, a doctor, a bench or the Lab's worker process).
pub fn gpudash_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target/debug").join("gpudash");
    assert!(bin.exists(), "{} is missing: build it with `cargo build -p gpudash`", bin.display());
    bin
}

/// How often [`eventually`] asks again.
pub const POLL: Duration = Duration::from_millis(100);

/// Polls `check` every 100 ms until it returns `Some`, or fails with `what` after `secs`:
/// the one way a test waits for a state (never a fixed sleep).
pub async fn eventually<T, Fut: Future<Output = Option<T>>>(
    secs: u64,
    what: &str,
    mut check: impl FnMut() -> Fut,
) -> T {
    eventually_every(secs, POLL, what, move || {
        let answer = check();
        async move { answer.await.ok_or(NotYet) }
    })
    .await
}

/// [`eventually`], polling every `every`, for a `check` that says why it is not done yet:
/// `Err(last state)`, which the failure shows.
pub async fn eventually_every<T, E: std::fmt::Debug, Fut: Future<Output = Result<T, E>>>(
    secs: u64,
    every: Duration,
    what: &str,
    mut check: impl FnMut() -> Fut,
) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(last) => last,
        };
        assert!(std::time::Instant::now() < deadline, "timed out after {secs} s waiting for {what}; last: {last:#?}");
        tokio::time::sleep(every).await;
    }
}

/// Text shown as is in a failure (a log, say), not as a quoted string.
pub struct Said(pub String);

impl std::fmt::Debug for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an [`eventually`] check that returned `None` was last.
#[derive(Debug)]
struct NotYet;

/// `GET path` as JSON, failing the test unless it answers 200.
pub async fn get_json<T: serde::de::DeserializeOwned>(server: &TestServer, path: &str) -> T {
    let response = reqwest::get(server.url(path)).await.expect("request");
    assert_eq!(response.status(), reqwest::StatusCode::OK, "{path}");
    response.json().await.expect("JSON body")
}

/// Polls a lab run until it has ended, failing the test after 30 s.
pub async fn finished(server: &TestServer, id: u64) -> shared::lab::Run {
    let what = format!("run {id} to end");
    eventually_every(30, Duration::from_millis(20), &what, || async {
        let run: shared::lab::Run = get_json(server, &format!("/api/runs/{id}")).await;
        if run.summary.status.is_final() { Ok(run) } else { Err(run.summary.status) }
    })
    .await
}

/// PEM files for a server speaking TLS: a private CA, and a certificate it signed for some names.
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate (and its key) the same CA signed, for mutual TLS.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TlsFiles {
    /// A CA and a certificate for `names` (host names or IP addresses), written into `dir`.
    pub fn generate_for(names: &[&str], dir: &Path) -> Self {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "gpudash test CA");
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("params")
            .signed_by(&key, &ca)
            .expect("certificate");
        let client_key = rcgen::KeyPair::generate().expect("client key");
        let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("client params");
        client_params.distinguished_name.push(rcgen::DnType::CommonName, "prometheus");
        let client = client_params.signed_by(&client_key, &ca).expect("client certificate");
        let files = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client-key.pem"),
        };
        std::fs::write(&files.client_cert, client.pem()).expect("write client.pem");
        std::fs::write(&files.client_key, client_key.serialize_pem()).expect("write client-key.pem");
        std::fs::write(&files.ca, ca.pem()).expect("write ca.pem");
        std::fs::write(&files.cert, cert.pem()).expect("write cert.pem");
        std::fs::write(&files.key, key.serialize_pem()).expect("write key.pem");
        files
    }
}

/// An audit log answer (`GET /api/audit`) as (user, action, outcome), in its order.
pub fn audit_triples(log: &serde_json::Value) -> Vec<(String, String, String)> {
    let text = |e: &serde_json::Value, key: &str| e[key].as_str().unwrap().to_owned();
    log.as_array().unwrap().iter().map(|e| (text(e, "user"), text(e, "action"), text(e, "outcome"))).collect()
}
