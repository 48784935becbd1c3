//! The fleet model: which PromQL queries to ask (one per metric, for the whole
//! fleet), and how their answers join into nodes and GPUs by (instance, gpu).
//!
//! Pure: the answers come in as [`Answers`], so the join is tested without a Prometheus.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use shared::fleet::{FleetChoices, FleetGpu, FleetNode, FleetSummary, FleetUser, NodeKind};
use shared::usability::{is_free, unhealthy};

use super::client::Series;
use super::usable;

const MIB: f64 = 1024.0 * 1024.0;

/// What one refresh asks Prometheus, one query each, all evaluated at the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Query {
    /// `up`: did the last scrape of each target succeed.
    Up,
    /// When each target last scraped well (a subquery over the window, to its 1 s step).
    LastSeen,
    GpuUtil,
    FbUsed,
    FbFree,
    FbReserved,
    Temperature,
    Power,
    /// The instant (not `last_over_time`) presence of each GPU's series: absent once stale.
    Present,
    /// `gpudash_info`: which nodes are gpudash, their version and host name.
    Info,
    Simulated,
    Lost,
    /// Per-process memory (gpudash only), instant: ended processes drop out at once.
    Processes,
    /// `gpudash_reservation_active` (gpudash only), instant: a released reservation drops out at once.
    Reserved,
    /// What is wrong with each GPU (recent XIDs, ECC, remaps, clock events), one series per fault.
    Faults,
}

impl Query {
    pub const ALL: [Self; 15] = [
        Self::Up,
        Self::LastSeen,
        Self::GpuUtil,
        Self::FbUsed,
        Self::FbFree,
        Self::FbReserved,
        Self::Temperature,
        Self::Power,
        Self::Present,
        Self::Info,
        Self::Simulated,
        Self::Lost,
        Self::Processes,
        Self::Reserved,
        Self::Faults,
    ];

    /// The PromQL for a window of `window` (how long a silent node's last figures are kept).
    pub fn promql(self, window: Duration) -> String {
        self.promql_for(window, "")
    }

    /// The PromQL for a window of `window` over the targets `matcher` selects (e.g.
    /// `instance="gpu-07:7070"`; empty: the whole fleet).
    pub fn promql_for(self, window: Duration, matcher: &str) -> String {
        let w = format!("{}s", window.as_secs().max(60));
        let sel = |metric: &str| if matcher.is_empty() { metric.to_owned() } else { format!("{metric}{{{matcher}}}") };
        let last = |metric: &str| format!("last_over_time({}[{w}])", sel(metric));
        match self {
            Self::Up => sel("up"),
            Self::LastSeen => format!("max_over_time(timestamp({} == 1)[{w}:1s])", sel("up")),
            Self::GpuUtil => last("DCGM_FI_DEV_GPU_UTIL"),
            Self::FbUsed => last("DCGM_FI_DEV_FB_USED"),
            Self::FbFree => last("DCGM_FI_DEV_FB_FREE"),
            Self::FbReserved => last("DCGM_FI_DEV_FB_RESERVED"),
            Self::Temperature => last("DCGM_FI_DEV_GPU_TEMP"),
            Self::Power => last("DCGM_FI_DEV_POWER_USAGE"),
            Self::Present => format!("timestamp({})", sel("DCGM_FI_DEV_FB_USED")),
            Self::Info => last("gpudash_info"),
            Self::Simulated => last("gpudash_simulated"),
            Self::Lost => last("gpudash_device_lost"),
            Self::Processes => sel("gpudash_process_memory_bytes"),
            Self::Reserved => sel("gpudash_reservation_active"),
            Self::Faults => usable::promql(&w, &sel, false),
        }
    }
}

/// Every query's answer.
pub type Answers = HashMap<Query, Vec<Series>>;

/// Nodes and GPUs, joined and ordered (before filters).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetView {
    pub nodes: Vec<FleetNode>,
    pub gpus: Vec<FleetGpu>,
    pub summary: FleetSummary,
    pub choices: FleetChoices,
}

type GpuKey = (String, u32);

/// Per (instance, gpu), the series of one metric; several when labels changed within the window.
fn by_gpu(series: &[Series]) -> HashMap<GpuKey, Vec<&Series>> {
    let mut out: HashMap<GpuKey, Vec<&Series>> = HashMap::new();
    for s in series {
        if let (Some(instance), Some(gpu)) = (s.label("instance"), s.label("gpu").and_then(|g| g.parse().ok())) {
            out.entry((instance.to_owned(), gpu)).or_default().push(s);
        }
    }
    out
}

fn by_instance(series: &[Series]) -> HashMap<&str, &Series> {
    series.iter().filter_map(|s| Some((s.label("instance")?, s))).collect()
}

/// Per-process memory and process count, per user, per GPU.
type ProcessesByGpu = HashMap<GpuKey, BTreeMap<String, (u64, u32)>>;

/// The metrics read per GPU.
const GPU_METRICS: [Query; 7] =
    [Query::FbUsed, Query::GpuUtil, Query::Temperature, Query::Power, Query::FbFree, Query::FbReserved, Query::Lost];

/// The answers indexed by instance or by (instance, gpu), for the join.
struct Indexed<'a> {
    up: HashMap<&'a str, &'a Series>,
    last_seen: HashMap<&'a str, &'a Series>,
    info: HashMap<&'a str, &'a Series>,
    simulated: HashMap<&'a str, &'a Series>,
    present: HashMap<GpuKey, Vec<&'a Series>>,
    metrics: HashMap<Query, HashMap<GpuKey, Vec<&'a Series>>>,
    processes: ProcessesByGpu,
    reserved: HashMap<GpuKey, Vec<&'a Series>>,
    faults: HashMap<GpuKey, Vec<&'a Series>>,
}

impl<'a> Indexed<'a> {
    fn new(answers: &'a Answers) -> Self {
        let get = |q: Query| answers.get(&q).map_or(&[][..], Vec::as_slice);
        Indexed {
            up: by_instance(get(Query::Up)),
            last_seen: by_instance(get(Query::LastSeen)),
            info: by_instance(get(Query::Info)),
            simulated: by_instance(get(Query::Simulated)),
            present: by_gpu(get(Query::Present)),
            metrics: GPU_METRICS.into_iter().map(|q| (q, by_gpu(get(q)))).collect(),
            processes: processes_by_gpu(get(Query::Processes)),
            reserved: by_gpu(get(Query::Reserved)),
            faults: by_gpu(get(Query::Faults)),
        }
    }

    /// Every GPU with a series of any metric.
    fn keys(&self) -> BTreeSet<GpuKey> {
        self.metrics.values().flat_map(|m| m.keys().cloned()).collect()
    }

    /// The current label set of a GPU, when its series are live: it decides between
    /// series whose labels changed within the window (e.g. a pod label came or went).
    fn current(&self, key: &GpuKey) -> Option<&'a BTreeMap<String, String>> {
        self.present.get(key).and_then(|s| s.first()).map(|s| &s.labels)
    }

    /// A GPU's series of one metric: the one with the current labels, else the latest.
    fn pick(&self, q: Query, key: &GpuKey) -> Option<&'a Series> {
        let candidates = self.metrics.get(&q)?.get(key)?;
        self.current(key)
            .and_then(|labels| candidates.iter().find(|s| &s.labels == labels))
            .or_else(|| candidates.last())
            .copied()
    }

    fn value(&self, q: Query, key: &GpuKey) -> Option<f64> {
        self.pick(q, key).map(|s| s.value)
    }

    /// A MiB gauge as bytes.
    fn bytes(&self, q: Query, key: &GpuKey) -> Option<u64> {
        self.value(q, key).map(|v| (v.max(0.0) * MIB) as u64)
    }
}

/// Joins the answers into the fleet.
pub fn join(answers: &Answers) -> FleetView {
    let index = Indexed::new(answers);
    let keys = index.keys();
    let mut instances: BTreeSet<String> = keys.iter().map(|(i, _)| i.clone()).collect();
    instances.extend(index.info.keys().map(|i| (*i).to_owned()));

    let mut nodes: Vec<FleetNode> = instances.iter().map(|instance| node(&index, &keys, instance)).collect();
    let node_of: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.instance.clone(), i)).collect();
    let mut gpus: Vec<FleetGpu> = keys.iter().map(|key| gpu(&index, &nodes[node_of[&key.0]], key)).collect();
    gpus.sort_by(|a, b| {
        let group = |g: &FleetGpu| if g.stale || g.lost { 2 } else { u8::from(!g.free) };
        (group(a), &a.hostname, &a.instance, a.gpu).cmp(&(group(b), &b.hostname, &b.instance, b.gpu))
    });
    for gpu in &gpus {
        let node = &mut nodes[node_of[&gpu.instance]];
        node.gpus += 1;
        node.free_gpus += u32::from(gpu.free);
    }
    nodes.sort_by(|a, b| (&a.hostname, &a.instance).cmp(&(&b.hostname, &b.instance)));
    let summary = FleetSummary {
        nodes: nodes.len() as u32,
        stale_nodes: nodes.iter().filter(|n| n.stale).count() as u32,
        gpus: gpus.len() as u32,
        free_gpus: gpus.iter().filter(|g| g.free).count() as u32,
        ..FleetSummary::default()
    };
    let choices = choices(&nodes, &gpus);
    FleetView { nodes, gpus, summary, choices }
}

/// Sums per-process memory into users, per GPU.
fn processes_by_gpu(series: &[Series]) -> ProcessesByGpu {
    let mut processes = ProcessesByGpu::new();
    for (key, series) in by_gpu(series) {
        let users = processes.entry(key).or_default();
        for s in series {
            let entry = users.entry(s.label("user").unwrap_or("unknown").to_owned()).or_default();
            entry.0 += s.value.max(0.0) as u64;
            // A sweep's series is a sum over a user's processes, carrying their count.
            entry.1 += s.label("processes").and_then(|n| n.parse().ok()).unwrap_or(1);
        }
    }
    processes
}

/// One scrape target, before its GPUs are counted.
fn node(index: &Indexed<'_>, keys: &BTreeSet<GpuKey>, instance: &str) -> FleetNode {
    let info = index.info.get(instance).copied();
    let any_series = keys.iter().find(|(i, _)| i == instance).and_then(|k| index.pick(Query::FbUsed, k));
    let hostname = info
        .and_then(|s| s.label("Hostname"))
        .or_else(|| any_series.and_then(|s| s.label("Hostname").or_else(|| s.label("hostname"))))
        .map_or_else(|| host_of(instance).to_owned(), str::to_owned);
    let up_now = index.up.get(instance).map(|s| s.value >= 1.0);
    let has_gpus = keys.iter().any(|(i, _)| i == instance);
    let any_present = index.present.keys().any(|(i, _)| i == instance);
    FleetNode {
        instance: instance.to_owned(),
        job: info.or(any_series).and_then(|s| s.label("job")).unwrap_or_default().to_owned(),
        hostname,
        kind: if info.is_some() { NodeKind::Gpudash } else { NodeKind::DcgmExporter },
        version: info.and_then(|s| s.label("version")).map(str::to_owned),
        url: info.map(|_| format!("http://{instance}/")),
        simulated: index.simulated.get(instance).is_some_and(|s| s.value >= 1.0),
        up: up_now,
        stale: up_now != Some(true) || (has_gpus && !any_present),
        last_seen_ms: index.last_seen.get(instance).map(|s| (s.value * 1000.0) as u64),
        last_error: None,
        ..FleetNode::default()
    }
}

/// One GPU of `node`, with its figures, users and whether it is free.
fn gpu(index: &Indexed<'_>, node: &FleetNode, key: &GpuKey) -> FleetGpu {
    let labels = index.current(key).or_else(|| {
        [Query::FbUsed, Query::GpuUtil, Query::Temperature, Query::Power, Query::Lost]
            .into_iter()
            .find_map(|q| index.pick(q, key))
            .map(|s| &s.labels)
    });
    let label = |name: &str| labels.and_then(|l| l.get(name)).filter(|v| !v.is_empty()).cloned();
    let lost = index.value(Query::Lost, key).is_some_and(|v| v >= 1.0);
    let stale = node.stale || (!lost && !index.present.contains_key(key));
    let memory_used = index.bytes(Query::FbUsed, key);
    let memory_total = match (memory_used, index.bytes(Query::FbFree, key)) {
        (Some(used), Some(free)) => Some(used + free + index.bytes(Query::FbReserved, key).unwrap_or(0)),
        _ => None,
    };
    let users = users_of(node, key, &index.processes, stale, labels);
    let gpu_util = index.value(Query::GpuUtil, key);
    let reserved_by = index.reserved.get(key).and_then(|s| s.first()).map(|s| s.label("user").unwrap_or("reserved"));
    let condition = usable::condition(lost, index.faults.get(key).map_or(&[][..], Vec::as_slice));
    let held = usable::held(stale, users.as_deref(), memory_used, memory_total, gpu_util);
    let free = is_free(&condition, held, reserved_by.is_some());
    FleetGpu {
        instance: key.0.clone(),
        hostname: node.hostname.clone(),
        gpu: key.1,
        uuid: label("UUID"),
        model: label("modelName"),
        gpu_util,
        memory_used,
        memory_total,
        temperature_c: index.value(Query::Temperature, key),
        power_w: index.value(Query::Power, key),
        users,
        free,
        unhealthy: unhealthy(&condition),
        reserved_by: reserved_by.map(str::to_owned),
        stale,
        lost,
        simulated: node.simulated,
    }
}

/// The values the page's filters offer, sorted and without repeats.
fn choices(nodes: &[FleetNode], gpus: &[FleetGpu]) -> FleetChoices {
    let sorted = |values: BTreeSet<String>| values.into_iter().collect::<Vec<_>>();
    FleetChoices {
        hosts: sorted(nodes.iter().map(|n| n.hostname.clone()).collect()),
        models: sorted(gpus.iter().filter_map(|g| g.model.clone()).collect()),
        users: sorted(gpus.iter().flat_map(|g| g.users.iter().flatten().map(|u| u.user.clone())).collect()),
    }
}

/// Who holds a GPU: gpudash's per-process series; for dcgm-exporter on Kubernetes,
/// the pod it is assigned to; otherwise unknown (`None`).
fn users_of(
    node: &FleetNode,
    key: &GpuKey,
    processes: &ProcessesByGpu,
    stale: bool,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<Vec<FleetUser>> {
    if stale {
        return None;
    }
    if node.kind == NodeKind::Gpudash {
        let mut users: Vec<FleetUser> = processes
            .get(key)
            .into_iter()
            .flatten()
            .map(|(user, (memory, count))| FleetUser { user: user.clone(), memory: Some(*memory), processes: *count })
            .collect();
        users.sort_by(|a, b| b.memory.cmp(&a.memory).then_with(|| a.user.cmp(&b.user)));
        return Some(users);
    }
    let label = |names: [&str; 2]| names.iter().find_map(|n| labels?.get(*n).filter(|v| !v.is_empty()));
    let pod = label(["pod", "exported_pod"])?;
    let user = match label(["namespace", "exported_namespace"]) {
        Some(namespace) => format!("{namespace}/{pod}"),
        None => pod.clone(),
    };
    Some(vec![FleetUser { user, memory: None, processes: 1 }])
}

/// "gpu-07:9400" → "gpu-07"; "[::1]:9400" → "[::1]".
pub(super) fn host_of(instance: &str) -> &str {
    match instance.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.is_empty() => host,
        _ => instance,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series { labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(), value }
    }

    fn gpu_labels<'a>(instance: &'a str, gpu: &'a str, host: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![("instance", instance), ("job", "gpus"), ("gpu", gpu), ("modelName", "NVIDIA H200"), ("Hostname", host)]
    }

    /// Two gpudash nodes (a: GPU 0 used by ana, GPU 1 free; b: stale) and one dcgm-exporter node.
    fn answers() -> Answers {
        let mut a = Answers::new();
        let a0 = gpu_labels("a:7070", "0", "node-a");
        let a1 = gpu_labels("a:7070", "1", "node-a");
        let b0 = gpu_labels("b:7070", "0", "node-b");
        let d0 = gpu_labels("d:9400", "0", "node-d");
        a.insert(
            Query::Up,
            vec![
                series(&[("instance", "a:7070")], 1.0),
                series(&[("instance", "b:7070")], 0.0),
                series(&[("instance", "d:9400")], 1.0),
                series(&[("instance", "prometheus:9090")], 1.0),
            ],
        );
        a.insert(Query::LastSeen, vec![series(&[("instance", "b:7070")], 1_700_000_000.0)]);
        a.insert(Query::FbUsed, vec![series(&a0, 40_000.0), series(&a1, 0.0), series(&b0, 10.0), series(&d0, 100.0)]);
        a.insert(
            Query::FbFree,
            vec![series(&a0, 100_000.0), series(&a1, 140_000.0), series(&b0, 1.0), series(&d0, 80_000.0)],
        );
        a.insert(Query::GpuUtil, vec![series(&a0, 97.0), series(&a1, 0.0), series(&d0, 0.0)]);
        a.insert(Query::Present, vec![series(&a0, 1.0), series(&a1, 1.0), series(&d0, 1.0)]);
        let info = |i: &'static str, h: &'static str| {
            series(&[("instance", i), ("job", "gpus"), ("Hostname", h), ("version", "0.1.0")], 1.0)
        };
        a.insert(Query::Info, vec![info("a:7070", "node-a"), info("b:7070", "node-b")]);
        let mut p = a0.clone();
        p.extend([("user", "ana"), ("pid", "1")]);
        let mut q = a0.clone();
        q.extend([("user", "ana"), ("pid", "2")]);
        a.insert(Query::Processes, vec![series(&p, 1e9), series(&q, 2e9)]);
        a
    }

    #[test]
    fn a_reserved_gpu_is_not_free_and_names_its_holder() {
        let mut a = answers();
        let mut reserved = gpu_labels("a:7070", "1", "node-a");
        reserved.push(("user", "bo"));
        a.insert(Query::Reserved, vec![series(&reserved, 1.0)]);
        let view = join(&a);
        let gpu = view.gpus.iter().find(|g| g.instance == "a:7070" && g.gpu == 1).unwrap();
        assert_eq!((gpu.free, gpu.reserved_by.as_deref(), view.summary.free_gpus), (false, Some("bo"), 1));
    }

    #[test]
    fn joins_nodes_and_gpus_free_first() {
        let view = join(&answers());
        let hosts: Vec<&str> = view.nodes.iter().map(|n| n.hostname.as_str()).collect();
        assert_eq!(hosts, ["node-a", "node-b", "node-d"], "targets without GPU series are not nodes");
        let order: Vec<(&str, u32, bool, bool)> =
            view.gpus.iter().map(|g| (g.hostname.as_str(), g.gpu, g.free, g.stale)).collect();
        assert_eq!(
            order,
            [
                ("node-a", 1, true, false),
                ("node-d", 0, true, false),
                ("node-a", 0, false, false),
                ("node-b", 0, false, true)
            ]
        );
        let busy = &view.gpus[2];
        assert_eq!(
            busy.users.as_ref().unwrap(),
            &[FleetUser { user: "ana".to_owned(), memory: Some(3_000_000_000), processes: 2 }]
        );
        assert_eq!(busy.memory_used, Some(40_000 * 1024 * 1024));
        assert_eq!(busy.memory_total, Some(140_000 * 1024 * 1024));
        assert_eq!(view.gpus[0].users, Some(vec![]), "a gpudash GPU without processes has nobody on it");
        assert_eq!(view.gpus[1].users, None, "dcgm-exporter cannot tell who uses a GPU");
        let a = &view.nodes[0];
        assert_eq!((a.kind, a.url.as_deref(), a.gpus, a.free_gpus), (NodeKind::Gpudash, Some("http://a:7070/"), 2, 1));
        let b = &view.nodes[1];
        assert!(b.stale && b.up == Some(false));
        assert_eq!(b.last_seen_ms, Some(1_700_000_000_000));
        assert_eq!(view.nodes[2].kind, NodeKind::DcgmExporter);
        assert_eq!(
            view.summary,
            FleetSummary { nodes: 3, stale_nodes: 1, gpus: 4, free_gpus: 2, ..FleetSummary::default() }
        );
        assert_eq!(view.choices.users, ["ana"]);
    }

    #[test]
    fn a_gpu_whose_series_stopped_is_stale_though_its_node_answers() {
        let mut a = answers();
        a.get_mut(&Query::Present)
            .unwrap()
            .retain(|s| s.label("gpu") != Some("1") || s.label("instance") != Some("a:7070"));
        let view = join(&a);
        let a1 = view.gpus.iter().find(|g| g.instance == "a:7070" && g.gpu == 1).unwrap();
        assert!(a1.stale && !a1.free && a1.users.is_none());
        assert!(!view.nodes[0].stale, "the node still has live series");
    }

    #[test]
    fn pods_are_users_on_kubernetes() {
        let mut a = answers();
        let mut labels = gpu_labels("d:9400", "0", "node-d");
        labels.extend([("pod", "train-0"), ("namespace", "ml")]);
        a.insert(Query::Present, vec![series(&labels, 1.0)]);
        a.get_mut(&Query::FbUsed).unwrap().push(series(&labels, 70_000.0));
        let view = join(&a);
        let d = view.gpus.iter().find(|g| g.instance == "d:9400").unwrap();
        assert_eq!(d.users.as_ref().unwrap()[0].user, "ml/train-0");
        assert_eq!(d.memory_used, Some(70_000 * 1024 * 1024), "the live series wins over the one that ended");
        assert!(!d.free);
    }

    #[test]
    fn processes_sum_per_user_per_gpu() {
        let mut labels = gpu_labels("a:7070", "0", "node-a");
        labels.push(("user", "ana"));
        let mut other = gpu_labels("a:7070", "0", "node-a");
        other.push(("user", "bo"));
        let sums = processes_by_gpu(&[series(&labels, 1e9), series(&labels, 2e9), series(&other, -5.0)]);
        let users = &sums[&("a:7070".to_owned(), 0)];
        assert_eq!(users["ana"], (3_000_000_000, 2));
        assert_eq!(users["bo"], (0, 1), "a negative reading counts as no memory");
    }

    #[test]
    fn host_names_fall_back_to_the_instance() {
        assert_eq!(host_of("gpu-07:9400"), "gpu-07");
        assert_eq!(host_of("[::1]:9400"), "[::1]");
        assert_eq!(host_of("gpu-07"), "gpu-07");
    }
}
