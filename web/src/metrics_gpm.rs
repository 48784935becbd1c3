//! `/metrics`' profiling families: dcgm-exporter's `DCGM_FI_PROF_*` names, help texts,
//! units (ratios 0-1, bytes per second) and labels, read from NVML's GPM rather than DCGM,
//! so dashboards and alerts written for dcgm-exporter work unchanged. A GPU whose GPM
//! figures are n/a has no such series.

use shared::DeviceSample;

use super::metrics_device::{DeviceMetric, gauge};

pub(super) const PROFILING_METRICS: &[DeviceMetric] = &[
    gauge(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active (averaged over 30 s: NVML computes it at 30 times the cost of the other figures).",
        |_, s| ratio(activity(s)?.gr_engine_active),
    ),
    gauge("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", |_, s| {
        ratio(activity(s)?.sm_active)
    }),
    gauge("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", |_, s| {
        ratio(activity(s)?.sm_occupancy)
    }),
    gauge("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", |_, s| {
        ratio(activity(s)?.tensor_active)
    }),
    gauge(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        |_, s| ratio(activity(s)?.dram_active),
    ),
    gauge("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active.", |_, s| {
        ratio(activity(s)?.fp64_active)
    }),
    gauge("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active.", |_, s| {
        ratio(activity(s)?.fp32_active)
    }),
    gauge("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active.", |_, s| {
        ratio(activity(s)?.fp16_active)
    }),
    gauge(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        |_, s| activity(s)?.pcie_tx_bytes_per_s.map(f64::round),
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        |_, s| activity(s)?.pcie_rx_bytes_per_s.map(f64::round),
    ),
    gauge(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
        |d, s| activity(s)?.nvlink_tx_bytes_per_s.filter(|_| d.nvlink_links > 0).map(f64::round),
    ),
    gauge(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
        |d, s| activity(s)?.nvlink_rx_bytes_per_s.filter(|_| d.nvlink_links > 0).map(f64::round),
    ),
];

/// A sample's GPM window, when it has figures.
fn activity(sample: &DeviceSample) -> Option<&shared::activity::Activity> {
    sample.activity.as_ref().filter(|a| a.unavailable.is_none())
}

/// GPM's percent as dcgm-exporter's ratio 0-1.
fn ratio(percent: Option<f64>) -> Option<f64> {
    percent.map(|p| (p / 100.0).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::super::metrics::render;
    use telemetry::GpuSource;
    use telemetry::simulator::Simulator;

    #[test]
    fn profiling_families_are_ratios_and_rates_and_left_out_where_na() {
        let sim = Simulator::new(8, 1000).with_idle_holder();
        let mut latest = sim.sample(1_000);
        let windows = sim.activity(1_000);
        for s in &mut latest {
            s.activity = windows.iter().find(|(i, _)| *i == s.index).map(|(_, a)| a.clone());
        }
        let mut processes = sim.details(1_000).processes;
        let since = telemetry::now_ms() - 90_000;
        let signal = shared::activity::IdleSignal::SmActivity;
        processes.iter_mut().filter(|p| p.device == 7).for_each(|p| {
            p.idle = Some(shared::activity::IdleHold { since_ms: since, signal });
        });
        let text = render("node-7", true, &sim.devices(), &latest, &[], &processes);
        assert!(
            text.contains("# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.\n")
        );
        assert!(text.contains("# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\n"));
        let value = |name: &str, gpu: u32| -> Option<f64> {
            let prefix = format!("{name}{{gpu=\"{gpu}\",UUID=");
            text.lines().find(|l| l.starts_with(&prefix))?.rsplit(' ').next()?.parse().ok()
        };
        let sm = value("DCGM_FI_PROF_SM_ACTIVE", 0).expect("GPU 0 busy");
        assert!(sm > 0.3 && sm <= 1.0, "a ratio, not percent: {sm}");
        assert!(value("DCGM_FI_PROF_PCIE_RX_BYTES", 0).unwrap() > 1e6, "bytes per second");
        assert!(value("DCGM_FI_PROF_NVLINK_TX_BYTES", 0).is_some(), "an H200 has links");
        // GPU 7 is an A100: GPM n/a, so no profiling series, while its other series stay.
        assert!(sim.devices()[7].name.contains("A100"));
        assert_eq!(value("DCGM_FI_PROF_SM_ACTIVE", 7), None);
        assert!(value("DCGM_FI_DEV_GPU_UTIL", 7).is_some());
        let idle = text.lines().find(|l| l.starts_with("gpudash_process_idle_seconds{gpu=\"7\"")).expect("{text}");
        let seconds: f64 = idle.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((90.0..100.0).contains(&seconds), "{idle}");
        assert!(!text.contains("gpudash_process_idle_seconds{gpu=\"0\""), "busy processes have no idle series");
    }
}
