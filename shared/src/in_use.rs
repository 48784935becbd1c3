//! Whether a GPU is in use by its own figures, whoever its processes are: the part of "free" that
//! needs no process list (a GPU whose processes gpudash cannot see still fills its memory and
//! keeps its SMs busy). A leaf: `severity` keeps its answer in a `Condition`, `activity` and
//! `usability` read it, and the Fleet applies it to what Prometheus holds.

use crate::DeviceSample;

/// Memory used at or above this much means someone holds the GPU, listed or not: an idle GPU reads
/// a few MiB (NVML's v2 memory figures leave the driver's reserve out; 0 MiB on an idle H200),
/// while a CUDA context alone takes 300–600 MiB.
pub const IN_USE_MEMORY_BYTES: u64 = 256 << 20;
/// ... or this share of a small GPU's total, when that is less (a 16 GiB card: 164 MiB). The Fleet
/// applies both to what Prometheus holds.
pub const IN_USE_MEMORY_SHARE: f64 = 0.01;

/// Why a GPU is in use by its own figures although no process on it is visible (gpudash in a PID
/// namespace of its own, a container without the host's PIDs, a driver that hides other users'
/// processes): memory used at or above [`IN_USE_MEMORY_BYTES`] (or [`IN_USE_MEMORY_SHARE`] of
/// `total`, when less), or any utilization. `None` when the figures say idle or are not known.
/// Percent `util` as NVML and DCGM report it.
pub fn by_figures(used: Option<u64>, total: Option<u64>, util: Option<f64>) -> Option<String> {
    let floor = total
        .filter(|&t| t > 0)
        .map_or(IN_USE_MEMORY_BYTES, |t| IN_USE_MEMORY_BYTES.min((IN_USE_MEMORY_SHARE * t as f64) as u64));
    let held = used.filter(|&used| used >= floor);
    let busy = util.filter(|&u| u > 0.0);
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let figures = match (held, busy) {
        (None, None) => return None,
        (Some(used), None) => format!("{:.1} GiB used", gib(used)),
        (None, Some(util)) => format!("util {util:.0}%"),
        (Some(used), Some(util)) => format!("{:.1} GiB used, util {util:.0}%", gib(used)),
    };
    Some(format!("{figures} with no process visible"))
}

/// [`by_figures`] of a sample of this host (its total: used plus free): what
/// [`crate::severity::Condition::of`] keeps and `shared::activity::gpu_state` reads, so both say the same.
pub fn unseen(sample: &DeviceSample) -> Option<String> {
    let total = sample.memory_used.zip(sample.memory_free).map(|(used, free)| used.saturating_add(free));
    by_figures(sample.memory_used, total, sample.gpu_util.map(f64::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_or_utilization_says_in_use() {
        assert_eq!(by_figures(Some(0), Some(100), Some(0.0)), None);
        assert_eq!(by_figures(Some(1), Some(100), Some(0.0)).as_deref(), Some("0.0 GiB used with no process visible"));
        assert_eq!(by_figures(Some(0), Some(100), Some(3.0)).as_deref(), Some("util 3% with no process visible"));
        assert_eq!(by_figures(None, None, None), None, "unknown figures say nothing");
        // An H200's 1% would be 1.4 GiB: an idle CUDA context (~0.5 GiB) is caught by the absolute floor.
        let h200 = Some(143_771 << 20);
        assert!(by_figures(Some(520 << 20), h200, Some(0.0)).is_some(), "an idle context nobody sees");
        assert!(by_figures(Some(255 << 20), h200, Some(0.0)).is_none());
        assert!(by_figures(Some(256 << 20), None, Some(0.0)).is_some(), "no total: the absolute floor");
    }
}
