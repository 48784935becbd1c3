//! Who computes on each GPU: NVML's process lists joined with `/proc` (user,
//! command, start) and the per-process SM use since the last look. The workload and
//! owner are set after, by `telemetry::identity`.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use shared::DeviceInfo;
use shared::processes::{GpuProcess, ProcessKind};

use super::{NvmlSource, lock};

impl NvmlSource {
    pub(super) fn processes(&self, info: &DeviceInfo) -> Vec<GpuProcess> {
        let index = info.index;
        let Ok(device) = self.handle(index) else { return Vec::new() };
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
                    workload: None,
                    owner: None,
                    redacted: false,
                    idle: None,
                });
            }
        }
        // Per-process SM use since the last look; NVML stamps samples in µs.
        let since = lock(&self.last_process_sample).get(&index).copied();
        // NotFound means "no new samples since `since`": nothing ran, not an error.
        let utilization = match self.meter.time("process utilization", || device.process_utilization_stats(since)) {
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            other => other,
        };
        if let Some(samples) = self.field(index, "process utilization", utilization) {
            let newest = samples.iter().map(|s| s.timestamp).max();
            for sample in samples {
                if let Some(row) = rows.iter_mut().find(|r| r.pid == sample.pid) {
                    // Several samples of one process: the busiest speaks for it (a 0 must not hide work).
                    row.sm_util = Some(row.sm_util.map_or(sample.sm_util, |u| u.max(sample.sm_util)));
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
