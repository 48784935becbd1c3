//! NVML's GPM (GPU Performance Monitoring, Hopper and later): what the SMs really
//! did between two samples a second apart. Runs on the GPM loop's own thread only.
//!
//! Where GPM cannot be read (an older GPU, a driver that refuses, MIG on, profiling
//! held by another tool) every figure is n/a with the reason, logged once per change.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use shared::DeviceInfo;
use shared::activity::Activity;

use super::error_chain;
use super::meter::CallMeter;

/// NVML reports PCIe and NVLink rates in MiB/s (`nvml.h`, `NVML_GPM_METRIC_PCIE_TX_PER_SEC`).
const MIB: f64 = 1024.0 * 1024.0;

/// The figures read every window, in the order [`to_activity`] reads them back.
const METRICS: [GpmMetricId; 10] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::GraphicsUtil,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
];
/// Read besides [`METRICS`] on a GPU with NVLink links.
const NVLINK_METRICS: [GpmMetricId; 2] = [GpmMetricId::NvlinkTotalTxPerSec, GpmMetricId::NvlinkTotalRxPerSec];

/// How long a GPU's "can GPM be read here" answer (MIG off, GPM supported) is trusted before it is
/// asked again, and how long gpudash leaves GPM alone after another profiler (DCGM, Nsight) took it.
const RECHECK: Duration = Duration::from_secs(30);

/// One GPU's open window.
struct Open<'n> {
    sample: GpmSample<'n>,
    at_ms: u64,
}

/// Closes one GPM window per GPU each time [`GpmReader::step`] is called.
pub struct GpmReader<'n> {
    nvml: &'n Nvml,
    meter: std::sync::Arc<CallMeter>,
    devices: Vec<(u32, bool)>,
    open: HashMap<u32, Open<'n>>,
    /// What was last said about each GPU (`None`: readable), so a change is logged once.
    said: HashMap<u32, Option<String>>,
    /// Per GPU, when GPM was last found readable (MIG off, supported): asked again after [`RECHECK`].
    checked: HashMap<u32, Instant>,
    /// Per GPU, GPM held by another profiler: left alone until then, the reason repeated meanwhile.
    backoff: HashMap<u32, (Instant, String)>,
}

impl std::fmt::Debug for GpmReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpmReader").field("devices", &self.devices).finish_non_exhaustive()
    }
}

impl<'n> GpmReader<'n> {
    pub fn new(nvml: &'n Nvml, devices: &[DeviceInfo], meter: std::sync::Arc<CallMeter>) -> Self {
        let devices = devices.iter().map(|d| (d.index, d.nvlink_links > 0)).collect();
        Self {
            nvml,
            meter,
            devices,
            open: HashMap::new(),
            said: HashMap::new(),
            checked: HashMap::new(),
            backoff: HashMap::new(),
        }
    }

    /// Samples every GPU and returns the windows that closed (none on the first call).
    pub fn step(&mut self, now_ms: u64) -> Vec<(u32, Activity)> {
        let mut out = Vec::new();
        for (index, nvlink) in self.devices.clone() {
            let result = match self.backoff.get(&index) {
                Some((until, reason)) if Instant::now() < *until => Err(reason.clone()),
                _ => self.read(index, nvlink, now_ms),
            };
            self.say(index, result.as_ref().err());
            match result {
                Ok(Some(activity)) => out.push((index, activity)),
                Ok(None) => {}
                Err(reason) => {
                    self.open.remove(&index);
                    out.push((index, Activity::unavailable(now_ms, reason)));
                }
            }
        }
        out
    }

    /// Takes a new sample; with an open window, closes it into figures.
    fn read(&mut self, index: u32, nvlink: bool, now_ms: u64) -> Result<Option<Activity>, String> {
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|e| format!("GPU {index} does not answer: {}", error_chain(&e)))?;
        if self.checked.get(&index).is_none_or(|at| at.elapsed() >= RECHECK) {
            self.checked.remove(&index);
            if device.mig_mode().is_ok_and(|m| m.current == 1) {
                return Err("MIG is on: gpudash does not read activity per MIG instance yet".to_owned());
            }
            match device.gpm_support() {
                Ok(true) => {}
                Ok(false) | Err(NvmlError::NotSupported) => {
                    return Err("GPM needs a Hopper or newer GPU; this one does not support it".to_owned());
                }
                Err(e) => return Err(format!("the driver does not say whether GPM works: {}", error_chain(&e))),
            }
            self.checked.insert(index, Instant::now());
        }
        let sample = self.meter.time("GPM sample", || device.gpm_sample()).map_err(|e| self.refused(index, &e))?;
        let previous = self.open.insert(index, Open { sample, at_ms: now_ms });
        let (Some(previous), Some(current)) = (previous, self.open.get(&index)) else { return Ok(None) };
        let mut ids = METRICS.to_vec();
        if nvlink {
            ids.extend(NVLINK_METRICS);
        }
        let results = self
            .meter
            .time("GPM metrics (one call, all figures)", || {
                gpm_metrics_get(self.nvml, &previous.sample, &current.sample, &ids)
            })
            .map_err(|e| self.refused(index, &e))?;
        let values: Vec<Option<f64>> =
            results.into_iter().map(|r| r.ok().map(|m| m.value).filter(|v| v.is_finite())).collect();
        Ok(Some(to_activity(&values, now_ms, now_ms.saturating_sub(previous.at_ms))))
    }

    /// Logs a GPU's GPM state when it changes: once, not every window.
    fn say(&mut self, index: u32, reason: Option<&String>) {
        let now = reason.cloned();
        let before = self.said.insert(index, now.clone());
        match (before, now) {
            (Some(Some(old)), Some(new)) if old == new => {}
            (_, Some(reason)) => tracing::warn!(index, "SM and tensor activity are n/a: {reason}"),
            (Some(Some(_)), None) => tracing::info!(index, "SM and tensor activity readable again (GPM)"),
            (_, None) => {}
        }
    }
}

/// Figures in the order of [`METRICS`] then [`NVLINK_METRICS`]; NVML's percentages kept as percent.
fn to_activity(values: &[Option<f64>], now_ms: u64, window_ms: u64) -> Activity {
    let at = |i: usize| values.get(i).copied().flatten();
    let rate = |i: usize| at(i).map(|mib_per_s| mib_per_s * MIB);
    Activity {
        timestamp_ms: now_ms,
        window_ms,
        sm_active: at(0),
        sm_occupancy: at(1),
        tensor_active: at(2),
        dram_active: at(3),
        fp64_active: at(4),
        fp32_active: at(5),
        fp16_active: at(6),
        gr_engine_active: at(7),
        pcie_tx_bytes_per_s: rate(8),
        pcie_rx_bytes_per_s: rate(9),
        nvlink_tx_bytes_per_s: rate(10),
        nvlink_rx_bytes_per_s: rate(11),
        unavailable: None,
    }
}

impl GpmReader<'_> {
    /// Why NVML refused a sample, in words a user can act on. Held by another profiler, GPM is
    /// left alone for [`RECHECK`] rather than asked every window.
    fn refused(&mut self, index: u32, error: &NvmlError) -> String {
        let reason = refused(error);
        self.checked.remove(&index);
        if matches!(error, NvmlError::InUse) {
            self.backoff.insert(index, (Instant::now() + RECHECK, reason.clone()));
        }
        reason
    }
}

/// Why NVML refused a sample, in words a user can act on.
fn refused(error: &NvmlError) -> String {
    match error {
        NvmlError::NotSupported => "the driver does not support GPM on this GPU".to_owned(),
        NvmlError::NoPermission => "GPM needs more permission than gpudash has".to_owned(),
        NvmlError::InUse => "GPM is in use by another profiler (DCGM, Nsight): gpudash leaves it alone and asks \
                             again every 30 s"
            .to_owned(),
        other => format!("NVML refused a GPM sample: {}", error_chain(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_map_in_order_and_rates_become_bytes() {
        let mut values: Vec<Option<f64>> = (0..12).map(|i| Some(f64::from(i))).collect();
        values[2] = None;
        let a = to_activity(&values, 9, 1000);
        assert_eq!((a.sm_active, a.sm_occupancy, a.tensor_active), (Some(0.0), Some(1.0), None));
        assert_eq!(a.gr_engine_active, Some(7.0));
        assert_eq!(a.pcie_tx_bytes_per_s, Some(8.0 * MIB));
        assert_eq!(a.nvlink_rx_bytes_per_s, Some(11.0 * MIB));
        let no_links = to_activity(&values[..10], 9, 1000);
        assert_eq!(no_links.nvlink_tx_bytes_per_s, None);
    }
}
