//! Who holds a GPU: each GPU process's workload (container, Kubernetes pod, Slurm job) and its
//! owner by the one rule in `shared::workload`.
//!
//! A process is looked at once, when the slow loop first lists it, and cached by PID and start
//! time (a PID reused by a new container's process gets a fresh look). The first look reads only
//! `/proc` (the cgroup path and, for Slurm, the environment). What needs an API (a container's
//! name, image and labels from the engine; the pods holding GPUs from the kubelet) is asked on a
//! thread of its own, with a timeout, and lands in the cache for the next pass: a slow runtime
//! never delays the sampler. Every source is optional; a missing one is skipped quietly, a
//! broken one is named once (in `/healthz` and the page) and logged when it changes.

mod askers;
pub mod cgroup;
pub mod engine;
pub mod environ;
pub mod kube;
pub mod kubelet;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::workload::{Container, DEFAULT_OWNER_LABEL, Pod, ScheduledGpu, SlurmJob, Workload};

use self::engine::Engine;
use self::kubelet::GpuPods;
use base::clock::Clock;
use base::sync::lock;

/// Where gpudash finds who runs what (`--container-socket`, `--pod-resources-socket`, `--owner-label`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct IdentityArgs {
    /// The Docker Engine API's unix socket (Docker's, or Podman's `podman system service`), for
    /// containers' names, images and labels [default: /var/run/docker.sock, else
    /// /run/podman/podman.sock, when present]
    #[arg(long, env = "GPUDASH_CONTAINER_SOCKET", value_name = "PATH", value_parser = parse_socket)]
    pub container_socket: Option<PathBuf>,

    /// The kubelet's pod-resources socket, for the pod that holds each GPU
    /// [default: /var/lib/kubelet/pod-resources/kubelet.sock, when present]
    #[arg(long, env = "GPUDASH_POD_RESOURCES_SOCKET", value_name = "PATH", value_parser = parse_socket)]
    pub pod_resources_socket: Option<PathBuf>,

    /// The container label that names a container's owner (a person or a team): a root process in
    /// a container is owned by this label's value, else by "container NAME"
    #[arg(long, env = "GPUDASH_OWNER_LABEL", value_name = "LABEL", default_value = DEFAULT_OWNER_LABEL, value_parser = parse_label)]
    pub owner_label: String,
}

/// The identity sources, resolved from [`IdentityArgs`].
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The engine's socket; `None` when none was given and none of the usual ones exists.
    pub container_socket: Option<PathBuf>,
    pub pod_resources_socket: Option<PathBuf>,
    /// The Kubernetes API server, for pods' owner labels: found in a cluster; `Err` when it is
    /// there but cannot be used (named once, like a broken source).
    pub kube_api: Option<Result<kube::KubeApi, String>>,
    pub owner_label: String,
    /// The /proc to read (a fixture in tests).
    pub proc_root: PathBuf,
    /// Longest wait for an API's answer.
    pub timeout: Duration,
    /// When to ask again: the engine after a failure, the kubelet's pod list, a pod's owner.
    pub clock: Clock,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            container_socket: None,
            pod_resources_socket: None,
            kube_api: None,
            owner_label: DEFAULT_OWNER_LABEL.to_owned(),
            proc_root: PathBuf::from("/proc"),
            timeout: API_TIMEOUT,
            clock: Clock::system(),
        }
    }
}

impl IdentityConfig {
    pub fn from_args(args: &IdentityArgs) -> Self {
        let kubelet = Path::new(kubelet::DEFAULT_SOCKET);
        Self {
            container_socket: engine::find_socket(args.container_socket.as_deref()),
            pod_resources_socket: args
                .pod_resources_socket
                .clone()
                .or_else(|| kubelet.exists().then(|| kubelet.into())),
            kube_api: kube::KubeApi::in_cluster(API_TIMEOUT),
            owner_label: args.owner_label.clone(),
            ..Self::default()
        }
    }
}

/// Longest wait for the engine's or the kubelet's answer.
pub const API_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the kubelet is asked again while processes in pods are listed.
const PODS_REFRESH: Duration = Duration::from_secs(10);
/// After an engine fails, how long before a container is asked about again.
const ENGINE_RETRY: Duration = Duration::from_secs(30);
/// Questions waiting for the API thread; past it they wait for the next pass.
const QUEUE: usize = 256;

type Key = (u32, Option<u64>);

/// A broken source, named once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Engine,
    /// The engine's socket is not root's: its owner labels are not believed.
    EngineTrust,
    Kubelet,
    KubeApi,
    SlurmEnviron,
}

#[derive(Debug, Default)]
struct Entry {
    workload: Workload,
    /// The full container id and its runtime, until the engine has answered about it.
    container: Option<(String, Option<&'static str>)>,
    /// True while a question about it waits for the API thread.
    asked: bool,
}

#[derive(Debug, Default)]
struct Shared {
    cache: Mutex<HashMap<Key, Entry>>,
    pods: Mutex<GpuPods>,
    problems: Mutex<BTreeMap<Source, String>>,
    engine_retry: Mutex<Option<Instant>>,
    clock: Clock,
}

/// A container to ask the engine about: the process's key, the container's full id and runtime.
struct Inspect {
    key: Key,
    id: String,
    runtime: Option<&'static str>,
}

/// The workload cache and its API thread.
#[derive(Debug)]
pub struct Identities {
    owner_label: String,
    proc_root: PathBuf,
    kubelet: bool,
    /// GPU index → UUID, to find a GPU's pod.
    uuids: HashMap<u32, String>,
    shared: Arc<Shared>,
    /// The engine's thread and the kubelet's, each with its own queue: a hung engine delays no
    /// pod list, and the reverse.
    inspects: Option<SyncSender<Inspect>>,
    pod_lists: Option<SyncSender<()>>,
    last_pods_request: Mutex<Option<Instant>>,
}

impl Identities {
    /// Starts the API thread when an engine or a kubelet socket is configured.
    pub fn start(config: IdentityConfig, devices: &[shared::DeviceInfo]) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { clock: config.clock.clone(), ..Shared::default() });
        let kubelet = config.pod_resources_socket.is_some();
        let engine = config.container_socket.as_deref().map(|socket| Engine::new(socket, config.timeout));
        if let Some(Err(e)) = &engine {
            note(&shared, Source::Engine, Some(format!("the container engine cannot be asked: {e}")));
        }
        let engine = engine.and_then(Result::ok);
        if let Some(why) = engine.as_ref().and_then(Engine::distrust) {
            let problem = format!(
                "the container engine's socket is not root's ({why}): containers are named, their owner labels are not \
                 believed (processes are owned by their Unix user)"
            );
            note(&shared, Source::EngineTrust, Some(problem));
        }
        let kube_api = match config.kube_api {
            Some(Ok(api)) => Some(api),
            Some(Err(e)) => {
                note(&shared, Source::KubeApi, Some(format!("pods' owner labels cannot be read: {e}")));
                None
            }
            None => None,
        };
        let inspects = match engine {
            Some(engine) => {
                let (send, receive) = mpsc::sync_channel(QUEUE);
                let thread = askers::EngineThread {
                    shared: shared.clone(),
                    engine,
                    owner_label: config.owner_label.clone(),
                    proc_root: config.proc_root.clone(),
                };
                std::thread::Builder::new().name("gpudash-engine".into()).spawn(move || thread.run(&receive))?;
                Some(send)
            }
            None => None,
        };
        let pod_lists = match config.pod_resources_socket.clone() {
            Some(kubelet) => {
                let (send, receive) = mpsc::sync_channel(1);
                let thread = askers::PodsThread {
                    shared: shared.clone(),
                    kubelet,
                    kube_api,
                    pod_owners: HashMap::new(),
                    owner_label: config.owner_label.clone(),
                    timeout: config.timeout,
                };
                std::thread::Builder::new().name("gpudash-pods".into()).spawn(move || thread.run(&receive))?;
                Some(send)
            }
            None => None,
        };
        Ok(Self {
            owner_label: config.owner_label,
            proc_root: config.proc_root,
            kubelet,
            uuids: devices.iter().map(|d| (d.index, d.uuid.clone())).collect(),
            shared,
            inspects,
            pod_lists,
            last_pods_request: Mutex::new(None),
        })
    }

    /// Sets each process's workload and owner, and the slow loop's notices about broken sources.
    /// A process whose source already set its workload keeps it: the simulator sets one on every
    /// process it makes up (empty for "none"), as those PIDs are not this host's to read.
    pub fn attach(&self, details: &mut shared::Details) {
        let pods = lock(&self.shared.pods).clone();
        let mut seen = HashSet::with_capacity(details.processes.len());
        {
            let mut cache = lock(&self.shared.cache);
            for process in &mut details.processes {
                if process.workload.is_none() {
                    let key = (process.pid, process.started_ms);
                    seen.insert(key);
                    let entry =
                        cache.entry(key).or_insert_with(|| self.first_look(process.pid, process.user.as_deref()));
                    if let Some((id, runtime)) =
                        entry.container.as_ref().filter(|_| !entry.asked && self.engine_ready())
                    {
                        entry.asked = send(&self.inspects, Inspect { key, id: id.clone(), runtime: *runtime });
                    }
                    let mut workload = entry.workload.clone();
                    // The kubelet's GPU → pod map names only processes whose own cgroup is a pod's:
                    // a plain container's process on a GPU a pod was given is not that pod's.
                    // With the API server's UID for that pod, the cgroup's must be the same: a
                    // process of another pod on this GPU keeps its UID alone.
                    if let Some(cgroup) = &mut workload.pod
                        && let Some(pod) = self.uuids.get(&process.device).and_then(|uuid| pods.get(uuid))
                        && (pod.uid.is_none() || pod.uid == cgroup.uid)
                    {
                        *cgroup = Pod { uid: cgroup.uid.take(), ..pod.clone() };
                    }
                    process.workload = (workload != Workload::default()).then_some(workload);
                }
                if process.workload.as_ref().is_some_and(|w| *w == Workload::default()) {
                    process.workload = None;
                }
                process.apply_owner_rule(&self.owner_label);
            }
            cache.retain(|key, _| seen.contains(key));
        }
        // Asked while no pod computes too: a GPU given to a pod is its own before it starts (the lab
        // keeps off it), and one List per PODS_REFRESH is cheap next to the kubelet's own work.
        if self.kubelet {
            let mut last = lock(&self.last_pods_request);
            let now = self.shared.clock.now();
            if last.is_none_or(|t| now.duration_since(t) >= PODS_REFRESH) && send(&self.pod_lists, ()) {
                *last = Some(now);
            }
        }
        details.scheduled = scheduled(&self.uuids, &pods);
        details.workload_problems = self.problems();
    }

    /// Broken sources, one sentence each.
    pub fn problems(&self) -> Vec<String> {
        lock(&self.shared.problems).values().cloned().collect()
    }

    /// What `/proc` says of a new process: its cgroup's ids and its Slurm environment.
    fn first_look(&self, pid: u32, user: Option<&str>) -> Entry {
        let dir = self.proc_root.join(pid.to_string());
        let ids =
            std::fs::read(dir.join("cgroup")).map(|b| cgroup::parse(&String::from_utf8_lossy(&b))).unwrap_or_default();
        let mut entry = Entry::default();
        if let Some(id) = &ids.container {
            let short = id.chars().take(12).collect();
            entry.workload.container =
                Some(Container { id: short, runtime: ids.runtime.map(str::to_owned), ..Container::default() });
            entry.container = Some((id.clone(), ids.runtime));
        }
        if let Some(uid) = ids.pod_uid.clone() {
            entry.workload.pod = Some(Pod { uid: Some(uid), ..Pod::default() });
        }
        let uid = std::fs::read_to_string(dir.join("status")).ok().and_then(|status| super::procfs::uid(&status));
        entry.workload.job = match environ::slurm_job(&self.proc_root, pid) {
            Ok(claim) => slurm_job(claim, &ids, uid, user),
            Err(environ::EnvironError::PermissionDenied) => {
                if ids.slurm_job.is_some() {
                    let problem = "Slurm jobs' users, accounts and partitions need root to read /proc/PID/environ; \
                                   jobs are named by id only, and owned by their Unix user";
                    note(&self.shared, Source::SlurmEnviron, Some(problem.to_owned()));
                }
                slurm_job(None, &ids, uid, user)
            }
        };
        entry
    }

    /// Whether an engine is there to ask, and not pausing after a failure.
    fn engine_ready(&self) -> bool {
        self.inspects.is_some() && engine_ready(&self.shared)
    }
}

/// The GPUs the kubelet gave to pods, by index, in index order.
fn scheduled(uuids: &HashMap<u32, String>, pods: &GpuPods) -> Vec<ScheduledGpu> {
    let mut out: Vec<ScheduledGpu> =
        uuids.iter().filter_map(|(&index, uuid)| Some(ScheduledGpu { index, pod: pods.get(uuid)?.clone() })).collect();
    out.sort_by_key(|s| s.index);
    out
}

/// The engine is not pausing after a failure.
fn engine_ready(shared: &Shared) -> bool {
    lock(&shared.engine_retry).is_none_or(|t| shared.clock.now() >= t)
}

/// Queues a question for an API thread; false when none runs or its queue is full.
fn send<T>(queue: &Option<SyncSender<T>>, question: T) -> bool {
    queue.as_ref().is_some_and(|q| match q.try_send(question) {
        Ok(()) => true,
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
    })
}

/// The process's Slurm job: what its environment claims, verified only where Slurm itself placed
/// the process there (its cgroup, in Slurm's own layout, names the same job) and the job is the
/// process's own (`SLURM_JOB_UID`, and in v1 the cgroup's `uid_N`, equal its real `uid`, and
/// `SLURM_JOB_USER` is that uid's name, `user`: inside their own job a user can still rewrite
/// the name); else the claim is kept unverified and names no owner. Without a claim (an
/// environment gpudash may not read), the cgroup's job is named by id, verified, with no user.
fn slurm_job(
    claim: Option<environ::Claim>,
    ids: &cgroup::CgroupIds,
    uid: Option<u32>,
    user: Option<&str>,
) -> Option<SlurmJob> {
    // The job Slurm's cgroup names, by id: verified unless its v1 `uid_N` is another uid than the process's.
    let cgroup_job = || {
        let verified = ids.slurm_uid.is_none_or(|cgroup_uid| Some(cgroup_uid) == uid);
        ids.slurm_job.clone().map(|id| SlurmJob { id, verified, ..SlurmJob::default() })
    };
    let Some(environ::Claim { mut job, uid: job_uid }) = claim else {
        return cgroup_job();
    };
    let placed = ids.slurm_job.as_deref() == Some(job.id.as_str());
    if !placed && ids.slurm_job.is_some() {
        // Slurm placed it in another job than it claims: that job, by id, is the truth.
        return cgroup_job();
    }
    let own = uid.is_some()
        && job_uid == uid
        && ids.slurm_uid.is_none_or(|cgroup_uid| Some(cgroup_uid) == uid)
        && job.user.as_deref().is_none_or(|name| Some(name) == user);
    job.verified = placed && own;
    Some(job)
}

/// Records (or clears, with `None`) a source's problem, logging only when it changes.
fn note(shared: &Shared, source: Source, problem: Option<String>) {
    let mut problems = lock(&shared.problems);
    match problem {
        Some(problem) if problems.get(&source) != Some(&problem) => {
            tracing::warn!("{problem}");
            problems.insert(source, problem);
        }
        Some(_) => {}
        None => {
            if let Some(old) = problems.remove(&source) {
                tracing::info!("answers again (was: {old})");
            }
        }
    }
}

/// A socket path: absolute, at most 107 bytes (a unix socket address's limit).
fn parse_socket(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if !path.is_absolute() || value.len() > 107 || value.contains('\0') {
        return Err(format!(
            "'{value}' is not a socket path; give an absolute path of at most 107 bytes, e.g. /var/run/docker.sock"
        ));
    }
    Ok(path)
}

/// A label name: 1 to 128 of letters, digits and `._/-`.
fn parse_label(value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'));
    ok.then(|| value.to_owned()).ok_or_else(|| {
        format!("'{value}' is not a label name; use 1 to 128 letters, digits, '.', '_', '/' or '-', e.g. gpudash.user")
    })
}

#[cfg(test)]
mod tests;
