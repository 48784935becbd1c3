//! Who computes on each GPU: NVML's process lists joined with `/proc` (user,
//! command, start) and the per-process SM use since the last look. The workload and
//! owner are set after, by `telemetry::identity`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use shared::DeviceInfo;
use shared::processes::{GpuProcess, ProcessKind};

use super::{NvmlSource, lock};

/// How often each GPU's per-process SM use is asked for: the call costs about 1.9 ms of CPU on the
/// H200 (`gpudash-bench loops`), the most of any call the loops make, and NVML keeps one sample per
/// process (docs/runs/gpu/session13-diag.log), so a read every other slow pass shows the same
/// figure, at most 4 s old rather than 2 s.
const UTILIZATION_PERIOD: Duration = Duration::from_millis(3900);

/// One GPU's last per-process SM use: by PID, the busiest sample (%) and when NVML took it (ms).
#[derive(Debug, Clone, Default)]
pub(super) struct ProcessUse {
    read: Option<Instant>,
    /// The newest NVML sample timestamp seen (µs), asked from on the next read.
    since: Option<u64>,
    by_pid: HashMap<u32, (u32, u64)>,
}

impl NvmlSource {
    pub(super) fn processes(&self, info: &DeviceInfo) -> Vec<GpuProcess> {
        let index = info.index;
        let Ok(device) = self.handle(index) else { return Vec::new() };
        let mut rows = self.process_rows(index, &device);
        // Without processes there is no per-process use to ask for.
        if !rows.is_empty() {
            let used = self.process_use(index, &device);
            for row in &mut rows {
                if let Some(&(util, seen_ms)) = used.get(&row.pid) {
                    (row.sm_util, row.sm_util_seen_ms) = (Some(util), Some(seen_ms));
                }
            }
        }
        rows.sort_by(|a, b| b.used_memory.cmp(&a.used_memory).then(a.pid.cmp(&b.pid)));
        rows
    }

    /// NVML's compute and graphics lists, one row per PID, with what `/proc` says of each.
    fn process_rows(&self, index: u32, device: &Device<'_>) -> Vec<GpuProcess> {
        let mut rows: Vec<GpuProcess> = Vec::new();
        let lists = [
            (ProcessKind::Compute, self.read(index, "compute processes", || device.running_compute_processes())),
            (ProcessKind::Graphics, self.read(index, "graphics processes", || device.running_graphics_processes())),
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
                let proc = self.meter.time("/proc read (user, command, start)", || self.proc.read(p.pid));
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
                    group: proc.group,
                    workload: None,
                    owner: None,
                    redacted: false,
                    idle: None,
                });
            }
        }
        rows
    }

    /// Per-process SM use since the last look, read every [`UTILIZATION_PERIOD`] and held between.
    /// A read replaces what was held: a process without a new sample has no figure, as NVML says.
    fn process_use(&self, index: u32, device: &Device<'_>) -> HashMap<u32, (u32, u64)> {
        let held = lock(&self.process_use).get(&index).cloned().unwrap_or_default();
        if held.read.is_some_and(|at| self.clock.now().duration_since(at) < UTILIZATION_PERIOD) {
            return held.by_pid;
        }
        // NotFound means "no new samples since `since`": nothing ran, not an error. NVML stamps in µs.
        let utilization = match self.meter.time("process utilization", || device.process_utilization_stats(held.since))
        {
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            other => other,
        };
        let mut fresh = ProcessUse { read: Some(self.clock.now()), since: held.since, by_pid: HashMap::new() };
        if let Some(samples) = self.field(index, "process utilization", utilization) {
            for sample in samples {
                fresh.since = fresh.since.max(Some(sample.timestamp));
                let seen_ms = sample.timestamp / 1000;
                // Several samples of one process: the busiest speaks for it (a 0 must not hide work).
                let entry = fresh.by_pid.entry(sample.pid).or_insert((sample.sm_util, seen_ms));
                *entry = (entry.0.max(sample.sm_util), entry.1.max(seen_ms));
            }
        }
        let by_pid = fresh.by_pid.clone();
        lock(&self.process_use).insert(index, fresh);
        by_pid
    }
}
