//! Each experiment in PyTorch's words ([`InPyTorch`], implemented in its folder's `pytorch.rs`), and
//! what the takeaways read their figures with; the lab hands them out (`ExperimentInfo::snippet`,
//! `Run::takeaway`), so the page and the exports say the same words and name no kind.

use shared::lab::{Figure, RunResult};
use shared::units::three_digits;

/// An experiment in PyTorch's words: its folder's `pytorch.rs` implements it for the experiment.
pub trait InPyTorch {
    /// What it measures, written as PyTorch does it: a short script the page shows and copies.
    const SNIPPET: &'static str;
    /// One line on what a run's figures mean for a PyTorch program ("pinned copies were 6.8× faster…");
    /// `None` when the figures it needs are missing (a failed run, a subset of the experiment).
    fn takeaway(result: &RunResult) -> Option<String>;
}

/// The median of the figure named `name`, when it is a positive number.
pub fn median(figures: &[Figure], name: &str) -> Option<f64> {
    figures.iter().find(|f| f.name == name).map(|f| f.stats.median).filter(|v| v.is_finite() && *v > 0.0)
}

/// "6.8×", "15×".
pub fn times(ratio: f64) -> String {
    format!("{}×", three_digits(ratio))
}

#[cfg(test)]
pub mod testing {
    use shared::lab::{ChartSpec, Figure, MemoryStep, RunResult, Stats};

    pub fn fig(name: &str, median: f64) -> Figure {
        Figure { name: name.into(), unit: String::new(), stats: Stats { median, min: median, max: median, n: 3 } }
    }

    pub fn result(figures: Vec<Figure>, memory_steps: Vec<MemoryStep>) -> RunResult {
        RunResult {
            chart: ChartSpec::Bars { y_label: String::new() },
            unit: String::new(),
            series: vec![],
            references: vec![],
            figures,
            checks: vec![],
            memory_steps,
            timeline: vec![],
            matrices: vec![],
            notes: vec![],
            l2_bytes: None,
        }
    }

    /// Fails unless `snippet` is a script that imports torch and names each of `words`.
    pub fn says(snippet: &str, words: &[&str]) {
        assert!(snippet.starts_with("import torch"), "{snippet}");
        for word in words {
            assert!(snippet.contains(word), "lacks {word}: {snippet}");
        }
    }

    pub fn step(label: &str, allocated: u64, reserved: u64) -> MemoryStep {
        MemoryStep { label: label.into(), allocated, reserved, nvml_used: None }
    }
}
