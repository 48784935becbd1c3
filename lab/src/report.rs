//! What every experiment's report shaping starts from: an empty [`RunResult`] and a named figure.
//! Each kind's shaping lives in `experiments/<kind>/report.rs`, shared by the CUDA and the simulated
//! executor, so the simulated one exercises the same shaping as the GPU.

use shared::lab::{ChartSpec, Figure, RunResult, Stats};

pub(crate) fn figure(name: &str, unit: &str, stats: Option<Stats>) -> Option<Figure> {
    stats.map(|stats| Figure { name: name.to_owned(), unit: unit.to_owned(), stats })
}

pub(crate) fn empty(chart: ChartSpec, unit: &str) -> RunResult {
    RunResult {
        chart,
        unit: unit.to_owned(),
        series: Vec::new(),
        references: Vec::new(),
        figures: Vec::new(),
        checks: Vec::new(),
        memory_steps: Vec::new(),
        timeline: Vec::new(),
        notes: Vec::new(),
        matrices: Vec::new(),
        l2_bytes: None,
    }
}
