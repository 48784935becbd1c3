//! Who holds a GPU, with real engines: a labelled Podman container (through Podman's
//! Docker-compatible API) and a job of a real single-node Slurm (the kubelet's side is in
//! `identity_pods.rs`). Each process is listed by the simulator (a `pid:` fault, or the test's own row), so CI covers
//! the real lookups without a GPU. Podman and Slurm need root, as CI has; tests/identity/ holds
//! the fixtures' scripts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fantoccini::Locator;
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
pub(crate) async fn process(server: &TestServer, pid: u32, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let url = server.url("/api/processes");
    eventually(30, what, || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        body["processes"].as_array()?.iter().find(|p| p["pid"] == pid && ready(p)).cloned()
    })
    .await
}

/// The `gpudash_process_memory_bytes` line of `pid`.
pub(crate) async fn metrics_line(server: &TestServer, pid: u32) -> String {
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
