//! What the GPU's SMs really do (NVML's GPM figures, Hopper and later) and which
//! processes hold memory while doing nothing.
//!
//! "GPU utilization" is the share of time *any* kernel ran; a loop of one-element
//! kernels reads 30 % there and 0.04 % in SM activity. These figures tell the two apart.

use serde::{Deserialize, Serialize};

use crate::DeviceSample;
pub use crate::idle::{IdleHold, IdleSignal};
use crate::processes::GpuProcess;

/// Below this SM activity (percent) a GPU counts as doing nothing.
pub const IDLE_SM_PERCENT: f64 = 1.0;

/// One GPM window of a device: two samples about a second apart.
///
/// Activities are percent (0–100) of the window; rates are bytes per second.
/// A figure the GPU does not report is `None`; when GPM cannot be read at all,
/// every figure is `None` and [`Activity::unavailable`] says why.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Activity {
    /// End of the window, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Length of the window, ms.
    pub window_ms: u64,
    /// Share of time each SM had at least one warp assigned, averaged over all SMs.
    pub sm_active: Option<f64>,
    /// Resident warps against the SMs' maximum.
    pub sm_occupancy: Option<f64>,
    /// Share of time any tensor pipe was busy.
    pub tensor_active: Option<f64>,
    /// Share of the device memory bandwidth used.
    pub dram_active: Option<f64>,
    pub fp64_active: Option<f64>,
    pub fp32_active: Option<f64>,
    pub fp16_active: Option<f64>,
    /// Share of time the graphics/compute engine was busy.
    pub gr_engine_active: Option<f64>,
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// NVLink traffic over all links; `None` on a GPU without links.
    pub nvlink_tx_bytes_per_s: Option<f64>,
    pub nvlink_rx_bytes_per_s: Option<f64>,
    /// Why there are no figures: a GPU before Hopper, a driver that refuses, MIG on.
    pub unavailable: Option<String>,
}

impl Activity {
    /// No figures, and why.
    pub fn unavailable(timestamp_ms: u64, reason: impl Into<String>) -> Self {
        Self { timestamp_ms, unavailable: Some(reason.into()), ..Self::default() }
    }
}

/// What a GPU is doing: the one state type of the server's API, the page's rows and tiles, and the
/// Fleet's per-host counts. A host decides it from its own readings and processes ([`gpu_state`]);
/// the Fleet from what Prometheus holds (`team/src/fleet/hosts.rs`), where it also knows
/// [`GpuState::Reserved`] and [`GpuState::Stale`].
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GpuState {
    /// No process holds it.
    Free,
    /// Someone computes on it (or holds it without having been idle long enough).
    Busy,
    /// Held while it computes nothing: every process on it flagged idle (on a host), or held at 0%
    /// utilization now (in the Fleet, which sees no idle flags).
    HeldIdle,
    /// No process is visible, yet its memory or utilization says someone uses it
    /// ([`crate::in_use::unseen`]): never free.
    InUseUnseen,
    /// Free of processes but booked now (the Fleet counts it apart; a host's page says the booking
    /// beside the state, whatever it is).
    Reserved,
    /// It stopped answering (fell off the bus): neither free nor in use.
    Lost,
    /// The Fleet has no recent figures of it: its state is not known now.
    Stale,
}

impl GpuState {
    /// The state in words, as the page and the API's readers see it.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuState::Free => "free",
            GpuState::Busy => "busy",
            GpuState::HeldIdle => "held idle",
            GpuState::InUseUnseen => "in use (no process visible)",
            GpuState::Reserved => "reserved",
            GpuState::Lost => "lost",
            GpuState::Stale => "stale",
        }
    }

    /// The page's CSS class for it.
    pub fn class(self) -> &'static str {
        match self {
            GpuState::Free => "free",
            GpuState::Busy => "busy",
            GpuState::HeldIdle => "held-idle",
            GpuState::InUseUnseen => "in-use-unseen",
            GpuState::Reserved => "reserved",
            GpuState::Lost => "lost",
            GpuState::Stale => "stale",
        }
    }
}

/// A GPU's state on its host from its latest reading and the processes on it: [`GpuState::Lost`]
/// for a GPU that stopped answering. With no process listed, the reading decides between free and
/// in use by someone gpudash cannot see. Never `Reserved` or `Stale` (see [`GpuState`]).
pub fn gpu_state(index: u32, latest: Option<&DeviceSample>, processes: &[GpuProcess]) -> GpuState {
    if latest.is_some_and(|s| s.lost.is_some()) {
        return GpuState::Lost;
    }
    let mut on_it = processes.iter().filter(|p| p.device == index).peekable();
    if on_it.peek().is_none() {
        let unseen = latest.and_then(crate::in_use::unseen).is_some();
        return if unseen { GpuState::InUseUnseen } else { GpuState::Free };
    }
    if on_it.all(|p| p.idle.is_some()) { GpuState::HeldIdle } else { GpuState::Busy }
}

/// Device memory held by idle processes, bytes.
pub fn idle_memory(processes: &[&GpuProcess]) -> u64 {
    processes.iter().filter(|p| p.idle.is_some()).map(|p| p.used_memory.unwrap_or(0)).sum()
}

/// GPU util at or above which a process judged idle by SM activity needs saying why: "util"
/// counts any kernel running, SM activity how much of the SMs it keeps busy.
pub const HIGH_UTIL_PERCENT: u32 = 30;

/// Why a process on a GPU at `util` % with `sm_active` % SM activity is judged idle although its
/// util reads high, held as `held` says ("for 31m" on the live page, "since 2026-12-06 02:40 UTC"
/// in an alert, which must not freeze): "util 98% but SM activity 0.3% for 31m: tiny kernels or a
/// spin loop?". `None` when util is low (idle on every figure) or unknown. The page's row and the
/// idle alert both say it.
pub fn idle_despite_util(util: Option<u32>, sm_active: Option<f64>, held: &str) -> Option<String> {
    let util = util.filter(|&u| u >= HIGH_UTIL_PERCENT)?;
    let sm = sm_active.map_or_else(|| "below 1%".to_owned(), |sm| format!("{sm:.1}%"));
    Some(format!("util {util}% but SM activity {sm} {held}: tiny kernels or a spin loop?"))
}

/// Why GPU `index`, held idle, reads so although its util bar is high: [`idle_despite_util`] over
/// its util and SM activity in `latest` and the longest hold on it judged by SM activity, up to the
/// reading's time. `None` unless it is
/// [`GpuState::HeldIdle`] with util at or above [`HIGH_UTIL_PERCENT`]. The overview's row and tile say it
/// beside "held idle", the process table on each process.
pub fn held_idle_reason(index: u32, latest: Option<&DeviceSample>, processes: &[GpuProcess]) -> Option<String> {
    if gpu_state(index, latest, processes) != GpuState::HeldIdle {
        return None;
    }
    let now_ms = latest?.timestamp_ms;
    let since = processes
        .iter()
        .filter(|p| p.device == index)
        .filter_map(|p| p.idle.filter(|hold| hold.signal == IdleSignal::SmActivity))
        .map(|hold| hold.since_ms)
        .min()?;
    let activity = latest.and_then(|s| s.activity.as_ref()).filter(|a| a.unavailable.is_none());
    let held = format!("for {}", crate::time::duration(now_ms.saturating_sub(since)));
    idle_despite_util(latest.and_then(|s| s.gpu_util), activity.and_then(|a| a.sm_active), &held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_idle_gpu_at_high_util_says_why() {
        let sample = |util| DeviceSample { gpu_util: Some(util), timestamp_ms: 61_001, ..DeviceSample::default() };
        let idle = [process(0, true)];
        let why = held_idle_reason(0, Some(&sample(92)), &idle);
        assert_eq!(why.as_deref(), Some("util 92% but SM activity below 1% for 1m 1s: tiny kernels or a spin loop?"));
        assert_eq!(held_idle_reason(0, Some(&sample(5)), &idle), None, "low util: idle on every figure");
        let busy = [process(0, true), process(0, false)];
        assert_eq!(held_idle_reason(0, Some(&sample(92)), &busy), None, "not held idle");
    }

    fn process(device: u32, idle: bool) -> GpuProcess {
        GpuProcess {
            used_memory: Some(3 << 30),
            idle: idle.then_some(IdleHold { since_ms: 1, signal: IdleSignal::SmActivity }),
            ..crate::testing::process(device, 7)
        }
    }

    #[test]
    fn a_gpu_is_free_busy_or_held_idle() {
        let (idle, busy) = (process(1, true), process(2, false));
        let both = [idle.clone(), busy.clone(), process(2, true)];
        assert_eq!(gpu_state(0, None, &both), GpuState::Free);
        assert_eq!(gpu_state(1, None, &both), GpuState::HeldIdle);
        assert_eq!(gpu_state(2, None, &both), GpuState::Busy, "one idle process beside a busy one");
        let hidden = DeviceSample {
            memory_used: Some(21 << 30),
            memory_free: Some(120 << 30),
            gpu_util: Some(100),
            ..Default::default()
        };
        assert_eq!(gpu_state(0, Some(&hidden), &both), GpuState::InUseUnseen, "busy with no process visible");
        assert_eq!(gpu_state(1, Some(&hidden), &both), GpuState::HeldIdle, "its listed processes decide");
        let lost = DeviceSample { lost: Some("gone".into()), ..Default::default() };
        assert_eq!(gpu_state(0, Some(&lost), &both), GpuState::Lost);
        assert_eq!(idle_memory(&[&idle, &busy]), 3 << 30);
    }

    #[test]
    fn idle_at_high_util_says_why() {
        assert_eq!(
            idle_despite_util(Some(98), Some(0.31), "for 31m").as_deref(),
            Some("util 98% but SM activity 0.3% for 31m: tiny kernels or a spin loop?")
        );
        assert_eq!(idle_despite_util(Some(5), Some(0.0), "for 1m"), None, "idle on every figure");
        assert_eq!(idle_despite_util(None, Some(0.0), "for 1m"), None);
    }

    #[test]
    fn unavailable_activity_has_no_figures_and_round_trips() {
        let a = Activity::unavailable(5, "GPM needs Hopper");
        assert_eq!((a.sm_active, a.tensor_active), (None, None));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Activity>(&json).unwrap(), a);
    }
}
