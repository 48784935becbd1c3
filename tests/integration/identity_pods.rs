//! Who holds a GPU on a Kubernetes node: a stand-in kubelet that speaks the pod-resources gRPC API
//! (its server generated from the same proto as gpudash's client) and a stand-in API server for
//! pods' owner labels; a plain container on a pod's GPU, and an engine that hangs while the
//! kubelet answers. The real-engine tests are in `identity.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpudash::telemetry::GpuSource;
use gpudash::telemetry::identity::kubelet::api;
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::processes::GpuProcess;

use crate::identity::{metrics_line, process};
use crate::support::{TestServer, WithProcesses, eventually};

/// Serves the stand-in [`Kubelet`] (every GPU in `gpus` held by pod ml/bert-0) on a socket in `dir`.
fn kubelet(dir: &Path, gpus: Vec<String>) -> PathBuf {
    let socket = dir.join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let kubelet = api::pod_resources_lister_server::PodResourcesListerServer::new(Kubelet { gpus });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(kubelet)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    socket
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
            "metadata": {
                "name": name, "namespace": ns, "uid": "1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d",
                "labels": {"app": "bert", "gpudash.user": "cy"}
            }
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
    let socket = kubelet(dir.path(), vec![gpu0]);

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

    // With the API server, the pod's owner label names its owner (asked with the service account's token),
    // and its UID must be the one the process's cgroup names: another pod's process on the GPU is not it.
    const OTHER: u32 = 900_502;
    std::fs::create_dir_all(proc_root.join(OTHER.to_string())).unwrap();
    let other = format!(
        "0::/kubepods.slice/kubepods-pod99999999_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{}.scope\n",
        "7".repeat(64)
    );
    std::fs::write(proc_root.join(OTHER.to_string()).join("cgroup"), other).unwrap();
    let api = api_server().await;
    let source = WithProcesses::new(Simulator::new(2, 300), |_, processes| {
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, PID) });
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, OTHER) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = proc_root;
    options.identity.pod_resources_socket = Some(socket);
    let kube = gpudash::telemetry::identity::kube::KubeApi::new(api, Some(TOKEN.into()), None, Duration::from_secs(2));
    options.identity.kube_api = Some(kube);
    let server = TestServer::with_options(Box::new(source), options).await;
    let p = process(&server, PID, "the pod's owner label", |p| p["owner"]["name"] == "cy").await;
    assert_eq!((&p["owner"]["source"], &p["workload"]["pod"]["owner"]), (&"pod_label".into(), &"cy".into()), "{p}");
    let o = process(&server, OTHER, "another pod's process", |p| p["owner"].is_object()).await;
    assert_eq!(o["workload"]["pod"]["uid"], "99999999-5f60-4a1b-8c9d-0e1f2a3b4c5d", "{o}");
    assert_eq!(o["workload"]["pod"]["name"], Value::Null, "not the pod the kubelet gave the GPU to: {o}");
    assert_ne!(o["owner"]["name"], "cy", "{o}");
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
    let socket = kubelet(dir.path(), vec![gpu0]);
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

/// The lab keeps off a GPU the kubelet gave to a pod, before the pod computes on it too: an
/// operator's force is refused, an admin's runs; a GPU given to no pod takes the same run.
#[tokio::test]
async fn the_lab_keeps_off_a_gpu_given_to_a_pod_unless_an_admin_forces() {
    const PID: u32 = 900_600;
    const OPERATOR: &str = "operator-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join(PID.to_string())).unwrap();
    let cgroup = format!(
        "0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{PID:064x}.scope\n"
    );
    std::fs::write(proc_root.join(PID.to_string()).join("cgroup"), cgroup).unwrap();
    let simulator = Simulator::new(3, 300);
    let given: Vec<String> = simulator.devices()[..2].iter().map(|d| d.uuid.clone()).collect();
    let socket = kubelet(dir.path(), given);
    // The pod computes on GPU 0 only (its process shows when the kubelet has answered); GPU 1 is
    // given to it and idle; GPU 2 is nobody's.
    let source = WithProcesses::new(simulator, |_, processes| {
        processes.push(GpuProcess { user: Some("root".into()), ..shared::testing::process(0, PID) });
    });
    let mut options = gpudash::Options::new(Duration::from_millis(300));
    options.identity.proc_root = proc_root;
    options.identity.pod_resources_socket = Some(socket);
    let tokens = format!("omar:operator:{OPERATOR},ada:admin:{ADMIN}");
    options.auth = gpudash::auth::AuthConfig::load(None, Some(&tokens)).unwrap();
    let server = TestServer::with_options(Box::new(source), options).await;
    let client = reqwest::Client::new();
    let h = |t: &str| format!("Bearer {t}");
    let pods: Value = {
        let url = server.url("/api/processes");
        let (client, auth) = (client.clone(), h(ADMIN));
        eventually(15, "the kubelet's answer", || async {
            let body: Value = client.get(&url).header("authorization", &auth).send().await.ok()?.json().await.ok()?;
            body["processes"].as_array()?.iter().find(|p| p["workload"]["pod"]["name"] == "bert-0").cloned()
        })
        .await
    };
    assert_eq!(pods["device"], 0, "{pods}");
    let submit = |token: &'static str, device: u32, force: bool| {
        let (client, url) = (client.clone(), server.url("/api/runs"));
        async move {
            let body = serde_json::json!({ "device": device, "params": { "kind": "latency", "repetitions": 10 }, "force": force });
            let answer = client.post(url).header("authorization", h(token)).json(&body).send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        }
    };
    for force in [false, true] {
        let (status, body) = submit(OPERATOR, 1, force).await;
        assert_eq!(status, 409, "an operator, force {force}: {body}");
        assert_eq!(
            body["error"],
            "refused: Kubernetes gave GPU 1 to pod ml/bert-0 (container train); the lab keeps off GPUs the scheduler \
             gave to others unless an admin forces the run",
            "{body}"
        );
    }
    let (status, body) = submit(ADMIN, 1, false).await;
    assert_eq!(status, 409, "an admin who does not force: {body}");
    let (status, body) = submit(ADMIN, 1, true).await;
    assert_eq!(status, 202, "an admin's force: {body}");
    assert_eq!(body["forced_by_admin"], true, "{body}");
    let notes = body["plan"]["notes"].to_string();
    assert!(
        notes.contains("Kubernetes gave GPU 1 to pod ml/bert-0") && notes.contains("forced by an admin"),
        "{notes}"
    );
    let (status, body) = submit(OPERATOR, 2, false).await;
    assert_eq!(status, 202, "a GPU given to no pod: {body}");
    server.stop().await;
}
