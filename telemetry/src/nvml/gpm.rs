//! NVML's GPM (GPU Performance Monitoring, Hopper and later): what the SMs really
//! did between two samples a second apart. Runs on the GPM loop's own thread only.
//!
//! Where GPM cannot be read (an older GPU, a driver that refuses, MIG on, profiling
//! held by another tool) every figure is n/a with the reason, logged once per change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use shared::DeviceInfo;
use shared::activity::Activity;

use base::clock::Clock;

use super::lock;
use super::meter::CallMeter;

/// NVML reports PCIe and NVLink rates in MiB/s (`nvml.h`, `NVML_GPM_METRIC_PCIE_TX_PER_SEC`).
const MIB: f64 = 1024.0 * 1024.0;

/// The figures read every window, in the order [`to_activity`] reads them back. The graphics
/// engine's is not among them: alone it costs 2.0 ms of CPU per call where every other metric costs
/// about 0.06 ms (`tests/gpu/nvml_costs.py`, docs/runs/gpu/session13-diag.log), so it is read over
/// [`GRAPHICS_WINDOW_MS`] instead.
const METRICS: [GpmMetricId; 9] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
];
/// The graphics engine's activity (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`) is averaged over windows this long.
pub const GRAPHICS_WINDOW_MS: u64 = 30_000;
/// The slow loop takes a GPU's PCIe traffic from GPM while its last window closed this recently.
const PCIE_FRESH: Duration = Duration::from_secs(5);
/// Read besides [`METRICS`] on a GPU with NVLink links.
const NVLINK_METRICS: [GpmMetricId; 2] = [GpmMetricId::NvlinkTotalTxPerSec, GpmMetricId::NvlinkTotalRxPerSec];

/// How long gpudash leaves GPM alone after another profiler (DCGM, Nsight) took it.
const RECHECK: Duration = Duration::from_secs(30);
/// How long a GPU's "GPM is readable here" (MIG off, GPM supported) is trusted: MIG changes only
/// with a GPU reset, and asking costs ~2.6 ms of CPU on the H200 (MIG mode ~2.2 ms).
const READABLE_FOR: Duration = Duration::from_secs(300);

/// Each GPU's PCIe traffic (bytes/s sent, received) from its last GPM window, and when it closed:
/// shared with the slow loop, which then need not make NVML's 20 ms PCIe sampling calls.
#[derive(Debug, Clone, Default)]
pub struct GpmPcie {
    rates: Arc<Mutex<PcieRates>>,
    /// How fresh a window is.
    clock: Clock,
}

/// Per GPU: bytes/s sent, received, and when the window closed.
type PcieRates = HashMap<u32, (u64, u64, Instant)>;

impl GpmPcie {
    pub fn new(clock: Clock) -> Self {
        Self { rates: Arc::default(), clock }
    }

    fn set(&self, index: u32, tx: Option<f64>, rx: Option<f64>) {
        let mut rates = lock(&self.rates);
        match tx.zip(rx) {
            Some((tx, rx)) => rates.insert(index, (tx.round() as u64, rx.round() as u64, self.clock.now())),
            None => rates.remove(&index),
        };
    }

    /// A GPU's traffic from a window that closed within [`PCIE_FRESH`], if any.
    pub fn fresh(&self, index: u32) -> Option<(u64, u64)> {
        let now = self.clock.now();
        lock(&self.rates)
            .get(&index)
            .filter(|(_, _, at)| now.duration_since(*at) <= PCIE_FRESH)
            .map(|&(tx, rx, _)| (tx, rx))
    }
}

/// One GPU's open window.
struct Open<'n> {
    sample: GpmSample<'n>,
    at_ms: u64,
}

/// Closes one GPM window per GPU each time [`GpmReader::step`] is called.
pub struct GpmReader<'n> {
    nvml: &'n Nvml,
    meter: Arc<CallMeter>,
    devices: Vec<(u32, bool)>,
    open: HashMap<u32, Open<'n>>,
    /// What was last said about each GPU (`None`: readable), so a change is logged once.
    said: HashMap<u32, Option<String>>,
    /// Per GPU, when GPM was last found readable (MIG off, supported): asked again after [`READABLE_FOR`].
    checked: HashMap<u32, Instant>,
    /// Per GPU, GPM held by another profiler: left alone until then, the reason repeated meanwhile.
    backoff: HashMap<u32, (Instant, String)>,
    /// Per GPU, the sample that opened the graphics engine's long window.
    long: HashMap<u32, Open<'n>>,
    /// Per GPU, the graphics engine's activity over the last long window that closed.
    graphics: HashMap<u32, f64>,
    pcie: GpmPcie,
    /// When GPM is asked again (`checked`, `backoff`).
    clock: Clock,
}

impl std::fmt::Debug for GpmReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpmReader").field("devices", &self.devices).finish_non_exhaustive()
    }
}

impl<'n> GpmReader<'n> {
    pub fn new(nvml: &'n Nvml, devices: &[DeviceInfo], meter: Arc<CallMeter>, pcie: GpmPcie, clock: Clock) -> Self {
        let devices = devices.iter().map(|d| (d.index, d.nvlink_links > 0)).collect();
        Self {
            nvml,
            meter,
            devices,
            open: HashMap::new(),
            said: HashMap::new(),
            checked: HashMap::new(),
            backoff: HashMap::new(),
            long: HashMap::new(),
            graphics: HashMap::new(),
            pcie,
            clock,
        }
    }

    /// Samples every GPU and returns the windows that closed (none on the first call).
    pub fn step(&mut self, now_ms: u64) -> Vec<(u32, Activity)> {
        let mut out = Vec::new();
        for (index, nvlink) in self.devices.clone() {
            let result = match self.backoff.get(&index) {
                Some((until, reason)) if self.clock.now() < *until => Err(reason.clone()),
                _ => self.read(index, nvlink, now_ms),
            };
            self.say(index, result.as_ref().err());
            match result {
                Ok(Some(activity)) => out.push((index, activity)),
                Ok(None) => {}
                Err(reason) => {
                    self.open.remove(&index);
                    self.long.remove(&index);
                    self.graphics.remove(&index);
                    self.pcie.set(index, None, None);
                    out.push((index, Activity::unavailable(now_ms, reason)));
                }
            }
        }
        out
    }

    /// Takes a new sample; with an open window, closes it into figures.
    fn read(&mut self, index: u32, nvlink: bool, now_ms: u64) -> Result<Option<Activity>, String> {
        let device = self
            .meter
            .time("device_by_index", || self.nvml.device_by_index(index))
            .map_err(|e| format!("GPU {index} does not answer: {}", base::error::chain(&e)))?;
        if self.checked.get(&index).is_none_or(|at| self.clock.now().duration_since(*at) >= READABLE_FOR) {
            self.checked.remove(&index);
            if self.meter.time("MIG mode", || device.mig_mode()).is_ok_and(|m| m.current == 1) {
                return Err("MIG is on: gpudash does not read activity per MIG instance yet".to_owned());
            }
            match self.meter.time("GPM support", || device.gpm_support()) {
                Ok(true) => {}
                Ok(false) | Err(NvmlError::NotSupported) => {
                    return Err("GPM needs a Hopper or newer GPU; this one does not support it".to_owned());
                }
                Err(e) => return Err(format!("the driver does not say whether GPM works: {}", base::error::chain(&e))),
            }
            self.checked.insert(index, self.clock.now());
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
        let window_ms = now_ms.saturating_sub(previous.at_ms);
        let mut activity = to_activity(&values, now_ms, window_ms);
        self.pcie.set(index, activity.pcie_tx_bytes_per_s, activity.pcie_rx_bytes_per_s);
        activity.gr_engine_active = self.graphics_window(index, previous, now_ms);
        Ok(Some(activity))
    }

    /// The graphics engine's activity over the last [`GRAPHICS_WINDOW_MS`]: closes the long window
    /// when it is due, and opens the next one on `previous` (the short window's start, so one short
    /// window lies in both).
    fn graphics_window(&mut self, index: u32, previous: Open<'n>, now_ms: u64) -> Option<f64> {
        match self.long.remove(&index) {
            None => {
                self.long.insert(index, previous);
            }
            Some(start) if now_ms.saturating_sub(start.at_ms) < GRAPHICS_WINDOW_MS => {
                self.long.insert(index, start);
                self.meter.time("GPM sample free", || drop(previous));
            }
            Some(start) => {
                if let Some(current) = self.open.get(&index) {
                    let value = self
                        .meter
                        .time("GPM graphics engine (30 s window)", || {
                            gpm_metrics_get(self.nvml, &start.sample, &current.sample, &[GpmMetricId::GraphicsUtil])
                        })
                        .ok()
                        .and_then(|mut results| results.pop())
                        .and_then(|r| r.ok().map(|m| m.value))
                        .filter(|v| v.is_finite());
                    match value {
                        Some(value) => self.graphics.insert(index, value),
                        None => self.graphics.remove(&index),
                    };
                }
                self.long.insert(index, previous);
                self.meter.time("GPM sample free", || drop(start));
            }
        }
        self.graphics.get(&index).copied()
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
        gr_engine_active: None,
        pcie_tx_bytes_per_s: rate(7),
        pcie_rx_bytes_per_s: rate(8),
        nvlink_tx_bytes_per_s: rate(9),
        nvlink_rx_bytes_per_s: rate(10),
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
            self.backoff.insert(index, (self.clock.now() + RECHECK, reason.clone()));
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
        other => format!("NVML refused a GPM sample: {}", base::error::chain(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_map_in_order_and_rates_become_bytes() {
        let mut values: Vec<Option<f64>> = (0..11).map(|i| Some(f64::from(i))).collect();
        values[2] = None;
        let a = to_activity(&values, 9, 1000);
        assert_eq!((a.sm_active, a.sm_occupancy, a.tensor_active), (Some(0.0), Some(1.0), None));
        assert_eq!(a.gr_engine_active, None, "read over its own long window");
        assert_eq!(a.pcie_tx_bytes_per_s, Some(7.0 * MIB));
        assert_eq!(a.nvlink_rx_bytes_per_s, Some(10.0 * MIB));
        let no_links = to_activity(&values[..9], 9, 1000);
        assert_eq!(no_links.nvlink_tx_bytes_per_s, None);
    }
}
