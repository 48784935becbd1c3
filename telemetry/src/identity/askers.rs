//! The threads that ask the container engine, and the kubelet with the API server, each on its own
//! queue and runtime: a hung engine (every inspection waits out its timeout) delays no pod list,
//! and an engine that failed is left alone for [`ENGINE_RETRY`], queued questions included.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::engine::{Engine, Inspected};
use super::kubelet::{self, GpuPods};
use super::{ENGINE_RETRY, Inspect, Key, PODS_REFRESH, Shared, Source, cgroup, engine_ready, kube, note};
use base::sync::lock;

/// How long a pod's UID and owner from the API server are kept before they are asked again.
const POD_FACTS_KEPT: Duration = Duration::from_secs(60);

/// A current-thread runtime for one asker; `None` (named once) when it cannot start.
fn runtime(shared: &Shared, source: Source) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            note(shared, source, Some(format!("workload identity cannot start: {e}")));
            None
        }
    }
}

/// Asks the engine about containers, one at a time.
pub(super) struct EngineThread {
    pub shared: Arc<Shared>,
    pub engine: Engine,
    pub owner_label: String,
    /// The /proc to read, to check a process is in the container it names.
    pub proc_root: PathBuf,
}

impl EngineThread {
    pub fn run(self, inspects: &Receiver<Inspect>) {
        let Some(runtime) = runtime(&self.shared, Source::Engine) else { return };
        while let Ok(Inspect { key, id, runtime: kind }) = inspects.recv() {
            if engine_ready(&self.shared) {
                runtime.block_on(self.inspect(key, &id, kind));
            } else if let Some(entry) = lock(&self.shared.cache).get_mut(&key) {
                // Pausing after a failure: asked again once the pause is over.
                entry.asked = false;
            }
        }
    }

    async fn inspect(&self, key: Key, id: &str, kind: Option<&'static str>) {
        match self.engine.inspect(id, kind, &self.owner_label).await {
            Ok(answer) => {
                note(&self.shared, Source::Engine, None);
                // Outside the cache's lock: reading /proc takes a while.
                let found = match answer {
                    Inspected::Found(container, main) if in_container(&self.proc_root, key.0, main, id) => {
                        Some(Some(container))
                    }
                    // A process whose cgroup names a container it is not in (a folder a user made with
                    // that id): it is in no container gpudash can name.
                    Inspected::Found(..) => Some(None),
                    Inspected::Unknown => None,
                };
                if let Some(entry) = lock(&self.shared.cache).get_mut(&key) {
                    entry.container = None;
                    if let Some(container) = found {
                        entry.workload.container = container;
                    }
                }
            }
            Err(e) => {
                *lock(&self.shared.engine_retry) = Some(self.shared.clock.now() + ENGINE_RETRY);
                let socket = self.engine.socket().display();
                let problem =
                    format!("the container engine at {socket} does not answer ({e}): containers show by id only");
                note(&self.shared, Source::Engine, Some(problem));
                if let Some(entry) = lock(&self.shared.cache).get_mut(&key) {
                    entry.asked = false;
                }
            }
        }
    }
}

/// Whether process `pid` is in container `id` whose main process the engine says is `main`: its
/// cgroup is the main process's, or below it (`cgroup::within`).
fn in_container(proc_root: &Path, pid: u32, main: u32, id: &str) -> bool {
    let read = |pid: u32| std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok();
    match (main, read(pid), read(main)) {
        (0, ..) => false,
        (_, Some(process), Some(main)) => cgroup::within(&process, &main, id),
        _ => false,
    }
}

/// Asks the kubelet which pods hold GPUs, and the API server for their owner labels.
pub(super) struct PodsThread {
    pub shared: Arc<Shared>,
    pub kubelet: PathBuf,
    pub kube_api: Option<kube::KubeApi>,
    /// Each listed pod's owner label or annotation, asked once per pod (`namespace`, `name`).
    /// Each listed pod's UID and owner, asked once per pod and again after [`POD_FACTS_KEPT`] (a
    /// pod deleted and made again under its name has a new UID).
    pub pod_owners: HashMap<(String, String), (Instant, Option<kube::PodFacts>)>,
    pub owner_label: String,
    pub timeout: Duration,
}

impl PodsThread {
    pub fn run(mut self, lists: &Receiver<()>) {
        let Some(runtime) = runtime(&self.shared, Source::Kubelet) else { return };
        loop {
            match lists.recv_timeout(PODS_REFRESH * 3) {
                Ok(()) => runtime.block_on(self.list_pods()),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    async fn list_pods(&mut self) {
        match kubelet::gpu_pods(&self.kubelet, self.timeout).await {
            Ok(mut pods) => {
                note(&self.shared, Source::Kubelet, None);
                self.pod_owners_of(&mut pods).await;
                *lock(&self.shared.pods) = pods;
            }
            Err(e) => {
                let problem = format!(
                    "the kubelet's pod-resources API at {} does not answer ({e}): pods show by UID only",
                    self.kubelet.display()
                );
                note(&self.shared, Source::Kubelet, Some(problem));
            }
        }
    }

    /// Sets each pod's owner label or annotation, asking the API server once per pod.
    async fn pod_owners_of(&mut self, pods: &mut GpuPods) {
        let Some(api) = &self.kube_api else { return };
        let listed: HashSet<(String, String)> =
            pods.values().filter_map(|p| Some((p.namespace.clone()?, p.name.clone()?))).collect();
        let now = self.shared.clock.now();
        self.pod_owners.retain(|key, (asked, _)| listed.contains(key) && now.duration_since(*asked) < POD_FACTS_KEPT);
        for key in listed {
            if self.pod_owners.contains_key(&key) {
                continue;
            }
            match api.pod_facts(&key.0, &key.1, &self.owner_label).await {
                Ok(facts) => {
                    note(&self.shared, Source::KubeApi, None);
                    self.pod_owners.insert(key, (self.shared.clock.now(), facts));
                }
                Err(e) => {
                    let problem = format!(
                        "the Kubernetes API server does not tell pods' owner labels ({e}): pods are owned by their namespace"
                    );
                    note(&self.shared, Source::KubeApi, Some(problem));
                    break;
                }
            }
        }
        for pod in pods.values_mut() {
            let key = pod.namespace.clone().zip(pod.name.clone());
            let facts = key.and_then(|k| self.pod_owners.get(&k)).and_then(|(_, facts)| facts.clone());
            let facts = facts.unwrap_or_default();
            (pod.owner, pod.uid) = (facts.owner, facts.uid);
        }
    }
}
