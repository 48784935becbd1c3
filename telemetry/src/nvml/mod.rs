//! The real source: NVIDIA's management library through `nvml-wrapper`.
//!
//! `libnvidia-ml.so.1` is loaded at run time, so the same binary starts on a
//! machine without the driver and says why it shows no GPUs. Unsupported
//! fields are `None`; a GPU that answers "lost" is marked lost while the
//! others keep being sampled.

mod energy;
mod gpm;
mod health;
mod info;
pub mod meter;
mod processes;
mod profile;
mod query;
mod xid;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use shared::{Details, DeviceInfo, DeviceSample, HostInfo, PcieLink};

use self::energy::EnergyEstimate;
pub use self::gpm::{GpmPcie, GpmReader};
pub use self::info::clock_event_names;
use self::info::{pstate_number, read_info};
pub use self::query::NvmlQuery;
use super::procfs::ProcReader;
use super::{ActivitySink, GpuReadings, GpuSource, XidSink};
use base::sync::lock;

/// A lost GPU is probed again this often; probing a lost GPU can be slow.
const LOST_RETRY: Duration = Duration::from_secs(30);

/// GPUs read through NVML.
pub struct NvmlSource {
    nvml: Arc<Nvml>,
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    fans: HashMap<u32, u32>,
    /// Counts each call's cost while a benchmark asks (`gpudash-bench sampler --breakdown`).
    meter: Arc<meter::CallMeter>,
    /// Fields that already failed with an unexpected error, so each is logged once.
    reported: Mutex<HashSet<(u32, &'static str)>>,
    /// GPUs that answered "lost", with the reason and when they were last probed.
    lost: Mutex<HashMap<u32, (String, Instant)>>,
    /// When to read again: a lost GPU, the health facts, per-process use, GPM's checks and back-off.
    clock: base::clock::Clock,
    /// Per GPU, the per-process SM use last read, and when.
    process_use: Mutex<HashMap<u32, processes::ProcessUse>>,
    /// Fields too slow for the fast loop, refreshed by the slow one.
    slow_fields: Mutex<HashMap<u32, SlowFields>>,
    /// Each GPU's health facts as last read ([`health::FACTS_PERIOD`]).
    facts: Mutex<HashMap<u32, health::Facts>>,
    /// GPUs whose facts are read again on the next pass: an XID was reported, or the GPU answers again.
    facts_due: Arc<Mutex<HashSet<u32>>>,
    /// Each GPU's energy: the counter read every 30 s, the power draw integrated between.
    energy: Mutex<HashMap<u32, EnergyEstimate>>,
    /// Each GPU's PCIe traffic from its last GPM window, so the slow loop need not ask NVML's
    /// 20 ms sampling calls while GPM reads it.
    gpm_pcie: GpmPcie,
    proc: ProcReader,
}

/// Gauges the fast loop serves but the slow loop reads: they change rarely or slowly, and each NVML
/// call costs more than a tick should (`gpudash-bench loops` prints each call's cost).
#[derive(Debug, Clone, Default)]
struct SlowFields {
    /// Read with the facts (every 30 s).
    power_limit_mw: Option<u32>,
    enforced_power_limit_mw: Option<u32>,
    pcie_width: Option<u32>,
    /// Read on every slow pass (every 2 s).
    mem_clock_mhz: Option<u32>,
    graphics_clock_mhz: Option<u32>,
    pcie_generation: Option<u32>,
    encoder_util: Option<u32>,
    decoder_util: Option<u32>,
    fan_speeds: Option<Vec<u32>>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").field("devices", &self.devices.len()).finish_non_exhaustive()
    }
}

/// Why NVML cannot be read; each message carries NVML's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The library did not load or initialise (no driver, or a mismatched one).
    #[error("{0}")]
    Load(String),
    #[error("NVML could not count GPUs: {0}")]
    Count(String),
}

impl NvmlSource {
    /// Loads NVML and reads every device's static facts.
    ///
    /// Fails with the loader's message when there is no usable driver.
    pub fn open(interval_ms: u64) -> Result<Self, OpenError> {
        let nvml = Nvml::init().map_err(|e| OpenError::Load(base::error::chain(&e)))?;
        let count = nvml.device_count().map_err(|e| OpenError::Count(base::error::chain(&e)))?;
        let mut devices = Vec::new();
        let mut fans = HashMap::new();
        for index in 0..count {
            match read_info(&nvml, index) {
                Ok((info, fan_count)) => {
                    fans.insert(index, fan_count);
                    devices.push(info);
                }
                // A GPU that cannot even be named is left out, the others are shown.
                Err(e) => tracing::warn!(index, "skipping GPU: {}", base::error::chain(&e)),
            }
        }
        let host = HostInfo {
            hostname: super::hostname(),
            driver_version: nvml.sys_driver_version().ok(),
            cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(cuda_version),
            simulated: false,
            gpu_error: (devices.is_empty()).then(|| "NVML found no NVIDIA GPU on this machine".to_owned()),
            interval_ms,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            history: false,
        };
        // One clock for every re-read (a lost GPU, the facts, per-process use, GPM's checks and windows).
        let clock = base::clock::Clock::system();
        let source = Self {
            nvml: Arc::new(nvml),
            host,
            devices,
            fans,
            meter: Arc::default(),
            reported: Mutex::new(HashSet::new()),
            lost: Mutex::new(HashMap::new()),
            clock: clock.clone(),
            process_use: Mutex::new(HashMap::new()),
            slow_fields: Mutex::new(HashMap::new()),
            facts: Mutex::new(HashMap::new()),
            facts_due: Arc::default(),
            energy: Mutex::new(HashMap::new()),
            gpm_pcie: GpmPcie::new(clock),
            proc: ProcReader::new("/proc"),
        };
        for info in &source.devices {
            if let Ok(device) = source.nvml.device_by_index(info.index) {
                source.refresh_slow_fields(info.index, &device, true);
            }
        }
        Ok(source)
    }

    /// On-demand readings over this source's NVML handle (it outlives the source).
    pub fn query(&self) -> NvmlQuery {
        NvmlQuery::new(self.nvml.clone())
    }

    /// A reader of GPM windows over this source's NVML handle (the GPM loop's, or a benchmark's).
    pub fn gpm_reader(&self) -> GpmReader<'_> {
        GpmReader::new(&self.nvml, &self.devices, self.meter.clone(), self.gpm_pcie.clone(), self.clock.clone())
    }

    /// The meter of this source's NVML calls (off until a benchmark turns it on).
    pub fn meter(&self) -> Arc<meter::CallMeter> {
        self.meter.clone()
    }

    /// Makes one NVML call (metered), unwrapped as [`Self::field`] does.
    fn read<T>(&self, index: u32, name: &'static str, call: impl FnOnce() -> Result<T, NvmlError>) -> Option<T> {
        let result = self.meter.time(name, call);
        self.field(index, name, result)
    }

    /// Unwraps a reading; unsupported fields are `None` quietly, other errors once in the log.
    fn field<T>(&self, index: u32, name: &'static str, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::NotSupported | NvmlError::NoPermission) => None,
            Err(e) => {
                if lock(&self.reported).insert((index, name)) {
                    tracing::warn!(index, field = name, "NVML read failed: {}", base::error::chain(&e));
                }
                None
            }
        }
    }

    /// The device's handle, unless it is lost (then `Err` carries the reason).
    fn handle(&self, index: u32) -> Result<Device<'_>, String> {
        if let Some((reason, probed)) = lock(&self.lost).get(&index)
            && self.clock.now().duration_since(*probed) < LOST_RETRY
        {
            return Err(reason.clone());
        }
        self.meter
            .time("device_by_index", || self.nvml.device_by_index(index))
            .map_err(|e| self.check_lost(index, &e).unwrap_or_else(|| base::error::chain(&e)))
    }

    /// Marks the GPU lost when `error` says so, and returns why.
    fn check_lost(&self, index: u32, error: &NvmlError) -> Option<String> {
        if !is_lost(error) {
            return None;
        }
        let reason = format!("GPU {index} is lost: {}", base::error::chain(error));
        let mut lost = lock(&self.lost);
        if !lost.contains_key(&index) {
            tracing::error!("{reason}; the other GPUs keep being sampled");
        }
        lost.insert(index, (reason.clone(), self.clock.now()));
        Some(reason)
    }

    /// Clears the lost mark of a GPU that answered.
    fn answered(&self, index: u32) {
        let mut lost = lock(&self.lost);
        if lost.remove(&index).is_some() {
            lock(&self.facts_due).insert(index);
            tracing::warn!(index, "GPU answers again");
        }
    }

    fn sample_device(&self, index: u32, timestamp_ms: u64) -> DeviceSample {
        let mut s = DeviceSample { index, timestamp_ms, ..DeviceSample::default() };
        let device = match self.handle(index) {
            Ok(device) => device,
            Err(reason) => {
                s.lost = Some(reason);
                return s;
            }
        };
        // Memory first: it is the reading that tells a lost GPU from a live one.
        match self.meter.time("memory", || device.memory_info()) {
            Ok(m) => {
                self.answered(index);
                s.memory_used = Some(m.used);
                s.memory_free = Some(m.free);
            }
            Err(e) => {
                if let Some(reason) = self.check_lost(index, &e) {
                    s.lost = Some(reason);
                    return s;
                }
                let _ = self.field::<()>(index, "memory", Err(e));
            }
        }
        if let Some(u) = self.read(index, "utilization", || device.utilization_rates()) {
            s.gpu_util = Some(u.gpu);
            s.mem_util = Some(u.memory);
        }
        s.temperature_c = self.read(index, "temperature", || device.temperature(TemperatureSensor::Gpu));
        s.power_draw_mw = self.read(index, "power draw", || device.power_usage());
        if let Some(mw) = s.power_draw_mw {
            lock(&self.energy).entry(index).or_default().power(mw, base::clock::Stopwatch::now());
        }
        s.sm_clock_mhz = self.read(index, "SM clock", || device.clock_info(Clock::SM));
        s.pstate = self.read(index, "P-state", || device.performance_state()).and_then(|p| pstate_number(&p));
        s.clock_events = self.read(index, "clock events", || device.current_throttle_reasons()).map(clock_event_names);
        let slow = lock(&self.slow_fields).get(&index).cloned().unwrap_or_default();
        s.power_limit_mw = slow.power_limit_mw;
        s.enforced_power_limit_mw = slow.enforced_power_limit_mw;
        s.mem_clock_mhz = slow.mem_clock_mhz;
        s.graphics_clock_mhz = slow.graphics_clock_mhz;
        s.fan_speeds = slow.fan_speeds;
        s.encoder_util = slow.encoder_util;
        s.decoder_util = slow.decoder_util;
        s.pcie_link =
            slow.pcie_generation.zip(slow.pcie_width).map(|(generation, width)| PcieLink { generation, width });
        s
    }

    /// The fast loop's gauges that the slow loop reads: the limits and link width with the facts
    /// (`facts`: every 30 s), the clocks, link generation, video engines and fans on every pass.
    fn refresh_slow_fields(&self, index: u32, device: &Device<'_>, facts: bool) {
        let old = lock(&self.slow_fields).get(&index).cloned().unwrap_or_default();
        let fans = self.fans.get(&index).copied().unwrap_or(0);
        let (power_limit_mw, enforced_power_limit_mw, pcie_width) = if facts {
            (
                self.read(index, "power limit", || device.power_management_limit()),
                self.read(index, "enforced power limit", || device.enforced_power_limit()),
                self.read(index, "PCIe width", || device.current_pcie_link_width()),
            )
        } else {
            (old.power_limit_mw, old.enforced_power_limit_mw, old.pcie_width)
        };
        let fields = SlowFields {
            power_limit_mw,
            enforced_power_limit_mw,
            pcie_width,
            mem_clock_mhz: self.read(index, "memory clock", || device.clock_info(Clock::Memory)),
            graphics_clock_mhz: self.read(index, "graphics clock", || device.clock_info(Clock::Graphics)),
            pcie_generation: self.read(index, "PCIe generation", || device.current_pcie_link_gen()),
            encoder_util: self.read(index, "encoder", || device.encoder_utilization()).map(|u| u.utilization),
            decoder_util: self.read(index, "decoder", || device.decoder_utilization()).map(|u| u.utilization),
            fan_speeds: (fans > 0)
                .then(|| (0..fans).map(|fan| self.read(index, "fan speed", || device.fan_speed(fan))).collect())
                .flatten(),
        };
        lock(&self.slow_fields).insert(index, fields);
    }
}

impl GpuSource for NvmlSource {
    fn host(&self) -> HostInfo {
        self.host.clone()
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }

    fn sample(&self, timestamp_ms: u64) -> Vec<DeviceSample> {
        self.devices.iter().map(|d| self.sample_device(d.index, timestamp_ms)).collect()
    }

    fn details(&self, timestamp_ms: u64) -> Details {
        Details {
            health: self.devices.iter().filter_map(|d| self.health(d, timestamp_ms)).collect(),
            processes: self.devices.iter().flat_map(|d| self.processes(d)).collect(),
            workload_problems: Vec::new(),
            scheduled: Vec::new(),
        }
    }

    fn watch_xids(&self, sink: XidSink, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
        let nvml = self.nvml.clone();
        let indexes: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
        // An XID may change what the facts say (ECC counts, retired pages, remapped rows): read them next pass.
        let due = self.facts_due.clone();
        let sink: XidSink = Box::new(move |event| {
            lock(&due).insert(event.device);
            sink(event);
        });
        std::thread::Builder::new()
            .name("gpudash-xid".into())
            .spawn(move || xid::watch_xids(&nvml, &indexes, &sink, &stop))
            .map_err(|e| tracing::warn!("cannot start the XID watcher: {e}"))
            .ok()
    }

    fn watch_activity(&self, sink: ActivitySink, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
        let (nvml, devices, meter, pcie, clock) =
            (self.nvml.clone(), self.devices.clone(), self.meter.clone(), self.gpm_pcie.clone(), self.clock.clone());
        std::thread::Builder::new()
            .name("gpudash-gpm".into())
            .spawn(move || {
                let mut reader = GpmReader::new(&nvml, &devices, meter, pcie, clock);
                super::activity::run_loop(|now_ms| reader.step(now_ms), &sink, &stop);
            })
            .map_err(|e| tracing::warn!("cannot start the GPM loop: {e}"))
            .ok()
    }

    fn topology(&self) -> Option<shared::topology::Topology> {
        Some(super::topology::read(&self.nvml, &self.devices))
    }

    fn device_query(&self) -> Option<Arc<dyn GpuReadings>> {
        Some(Arc::new(self.query()))
    }
}

fn is_lost(error: &NvmlError) -> bool {
    matches!(error, NvmlError::GpuLost | NvmlError::Unknown)
}

/// NVML's CUDA version number (e.g. 13000) as "13.0".
fn cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use nvml_wrapper::bitmasks::device::ThrottleReasons;

    use super::*;

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12040), "12.4");
    }

    #[test]
    fn clock_events_decode_to_names() {
        let names = clock_event_names(ThrottleReasons::GPU_IDLE | ThrottleReasons::SW_POWER_CAP);
        assert_eq!(names, ["idle", "sw_power_cap"]);
        assert!(clock_event_names(ThrottleReasons::NONE).is_empty());
    }

    /// Without a driver (CI), opening fails with the loader's words, not a panic; with one (the H200),
    /// it opens and reads every GPU it lists.
    #[test]
    fn opens_where_a_driver_is_and_names_the_library_where_none_is() {
        let driver = std::path::Path::new("/proc/driver/nvidia").exists();
        match NvmlSource::open(1000) {
            Ok(source) => {
                let devices = source.devices();
                assert!(!devices.is_empty(), "NVML opened but lists no GPU");
                for d in &devices {
                    assert!(!d.simulated && d.uuid.starts_with("GPU-") && d.memory_total > 0, "{d:?}");
                }
                let samples = source.sample(super::super::now_ms());
                assert_eq!(samples.len(), devices.len(), "a reading per GPU");
                for (s, d) in samples.iter().zip(&devices) {
                    let used = s.memory_used.expect("memory used is read on every GPU");
                    assert!(s.lost.is_none() && used <= d.memory_total, "{s:?}");
                }
            }
            Err(err) => {
                let err = err.to_string();
                assert!(!driver, "an NVIDIA driver is loaded, yet NVML did not open: {err}");
                assert!(err.contains("libnvidia-ml"), "{err}");
            }
        }
    }
}
