//! The streams experiment's timings turned into figures, the overlap check and its timeline.

use shared::lab::{ChartSpec, Check, RunResult, Stats, TimelineSpan};

use crate::checks::{self, StreamsOutputs};
use crate::report::{empty, figure};
use crate::stats::summarize;

/// The streams experiment's timings, ms per round.
#[derive(Debug, Clone, Default)]
pub struct StreamsMeasurements {
    pub copy_ms: Vec<f64>,
    pub compute_ms: Vec<f64>,
    pub serial_ms: Vec<f64>,
    pub overlapped_ms: Vec<f64>,
    pub kernels: u32,
    pub kernels_one_stream_ms: Vec<f64>,
    pub kernels_many_streams_ms: Vec<f64>,
    /// The last round's spans.
    pub timeline: Vec<TimelineSpan>,
    /// What the last round's copy, GEMM and kernels produced; `None` fails the run (nothing verified).
    pub outputs: Option<StreamsOutputs>,
}

pub fn streams(m: StreamsMeasurements) -> RunResult {
    let mut r = empty(ChartSpec::Gantt, "ms");
    let s = |v: &[f64]| summarize(v);
    let k = m.kernels;
    for (name, stats) in [
        ("copy alone", s(&m.copy_ms)),
        ("compute alone", s(&m.compute_ms)),
        ("copy then compute, one stream", s(&m.serial_ms)),
        ("copy and compute, two streams", s(&m.overlapped_ms)),
        (&format!("{k} kernels, one stream") as &str, s(&m.kernels_one_stream_ms)),
        (&format!("{k} kernels, {k} streams") as &str, s(&m.kernels_many_streams_ms)),
    ] {
        r.figures.extend(figure(name, "ms", stats));
    }
    if let (Some(copy), Some(compute), Some(serial), Some(overlapped)) =
        (s(&m.copy_ms), s(&m.compute_ms), s(&m.serial_ms), s(&m.overlapped_ms))
    {
        let ideal = copy.median.max(compute.median);
        let gain = |t: f64| serial.median / t;
        r.figures.extend(figure("overlap gain", "×", Some(one(gain(overlapped.median)))));
        r.figures.extend(figure("ideal overlap gain", "×", Some(one(gain(ideal)))));
        r.checks.push(overlap_check(serial.median, overlapped.median, ideal));
    }
    if let (Some(one_stream), Some(many)) = (s(&m.kernels_one_stream_ms), s(&m.kernels_many_streams_ms)) {
        r.figures.extend(figure("concurrent kernels gain", "×", Some(one(one_stream.median / many.median))));
        r.figures.extend(figure("ideal concurrent kernels gain", "×", Some(one(f64::from(k)))));
    }
    match &m.outputs {
        Some(outputs) => r.checks.extend(checks::streams(outputs)),
        None => r.checks.push(Check {
            name: "the outputs were verified".into(),
            passed: false,
            detail: "the executor read back no outputs of the copy, the GEMM or the kernels".into(),
        }),
    }
    r.notes.push(
        "Both kernel arms are timed the same way: CUDA events around the whole batch, no host round trip inside. \
         Bars are CUDA events recorded around each operation in the last timed round."
            .into(),
    );
    r.timeline = m.timeline;
    r
}

/// Below this, max(copy, compute) is too short to hold two streams to +2% of it.
pub const OVERLAP_JUDGED_FROM_MS: f64 = 10.0;

/// The overlap check. From [`OVERLAP_JUDGED_FROM_MS`] up, two streams must come within 2% of
/// max(copy, compute). Shorter phases are not held to that: the stream join, event records and
/// the copy's DMA competing with the GEMM for memory cost a few percent there (+4.9% at 2.7 ms on
/// an H200, +0.8% at 21.6 ms). They are judged on what overlap is for instead: two streams must
/// save at least half of the time overlap can save (serial − ideal).
fn overlap_check(serial: f64, overlapped: f64, ideal: f64) -> Check {
    let excess = (overlapped / ideal - 1.0) * 100.0;
    let measured = format!("two streams {overlapped:.3} ms vs ideal max(copy, compute) {ideal:.3} ms ({excess:+.1}%)");
    if ideal >= OVERLAP_JUDGED_FROM_MS {
        return Check {
            name: "copy overlaps compute".into(),
            passed: excess <= 2.0,
            detail: format!("{measured}; target ≤ +2%"),
        };
    }
    let saved = serial - overlapped;
    let possible = serial - ideal;
    let share = if possible > 0.0 { saved / possible * 100.0 } else { 0.0 };
    Check {
        name: "copy overlaps compute".into(),
        passed: possible > 0.0 && share >= 50.0,
        detail: format!(
            "{measured}; phases under {OVERLAP_JUDGED_FROM_MS:.0} ms are not held to +2% (fixed costs and the \
             copy's memory traffic reach a few % there); judged instead: two streams save {share:.0}% of the \
             {possible:.3} ms overlap can save (target ≥ 50%). Use copy_bytes ≥ 256 MiB and gemm_size ≥ 8192 \
             (the defaults) for the +2% target"
        ),
    }
}

fn one(v: f64) -> Stats {
    Stats { median: v, min: v, max: v, n: 1 }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::checks::{GemmErrors, GemmSums, TimedGemms};

    fn good_outputs() -> StreamsOutputs {
        let n = 256;
        StreamsOutputs {
            copied: checks::PatternCompare { compared: 4096, differ: 0, first: None },
            gemm: GemmErrors { worst: 1e-6, at: (0, 0), compared: (2 * 16 * n - 256) as u64, order: n },
            gemm_sums: GemmSums { worst: 1e-6, at: ("row", 0), compared: 2 * n as u64, order: n },
            poisoned: TimedGemms { checked: 4, expected: 4, poisoned: 0 },
            spun: vec![1000; 16],
            cycles: 1000,
            launched: 16,
        }
    }

    #[test]
    fn streams_without_outputs_fail() {
        let m = StreamsMeasurements { copy_ms: vec![1.0], kernels: 8, ..Default::default() };
        let r = streams(m);
        assert_eq!(r.passed(), Some(false));
        assert_eq!(r.checks[0].name, "the outputs were verified");
    }

    #[test]
    fn streams_overlap_check_allows_two_percent() {
        let m = StreamsMeasurements {
            copy_ms: vec![4.84],
            compute_ms: vec![21.56],
            serial_ms: vec![26.35],
            overlapped_ms: vec![21.9],
            kernels: 8,
            kernels_one_stream_ms: vec![4.0],
            kernels_many_streams_ms: vec![0.55],
            timeline: vec![],
            outputs: Some(good_outputs()),
        };
        assert_eq!(streams(m.clone()).passed(), Some(true));
        assert_eq!(streams(StreamsMeasurements { overlapped_ms: vec![26.0], ..m }).passed(), Some(false));
    }

    #[test]
    fn short_phases_are_judged_on_the_time_overlap_saves() {
        // The H200's figures with a 64 MiB copy and a 4096 GEMM: +4.9% over ideal, yet most of the gain.
        let m = StreamsMeasurements {
            copy_ms: vec![1.24],
            compute_ms: vec![2.68],
            serial_ms: vec![3.93],
            overlapped_ms: vec![2.81],
            kernels: 8,
            outputs: Some(good_outputs()),
            ..Default::default()
        };
        let r = streams(m.clone());
        assert_eq!(r.passed(), Some(true), "{:?}", r.checks);
        assert!(r.checks[0].detail.contains("not held to +2%") && r.checks[0].detail.contains("+4.9%"));
        // No overlap at all fails, however short.
        assert_eq!(streams(StreamsMeasurements { overlapped_ms: vec![3.9], ..m }).passed(), Some(false));
    }
}
