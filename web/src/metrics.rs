//! `GET /metrics`: Prometheus text format with dcgm-exporter's names and
//! labels (so Grafana dashboard 12239 and existing alerts work unchanged),
//! plus `gpudash_*` series for what dcgm-exporter lacks.
//!
//! Written by [`base::prom_text`], the server's one writer of the text format (it says why not
//! `prometheus-client`); the per-GPU families are a table (`metrics_device.rs`, `metrics_gpm.rs`).
//!
//! Per-process series carry `user` and `command` labels only for a scraper
//! that may see who runs what: with tokens configured and `metrics = "open"`,
//! an unauthenticated scrape gets them without those labels (`pid` stays, so
//! series stay apart), as anonymous viewers of the page do.

use std::fmt::Write as _;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use shared::health::DeviceHealth;
use shared::processes::GpuProcess;
use shared::{DeviceInfo, DeviceSample};

use super::AppState;
use super::api::{processes_for, visibility};
use super::auth::Caller;
use super::metrics_device::{DEVICE_METRICS, Read};
use super::metrics_gpm::PROFILING_METRICS;
use base::prom_text::{CONTENT_TYPE, Exposition, Kind, escape};

/// Clock-event reasons always exported (0 or 1), so alerts can match on any of them.
const CLOCK_EVENTS: [&str; 9] = shared::telemetry::CLOCK_EVENT_NAMES;

pub async fn metrics(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> impl IntoResponse {
    let telemetry = &state.telemetry;
    let details = telemetry.details();
    let processes = processes_for(&state, visibility(&state, caller.as_deref()));
    let mut text = render(
        &telemetry.host().hostname,
        telemetry.host().simulated,
        telemetry.devices(),
        &telemetry.latest(),
        &details.health,
        &processes,
    );
    let full = visibility(&state, caller.as_deref()) == super::Visibility::Full;
    let reserved = state.reservations.active(telemetry::now_ms());
    text.push_str(&reservation_family(&telemetry.host().hostname, telemetry.devices(), &reserved, full));
    let totals = state.usage.totals_for_export();
    text.push_str(&super::metrics_usage::families(&telemetry.host().hostname, &totals, &processes, full));
    text.push_str(&super::metrics_jobs::families(&telemetry.host().hostname, &state.jobs.running_for_metrics(), full));
    text.push_str(&team::alerts::deliver::metrics_text(&state.alerts.webhooks()));
    text.push_str(&state.notices.metrics_text());
    text.push_str(&store::writer_metrics_text());
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
}

/// One per-process metric family.
struct ProcessMetric {
    name: &'static str,
    help: &'static str,
    read: fn(&GpuProcess) -> Option<f64>,
}

const PROCESS_METRICS: &[ProcessMetric] = &[
    ProcessMetric {
        name: "gpudash_process_memory_bytes",
        help: "Device memory held by a process.",
        read: |p| p.used_memory.map(|b| b as f64),
    },
    ProcessMetric {
        name: "gpudash_process_idle_seconds",
        help: "How long a process has held memory on a GPU that computes nothing (only processes flagged idle).",
        read: |p| p.idle.map(|hold| telemetry::now_ms().saturating_sub(hold.since_ms) as f64 / 1000.0),
    },
    ProcessMetric {
        name: "gpudash_process_sm_utilization",
        help: "Percent of SM time a process used over the last window.",
        read: |p| p.sm_util.map(f64::from),
    },
];

/// One device's readings, joined for rendering.
struct Gpu<'a> {
    info: &'a DeviceInfo,
    labels: String,
    sample: Option<&'a DeviceSample>,
    health: Option<&'a DeviceHealth>,
}

impl Gpu<'_> {
    fn read(&self, read: Read) -> Option<f64> {
        match read {
            Read::Sample(value) => value(self.info, self.sample?),
            Read::Health(value) => value(self.health?),
            Read::Count(value) => value(self.health?).map(|v| v as f64),
        }
    }
}

/// The whole exposition for the current readings.
pub fn render(
    hostname: &str,
    simulated: bool,
    devices: &[DeviceInfo],
    latest: &[DeviceSample],
    health: &[DeviceHealth],
    processes: &[GpuProcess],
) -> String {
    let gpus: Vec<Gpu<'_>> = devices
        .iter()
        .map(|d| Gpu {
            info: d,
            labels: device_labels(d, hostname),
            sample: latest.iter().find(|s| s.index == d.index && s.lost.is_none()),
            health: health.iter().find(|h| h.index == d.index),
        })
        .collect();
    let mut out = Exposition::default();
    for metric in DEVICE_METRICS.iter().chain(PROFILING_METRICS) {
        let samples = gpus.iter().filter_map(|g| Some((g.labels.clone(), g.read(metric.read)?)));
        out.family(metric.name, metric.help, metric.kind, samples);
    }
    out.family(
        "gpudash_clock_event_active",
        "1 while the clock-event (throttle) reason holds clocks down.",
        Kind::Gauge,
        gpus.iter().filter_map(|g| g.sample?.clock_events.as_ref().map(|active| (g, active))).flat_map(
            |(g, active)| {
                CLOCK_EVENTS.iter().map(move |reason| {
                    (
                        format!("{},reason=\"{reason}\"", g.labels),
                        f64::from(u8::from(active.iter().any(|a| a == reason))),
                    )
                })
            },
        ),
    );
    out.family(
        "gpudash_device_lost",
        "1 when the GPU stopped answering (lost, fallen off the bus).",
        Kind::Gauge,
        gpus.iter().map(|g| {
            let lost = latest.iter().any(|s| s.index == g.info.index && s.lost.is_some());
            (g.labels.clone(), f64::from(u8::from(lost)))
        }),
    );
    for metric in PROCESS_METRICS {
        let samples = processes.iter().filter_map(|p| Some((process_labels(p, &gpus), (metric.read)(p)?)));
        out.family(metric.name, metric.help, Kind::Gauge, samples);
    }
    let host = format!("Hostname=\"{}\"", escape(hostname));
    out.family(
        "gpudash_simulated",
        "1 when every figure on this instance comes from the simulator, not hardware.",
        Kind::Gauge,
        std::iter::once((host.clone(), f64::from(u8::from(simulated)))),
    );
    out.family(
        "gpudash_info",
        "gpudash version serving these metrics.",
        Kind::Gauge,
        std::iter::once((format!("{host},version=\"{}\"", env!("CARGO_PKG_VERSION")), 1.0)),
    );
    out.into_text()
}

/// `gpudash_reservation_active`: 1 per GPU reserved now, with its holder (`user="reserved"` for a
/// scraper that may not see names); the Fleet view reads it.
fn reservation_family(
    hostname: &str,
    devices: &[DeviceInfo],
    reserved: &[shared::reservations::Reservation],
    names: bool,
) -> String {
    let mut out = Exposition::default();
    let samples = devices.iter().filter_map(|d| {
        let r = reserved.iter().find(|r| r.devices.contains(&d.index))?;
        let user = if names { r.user.as_str() } else { shared::reservations::Reservation::SOMEONE };
        Some((format!("{},user=\"{}\"", device_labels(d, hostname), escape(user)), 1.0))
    });
    out.family(
        "gpudash_reservation_active",
        "1 while the GPU is reserved (advisory, not enforced), with the holder in `user`.",
        Kind::Gauge,
        samples,
    );
    out.into_text()
}

/// A process's labels: its GPU's, its pid, and who runs what unless redacted: `user` is its owner
/// by the owner rule, `unix_user` the Unix user, and its workload in dcgm-exporter's label names
/// (`container`, `pod`, `namespace`, `hpc_job`), each only when it has one. They ride on the
/// per-process series alone, never on device series.
fn process_labels(p: &GpuProcess, gpus: &[Gpu<'_>]) -> String {
    let device = gpus.iter().find(|g| g.info.index == p.device).map(|g| g.labels.as_str()).unwrap_or_default();
    if p.redacted {
        return format!("{device},pid=\"{}\"", p.pid);
    }
    let mut labels = format!(
        "{device},pid=\"{}\",user=\"{}\",unix_user=\"{}\",command=\"{}\"",
        p.pid,
        escape(p.user_name()),
        escape(p.user.as_deref().unwrap_or("unknown")),
        escape(p.name.as_deref().unwrap_or("unknown"))
    );
    if let Some(w) = &p.workload {
        let pod = w.pod.as_ref();
        let container = pod.and_then(|p| p.container.as_deref()).or(w.container.as_ref().map(|c| c.shown_name()));
        for (name, value) in [
            ("container", container),
            ("pod", pod.and_then(|p| p.name.as_deref())),
            ("namespace", pod.and_then(|p| p.namespace.as_deref())),
            ("hpc_job", shared::workload::verified_job(w).map(|j| j.id.as_str())),
        ] {
            if let Some(value) = value {
                let _ = write!(labels, ",{name}=\"{}\"", escape(value));
            }
        }
    }
    labels
}

/// dcgm-exporter's label set for one GPU.
fn device_labels(d: &DeviceInfo, hostname: &str) -> String {
    format!(
        "gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"",
        d.index,
        escape(&d.uuid),
        escape(&d.pci_bus_id),
        d.index,
        escape(&d.name),
        escape(hostname)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_device::MIB;
    use telemetry::GpuSource;
    use telemetry::simulator::Simulator;

    #[test]
    fn dcgm_names_and_labels_are_exact() {
        let sim = Simulator::new(2, 1000);
        let latest = sim.sample(1_000);
        let details = sim.details(1_000);
        let text = render("node-7", true, &sim.devices(), &latest, &details.health, &details.processes);
        let line = text.lines().find(|l| l.starts_with("DCGM_FI_DEV_FB_USED{")).unwrap();
        assert!(
            line.starts_with(
                "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-5140da5b-0000-4000-8000-000000000000\",\
                 pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H200 (simulated)\",Hostname=\"node-7\"} "
            ),
            "{line}"
        );
        assert!(text.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
        assert!(text.contains("gpudash_simulated{Hostname=\"node-7\"} 1\n"));
        assert!(text.lines().any(|l| l.starts_with("gpudash_process_memory_bytes{gpu=\"0\"") && l.contains("user=\"")));
        assert_eq!(text.matches("gpudash_clock_event_active{gpu=\"1\"").count(), CLOCK_EVENTS.len());
    }

    #[test]
    fn redacted_processes_export_load_without_user_or_command() {
        let sim = Simulator::new(2, 1000);
        let latest = sim.sample(1_000);
        let mut processes = sim.details(1_000).processes;
        let user = processes[0].user.clone().unwrap();
        shared::processes::redact_all(&mut processes);
        let text = render("h", true, &sim.devices(), &latest, &[], &processes);
        let line = text.lines().find(|l| l.starts_with("gpudash_process_memory_bytes{")).unwrap();
        assert!(line.contains(&format!("pid=\"{}\"}}", processes[0].pid)), "{line}");
        assert!(
            !text.contains("user=") && !text.contains("command=") && !text.contains(&format!("\"{user}\"")),
            "{text}"
        );
    }

    #[test]
    fn processes_carry_their_owner_and_workload_in_dcgm_exporter_label_names() {
        use shared::workload::{Pod, SlurmJob, Workload};
        let sim = Simulator::new(1, 1000);
        let latest = sim.sample(1_000);
        let mut p = shared::testing::process(0, 42);
        p.used_memory = Some(1 << 30);
        p.user = Some("root".into());
        p.workload = Some(Workload {
            pod: Some(Pod {
                namespace: Some("ml".into()),
                name: Some("bert-0".into()),
                container: Some("train".into()),
                uid: None,
                owner: None,
            }),
            job: Some(SlurmJob { id: "4242".into(), verified: true, ..SlurmJob::default() }),
            ..Workload::default()
        });
        p.apply_owner_rule(shared::workload::DEFAULT_OWNER_LABEL);
        let text = render("h", false, &sim.devices(), &latest, &[], &[p]);
        let line = text.lines().find(|l| l.starts_with("gpudash_process_memory_bytes{")).unwrap();
        for label in [
            "user=\"ml\"",
            "unix_user=\"root\"",
            "container=\"train\"",
            "pod=\"bert-0\"",
            "namespace=\"ml\"",
            "hpc_job=\"4242\"",
        ] {
            assert!(line.contains(label), "{label} missing: {line}");
        }
        assert!(
            !text.lines().filter(|l| l.starts_with("DCGM_")).any(|l| l.contains("pod=")),
            "device series stay lean"
        );
    }

    #[test]
    fn a_lost_gpu_exports_only_that_it_is_lost() {
        let sim = Simulator::new(2, 1000).with_fault("lost:0@0s".parse().unwrap());
        let latest = sim.sample(1_000);
        let text = render("h", true, &sim.devices(), &latest, &[], &[]);
        assert!(!text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""));
        assert!(text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""));
        assert!(text.lines().any(|l| l.starts_with("gpudash_device_lost{gpu=\"0\"") && l.ends_with(" 1")));
    }

    #[test]
    fn every_family_name_is_unique_and_help_is_set() {
        let devices = || DEVICE_METRICS.iter().chain(PROFILING_METRICS);
        let mut names: Vec<&str> = devices().map(|m| m.name).chain(PROCESS_METRICS.iter().map(|m| m.name)).collect();
        assert!(devices().all(|m| !m.help.is_empty()));
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total);
    }

    #[test]
    fn reserved_memory_is_what_used_and_free_leave_out() {
        let device = DeviceInfo { memory_total: 10 * MIB as u64, ..Simulator::new(1, 1000).devices().remove(0) };
        let sample =
            DeviceSample { memory_used: Some(6 * MIB as u64), memory_free: Some(3 * MIB as u64), ..Default::default() };
        let reserved = DEVICE_METRICS.iter().find(|m| m.name == "DCGM_FI_DEV_FB_RESERVED").unwrap();
        let Read::Sample(read) = reserved.read else { panic!("reserved memory reads the sample") };
        assert_eq!(read(&device, &sample), Some(1.0));
    }
}
