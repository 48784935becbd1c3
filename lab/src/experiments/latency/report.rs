//! The latency experiment's pure parts: what it measures, and its readings
//! turned into figures, checks and notes. Shared by the CUDA and the simulated executor.

use shared::lab::{ChartSpec, Check, RunResult};
use shared::units::three_digits;

use crate::report::{empty, figure};
use crate::stats::summarize;

/// Empty kernels queued back to back between two events, per sample of the queued figure.
pub const QUEUED_KERNELS: u32 = 100;
/// Empty kernels in the captured CUDA graph, per sample of the graph figure.
pub const GRAPH_KERNELS: u32 = 1000;
/// Launches of the counting graph, whose counter must read `GRAPH_KERNELS` × this.
pub const GRAPH_COUNT_LAUNCHES: u32 = 3;

/// Figure names of the latency experiment, host figures first.
pub const LATENCY_FIGURES: [&str; 6] = [
    "kernel launch (host)",
    "event record (host)",
    "synchronize, idle stream (host)",
    "launch + synchronize (host)",
    "queued empty kernels, per launch (GPU events; launch-rate bound)",
    "CUDA graph of empty kernels, per kernel (GPU events)",
];

/// The latency experiment's readings, µs per call or per kernel.
#[derive(Debug, Clone, Default)]
pub struct LatencyMeasurements {
    /// Host clock around each call: launch, event record, idle synchronize, launch + synchronize.
    pub host_us: [Vec<f64>; 4],
    /// Events around [`QUEUED_KERNELS`] empty kernels launched back to back, divided by their number.
    pub queued_us: Vec<f64>,
    /// Events around one launch of a graph of [`GRAPH_KERNELS`] empty kernels, divided by their number.
    pub graph_us: Vec<f64>,
    /// Nodes in the captured graph of empty kernels (`cuGraphGetNodes`).
    pub graph_nodes: u64,
    /// A device counter after [`QUEUED_KERNELS`] queued launches of a kernel that adds one to it.
    pub queued_counted: u64,
    /// The counter after [`GRAPH_COUNT_LAUNCHES`] launches of a graph of [`GRAPH_KERNELS`] counting kernels.
    pub graph_counted: u64,
}

pub fn report(m: &LatencyMeasurements) -> RunResult {
    let mut r = empty(ChartSpec::Bars { y_label: "µs".into() }, "µs");
    let [launch, record, sync, round_trip] = &m.host_us;
    for (name, samples) in LATENCY_FIGURES.iter().zip([launch, record, sync, round_trip, &m.queued_us, &m.graph_us]) {
        r.figures.extend(figure(name, "µs", summarize(samples)));
    }
    let graph_expected = u64::from(GRAPH_KERNELS) * u64::from(GRAPH_COUNT_LAUNCHES);
    r.checks.push(Check {
        name: "every kernel launched ran (a device counter), and the graph holds every kernel captured".into(),
        passed: m.queued_counted == u64::from(QUEUED_KERNELS)
            && m.graph_counted == graph_expected
            && m.graph_nodes == u64::from(GRAPH_KERNELS),
        detail: format!(
            "queued: counter {} of {QUEUED_KERNELS}; graph: counter {} of {graph_expected} \
             ({GRAPH_KERNELS} kernels × {GRAPH_COUNT_LAUNCHES} launches); {} of {GRAPH_KERNELS} nodes captured",
            m.queued_counted, m.graph_counted, m.graph_nodes
        ),
    });
    let (queued, graph) = (summarize(&m.queued_us), summarize(&m.graph_us));
    let timed = |v: &[f64]| !v.is_empty() && v.iter().all(|t| t.is_finite() && *t > 0.0);
    let passed = match (queued, graph) {
        (Some(q), Some(g)) => timed(&m.queued_us) && timed(&m.graph_us) && g.median <= q.median * 1.1,
        _ => false,
    };
    r.checks.push(Check {
        name: "GPU-side times are positive, and a kernel in a graph costs no more than a queued launch".into(),
        passed,
        detail: match (queued, graph) {
            (Some(q), Some(g)) => format!(
                "graph {} µs vs queued {} µs per kernel (allowed: up to 1.1×)",
                three_digits(g.median),
                three_digits(q.median)
            ),
            _ => "no GPU-side times were measured".into(),
        },
    });
    r.notes.push("Host figures: a monotonic CPU clock around each call (launch, event record, synchronize).".into());
    r.notes.push(format!(
        "Queued empty kernels: CUDA events around {QUEUED_KERNELS} empty kernels launched back to back, divided by \
         {QUEUED_KERNELS}: whichever is slower, the host launching them or the GPU running them; well above the graph \
         figure's, it is the launch rate, not GPU time."
    ));
    r.notes.push(format!(
        "CUDA graph: {GRAPH_KERNELS} empty kernels captured into a graph, and CUDA events around one launch of \
         it, divided by {GRAPH_KERNELS}: the GPU's time per kernel with the launch cost taken out."
    ));
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn latency_measurements() -> LatencyMeasurements {
        LatencyMeasurements {
            host_us: [vec![4.0], vec![1.4], vec![1.5], vec![8.9]],
            queued_us: vec![2.0, 2.1],
            graph_us: vec![0.9, 1.0],
            graph_nodes: u64::from(GRAPH_KERNELS),
            queued_counted: u64::from(QUEUED_KERNELS),
            graph_counted: u64::from(GRAPH_KERNELS * GRAPH_COUNT_LAUNCHES),
        }
    }

    #[test]
    fn latency_names_what_each_figure_measures() {
        let r = report(&latency_measurements());
        let names: Vec<&str> = r.figures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, LATENCY_FIGURES);
        assert!(names[4].contains("launch-rate bound") && names[5].contains("CUDA graph"));
        assert_eq!(r.passed(), Some(true), "{:?}", r.checks);
        assert!(r.notes.iter().any(|n| n.contains("launch cost taken out")), "{:?}", r.notes);
    }

    #[test]
    fn latency_checks_catch_lost_kernels_and_implausible_times() {
        let good = latency_measurements();
        let failing = [
            LatencyMeasurements { queued_counted: u64::from(QUEUED_KERNELS) - 1, ..good.clone() },
            LatencyMeasurements { graph_counted: u64::from(GRAPH_KERNELS), ..good.clone() },
            LatencyMeasurements { graph_nodes: 1, ..good.clone() },
            LatencyMeasurements { graph_us: vec![2.5], ..good.clone() },
            LatencyMeasurements { graph_us: vec![0.0, 0.9], ..good.clone() },
            LatencyMeasurements { queued_us: vec![f64::NAN, 2.0], ..good.clone() },
            LatencyMeasurements { graph_us: vec![], ..good.clone() },
        ];
        for (i, m) in failing.into_iter().enumerate() {
            let r = report(&m);
            assert_eq!(r.passed(), Some(false), "case {i}: {:?}", r.checks);
        }
        let r = report(&LatencyMeasurements { graph_nodes: 999, ..good });
        assert!(r.checks[0].detail.contains("999 of 1000 nodes"), "{}", r.checks[0].detail);
    }
}
