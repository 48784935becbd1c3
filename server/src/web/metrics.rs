//! `GET /metrics`: Prometheus text format with dcgm-exporter's names and
//! labels (so Grafana dashboard 12239 and existing alerts work unchanged),
//! plus `gpudash_*` series for what dcgm-exporter lacks.
//!
//! Written by hand rather than through `prometheus-client`: that crate emits
//! OpenMetrics and appends `_total` to counters, which would rename
//! dcgm-exporter's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` and break the very
//! dashboards this endpoint exists for.
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

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const MIB: f64 = 1024.0 * 1024.0;

/// Clock-event reasons always exported (0 or 1), so alerts can match on any of them.
const CLOCK_EVENTS: [&str; 9] = [
    "idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
];

pub async fn metrics(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> impl IntoResponse {
    let telemetry = &state.telemetry;
    let details = telemetry.details();
    let processes = processes_for(&state, visibility(&state, caller.as_deref()));
    let text = render(
        &telemetry.host().hostname,
        telemetry.host().simulated,
        telemetry.devices(),
        &telemetry.latest(),
        &details.health,
        &processes,
    );
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
}

/// One device's readings, joined for rendering.
struct Gpu<'a> {
    labels: String,
    sample: Option<&'a DeviceSample>,
    health: Option<&'a DeviceHealth>,
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
            labels: device_labels(d, hostname),
            sample: latest.iter().find(|s| s.index == d.index && s.lost.is_none()),
            health: health.iter().find(|h| h.index == d.index),
        })
        .collect();
    let mut out = Exposition::default();

    let gauge = |out: &mut Exposition, name: &str, help: &str, value: &dyn Fn(&DeviceSample) -> Option<f64>| {
        out.family(name, help, "gauge", gpus.iter().filter_map(|g| Some((g.labels.clone(), value(g.sample?)?))));
    };
    gauge(&mut out, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", &|s| s.gpu_util.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", &|s| s.mem_util.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", &|s| s.encoder_util.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", &|s| s.decoder_util.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", &|s| {
        s.memory_used.map(|b| (b as f64 / MIB).round())
    });
    gauge(&mut out, "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", &|s| {
        s.memory_free.map(|b| (b as f64 / MIB).round())
    });
    let totals: Vec<u64> = devices.iter().map(|d| d.memory_total).collect();
    out.family(
        "DCGM_FI_DEV_FB_RESERVED",
        "Framebuffer memory reserved (in MiB).",
        "gauge",
        gpus.iter().zip(&totals).filter_map(|(g, total)| {
            let s = g.sample?;
            let reserved = total.checked_sub(s.memory_used? + s.memory_free?)?;
            Some((g.labels.clone(), (reserved as f64 / MIB).round()))
        }),
    );
    gauge(&mut out, "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", &|s| s.temperature_c.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", &|s| s.power_draw_mw.map(watts));
    gauge(&mut out, "DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", &|s| s.power_limit_mw.map(watts));
    gauge(&mut out, "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", &|s| s.sm_clock_mhz.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", &|s| s.mem_clock_mhz.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_PSTATE", "Performance state (P-State) 0-15. 0=highest.", &|s| s.pstate.map(f64::from));
    gauge(&mut out, "DCGM_FI_DEV_FAN_SPEED", "Fan speed (in 0-100%).", &|s| {
        s.fan_speeds.as_ref()?.first().copied().map(f64::from)
    });
    gauge(&mut out, "DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation.", &|s| {
        s.pcie_link.map(|l| f64::from(l.generation))
    });
    gauge(&mut out, "DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width.", &|s| {
        s.pcie_link.map(|l| f64::from(l.width))
    });

    let health_metric =
        |out: &mut Exposition, name: &str, help: &str, kind: &str, value: &dyn Fn(&DeviceHealth) -> Option<f64>| {
            out.family(name, help, kind, gpus.iter().filter_map(|g| Some((g.labels.clone(), value(g.health?)?))));
        };
    let count = |v: Option<u64>| v.map(|v| v as f64);
    health_metric(
        &mut out,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "counter",
        &|h| count(h.energy_mj),
    );
    health_metric(&mut out, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "counter", &|h| {
        count(h.pcie_replays)
    });
    health_metric(&mut out, "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge", &|h| {
        Some(h.xids.last().map_or(0.0, |x| x.code as f64))
    });
    health_metric(
        &mut out,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        "counter",
        &|h| count(h.ecc_volatile.corrected),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        "counter",
        &|h| count(h.ecc_volatile.uncorrected),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
        "counter",
        &|h| count(h.ecc_aggregate.corrected),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
        "counter",
        &|h| count(h.ecc_aggregate.uncorrected),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_RETIRED_SBE",
        "Total number of retired pages due to single-bit errors.",
        "counter",
        &|h| count(h.retired_pages.single_bit),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_RETIRED_DBE",
        "Total number of retired pages due to double-bit errors.",
        "counter",
        &|h| count(h.retired_pages.double_bit),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_RETIRED_PENDING",
        "Total number of pages pending retirement.",
        "gauge",
        &|h| h.retired_pages.pending.map(f64::from),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        "counter",
        &|h| count(h.remapped_rows.correctable),
    );
    health_metric(
        &mut out,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        "counter",
        &|h| count(h.remapped_rows.uncorrectable),
    );
    health_metric(&mut out, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", "gauge", &|h| {
        h.remapped_rows.failed.map(f64::from)
    });
    health_metric(&mut out, "DCGM_FI_DEV_BAR1_USED", "Used BAR1 (in MiB).", "gauge", &|h| {
        h.bar1_used.map(|b| (b as f64 / MIB).round())
    });

    health_metric(
        &mut out,
        "gpudash_pcie_tx_bytes_per_second",
        "PCIe transmit throughput over NVML's 20 ms window.",
        "gauge",
        &|h| count(h.pcie_tx_bytes_per_s),
    );
    health_metric(
        &mut out,
        "gpudash_pcie_rx_bytes_per_second",
        "PCIe receive throughput over NVML's 20 ms window.",
        "gauge",
        &|h| count(h.pcie_rx_bytes_per_s),
    );
    health_metric(&mut out, "gpudash_nvlink_active_links", "NVLink links up.", "gauge", &|h| {
        (!h.nvlinks.is_empty()).then(|| h.nvlinks.iter().filter(|l| l.active).count() as f64)
    });
    out.family(
        "gpudash_clock_event_active",
        "1 while the clock-event (throttle) reason holds clocks down.",
        "gauge",
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
        "gauge",
        devices.iter().map(|d| {
            let lost = latest.iter().any(|s| s.index == d.index && s.lost.is_some());
            (device_labels(d, hostname), f64::from(u8::from(lost)))
        }),
    );
    let process_labels = |p: &GpuProcess| {
        let device =
            devices.iter().find(|d| d.index == p.device).map(|d| device_labels(d, hostname)).unwrap_or_default();
        if p.redacted {
            return format!("{device},pid=\"{}\"", p.pid);
        }
        format!(
            "{device},pid=\"{}\",user=\"{}\",command=\"{}\"",
            p.pid,
            escape(p.user.as_deref().unwrap_or("unknown")),
            escape(p.name.as_deref().unwrap_or("unknown"))
        )
    };
    out.family(
        "gpudash_process_memory_bytes",
        "Device memory held by a process.",
        "gauge",
        processes.iter().filter_map(|p| Some((process_labels(p), p.used_memory? as f64))),
    );
    out.family(
        "gpudash_process_sm_utilization",
        "Percent of SM time a process used over the last window.",
        "gauge",
        processes.iter().filter_map(|p| Some((process_labels(p), f64::from(p.sm_util?)))),
    );
    out.family(
        "gpudash_simulated",
        "1 when every figure on this instance comes from the simulator, not hardware.",
        "gauge",
        std::iter::once((format!("Hostname=\"{}\"", escape(hostname)), f64::from(u8::from(simulated)))),
    );
    out.family(
        "gpudash_info",
        "gpudash version serving these metrics.",
        "gauge",
        std::iter::once((format!("Hostname=\"{}\",version=\"{}\"", escape(hostname), env!("CARGO_PKG_VERSION")), 1.0)),
    );
    out.text
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

fn watts(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric family; families without samples are left out.
    fn family(&mut self, name: &str, help: &str, kind: &str, samples: impl Iterator<Item = (String, f64)>) {
        let mut samples = samples.peekable();
        if samples.peek().is_none() {
            return;
        }
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.text, "{name}{{{labels}}} {value}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::GpuSource;
    use crate::telemetry::simulator::Simulator;

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
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
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
}
