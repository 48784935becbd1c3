//! What the faults striking one GPU do to it at one moment.

use super::Fault;

/// Where a hot GPU's temperature ramps to, °C.
pub const HOT_PEAK: f64 = 92.0;
/// Above this a GPU reports `sw_thermal_slowdown` and trims its clock, °C: the slowdown
/// threshold the simulated GPUs report (NVML's `TemperatureThreshold::Slowdown`).
pub const THERMAL_SLOWDOWN: f64 = 87.0;
/// The shutdown threshold the simulated GPUs report, °C: above anything a fault reaches.
pub const THERMAL_SHUTDOWN: f64 = 95.0;
/// Where a warm GPU's temperature settles, °C: near its slowdown threshold, not past it.
pub const WARM_PEAK: f64 = THERMAL_SLOWDOWN - 3.0;
/// How fast a hot GPU heats, and cools back to [`COOLED`], °C per second.
pub const HOT_RAMP: f64 = 10.0;
/// Above anything a simulated job reaches by itself (78 °C at full load), °C: a GPU that was
/// hot cools fast down to here, then as usual.
pub const COOLED: f64 = 80.0;
/// The share of its memory a memory-full GPU fills.
pub const MEMORY_FULL: f64 = 0.985;

/// What the GPU's jobs must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jobs {
    /// Come and go as they like.
    #[default]
    Free,
    /// Keep a busy job running until `until_ms` (a job-ends fault has yet to strike).
    Busy { until_ms: u64 },
    /// Nothing runs until `until_ms` (`u64::MAX`: for good): every process has exited.
    Gone { until_ms: u64 },
    /// Only an idle notebook, opened at `since_ms`, until `until_ms`.
    Holder { since_ms: u64, until_ms: u64 },
    /// An idle-holder fault's notebook has exited: it must not stay.
    HolderExited,
}

/// What the faults on one GPU do at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Effects {
    /// Heating towards [`HOT_PEAK`].
    pub hot: bool,
    /// Heating towards [`WARM_PEAK`] (a hot fault wins when both hold).
    pub warm: bool,
    /// The hardware power brake holds the clock down.
    pub brake: bool,
    /// The board draws its power limit and the driver caps its clocks (`sw_power_cap`).
    pub power_cap: bool,
    /// An uncorrectable ECC error since the last reset, a row remap pending.
    pub ecc: bool,
    /// An ECC fault has struck at some point (aggregate counters keep it after a reset).
    pub ecc_struck: bool,
    /// Memory fills to [`MEMORY_FULL`].
    pub memory_full: bool,
    /// The GPU's processes are not listed (a busy job runs meanwhile).
    pub unseen: bool,
    pub jobs: Jobs,
}

impl Effects {
    /// What `faults` do to GPU `device` at `now_ms`, sampling having begun at `first_ms`.
    pub fn at(faults: &[Fault], device: u32, first_ms: u64, now_ms: u64) -> Self {
        let mut effects = Effects::default();
        for fault in faults.iter().filter(|fault| fault.device() == device) {
            let holds = |window: super::Window| window.holds(first_ms, now_ms);
            let until = |window: super::Window| window.end(first_ms).unwrap_or(u64::MAX);
            match fault {
                // Only its scripted processes run on a GPU with jobs (`Simulator::details`).
                Fault::Job { .. } => effects.jobs = Jobs::Gone { until_ms: u64::MAX },
                &Fault::Hot { window, .. } => effects.hot |= holds(window),
                &Fault::Warm { window, .. } => effects.warm |= holds(window),
                &Fault::PowerBrake { window, .. } => effects.brake |= holds(window),
                &Fault::PowerCap { window, .. } => effects.power_cap |= holds(window),
                &Fault::Ecc { window, .. } => {
                    effects.ecc |= holds(window);
                    effects.ecc_struck |= window.begun(first_ms, now_ms);
                }
                &Fault::MemoryFull { window, .. } => effects.memory_full |= holds(window),
                &Fault::JobEnds { window, .. } if !window.begun(first_ms, now_ms) => {
                    effects.jobs = Jobs::Busy { until_ms: window.start(first_ms) };
                }
                &Fault::JobEnds { window, .. } if holds(window) => {
                    effects.jobs = Jobs::Gone { until_ms: until(window) }
                }
                &Fault::IdleHolder { window, .. } if holds(window) => {
                    effects.jobs = Jobs::Holder { since_ms: window.start(first_ms), until_ms: until(window) };
                }
                &Fault::IdleHolder { window, .. } if window.ended(first_ms, now_ms) => {
                    effects.jobs = Jobs::HolderExited;
                }
                &Fault::Unseen { window, .. } if holds(window) => {
                    effects.unseen = true;
                    effects.jobs = Jobs::Busy { until_ms: until(window) };
                }
                _ => {}
            }
        }
        effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(fault: &str, device: u32, now_ms: u64) -> Effects {
        Effects::at(&[fault.parse().unwrap()], device, 1_000, now_ms)
    }

    #[test]
    fn a_window_holds_from_its_start_for_its_length_on_its_gpu_only() {
        assert!(!at("hot:1@2s+3s", 1, 2_999).hot);
        assert!(at("hot:1@2s+3s", 1, 3_000).hot);
        assert!(at("hot:1@2s+3s", 1, 5_999).hot);
        assert!(!at("hot:1@2s+3s", 1, 6_000).hot);
        assert!(at("hot:1@2s", 1, u64::MAX).hot, "without +LENGTH it lasts");
        assert_eq!(at("hot:1@2s", 0, 4_000), Effects::default());
        assert!(at("power-brake:1@0s+1s", 1, 1_000).brake);
        assert!(at("power-cap:1@0s+1s", 1, 1_000).power_cap);
        assert!(!at("power-cap:1@0s+1s", 1, 2_000).power_cap);
        assert!(at("warm:1@0s+1s", 1, 1_000).warm);
        assert!(at("memory-full:1@0s+1s", 1, 1_500).memory_full);
        assert!(!at("memory-full:1@0s+1s", 1, 2_000).memory_full);
        let unseen = at("unseen:1@1s+2s", 1, 2_500);
        assert_eq!((unseen.unseen, unseen.jobs), (true, Jobs::Busy { until_ms: 4_000 }));
        assert_eq!(at("unseen:1@1s+2s", 1, 4_000), Effects::default(), "ends with its window");
    }

    #[test]
    fn ecc_clears_at_the_reset_and_the_aggregate_remembers() {
        assert_eq!((at("ecc:0@1s+1s", 0, 1_999).ecc, at("ecc:0@1s+1s", 0, 1_999).ecc_struck), (false, false));
        assert_eq!((at("ecc:0@1s+1s", 0, 2_000).ecc, at("ecc:0@1s+1s", 0, 2_000).ecc_struck), (true, true));
        assert_eq!((at("ecc:0@1s+1s", 0, 3_000).ecc, at("ecc:0@1s+1s", 0, 3_000).ecc_struck), (false, true));
    }

    #[test]
    fn jobs_stay_busy_then_are_gone_then_free_again() {
        assert_eq!(at("job-ends:2@5s+10s", 2, 1_000).jobs, Jobs::Busy { until_ms: 6_000 });
        assert_eq!(at("job-ends:2@5s+10s", 2, 6_000).jobs, Jobs::Gone { until_ms: 16_000 });
        assert_eq!(at("job-ends:2@5s+10s", 2, 16_000).jobs, Jobs::Free);
        assert_eq!(at("job-ends:2@5s", 2, 99_000).jobs, Jobs::Gone { until_ms: u64::MAX });
        assert_eq!(at("idle-holder:2@5s+10s", 2, 5_999).jobs, Jobs::Free);
        assert_eq!(at("idle-holder:2@5s+10s", 2, 6_000).jobs, Jobs::Holder { since_ms: 6_000, until_ms: 16_000 });
        assert_eq!(at("idle-holder:2@5s+10s", 2, 16_000).jobs, Jobs::HolderExited);
    }
}
