//! The fleet view through a real Prometheus: Debian's `/usr/bin/prometheus` on
//! loopback scrapes three simulated gpudash instances, and a fourth gpudash
//! reads the fleet through Prometheus's HTTP API (plain, and over TLS with a
//! private CA).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpudash::fleet::{FleetConfig, parse_prometheus_url};
use gpudash::telemetry::simulator::Simulator;
use shared::fleet::{FleetResponse, NodeKind};
use tokio::net::TcpListener;

use crate::security::VIEWER;
use crate::support::{Said, TestServer, TlsFiles, eventually_every};

const SCRAPE_INTERVAL_S: u64 = 1;

/// A child process killed (and reaped) when the test ends, passing or not.
pub struct ChildGuard {
    child: Child,
    log: PathBuf,
}

impl ChildGuard {
    /// Guards `child`, whose output goes to the file `log`.
    pub fn new(child: Child, log: PathBuf) -> Self {
        Self { child, log }
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn prometheus_binary() -> String {
    let path = std::env::var("PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".to_owned());
    assert!(
        Path::new(&path).exists(),
        "the fleet test needs Prometheus (Debian package `prometheus`; `bash tests/run.sh` installs it)"
    );
    path
}

/// A loopback port free right now (Prometheus binds it itself).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Starts Prometheus on loopback scraping `targets` every `interval_s`, and waits until it is ready.
pub async fn start_prometheus(dir: &Path, targets: &[String], interval_s: u64) -> (ChildGuard, String) {
    start_prometheus_with(dir, targets, interval_s, None).await
}

/// [`start_prometheus`], serving https with `tls` when given (Prometheus's `--web.config.file`).
async fn start_prometheus_with(
    dir: &Path,
    targets: &[String],
    interval_s: u64,
    tls: Option<&TlsFiles>,
) -> (ChildGuard, String) {
    let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
    let config = format!(
        "global:\n  scrape_interval: {interval_s}s\n  scrape_timeout: {interval_s}s\n\
         scrape_configs:\n  - job_name: gpudash\n    static_configs:\n      - targets: [{list}]\n"
    );
    launch_prometheus(dir, &config, tls).await
}

/// Starts Prometheus on loopback with `config` (its whole prometheus.yml), serving https with `tls` when
/// given, and waits until it is ready.
pub async fn launch_prometheus(dir: &Path, config: &str, tls: Option<&TlsFiles>) -> (ChildGuard, String) {
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write prometheus.yml");
    let port = free_port();
    let log = dir.join("prometheus.log");
    let out = std::fs::File::create(&log).expect("log file");
    let mut command = Command::new(prometheus_binary());
    command
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let mut http = reqwest::Client::builder();
    let scheme = if let Some(tls) = tls {
        let web = dir.join("web.yml");
        let config =
            format!("tls_server_config:\n  cert_file: {}\n  key_file: {}\n", tls.cert.display(), tls.key.display());
        std::fs::write(&web, config).expect("write web.yml");
        command.arg(format!("--web.config.file={}", web.display()));
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&tls.ca).expect("ca.pem")).expect("a PEM CA");
        http = http.add_root_certificate(ca);
        "https"
    } else {
        "http"
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file"))
        .stderr(out)
        .spawn()
        .expect("start prometheus");
    let guard = ChildGuard { child, log };
    let http = http.build().expect("a client");
    let base = format!("{scheme}://127.0.0.1:{port}");
    eventually_every(30, Duration::from_millis(200), "Prometheus to be ready", || async {
        let answer = http.get(format!("{base}/-/ready")).send().await;
        match answer {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(Said(format!("/-/ready answered {}; its log:\n{}", r.status(), guard.log_tail()))),
            Err(e) => Err(Said(format!("/-/ready: {e}; its log:\n{}", guard.log_tail()))),
        }
    })
    .await;
    (guard, base)
}

/// The fleet view of the Prometheus at `url`, with a short cache and timeout for tests.
pub(crate) fn quick_fleet_config(url: &str) -> FleetConfig {
    FleetConfig {
        cache: Duration::from_millis(300),
        timeout: Duration::from_secs(2),
        ..FleetConfig::new(parse_prometheus_url(url).expect("a Prometheus URL"))
    }
}

/// A simulated gpudash reporting `hostname`.
pub(crate) async fn instance(hostname: &str, gpus: u32, fleet: Option<FleetConfig>) -> TestServer {
    let options = gpudash::Options {
        hostname: Some(hostname.to_owned()),
        fleet,
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(gpus, 200)), options).await
}

/// Polls `url` until `done` holds, failing after `secs` with the last answer.
async fn fleet_until(url: &str, secs: u64, what: &str, done: impl Fn(&FleetResponse) -> bool) -> FleetResponse {
    eventually_every(secs, Duration::from_millis(250), what, || async {
        let response = reqwest::get(url).await.expect("GET /api/fleet");
        assert_eq!(response.status(), 200);
        let fleet: FleetResponse = response.json().await.expect("a FleetResponse");
        if done(&fleet) { Ok(fleet) } else { Err(fleet) }
    })
    .await
}

/// Who is on each GPU of `server`, as its own API says: (gpu, users).
async fn own_users(server: &TestServer) -> Vec<(u32, Vec<String>)> {
    let body: serde_json::Value =
        reqwest::get(server.url("/api/processes")).await.expect("GET /api/processes").json().await.expect("JSON");
    let mut users: Vec<(u32, Vec<String>)> = (0..2).map(|gpu| (gpu, Vec::new())).collect();
    for p in body["processes"].as_array().expect("processes") {
        let gpu = p["device"].as_u64().expect("a device index") as usize;
        // The fleet's users are the nodes' `user` labels: each process's owner.
        users[gpu].1.push(p["owner"]["name"].as_str().or(p["user"].as_str()).unwrap_or("unknown").to_owned());
    }
    users.iter_mut().for_each(|(_, u)| {
        u.sort();
        u.dedup();
    });
    users
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_lists_every_scraped_gpudash_and_marks_a_dead_one_stale() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["fleet-a", "fleet-b", "fleet-c"];
    let mut nodes = Vec::new();
    for name in names {
        nodes.push(instance(name, 2, None).await);
    }
    let targets: Vec<String> = nodes.iter().map(|n| n.running.addr().to_string()).collect();
    let (mut prometheus, prometheus_url) = start_prometheus(dir.path(), &targets, SCRAPE_INTERVAL_S).await;
    let fleet_config = quick_fleet_config(&prometheus_url);
    let viewer = instance("viewer", 1, Some(fleet_config)).await;
    let url = viewer.url("/api/fleet");

    // All three, with both GPUs each and the same users as each instance's own API says.
    let fleet = eventually_every(30, Duration::from_millis(250), "three live nodes with their users", || async {
        let mut expected = Vec::new();
        for node in &nodes {
            expected.push((node.running.addr().to_string(), own_users(node).await));
        }
        let fleet: FleetResponse = reqwest::get(&url).await.unwrap().json().await.unwrap();
        let users_match = expected.iter().all(|(instance, users)| {
            users.iter().all(|(gpu, users)| {
                fleet.gpus.iter().any(|g| {
                    let names = g.users.as_ref().map(|u| {
                        let mut names: Vec<String> = u.iter().map(|u| u.user.clone()).collect();
                        names.sort();
                        names
                    });
                    &g.instance == instance && g.gpu == *gpu && names.as_ref() == Some(users)
                })
            })
        });
        let someone = expected.iter().any(|(_, users)| users.iter().any(|(_, u)| !u.is_empty()));
        let live =
            fleet.error.is_none() && fleet.nodes.len() == 3 && fleet.nodes.iter().all(|n| !n.stale && n.gpus == 2);
        if live && users_match && someone { Ok(fleet) } else { Err((fleet, expected)) }
    })
    .await;
    let hosts: Vec<&str> = fleet.nodes.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(hosts, names);
    for (node, server) in fleet.nodes.iter().zip(&nodes) {
        assert_eq!(node.kind, NodeKind::Gpudash);
        assert_eq!(node.url.as_deref(), Some(format!("{}/", server.base).as_str()));
        assert!(node.simulated && node.up == Some(true) && node.version.is_some());
    }
    assert_eq!(fleet.summary.gpus, 6);
    for gpu in &fleet.gpus {
        assert_eq!(gpu.model.as_deref(), Some("NVIDIA H200 (simulated)"));
        assert!(gpu.memory_total.unwrap() > 100 << 30, "{gpu:?}");
        assert!(
            gpu.memory_used.is_some() && gpu.temperature_c.is_some() && gpu.power_w.is_some() && gpu.gpu_util.is_some()
        );
    }
    let first_busy = fleet.gpus.iter().position(|g| !g.free).unwrap_or(fleet.gpus.len());
    assert!(fleet.gpus[first_busy..].iter().all(|g| !g.free), "free GPUs first: {:#?}", fleet.gpus);
    assert!(fleet.gpus.iter().any(|g| g.users.as_ref().is_some_and(|u| !u.is_empty())), "someone holds a GPU");

    // Filters: by host, by user.
    let only_b: FleetResponse = reqwest::get(format!("{url}?host=FLEET-B")).await.unwrap().json().await.unwrap();
    assert_eq!(only_b.nodes.len(), 1);
    assert!(only_b.gpus.len() == 2 && only_b.gpus.iter().all(|g| g.hostname == "fleet-b"));
    let user = fleet.choices.users.first().expect("a user").clone();
    let by_user: FleetResponse = reqwest::get(format!("{url}?user={user}")).await.unwrap().json().await.unwrap();
    assert!(!by_user.gpus.is_empty());
    assert!(by_user.gpus.iter().all(|g| g.users.iter().flatten().any(|u| u.user == user)));

    // The page's first answer: hosts with their counts and owners, no GPUs; a host's GPUs on their own.
    let hosts_only: FleetResponse = reqwest::get(format!("{url}?gpus=none")).await.unwrap().json().await.unwrap();
    assert!(hosts_only.gpus.is_empty() && hosts_only.nodes.len() == 3);
    for node in &hosts_only.nodes {
        let counted = node.free_gpus + node.busy_gpus + node.idle_gpus + node.reserved_gpus + node.lost_gpus;
        assert_eq!((node.gpus, counted + node.stale_gpus), (2, 2), "{node:?}");
    }
    let owners: std::collections::BTreeSet<&String> = hosts_only.nodes.iter().flat_map(|n| &n.owners).collect();
    assert!(owners.contains(&user), "{user} among the owners {owners:?}");
    let one = &hosts_only.nodes[1];
    let host_url = viewer.url(&format!("/api/fleet/host/{}", one.instance));
    let opened: FleetResponse = reqwest::get(&host_url).await.unwrap().json().await.unwrap();
    assert_eq!(opened.nodes.len(), 1);
    assert!(
        opened.gpus.len() == 2 && opened.gpus.iter().all(|g| g.instance == one.instance && g.temperature_c.is_some())
    );
    let unknown = reqwest::get(viewer.url("/api/fleet/host/nowhere:1")).await.unwrap();
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);
    assert!(unknown.text().await.unwrap().contains("Prometheus knows no target 'nowhere:1'"));

    // A team dashboard with tokens: anonymous visitors see who holds how much, not who.
    let team = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let auth = gpudash::auth::AuthConfig::load(None, Some(&format!("vera:viewer:{VIEWER}"))).unwrap();
        let fleet = Some(quick_fleet_config(&prometheus_url));
        let options = gpudash::Options { auth, fleet, ..gpudash::Options::new(Duration::from_millis(200)) };
        let running = gpudash::start_with(listener, Box::new(Simulator::new(1, 200)), options).await.unwrap();
        TestServer { base: format!("http://{}", running.addr()), running }
    };
    let team_url = team.url("/api/fleet");
    let hidden = fleet_until(&team_url, 30, "the fleet with its holders", |f| {
        f.gpus.iter().any(|g| g.users.as_ref().is_some_and(|u| !u.is_empty()))
    })
    .await;
    let holders: Vec<&str> =
        hidden.gpus.iter().flat_map(|g| g.users.iter().flatten()).map(|u| u.user.as_str()).collect();
    assert!(holders.iter().all(|u| *u == shared::lab::HIDDEN_REQUESTER), "{holders:?}");
    assert!(hidden.choices.users.is_empty(), "{:?}", hidden.choices);
    assert_eq!(reqwest::get(format!("{team_url}?user={user}")).await.unwrap().status(), 401);
    let named: FleetResponse =
        reqwest::Client::new().get(&team_url).bearer_auth(VIEWER).send().await.unwrap().json().await.unwrap();
    assert!(named.choices.users.contains(&user), "{:?}", named.choices);
    team.stop().await;

    // One instance dies: stale within a few scrape intervals, still listed with its last figures.
    let dead = nodes.remove(1);
    dead.stop().await;
    let fleet = fleet_until(&url, 10 * SCRAPE_INTERVAL_S, "fleet-b marked stale", |f| {
        f.nodes.iter().any(|n| n.hostname == "fleet-b" && n.stale)
    })
    .await;
    let b = fleet.nodes.iter().find(|n| n.hostname == "fleet-b").unwrap();
    assert_eq!(b.up, Some(false));
    assert!(b.last_seen_ms.is_some_and(|t| t + 60_000 > fleet.queried_ms), "{b:?}");
    assert!(fleet.nodes.iter().filter(|n| n.hostname != "fleet-b").all(|n| !n.stale));
    let b_gpus: Vec<_> = fleet.gpus.iter().filter(|g| g.hostname == "fleet-b").collect();
    assert_eq!(b_gpus.len(), 2);
    assert!(b_gpus.iter().all(|g| g.stale && !g.free && g.memory_used.is_some()));
    assert!(fleet.gpus.iter().rev().take(2).all(|g| g.hostname == "fleet-b"), "stale GPUs last");

    // Prometheus goes away: the fleet answer says so; the local dashboard carries on.
    prometheus.stop();
    let fleet = fleet_until(&url, 10, "an error once Prometheus is gone", |f| f.error.is_some()).await;
    let error = fleet.error.unwrap();
    assert!(error.contains(&format!("cannot reach Prometheus at '{prometheus_url}/'")), "{error}");
    assert!(fleet.nodes.is_empty() && fleet.gpus.is_empty());
    let devices = reqwest::get(viewer.url("/api/devices")).await.unwrap();
    assert_eq!(devices.status(), 200);

    viewer.stop().await;
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_prometheus_is_read_with_its_private_ca_and_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsFiles::generate_for(&["127.0.0.1"], dir.path());
    let node = instance("tls-node", 1, None).await;
    let (_prometheus, prometheus_url) =
        start_prometheus_with(dir.path(), &[node.running.addr().to_string()], SCRAPE_INTERVAL_S, Some(&tls)).await;
    assert!(prometheus_url.starts_with("https://"));
    let config = quick_fleet_config(&prometheus_url);

    let trusting =
        instance("viewer-ca", 1, Some(FleetConfig { ca_file: Some(tls.ca.clone()), ..config.clone() })).await;
    let fleet = fleet_until(&trusting.url("/api/fleet"), 30, "the node listed over https", |f| {
        f.error.is_none() && f.nodes.iter().any(|n| n.hostname == "tls-node")
    })
    .await;
    assert_eq!(fleet.gpus.iter().filter(|g| g.hostname == "tls-node").count(), 1);

    // Without the CA, the system's CAs do not vouch for the certificate: the answer says what to pass.
    let doubting = instance("viewer-no-ca", 1, Some(config)).await;
    let fleet = fleet_until(&doubting.url("/api/fleet"), 10, "a TLS error", |f| f.error.is_some()).await;
    let error = fleet.error.unwrap();
    assert!(error.contains(&format!("the TLS connection to Prometheus at '{prometheus_url}/' failed")), "{error}");
    assert!(error.contains("--fleet-prometheus-ca"), "{error}");

    for server in [trusting, doubting, node] {
        server.stop().await;
    }
}

/// A GPU whose XID 79 fires is not free on the Fleet page either: what Prometheus holds of it goes
/// through the rule of its own page (`shared::usability`), and the Fleet says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_with_a_hardware_xid_is_unhealthy_not_free_in_the_fleet() {
    let dir = tempfile::tempdir().unwrap();
    // Both GPUs' jobs end at once: only the XID tells them apart. GPU 2 computes for a job whose
    // process the node cannot see: in use by its figures, not free either.
    let simulator = ["job-ends:0@0s", "job-ends:1@0s", "xid:1:79@0s", "unseen:2@0s"]
        .iter()
        .fold(Simulator::new(3, 200), |s, f| s.with_fault(f.parse().unwrap()));
    let options =
        gpudash::Options { hostname: Some("fleet-x".to_owned()), ..gpudash::Options::new(Duration::from_millis(200)) };
    let node = TestServer::with_options(Box::new(simulator), options).await;
    let (_prometheus, prometheus_url) =
        start_prometheus(dir.path(), &[node.running.addr().to_string()], SCRAPE_INTERVAL_S).await;
    let viewer = instance("viewer", 1, Some(quick_fleet_config(&prometheus_url))).await;
    let fleet = fleet_until(&viewer.url("/api/fleet"), 30, "GPU 0 free and GPU 1 unhealthy", |f| {
        let gpu = |i: u32| f.gpus.iter().find(|g| g.hostname == "fleet-x" && g.gpu == i);
        gpu(0).is_some_and(|g| g.free) && gpu(1).is_some_and(|g| g.unhealthy.as_deref() == Some("XID 79"))
    })
    .await;
    let xid = fleet.gpus.iter().find(|g| g.gpu == 1).unwrap();
    assert!(!xid.free && xid.users == Some(Vec::new()), "nobody holds it, and it is not free: {xid:?}");
    let unseen = fleet.gpus.iter().find(|g| g.gpu == 2).unwrap();
    assert!(!unseen.free && unseen.users == Some(Vec::new()), "no process listed, in use all the same: {unseen:?}");
    assert_eq!((fleet.summary.free_gpus, fleet.nodes[0].free_gpus), (1, 1));
    viewer.stop().await;
    node.stop().await;
}

#[tokio::test]
async fn without_a_prometheus_the_fleet_view_says_how_to_turn_it_on() {
    let server = TestServer::simulated(1, 200).await;
    let response = reqwest::get(server.url("/api/fleet")).await.unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("--fleet-prometheus"), "{body}");
    server.stop().await;
}

#[tokio::test]
async fn the_host_name_flag_names_the_host_everywhere() {
    let server = instance("renamed-7", 1, None).await;
    let devices: serde_json::Value = reqwest::get(server.url("/api/devices")).await.unwrap().json().await.unwrap();
    assert_eq!(devices["host"]["hostname"], "renamed-7");
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gpudash_info{Hostname=\"renamed-7\""), "{metrics}");
    server.stop().await;
}
