//! The simulator's GPM windows: plausible SM, tensor and memory activity for what each
//! simulated GPU runs, n/a (with the reason) on models before Hopper, as NVML would say.

use shared::activity::Activity;

use super::models::{self, MODELS, PROFILES};
use super::{Phase, SimGpu, SimJob, Simulator};

/// Bytes per second of PCIe and NVLink traffic at full load.
const PCIE_FULL: f64 = 4e9;
const NVLINK_FULL: f64 = 60e9;

/// One window per GPU that has answered at least once (a lost GPU gives none).
pub(super) fn windows(gpus: &[SimGpu], now_ms: u64) -> Vec<(u32, Activity)> {
    (0u32..)
        .zip(gpus)
        .filter(|(_, gpu)| gpu.last_ms.is_some())
        .map(|(index, gpu)| (index, gpu.activity(now_ms)))
        .collect()
}

impl SimGpu {
    fn activity(&self, now_ms: u64) -> Activity {
        let model = &MODELS[self.model];
        if model.capability.0 < 9 {
            return Activity::unavailable(
                now_ms,
                "GPM needs a Hopper or newer GPU; this one does not support it (simulated)",
            );
        }
        let load = (self.util / 100.0).clamp(0.0, 1.0);
        let profile = match (self.phase, &self.job, self.scripted) {
            // A scripted job computes as a training step does, unless it is a spin loop.
            (_, _, Some(scripted)) if !scripted.spin => &PROFILES[0],
            (Phase::Job { .. }, Some(job), _) => &PROFILES[job.profile % PROFILES.len()],
            // Idle, or a notebook that holds memory: the SMs do nothing.
            _ => &PROFILES[4],
        };
        let percent = |share: f64| (100.0 * share * load).clamp(0.0, 100.0);
        let links = model.nvlinks > 0;
        Activity {
            timestamp_ms: now_ms,
            window_ms: 1000,
            sm_active: Some(percent(profile.sm)),
            sm_occupancy: Some(percent(profile.occupancy)),
            tensor_active: Some(percent(profile.tensor)),
            dram_active: Some(percent(profile.dram)),
            fp64_active: Some(0.0),
            fp32_active: Some(percent(profile.fp32)),
            fp16_active: Some(percent(profile.fp16)),
            gr_engine_active: Some(100.0 * load),
            pcie_tx_bytes_per_s: Some(PCIE_FULL * 0.2 * load + 1e6),
            pcie_rx_bytes_per_s: Some(PCIE_FULL * load + 6e5),
            nvlink_tx_bytes_per_s: links.then_some(NVLINK_FULL * 0.1 * load * profile.sm),
            nvlink_rx_bytes_per_s: links.then_some(NVLINK_FULL * 0.1 * load * profile.sm),
            unavailable: None,
        }
    }
}

impl Simulator {
    /// Puts a notebook on the last GPU that holds [`HOLDER_MEMORY`] and never computes: the
    /// idle-but-held case. That GPU runs no other job. What `--simulate` shows.
    #[must_use]
    pub fn with_idle_holder(self) -> Self {
        {
            let mut state = self.state();
            let pid = state.next_pid + 7;
            state.next_pid = pid;
            if let Some(gpu) = state.gpus.last_mut() {
                gpu.phase = Phase::Idle { until_ms: u64::MAX };
                gpu.holder = Some(SimJob {
                    pid,
                    user: "eli",
                    command: models::NOTEBOOK.to_owned(),
                    started_ms: 0,
                    workload: None,
                    profile: 0,
                });
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use crate::GpuSource;
    use crate::simulator::Simulator;

    #[test]
    fn busy_gpus_show_activity_older_ones_say_why_not() {
        let sim = Simulator::new(8, 1000);
        for t in 0..8u64 {
            sim.sample(t * 1000);
        }
        let windows = sim.activity(8000);
        assert_eq!(windows.len(), 8);
        let busy = &windows[0].1;
        assert!(busy.sm_active.unwrap() > 0.0 && busy.sm_active.unwrap() <= 100.0, "{busy:?}");
        let idle = &windows[1].1;
        assert_eq!(idle.sm_active, Some(0.0), "GPU 1 starts idle");
        let a100 = &windows[7].1;
        assert!(sim.devices()[7].name.contains("A100"));
        assert!(a100.sm_active.is_none() && a100.unavailable.as_deref().unwrap().contains("Hopper"), "{a100:?}");
    }

    #[test]
    fn a_notebook_loop_keeps_util_up_and_the_sms_idle() {
        let sim = Simulator::new(1, 1000);
        // Find a moment when GPU 0's job is the notebook (profile 4): the RNG is seeded.
        let mut seen = false;
        for t in 0..20_000u64 {
            let util = sim.sample(t * 1000)[0].gpu_util.unwrap();
            let a = sim.activity(t * 1000).remove(0).1;
            let state = sim.state();
            let notebook = state.gpus[0].job.as_ref().is_some_and(|j| j.profile == 4);
            if notebook && util > 30 {
                assert!(a.sm_active.unwrap() < 1.0, "util {util}%, SM {:?}", a.sm_active);
                seen = true;
                break;
            }
        }
        assert!(seen, "the notebook job never ran in 20000 simulated seconds");
    }

    #[test]
    fn the_idle_holder_holds_memory_and_computes_nothing() {
        let sim = Simulator::new(3, 1000).with_idle_holder();
        for t in 0..5u64 {
            sim.sample(t * 1000);
        }
        let details = sim.details(5000);
        let holder = details.processes.iter().find(|p| p.device == 2).expect("the notebook on the last GPU");
        assert!(holder.used_memory.unwrap() > 5 << 30 && holder.sm_util.is_none(), "{holder:?}");
        assert!(holder.command.as_deref().unwrap().contains("ipykernel"));
        assert_eq!(sim.activity(5000)[2].1.sm_active, Some(0.0));
    }
}
