//! The memory experiment's readings turned into its chart, figures and checks.

use shared::lab::{ChartSpec, MemoryStep, Point, RunResult, Series, Stats};

use crate::checks;
use crate::report::{empty, figure};
use crate::stats::summarize;

/// The memory chart's third curve: the device's used memory (NVML, every process) less what it was at the start.
pub const NVML_CHANGE: &str = "device used (NVML), change since start";

/// The memory experiment's readings.
#[derive(Debug, Clone, Default)]
pub struct MemoryMeasurements {
    pub steps: Vec<MemoryStep>,
    /// Host-side time of an allocation the pool served from its cache, µs.
    pub pooled_us: Vec<f64>,
    /// Host-side time of an allocation that had to ask the driver for memory, µs.
    pub fresh_us: Vec<f64>,
}

pub fn memory(m: MemoryMeasurements) -> RunResult {
    const GIB: f64 = (1u64 << 30) as f64;
    let mut r =
        empty(ChartSpec::Lines { x_label: "step".into(), y_label: "GiB".into(), log_x: false, log_y: false }, "GiB");
    let curve = |name: &str, value: &dyn Fn(&MemoryStep) -> Option<u64>| Series {
        name: name.to_owned(),
        points: m
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let v = value(s)? as f64 / GIB;
                Some(Point { x: i as f64, y: Stats { median: v, min: v, max: v, n: 1 } })
            })
            .collect(),
    };
    // NVML's figure counts every process on the GPU: drawn as is, it would dwarf the pool. Its change
    // since the start is what this run did to the device, on the pool's own scale.
    let nvml_start = m.steps.first().and_then(|s| s.nvml_used);
    r.series = vec![
        curve("allocated (pool used)", &|s| Some(s.allocated)),
        curve("reserved (pool reserved)", &|s| Some(s.reserved)),
        curve(NVML_CHANGE, &|s| Some(s.nvml_used?.saturating_sub(nvml_start?))),
    ];
    r.figures.extend(figure("allocation served from the pool", "µs", summarize(&m.pooled_us)));
    r.figures.extend(figure("fresh allocation from the driver", "µs", summarize(&m.fresh_us)));
    r.checks.extend(checks::memory(&m.steps));
    r.notes.push(
        "Blocks come from the driver's stream-ordered pool (cuMemAllocAsync); freed blocks stay reserved until \
         empty_cache trims the pool, like PyTorch's caching allocator."
            .into(),
    );
    r.memory_steps = m.steps;
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_chart_draws_nvml_as_the_change_since_the_start() {
        const GIB: u64 = 1 << 30;
        let step = |label: &str, allocated, reserved, nvml| MemoryStep {
            label: label.into(),
            allocated,
            reserved,
            nvml_used: Some(nvml),
        };
        let steps = vec![step("start", 0, 0, 90 * GIB), step("alloc block 1", GIB, GIB, 91 * GIB + (1 << 29))];
        let r = memory(MemoryMeasurements { steps, ..MemoryMeasurements::default() });
        let nvml = r.series.iter().find(|s| s.name == NVML_CHANGE).unwrap();
        let gib: Vec<f64> = nvml.points.iter().map(|p| p.y.median).collect();
        assert_eq!(gib, [0.0, 1.5], "90 GiB others hold is not drawn");
    }
}
