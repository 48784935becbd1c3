//! Idle but held: processes that keep device memory on a GPU that computes nothing
//! (a notebook left open, a crashed-but-alive job), flagged after `--idle-after`.

use std::collections::HashMap;
use std::time::Duration;

use shared::DeviceSample;
use shared::activity::{IDLE_SM_PERCENT, IdleHold, IdleSignal};
use shared::processes::GpuProcess;

/// When a process counts as idle: it holds at least `memory` bytes and its GPU has
/// done nothing for at least `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleRule {
    pub memory: u64,
    pub after: Duration,
}

impl Default for IdleRule {
    /// 1 GiB for 30 minutes: a notebook's CUDA context alone holds ~500 MiB, and a training
    /// job's evaluation or checkpoint pause lasts minutes, not half an hour.
    fn default() -> Self {
        Self { memory: 1 << 30, after: Duration::from_secs(30 * 60) }
    }
}

/// Since when a GPU has done nothing, by the best signal it has.
#[derive(Debug, Clone, Copy)]
struct Quiet {
    signal: IdleSignal,
    since_ms: Option<u64>,
}

/// Follows each GPU's quiet spells (fast ticks) and each process's (slow ticks).
#[derive(Debug, Default)]
pub struct IdleTracker {
    rule: IdleRule,
    devices: HashMap<u32, Quiet>,
    /// Per (device, pid): since when the process has been quiet while holding memory.
    processes: HashMap<(u32, u32), u64>,
}

impl IdleTracker {
    pub fn new(rule: IdleRule) -> Self {
        Self { rule, ..Self::default() }
    }

    /// Reads one tick: GPM's SM activity where the sample carries it, else GPU utilization.
    pub fn observe(&mut self, samples: &[DeviceSample]) {
        for s in samples {
            if s.lost.is_some() {
                self.devices.remove(&s.index);
                continue;
            }
            let (signal, quiet) = match s.activity.as_ref().and_then(|a| a.sm_active) {
                Some(sm) => (IdleSignal::SmActivity, sm < IDLE_SM_PERCENT),
                None => match s.gpu_util {
                    Some(util) => (IdleSignal::ProcessSmUtil, util == 0),
                    // No reading at all: forget the spell rather than let it grow on stale data.
                    None => {
                        self.devices.remove(&s.index);
                        continue;
                    }
                },
            };
            let entry = self.devices.entry(s.index).or_insert(Quiet { signal, since_ms: None });
            if entry.signal != signal {
                *entry = Quiet { signal, since_ms: None };
            }
            entry.since_ms = quiet.then(|| entry.since_ms.unwrap_or(s.timestamp_ms));
        }
    }

    /// Sets or clears [`GpuProcess::idle`] on every process, as of `now_ms`.
    pub fn mark(&mut self, processes: &mut [GpuProcess], now_ms: u64) {
        let after_ms = u64::try_from(self.rule.after.as_millis()).unwrap_or(u64::MAX);
        let mut kept = HashMap::new();
        for p in processes.iter_mut() {
            p.idle = None;
            let key = (p.device, p.pid);
            let Some(device) = self.devices.get(&p.device) else { continue };
            if p.used_memory.is_none_or(|bytes| bytes < self.rule.memory) {
                continue;
            }
            let since = match device.signal {
                // The whole GPU did nothing: the process has been idle since then, or since it started.
                IdleSignal::SmActivity => device.since_ms.map(|since| since.max(p.started_ms.unwrap_or(0))),
                // NVML has per-process samples only for processes that ran kernels recently:
                // one with a figure is judged by it, one without by the GPU's utilization.
                IdleSignal::ProcessSmUtil => match p.sm_util {
                    Some(util) => (util == 0).then_some(now_ms),
                    None => device.since_ms.map(|_| now_ms),
                },
            };
            let Some(candidate) = since else { continue };
            let since = match device.signal {
                // The GPU's quiet start is kept on every tick (work in between resets it): take it as is.
                IdleSignal::SmActivity => candidate,
                // The candidate is "now": a spell already followed keeps its start.
                IdleSignal::ProcessSmUtil => self.processes.get(&key).map_or(candidate, |&known| known.min(candidate)),
            };
            kept.insert(key, since);
            if now_ms.saturating_sub(since) >= after_ms {
                p.idle = Some(IdleHold { since_ms: since, signal: device.signal });
            }
        }
        self.processes = kept;
    }
}

#[cfg(test)]
mod tests {
    use shared::activity::Activity;

    use super::*;

    const GIB: u64 = 1 << 30;

    fn tracker(after_s: u64) -> IdleTracker {
        IdleTracker::new(IdleRule { memory: GIB, after: Duration::from_secs(after_s) })
    }

    fn sample(t: u64, util: u32, sm: Option<f64>) -> DeviceSample {
        let activity = sm.map(|sm| Activity { sm_active: Some(sm), ..Activity::default() });
        DeviceSample { index: 0, timestamp_ms: t, gpu_util: Some(util), activity, ..Default::default() }
    }

    fn holder(memory: u64, sm_util: Option<u32>) -> GpuProcess {
        GpuProcess {
            used_memory: Some(memory),
            sm_util,
            user: Some("ana".into()),
            started_ms: Some(0),
            ..shared::testing::process(0, 9)
        }
    }

    #[test]
    fn a_holder_on_a_quiet_gpu_is_flagged_after_the_threshold_and_cleared_by_work() {
        let mut idle = tracker(10);
        let mut ps = [holder(2 * GIB, None)];
        // util says busy, but the SMs do nothing: GPM decides.
        idle.observe(&[sample(1_000, 40, Some(0.04))]);
        idle.mark(&mut ps, 5_000);
        assert_eq!(ps[0].idle, None, "only 4 s");
        idle.observe(&[sample(11_000, 40, Some(0.2))]);
        idle.mark(&mut ps, 11_000);
        assert_eq!(ps[0].idle, Some(IdleHold { since_ms: 1_000, signal: IdleSignal::SmActivity }));
        idle.observe(&[sample(12_000, 90, Some(60.0))]);
        idle.mark(&mut ps, 12_000);
        assert_eq!(ps[0].idle, None, "work clears the flag");
        idle.observe(&[sample(13_000, 0, Some(0.0))]);
        idle.mark(&mut ps, 20_000);
        assert_eq!(ps[0].idle, None, "the spell starts again");
    }

    #[test]
    fn work_between_two_looks_restarts_the_spell() {
        let mut idle = tracker(10);
        let mut ps = [holder(2 * GIB, None)];
        idle.observe(&[sample(1_000, 0, Some(0.0))]);
        idle.mark(&mut ps, 2_000);
        // A short burst of work the process list never saw (marks come every 2 s, windows every 1 s).
        idle.observe(&[sample(3_000, 90, Some(70.0))]);
        idle.observe(&[sample(4_000, 0, Some(0.0))]);
        idle.mark(&mut ps, 12_000);
        assert_eq!(ps[0].idle, None, "quiet since 4 s, not since 1 s");
        idle.mark(&mut ps, 14_000);
        assert_eq!(ps[0].idle, Some(IdleHold { since_ms: 4_000, signal: IdleSignal::SmActivity }));
    }

    #[test]
    fn a_gpu_without_any_reading_forgets_its_spell() {
        let mut idle = tracker(1);
        let mut ps = [holder(2 * GIB, None)];
        idle.observe(&[sample(0, 0, Some(0.0))]);
        idle.observe(&[DeviceSample { index: 0, timestamp_ms: 5_000, ..Default::default() }]);
        idle.mark(&mut ps, 10_000);
        assert_eq!(ps[0].idle, None, "no current reading: no flag");
    }

    #[test]
    fn small_holders_are_never_idle() {
        let mut idle = tracker(0);
        let mut ps = [holder(GIB / 2, None)];
        idle.observe(&[sample(0, 0, Some(0.0))]);
        idle.mark(&mut ps, 100_000);
        assert_eq!(ps[0].idle, None);
    }

    #[test]
    fn without_gpm_the_process_figure_then_gpu_util_decide() {
        let mut idle = tracker(5);
        let mut busy_gpu = [holder(2 * GIB, Some(0)), GpuProcess { pid: 10, ..holder(2 * GIB, Some(80)) }];
        idle.observe(&[sample(0, 80, None)]);
        idle.mark(&mut busy_gpu, 0);
        idle.mark(&mut busy_gpu, 6_000);
        assert_eq!(busy_gpu[0].idle.map(|h| (h.since_ms, h.signal)), Some((0, IdleSignal::ProcessSmUtil)));
        assert_eq!(busy_gpu[1].idle, None, "the process that computes");
        let mut unknown = [holder(2 * GIB, None)];
        idle.mark(&mut unknown, 7_000);
        idle.mark(&mut unknown, 20_000);
        assert_eq!(unknown[0].idle, None, "no process figure and a busy GPU: not idle");
    }
}
