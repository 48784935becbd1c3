//! Whether a GPU is in use by its own figures, whoever its processes are: the part of "free" that
//! needs no process list (a GPU whose processes gpudash cannot see still fills its memory and
//! keeps its SMs busy). A leaf: `severity` keeps its answer in a `Condition`, `activity` and
//! `usability` read it, and the Fleet applies it to what Prometheus holds.

use crate::DeviceSample;

/// Memory used at or above this share of a GPU's total means someone holds it, listed or not:
/// an idle GPU reads a few MiB (NVML's v2 memory figures leave the driver's reserve out), while a
/// CUDA context alone takes 300–600 MiB. The Fleet reads the same share from Prometheus.
pub const IN_USE_MEMORY_SHARE: f64 = 0.01;

/// Why a GPU is in use by its own figures although no process on it is visible (gpudash in a PID
/// namespace of its own, a container without the host's PIDs, a driver that hides other users'
/// processes): memory used at or above [`IN_USE_MEMORY_SHARE`] of `total`, or any utilization.
/// `None` when the figures say idle or are not known. Percent `util` as NVML and DCGM report it.
pub fn by_figures(used: Option<u64>, total: Option<u64>, util: Option<f64>) -> Option<String> {
    let held = match (used, total) {
        (Some(used), Some(total)) if total > 0 => (used as f64 >= IN_USE_MEMORY_SHARE * total as f64).then_some(used),
        _ => None,
    };
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
    }
}
