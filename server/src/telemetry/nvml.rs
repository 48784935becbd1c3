//! The real source: NVIDIA's management library through `nvml-wrapper`.
//!
//! `libnvidia-ml.so.1` is loaded at run time, so the same binary starts on a
//! machine without the driver and says why it shows no GPUs. Unsupported
//! fields are `None`; a GPU that answers "lost" is marked lost while the
//! others keep being sampled.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode, EccCounter, MemoryError, PcieUtilCounter, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_NVLINK_LINK_COUNT, NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE,
    NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};
use shared::health::{
    DeviceHealth, EccCounts, MigInstance, NvLinkState, RemappedRows, RetiredPages, XidEvent, xid_meaning,
};
use shared::processes::{GpuProcess, ProcessKind};
use shared::{Clocks, ComputeCapability, Details, DeviceInfo, DeviceSample, HostInfo, PcieLink};

use super::procfs::ProcReader;
use super::{GpuSource, XidSink, now_ms};

/// A lost GPU is probed again this often; probing a lost GPU can be slow.
const LOST_RETRY: Duration = Duration::from_secs(30);

/// GPUs read through NVML.
pub struct NvmlSource {
    nvml: Arc<Nvml>,
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    fans: HashMap<u32, u32>,
    /// Fields that already failed with an unexpected error, so each is logged once.
    reported: Mutex<HashSet<(u32, &'static str)>>,
    /// GPUs that answered "lost", with the reason and when they were last probed.
    lost: Mutex<HashMap<u32, (String, Instant)>>,
    /// Per GPU, the NVML timestamp of the last process-utilization sample seen.
    last_process_sample: Mutex<HashMap<u32, u64>>,
    /// Fields too slow for the fast loop, refreshed by the slow one.
    slow_fields: Mutex<HashMap<u32, SlowFields>>,
    proc: ProcReader,
}

/// Readings that change rarely and cost too much per call for the fast loop.
#[derive(Debug, Clone, Copy, Default)]
struct SlowFields {
    power_limit_mw: Option<u32>,
    pcie_width: Option<u32>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").field("devices", &self.devices.len()).finish_non_exhaustive()
    }
}

impl NvmlSource {
    /// Loads NVML and reads every device's static facts.
    ///
    /// Fails with the loader's message when there is no usable driver.
    pub fn open(interval_ms: u64) -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| error_chain(&e))?;
        let count = nvml.device_count().map_err(|e| format!("NVML could not count GPUs: {}", error_chain(&e)))?;
        let mut devices = Vec::new();
        let mut fans = HashMap::new();
        for index in 0..count {
            match read_info(&nvml, index) {
                Ok((info, fan_count)) => {
                    fans.insert(index, fan_count);
                    devices.push(info);
                }
                // A GPU that cannot even be named is left out, the others are shown.
                Err(e) => tracing::warn!(index, "skipping GPU: {}", error_chain(&e)),
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
        let source = Self {
            nvml: Arc::new(nvml),
            host,
            devices,
            fans,
            reported: Mutex::new(HashSet::new()),
            lost: Mutex::new(HashMap::new()),
            last_process_sample: Mutex::new(HashMap::new()),
            slow_fields: Mutex::new(HashMap::new()),
            proc: ProcReader::new("/proc"),
        };
        for info in &source.devices {
            if let Ok(device) = source.nvml.device_by_index(info.index) {
                source.refresh_slow_fields(info.index, &device);
            }
        }
        Ok(source)
    }

    /// Unwraps a reading; unsupported fields are `None` quietly, other errors once in the log.
    fn field<T>(&self, index: u32, name: &'static str, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::NotSupported | NvmlError::NoPermission) => None,
            Err(e) => {
                if lock(&self.reported).insert((index, name)) {
                    tracing::warn!(index, field = name, "NVML read failed: {}", error_chain(&e));
                }
                None
            }
        }
    }

    /// The device's handle, unless it is lost (then `Err` carries the reason).
    fn handle(&self, index: u32) -> Result<Device<'_>, String> {
        if let Some((reason, probed)) = lock(&self.lost).get(&index)
            && probed.elapsed() < LOST_RETRY
        {
            return Err(reason.clone());
        }
        self.nvml.device_by_index(index).map_err(|e| self.check_lost(index, &e).unwrap_or_else(|| error_chain(&e)))
    }

    /// Marks the GPU lost when `error` says so, and returns why.
    fn check_lost(&self, index: u32, error: &NvmlError) -> Option<String> {
        if !is_lost(error) {
            return None;
        }
        let reason = format!("GPU {index} is lost: {}", error_chain(error));
        let mut lost = lock(&self.lost);
        if !lost.contains_key(&index) {
            tracing::error!("{reason}; the other GPUs keep being sampled");
        }
        lost.insert(index, (reason.clone(), Instant::now()));
        Some(reason)
    }

    /// Clears the lost mark of a GPU that answered.
    fn answered(&self, index: u32) {
        let mut lost = lock(&self.lost);
        if lost.remove(&index).is_some() {
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
        match device.memory_info() {
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
        if let Some(u) = self.field(index, "utilization", device.utilization_rates()) {
            s.gpu_util = Some(u.gpu);
            s.mem_util = Some(u.memory);
        }
        s.temperature_c = self.field(index, "temperature", device.temperature(TemperatureSensor::Gpu));
        s.power_draw_mw = self.field(index, "power draw", device.power_usage());
        let slow = lock(&self.slow_fields).get(&index).copied().unwrap_or_default();
        s.power_limit_mw = slow.power_limit_mw;
        s.enforced_power_limit_mw = self.field(index, "enforced power limit", device.enforced_power_limit());
        s.sm_clock_mhz = self.field(index, "SM clock", device.clock_info(Clock::SM));
        s.mem_clock_mhz = self.field(index, "memory clock", device.clock_info(Clock::Memory));
        s.graphics_clock_mhz = self.field(index, "graphics clock", device.clock_info(Clock::Graphics));
        s.pstate = self.field(index, "P-state", device.performance_state()).and_then(|p| pstate_number(&p));
        s.clock_events = self.field(index, "clock events", device.current_throttle_reasons()).map(clock_event_names);
        let fans = self.fans.get(&index).copied().unwrap_or(0);
        if fans > 0 {
            s.fan_speeds = (0..fans).map(|fan| self.field(index, "fan speed", device.fan_speed(fan))).collect();
        }
        s.encoder_util = self.field(index, "encoder", device.encoder_utilization()).map(|u| u.utilization);
        s.decoder_util = self.field(index, "decoder", device.decoder_utilization()).map(|u| u.utilization);
        let generation = self.field(index, "PCIe generation", device.current_pcie_link_gen());
        s.pcie_link = generation.zip(slow.pcie_width).map(|(generation, width)| PcieLink { generation, width });
        s
    }

    fn health(&self, info: &DeviceInfo, timestamp_ms: u64) -> Option<DeviceHealth> {
        let index = info.index;
        let device = self.handle(index).ok()?;
        self.refresh_slow_fields(index, &device);
        let mut h = DeviceHealth { index, timestamp_ms, ..DeviceHealth::default() };
        h.persistence_mode = self.field(index, "persistence", device.is_in_persistent_mode());
        h.compute_mode =
            self.field(index, "compute mode", device.compute_mode()).map(|m| compute_mode_name(&m).to_owned());
        if let Some(mig) = self.field(index, "MIG mode", device.mig_mode()) {
            h.mig_enabled = Some(mig.current == 1);
            h.mig_pending = Some(mig.pending == 1);
            if mig.current == 1 {
                h.mig_instances = self.mig_instances(&device, index);
            }
        }
        if let Some(ecc) = self.field(index, "ECC mode", device.is_ecc_enabled()) {
            h.ecc_enabled = Some(ecc.currently_enabled);
            let count = |kind, counter| self.field(index, "ECC counts", device.total_ecc_errors(kind, counter));
            h.ecc_volatile = EccCounts {
                corrected: count(MemoryError::Corrected, EccCounter::Volatile),
                uncorrected: count(MemoryError::Uncorrected, EccCounter::Volatile),
            };
            h.ecc_aggregate = EccCounts {
                corrected: count(MemoryError::Corrected, EccCounter::Aggregate),
                uncorrected: count(MemoryError::Uncorrected, EccCounter::Aggregate),
            };
        }
        let pages = |cause| self.field(index, "retired pages", device.retired_pages(cause)).map(|p| p.len() as u64);
        h.retired_pages = RetiredPages {
            single_bit: pages(RetirementCause::MultipleSingleBitEccErrors),
            double_bit: pages(RetirementCause::DoubleBitEccError),
            pending: self.field(index, "retired pages pending", device.are_pages_pending_retired()),
        };
        h.remapped_rows = self.remapped_rows(&device, index);
        if let Some(bar1) = self.field(index, "BAR1", device.bar1_memory_info()) {
            h.bar1_total = Some(bar1.total);
            h.bar1_used = Some(bar1.used);
        }
        h.nvlinks = (0..info.nvlink_links)
            .filter_map(|link| {
                let active = self.field(index, "NVLink state", device.link_wrapper_for(link).is_active())?;
                Some(NvLinkState { link, active })
            })
            .collect();
        // Each blocks for NVML's 20 ms sampling window: this is why the slow loop exists.
        let kb_per_s = |counter| self.field(index, "PCIe throughput", device.pcie_throughput(counter));
        h.pcie_tx_bytes_per_s = kb_per_s(PcieUtilCounter::Send).map(|kb| u64::from(kb) * 1024);
        h.pcie_rx_bytes_per_s = kb_per_s(PcieUtilCounter::Receive).map(|kb| u64::from(kb) * 1024);
        h.pcie_replays = self.field(index, "PCIe replays", device.pcie_replay_counter()).map(u64::from);
        h.energy_mj = self.field(index, "energy", device.total_energy_consumption());
        Some(h)
    }

    /// Two fast-path fields cost 30–180 µs per call on an H200 (`gpudash-bench
    /// sampler --per-call`) and rarely change: the slow loop reads them, the fast one serves them.
    fn refresh_slow_fields(&self, index: u32, device: &Device<'_>) {
        let fields = SlowFields {
            power_limit_mw: self.field(index, "power limit", device.power_management_limit()),
            pcie_width: self.field(index, "PCIe width", device.current_pcie_link_width()),
        };
        lock(&self.slow_fields).insert(index, fields);
    }

    fn mig_instances(&self, device: &Device<'_>, index: u32) -> Vec<MigInstance> {
        let count = self.field(index, "MIG count", device.mig_device_count()).unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let mig = device.mig_device_by_index(i).ok()?;
                let memory = mig.memory_info().ok();
                Some(MigInstance {
                    index: i,
                    uuid: mig.uuid().unwrap_or_default(),
                    name: mig.name().unwrap_or_else(|_| "MIG instance".to_owned()),
                    memory_total: memory.as_ref().map(|m| m.total),
                    memory_used: memory.as_ref().map(|m| m.used),
                })
            })
            .collect()
    }

    fn remapped_rows(&self, device: &Device<'_>, index: u32) -> RemappedRows {
        let ids = [
            NVML_FI_DEV_REMAPPED_COR,
            NVML_FI_DEV_REMAPPED_UNC,
            NVML_FI_DEV_REMAPPED_PENDING,
            NVML_FI_DEV_REMAPPED_FAILURE,
        ]
        .map(FieldId);
        let Some(values) = self.field(index, "remapped rows", device.field_values_for(&ids)) else {
            return RemappedRows::default();
        };
        let value =
            |i: usize| values.get(i).and_then(|v| v.as_ref().ok()).and_then(|v| v.value.as_ref().ok()).and_then(as_u64);
        RemappedRows {
            correctable: value(0),
            uncorrectable: value(1),
            pending: value(2).map(|v| v != 0),
            failed: value(3).map(|v| v != 0),
        }
    }

    fn processes(&self, info: &DeviceInfo) -> Vec<GpuProcess> {
        let index = info.index;
        let Ok(device) = self.handle(index) else { return Vec::new() };
        let mut rows: Vec<GpuProcess> = Vec::new();
        let lists = [
            (ProcessKind::Compute, self.field(index, "compute processes", device.running_compute_processes())),
            (ProcessKind::Graphics, self.field(index, "graphics processes", device.running_graphics_processes())),
        ];
        for (kind, list) in lists {
            for p in list.unwrap_or_default() {
                let used = match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                };
                if let Some(row) = rows.iter_mut().find(|r| r.pid == p.pid) {
                    row.kind = ProcessKind::Both;
                    row.used_memory = row.used_memory.max(used);
                    continue;
                }
                let proc = self.proc.read(p.pid);
                rows.push(GpuProcess {
                    device: index,
                    pid: p.pid,
                    kind,
                    used_memory: used,
                    sm_util: None,
                    sm_util_seen_ms: None,
                    user: proc.user,
                    name: proc.name.or_else(|| self.nvml.sys_process_name(p.pid, 64).ok()),
                    command: proc.command,
                    started_ms: proc.started_ms,
                    container: proc.container,
                    redacted: false,
                });
            }
        }
        // Per-process SM use since the last look; NVML stamps samples in µs.
        let since = lock(&self.last_process_sample).get(&index).copied();
        // NotFound means "no new samples since `since`": nothing ran, not an error.
        let utilization = match device.process_utilization_stats(since) {
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            other => other,
        };
        if let Some(samples) = self.field(index, "process utilization", utilization) {
            let newest = samples.iter().map(|s| s.timestamp).max();
            for sample in samples {
                if let Some(row) = rows.iter_mut().find(|r| r.pid == sample.pid) {
                    row.sm_util = Some(sample.sm_util);
                    row.sm_util_seen_ms = Some(sample.timestamp / 1000);
                }
            }
            if let Some(newest) = newest {
                lock(&self.last_process_sample).insert(index, newest);
            }
        }
        rows.sort_by(|a, b| b.used_memory.cmp(&a.used_memory).then(a.pid.cmp(&b.pid)));
        rows
    }
}

impl NvmlSource {
    /// Mean cost of each fast-path NVML call on GPU `index`, µs, over `iterations` calls: what
    /// `gpudash-bench sampler --per-call` prints to decide what belongs on the fast path.
    pub fn profile_calls(&self, index: u32, iterations: u32) -> Vec<(&'static str, f64)> {
        let Ok(device) = self.nvml.device_by_index(index) else { return Vec::new() };
        let time = |f: &dyn Fn() -> bool| {
            let start = Instant::now();
            for _ in 0..iterations {
                std::hint::black_box(f());
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations.max(1))
        };
        vec![
            ("device_by_index", time(&|| self.nvml.device_by_index(index).is_ok())),
            ("memory_info", time(&|| device.memory_info().is_ok())),
            ("utilization_rates", time(&|| device.utilization_rates().is_ok())),
            ("temperature", time(&|| device.temperature(TemperatureSensor::Gpu).is_ok())),
            ("power_usage", time(&|| device.power_usage().is_ok())),
            ("power_management_limit", time(&|| device.power_management_limit().is_ok())),
            ("enforced_power_limit", time(&|| device.enforced_power_limit().is_ok())),
            ("clock_info(SM)", time(&|| device.clock_info(Clock::SM).is_ok())),
            ("clock_info(Memory)", time(&|| device.clock_info(Clock::Memory).is_ok())),
            ("clock_info(Graphics)", time(&|| device.clock_info(Clock::Graphics).is_ok())),
            ("performance_state", time(&|| device.performance_state().is_ok())),
            ("current_throttle_reasons", time(&|| device.current_throttle_reasons().is_ok())),
            ("num_fans", time(&|| device.num_fans().is_ok())),
            ("encoder_utilization", time(&|| device.encoder_utilization().is_ok())),
            ("decoder_utilization", time(&|| device.decoder_utilization().is_ok())),
            ("current_pcie_link_gen", time(&|| device.current_pcie_link_gen().is_ok())),
            ("current_pcie_link_width", time(&|| device.current_pcie_link_width().is_ok())),
            ("running_compute_processes", time(&|| device.running_compute_processes().is_ok())),
            ("is_ecc_enabled", time(&|| device.is_ecc_enabled().is_ok())),
            ("bar1_memory_info", time(&|| device.bar1_memory_info().is_ok())),
        ]
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
        }
    }

    fn watch_xids(&self, sink: XidSink, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
        let nvml = self.nvml.clone();
        let indexes: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
        std::thread::Builder::new()
            .name("gpudash-xid".into())
            .spawn(move || watch_xids(&nvml, &indexes, &sink, &stop))
            .map_err(|e| tracing::warn!("cannot start the XID watcher: {e}"))
            .ok()
    }

    fn topology(&self) -> Option<shared::topology::Topology> {
        Some(super::topology::read(&self.nvml, &self.devices))
    }
}

/// Waits on NVML event sets (one per GPU, so one GPU without event
/// support does not cost the others theirs) for critical XID errors until `stop` is set.
fn watch_xids(nvml: &Nvml, indexes: &[u32], sink: &XidSink, stop: &AtomicBool) {
    let mut sets = Vec::new();
    for &index in indexes {
        let registered = nvml.device_by_index(index).map_err(Into::into).and_then(|device| {
            let set = nvml.create_event_set()?;
            device.register_events(EventTypes::CRITICAL_XID_ERROR, set)
        });
        match registered {
            Ok(set) => sets.push((index, set)),
            Err(e) => tracing::info!(index, "XID events unavailable: {}", error_chain(&e.error)),
        }
    }
    if sets.is_empty() {
        return;
    }
    let wait_ms = u32::try_from(500 / sets.len()).unwrap_or(50).max(20);
    while !stop.load(Ordering::Relaxed) {
        for (index, set) in &sets {
            match set.wait(wait_ms) {
                Ok(event) => {
                    let code = match event.event_data {
                        Some(XidError::Value(code)) => code,
                        Some(XidError::Unknown) | None => 0,
                    };
                    sink(XidEvent {
                        device: *index,
                        timestamp_ms: now_ms(),
                        code,
                        meaning: xid_meaning(code).to_owned(),
                    });
                }
                Err(NvmlError::Timeout) => {}
                Err(e) => {
                    tracing::warn!("XID watcher stopped: {}", error_chain(&e));
                    return;
                }
            }
        }
    }
}

fn read_info(nvml: &Nvml, index: u32) -> Result<(DeviceInfo, u32), NvmlError> {
    let device = nvml.device_by_index(index)?;
    let optional = |r: Result<String, NvmlError>| r.unwrap_or_else(|_| "n/a".to_owned());
    let max = |clock| device.max_clock_info(clock).ok();
    let nvlinks = device
        .field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_LINK_COUNT)])
        .ok()
        .and_then(|v| v.into_iter().next())
        .and_then(|v| v.ok())
        .and_then(|v| v.value.ok())
        .and_then(|v| as_u64(&v))
        .map_or(0, |n| u32::try_from(n).unwrap_or(0));
    let info = DeviceInfo {
        index,
        name: device.name()?,
        uuid: optional(device.uuid()),
        pci_bus_id: optional(device.pci_info().map(|p| p.bus_id)),
        compute_capability: device.cuda_compute_capability().ok().and_then(|c| {
            Some(ComputeCapability { major: u32::try_from(c.major).ok()?, minor: u32::try_from(c.minor).ok()? })
        }),
        memory_total: device.memory_info()?.total,
        simulated: false,
        max_clocks: Clocks {
            graphics_mhz: max(Clock::Graphics),
            sm_mhz: max(Clock::SM),
            memory_mhz: max(Clock::Memory),
        },
        pcie_max: device
            .max_pcie_link_gen()
            .ok()
            .zip(device.max_pcie_link_width().ok())
            .map(|(generation, width)| PcieLink { generation, width }),
        memory_bus_width: device.memory_bus_width().ok(),
        nvlink_links: nvlinks,
    };
    Ok((info, device.num_fans().unwrap_or(0)))
}

fn is_lost(error: &NvmlError) -> bool {
    matches!(error, NvmlError::GpuLost | NvmlError::Unknown)
}

fn as_u64(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U64(v) => Some(v),
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(v) => (v >= 0.0).then_some(v as u64),
    }
}

fn pstate_number(state: &nvml_wrapper::enum_wrappers::device::PerformanceState) -> Option<u32> {
    use nvml_wrapper::enum_wrappers::device::PerformanceState as P;
    Some(match state {
        P::Zero => 0,
        P::One => 1,
        P::Two => 2,
        P::Three => 3,
        P::Four => 4,
        P::Five => 5,
        P::Six => 6,
        P::Seven => 7,
        P::Eight => 8,
        P::Nine => 9,
        P::Ten => 10,
        P::Eleven => 11,
        P::Twelve => 12,
        P::Thirteen => 13,
        P::Fourteen => 14,
        P::Fifteen => 15,
        P::Unknown => return None,
    })
}

/// Clock-event (throttle) reasons as the names nvidia-smi -q uses, snake_cased.
pub fn clock_event_names(reasons: ThrottleReasons) -> Vec<String> {
    const NAMES: [(ThrottleReasons, &str); 9] = [
        (ThrottleReasons::GPU_IDLE, "idle"),
        (ThrottleReasons::APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
        (ThrottleReasons::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
    ];
    NAMES.iter().filter(|(flag, _)| reasons.contains(*flag)).map(|(_, name)| (*name).to_owned()).collect()
}

fn compute_mode_name(mode: &ComputeMode) -> &'static str {
    match mode {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// NVML's CUDA version number (e.g. 13000) as "13.0".
fn cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// An error and its causes on one line: "a: b: c", leaving out a cause the text already says
/// (libloading's errors repeat their source in their own message).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12040), "12.4");
    }

    #[test]
    fn error_chains_do_not_repeat_a_cause() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "load failed: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::other("libnvidia-ml.so.1: cannot open"));
        assert_eq!(error_chain(&error), "load failed: libnvidia-ml.so.1: cannot open");
    }

    #[test]
    fn clock_events_decode_to_names() {
        let names = clock_event_names(ThrottleReasons::GPU_IDLE | ThrottleReasons::SW_POWER_CAP);
        assert_eq!(names, ["idle", "sw_power_cap"]);
        assert!(clock_event_names(ThrottleReasons::NONE).is_empty());
    }

    #[test]
    fn without_a_driver_the_error_names_the_library() {
        // CI machines have no NVIDIA driver: opening must fail with the loader's words, not panic.
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        let err = NvmlSource::open(1000).unwrap_err();
        assert!(err.contains("libnvidia-ml"), "{err}");
    }
}
