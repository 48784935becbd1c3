//! Who holds a GPU, with real engines: a labelled Podman container (through Podman's
//! Docker-compatible API), a job of a real single-node Slurm, and a stand-in kubelet that speaks
//! the pod-resources gRPC API (its server generated from the same proto as gpudash's client).
//! Each process is listed by the simulator (a `pid:` fault, or the test's own row), so CI covers
//! the real lookups without a GPU. Podman and Slurm need root, as CI has; tests/identity/ holds
//! the fixtures' scripts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fantoccini::Locator;
use gpudash::telemetry::GpuSource;
use gpudash::telemetry::identity::kubelet::api;
use gpudash::telemetry::procfs::ProcReader;
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::processes::GpuProcess;

use crate::browser::{texts, with_browser};
use crate::support::{TestServer, WithProcesses, eventually};

#[expect(clippy::print_stderr, reason = "a skipped test says why")]
fn root() -> bool {
    let root = gpudash::web::local_user::own_uid() == 0;
    if !root {
        eprintln!("skipped: Podman and Slurm need root (CI runs as root)");
    }
    root
}

/// A fixture script of tests/identity/, with its directory in `var`; stopped when dropped.
struct Fixture {
    script: PathBuf,
    var: &'static str,
    dir: PathBuf,
}

impl Fixture {
    fn new(script: &str, var: &'static str, dir: &Path) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("identity").join(script);
        Self { script, var, dir: dir.to_owned() }
    }

    /// Runs `script ARGS`, returning its stdout; fails the test with its stderr.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("bash").arg(&self.script).args(args).env(self.var, &self.dir).output().unwrap();
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            self.script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.script).arg("stop").env(self.var, &self.dir).output();
    }
}

/// `/api/processes`' entry for `pid`, once `ready` holds for it.
async fn process(server: &TestServer, pid: u32, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let url = server.url("/api/processes");
    eventually(30, what, || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        body["processes"].as_array()?.iter().find(|p| p["pid"] == pid && ready(p)).cloned()
    })
    .await
}

/// The `gpudash_process_memory_bytes` line of `pid`.
async fn metrics_line(server: &TestServer, pid: u32) -> String {
    let text = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let pid = format!("pid=\"{pid}\"");
    text.lines()
        .find(|l| l.starts_with("gpudash_process_memory_bytes{") && l.contains(&pid))
        .unwrap_or_else(|| panic!("no memory series of {pid}: {text}"))
        .to_owned()
}

/// A compute process of `pid` on GPU `device` as NVML would list it, its start read from /proc.
fn host_process(device: u32, pid: u32) -> GpuProcess {
    let info = ProcReader::new("/proc").read(pid);
    GpuProcess {
        used_memory: Some(2 << 30),
        user: info.user,
        name: info.name,
        command: info.command,
        started_ms: info.started_ms,
        ..shared::testing::process(device, pid)
    }
}

#[tokio::test]
async fn a_labelled_container_is_named_owned_shown_and_renamed_when_recreated() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let podman = Fixture::new("podman.sh", "GPUDASH_PODMAN_DIR", &dir.path().join("podman"));
    let socket = podman.run(&["service", &podman.dir.display().to_string()]);
    let labels = ["--label", "com.docker.compose.project=vision", "--label", "com.docker.compose.service=train"];
    let first: u32 =
        podman.run(&[&["run", "trainer", "--label", "gpudash.user=ana"][..], &labels].concat()).parse().unwrap();

    // The first container's process through the simulator's `pid:` fault; the recreated one's
    // (another PID) added once it runs.
    let second = Arc::new(AtomicU32::new(0));
    let added = second.clone();
    let simulator = Simulator::new(2, 300).with_fault(format!("pid:0:{first}").parse().unwrap());
    let source = WithProcesses::new(simulator, move |_, processes| {
        let pid = added.load(Ordering::Relaxed);
        if pid != 0 {
            processes.push(host_process(1, pid));
        }
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.container_socket = Some(PathBuf::from(&socket));
    let server = TestServer::with_options(Box::new(source), options).await;

    let p = process(&server, first, "the container's name from the engine", |p| {
        p["workload"]["container"]["name"] == "trainer"
    })
    .await;
    let container = &p["workload"]["container"];
    assert_eq!(container["image"], "localhost/gpudash-busybox:latest", "{p}");
    assert_eq!(container["runtime"], "podman", "{p}");
    let kept: Vec<(String, String)> = serde_json::from_value(container["labels"].clone()).unwrap();
    assert!(kept.contains(&("com.docker.compose.project".into(), "vision".into())), "{kept:?}");
    assert_eq!(
        (&p["owner"]["name"], &p["owner"]["source"], &p["user"]),
        (&"ana".into(), &"container_label".into(), &"root".into())
    );
    assert_eq!(container["trusted"], true, "root's socket: {p}");
    let line = metrics_line(&server, first).await;
    for label in ["user=\"ana\"", "unix_user=\"root\"", "container=\"trainer\""] {
        assert!(line.contains(label), "{label} missing: {line}");
    }

    // The page: the owner with the Unix user beside it, and the workload's name.
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let row = format!("#processes tr.process-row[data-pid='{first}']");
        let cells = eventually(20, "the container's row", || {
            let (c, row) = (c.clone(), row.clone());
            async move {
                let user = texts(&c, &format!("{row} td.user")).await.pop()?;
                let workload = texts(&c, &format!("{row} td.workload")).await.pop()?;
                (user.contains("ana") && workload.contains("trainer")).then_some((user, workload))
            }
        })
        .await;
        assert!(cells.0.contains("(root)"), "the Unix user beside the owner: {cells:?}");
        let title = c
            .find(Locator::Css(&format!("{row} td.workload")))
            .await
            .unwrap()
            .attr("title")
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(
            title.contains("image: localhost/gpudash-busybox:latest") && title.contains("compose project: vision"),
            "{title}"
        );
    })
    .await;

    // Recreated with another label: a new process, a new owner; the old one is gone.
    let recreated: u32 =
        podman.run(&[&["run", "trainer", "--label", "gpudash.user=bo"][..], &labels].concat()).parse().unwrap();
    second.store(recreated, Ordering::Relaxed);
    let p = process(&server, recreated, "the recreated container's owner", |p| p["owner"]["name"] == "bo").await;
    assert_eq!(p["workload"]["container"]["name"], "trainer");
    eventually(10, "the first container's process to leave the list", || {
        let url = server.url("/api/processes");
        async move {
            let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            (!body["processes"].as_array()?.iter().any(|p| p["pid"] == first)).then_some(())
        }
    })
    .await;
    let health: Value = reqwest::get(server.url("/healthz")).await.unwrap().json().await.unwrap();
    assert_eq!(health["reasons"], serde_json::json!([]), "{health}");
    server.stop().await;

    // A process whose cgroup names that container without being in it (a folder made elsewhere with
    // its id) is in no container: the engine's main process says where the container's cgroup is.
    let forged = forged_member(recreated);
    let simulator = Simulator::new(1, 300).with_fault("job-ends:0@0s".parse().unwrap());
    let source = WithProcesses::new(simulator, |_, processes| {
        processes.push(GpuProcess { user: Some("bo".into()), ..shared::testing::process(0, FORGED) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.container_socket = Some(PathBuf::from(&socket));
    options.identity.proc_root = forged.path().to_owned();
    let server = TestServer::with_options(Box::new(source), options).await;
    let url = server.url("/api/processes");
    let p = eventually(20, "the forged member asked about and refused", || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        let p = body["processes"].as_array()?.iter().find(|p| p["pid"] == FORGED)?.clone();
        // Named by id from the cgroup until the engine has answered; then in no container.
        p["workload"]["container"].is_null().then_some(p)
    })
    .await;
    assert_eq!((&p["owner"]["name"], &p["owner"]["source"]), (&"bo".into(), &"unix_user".into()), "{p}");
    server.stop().await;

    // The same engine behind a socket a user owns (as a rootless engine's): the container is named,
    // its owner label is not believed, /healthz and the doctor say why.
    std::os::unix::fs::chown(&socket, Some(65534), None).unwrap();
    let simulator = Simulator::new(1, 300).with_fault(format!("pid:0:{recreated}").parse().unwrap());
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.container_socket = Some(PathBuf::from(&socket));
    let server = TestServer::with_options(Box::new(simulator), options).await;
    let p = process(&server, recreated, "the container named by a user's engine", |p| {
        p["workload"]["container"]["name"] == "trainer"
    })
    .await;
    assert_eq!(p["workload"]["container"]["trusted"], false, "{p}");
    assert_eq!(p["owner"]["name"], "container trainer", "the label gpudash.user=bo is not believed: {p}");
    let health: Value = reqwest::get(server.url("/healthz")).await.unwrap().json().await.unwrap();
    assert!(health["reasons"].to_string().contains("not believed"), "{health}");
    server.stop().await;
    let doctor = Command::new(crate::support::gpudash_binary())
        .args(["doctor", "--container-socket", socket.as_str()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    let line = said.lines().find(|l| l.contains("container-engine") || l.contains("answers at")).unwrap_or_default();
    assert!(said.contains("not root's") && said.contains("owner labels"), "the doctor warns: {line}\n{said}");
}

/// The PID of a process [`forged_member`] makes up.
const FORGED: u32 = 900_600;

/// A /proc in which process [`FORGED`]'s cgroup names the container whose main process is `main`,
/// in a folder of its own (`/forged.slice/...`), and `main`'s cgroup is its real one.
fn forged_member(main: u32) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let real = std::fs::read_to_string(format!("/proc/{main}/cgroup")).unwrap();
    let id = real
        .split(|c: char| !c.is_ascii_hexdigit())
        .find(|part| part.len() == 64)
        .unwrap_or_else(|| panic!("no container id in {real}"))
        .to_owned();
    for (pid, cgroup) in [(main, real), (FORGED, format!("0::/forged.slice/libpod-{id}.scope\n"))] {
        std::fs::create_dir_all(root.path().join(pid.to_string())).unwrap();
        std::fs::write(root.path().join(pid.to_string()).join("cgroup"), cgroup).unwrap();
    }
    root
}

#[tokio::test]
async fn a_slurm_job_names_its_id_user_account_and_partition() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let slurm = Fixture::new("slurm.sh", "GPUDASH_SLURM_DIR", &dir.path().join("slurm"));
    slurm.run(&["start", &slurm.dir.display().to_string()]);
    let pid: u32 = slurm.run(&["job", "ana", "vision"]).parse().unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let job_id = String::from_utf8_lossy(&environ)
        .split('\0')
        .find_map(|kv| kv.strip_prefix("SLURM_JOB_ID=").map(str::to_owned))
        .expect("srun sets SLURM_JOB_ID");

    let simulator = Simulator::new(1, 300).with_fault(format!("pid:0:{pid}").parse().unwrap());
    let server = TestServer::with_options(Box::new(simulator), gpudash::Options::new(Duration::from_millis(300))).await;
    let p = process(&server, pid, "the Slurm job", |p| p["workload"]["job"]["id"] == job_id.as_str()).await;
    let job = &p["workload"]["job"];
    assert_eq!(
        (&job["user"], &job["account"], &job["partition"]),
        (&"ana".into(), &"vision".into(), &"gpu".into()),
        "{p}"
    );
    assert_eq!((&p["owner"]["name"], &p["owner"]["source"]), (&"ana".into(), &"slurm_job".into()), "{p}");
    assert_eq!(job["verified"], true, "Slurm's own cgroup and the job's uid: {p}");
    assert!(metrics_line(&server, pid).await.contains(&format!("hpc_job=\"{job_id}\"")));

    // Usage by job sums what the job used.
    let now = gpudash::telemetry::now_ms();
    let url = server.url(&format!("/api/usage?from={}&to={}&group=job", now - 3_600_000, now + 3_600_000));
    let row = eventually(30, "the job's usage row", || {
        let (url, job_id) = (url.clone(), job_id.clone());
        async move {
            let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            body["rows"]
                .as_array()?
                .iter()
                .find(|r| r["workload"] == job_id.as_str() && r["memory_gib_hours"].as_f64().is_some_and(|h| h > 0.0))
                .cloned()
        }
    })
    .await;
    assert!(row["gpu_hours"].as_f64().unwrap() >= 0.0, "{row}");
    server.stop().await;
}

const TOKEN: &str = "service-account-token";

/// A stand-in API server: pod ml/bert-0 carries the label gpudash.user=cy; it wants the token.
async fn api_server() -> url::Url {
    use axum::extract::Path as UrlPath;
    use axum::http::{HeaderMap, StatusCode};
    let pod = |UrlPath((ns, name)): UrlPath<(String, String)>, headers: HeaderMap| async move {
        let bearer = format!("Bearer {TOKEN}");
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(bearer.as_str()) {
            return Err(StatusCode::FORBIDDEN);
        }
        if (ns.as_str(), name.as_str()) != ("ml", "bert-0") {
            return Err(StatusCode::NOT_FOUND);
        }
        Ok(axum::Json(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "bert", "gpudash.user": "cy"}}
        })))
    };
    let app = axum::Router::new().route("/api/v1/namespaces/{ns}/pods/{name}", axum::routing::get(pod));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url::Url::parse(&format!("http://{addr}/")).unwrap()
}

/// The stand-in kubelet: every GPU in `gpus` is held by pod ml/bert-0's container "train".
struct Kubelet {
    gpus: Vec<String>,
}

#[tonic::codegen::async_trait]
impl api::pod_resources_lister_server::PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: tonic::Request<api::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<api::ListPodResourcesResponse>, tonic::Status> {
        let devices = api::ContainerDevices { resource_name: "nvidia.com/gpu".into(), device_ids: self.gpus.clone() };
        let train = api::ContainerResources { name: "train".into(), devices: vec![devices] };
        let pod = api::PodResources { name: "bert-0".into(), namespace: "ml".into(), containers: vec![train] };
        Ok(tonic::Response::new(api::ListPodResourcesResponse { pod_resources: vec![pod] }))
    }
}

#[tokio::test]
async fn the_kubelets_pod_resources_name_the_pod_holding_a_gpu() {
    const PID: u32 = 900_500;
    let dir = tempfile::tempdir().unwrap();
    // A containerd process of a pod, as its /proc/PID/cgroup reads on a node (cgroupfs driver).
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join(PID.to_string())).unwrap();
    let container = "3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809";
    let cgroup = format!("4:memory:/kubepods/burstable/pod1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d/{container}\n");
    std::fs::write(proc_root.join(PID.to_string()).join("cgroup"), cgroup).unwrap();

    let simulator = Simulator::new(2, 300);
    let gpu0 = simulator.devices()[0].uuid.clone();
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let kubelet = api::pod_resources_lister_server::PodResourcesListerServer::new(Kubelet { gpus: vec![gpu0] });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(kubelet)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );

    // A plain container's process (no pod in its cgroup) on the same GPU: not the pod's.
    const PLAIN: u32 = 900_501;
    std::fs::create_dir_all(proc_root.join(PLAIN.to_string())).unwrap();
    let plain = format!("0::/system.slice/docker-{}.scope\n", "9".repeat(64));
    std::fs::write(proc_root.join(PLAIN.to_string()).join("cgroup"), plain).unwrap();
    let source = WithProcesses::new(simulator, |_, processes| {
        processes.push(GpuProcess {
            used_memory: Some(4 << 30),
            user: Some("root".into()),
            ..shared::testing::process(0, PID)
        });
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, PLAIN) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = proc_root.clone();
    options.identity.pod_resources_socket = Some(socket.clone());
    let server = TestServer::with_options(Box::new(source), options).await;
    let p = process(&server, PID, "the pod from the kubelet", |p| p["workload"]["pod"]["name"] == "bert-0").await;
    let pod = &p["workload"]["pod"];
    assert_eq!((&pod["namespace"], &pod["container"]), (&"ml".into(), &"train".into()), "{p}");
    assert_eq!(pod["uid"], "1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d", "the cgroup's UID is kept: {p}");
    assert_eq!((&p["owner"]["name"], &p["owner"]["source"]), (&"ml".into(), &"namespace".into()));
    let line = metrics_line(&server, PID).await;
    for label in ["pod=\"bert-0\"", "namespace=\"ml\"", "container=\"train\"", "user=\"ml\""] {
        assert!(line.contains(label), "{label} missing: {line}");
    }
    let plain = process(&server, PLAIN, "the plain container's process", |p| p["owner"].is_object()).await;
    assert_eq!(plain["workload"]["pod"], Value::Null, "the kubelet's pod is not a plain container's: {plain}");
    assert_eq!(plain["owner"]["name"], "container 999999999999", "{plain}");
    server.stop().await;

    // With the API server, the pod's owner label names its owner (asked with the service account's token).
    let api = api_server().await;
    let source = WithProcesses::new(Simulator::new(2, 300), |_, processes| {
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, PID) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = proc_root;
    options.identity.pod_resources_socket = Some(socket);
    let kube = gpudash::telemetry::identity::kube::KubeApi::new(api, Some(TOKEN.into()), None, Duration::from_secs(2));
    options.identity.kube_api = Some(kube);
    let server = TestServer::with_options(Box::new(source), options).await;
    let p = process(&server, PID, "the pod's owner label", |p| p["owner"]["name"] == "cy").await;
    assert_eq!((&p["owner"]["source"], &p["workload"]["pod"]["owner"]), (&"pod_label".into(), &"cy".into()), "{p}");
    server.stop().await;

    // A kubelet that does not answer is named in /healthz, and the pod's UID still shows.
    let source = WithProcesses::new(Simulator::new(1, 300), |_, processes| {
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, PID) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = dir.path().join("proc");
    options.identity.pod_resources_socket = Some(dir.path().join("gone.sock"));
    let server = TestServer::with_options(Box::new(source), options).await;
    let url = server.url("/healthz");
    let reasons = eventually(20, "the kubelet's problem in /healthz", || {
        let url = url.clone();
        async move {
            let health: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            let reasons = health["reasons"].to_string();
            reasons.contains("pod-resources API").then_some(reasons)
        }
    })
    .await;
    assert!(reasons.contains("[path hidden]") && !reasons.contains("gone.sock"), "{reasons}");
    let p = process(&server, PID, "the pod's UID", |p| p["workload"]["pod"]["uid"].is_string()).await;
    assert_eq!(p["owner"]["name"], "container 3f4b1c2d5e6f", "no namespace known: the container owns it; {p}");
    server.stop().await;
}

/// An engine that never answers (every inspection waits out the timeout) delays no pod list: 40
/// containers of pods are inspected on the engine's own thread while the kubelet is asked on its
/// own. (With one queue, the pods waited for 40 × 2 s of timeouts.)
#[tokio::test]
async fn a_hung_engine_delays_no_pod_list() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    let pids: Vec<u32> = (0..40).map(|i| 901_000 + i).collect();
    for &pid in &pids {
        std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{pid:064x}.scope\n"
        );
        std::fs::write(proc_root.join(pid.to_string()).join("cgroup"), cgroup).unwrap();
    }
    let engine = dir.path().join("hung.sock");
    let listener = std::os::unix::net::UnixListener::bind(&engine).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept() {
            held.push(stream);
        }
    });
    let simulator = Simulator::new(1, 300).with_fault("job-ends:0@0s".parse().unwrap());
    let gpu0 = simulator.devices()[0].uuid.clone();
    let socket = dir.path().join("kubelet.sock");
    let kubelet_listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let kubelet = api::pod_resources_lister_server::PodResourcesListerServer::new(Kubelet { gpus: vec![gpu0] });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(kubelet)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(kubelet_listener)),
    );
    let listed = pids.clone();
    let source = WithProcesses::new(simulator, move |_, processes| {
        for &pid in &listed {
            processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, pid) });
        }
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = proc_root;
    options.identity.container_socket = Some(engine);
    options.identity.pod_resources_socket = Some(socket);
    let server = TestServer::with_options(Box::new(source), options).await;
    let url = server.url("/api/processes");
    eventually(15, "every process named by the kubelet while the engine hangs", || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        let named = body["processes"].as_array()?.iter().filter(|p| p["workload"]["pod"]["name"] == "bert-0").count();
        (named == pids.len()).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_simulator_scripts_containers_pods_and_jobs_for_the_api_and_metrics() {
    let faults =
        ["job:0:ana@slurm:77:4:50@0s+1h", "job:1:bo@container:trainer:2:40@0s+1h", "job:2:cy@pod:ml/bert-0:3:90@0s+1h"];
    let mut simulator = Simulator::new(3, 300);
    for fault in faults {
        simulator = simulator.with_fault(fault.parse().unwrap());
    }
    let server = TestServer::with_options(Box::new(simulator), gpudash::Options::new(Duration::from_millis(300))).await;
    let url = server.url("/api/processes");
    let owners = eventually(20, "the three scripted jobs", || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        let mut owners: Vec<(u64, String, String, String)> = body["processes"]
            .as_array()?
            .iter()
            .map(|p| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    p["device"].as_u64().unwrap_or(9),
                    text(&p["owner"]["name"]),
                    text(&p["owner"]["source"]),
                    text(&p["user"]),
                )
            })
            .collect();
        owners.sort();
        (owners.len() == 3).then_some(owners)
    })
    .await;
    let expected =
        [(0, "ana", "slurm_job", "ana"), (1, "bo", "container_label", "root"), (2, "ml", "namespace", "root")];
    let expected: Vec<_> =
        expected.iter().map(|(d, o, s, u)| (*d, (*o).to_owned(), (*s).to_owned(), (*u).to_owned())).collect();
    assert_eq!(owners, expected);
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let process_lines: Vec<&str> = metrics.lines().filter(|l| l.starts_with("gpudash_process_memory_bytes{")).collect();
    for label in ["hpc_job=\"77\"", "container=\"trainer\"", "pod=\"bert-0\"", "namespace=\"ml\""] {
        assert!(process_lines.iter().any(|l| l.contains(label)), "{label} missing: {process_lines:?}");
    }
    server.stop().await;
}
