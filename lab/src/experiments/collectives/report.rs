//! The collectives experiment's measurements turned into a result: time, algbw and busbw per collective
//! and size (nccl-tests' formulas, `params.rs`), busbw against size with the link's peak,
//! the per-GPU checks, and the DDP step view in PyTorch's words.

use crate::experiments::collectives::params::{Collective, DdpPlan, algbw_gbs, busbw_gbs};
use shared::lab::{ChartSpec, Check, Point, ReferenceLine, RunResult, Series, Stats};
use crate::experiments::precision::params::Dtype;
use shared::units::format_bytes;

use super::path::PathPeak;
use crate::report::{empty, figure};
use crate::stats::summarize;

/// Said on the page for a one-GPU run, before what each collective's figures mean there.
pub const ONE_GPU_NOTE: &str = "collectives need two GPUs to move data; this checks that NCCL works here.";

/// The one-GPU note for the collectives that ran: with one rank nothing crosses a bus, so all_reduce,
/// all_gather and reduce_scatter have busbw 0 by nccl-tests' formulas, while broadcast's factor is 1
/// whatever the rank count, so its busbw is a copy within the GPU (e.g. 2080 GB/s on an H200), not a link.
pub fn one_gpu_note(ran: &[Collective]) -> String {
    let zero: Vec<&str> = Collective::ALL
        .into_iter()
        .filter(|c| *c != Collective::Broadcast && ran.contains(c))
        .map(Collective::name)
        .collect();
    let mut parts = Vec::new();
    if !zero.is_empty() {
        parts.push(format!("{} busbw is 0 by nccl-tests' formulas", zero.join(", ")));
    }
    if ran.contains(&Collective::Broadcast) {
        parts.push("broadcast's busbw (factor 1) is a copy within the GPU's memory, not a link speed".to_owned());
    }
    format!("{ONE_GPU_NOTE} With one rank nothing crosses a bus: {}; so the chart has no link peak.", parts.join("; "))
}

/// One collective at one size: ms per call of each timed repetition (the slowest rank's).
#[derive(Debug, Clone)]
pub struct CollectiveSample {
    pub collective: Collective,
    /// Bytes as nccl-tests counts them (the whole gathered buffer for all_gather and reduce_scatter).
    pub bytes: u64,
    pub times_ms: Vec<f64>,
}

/// Element-by-element comparison of one rank's result with what it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResultCompare {
    pub compared: u64,
    pub differ: u64,
    /// The first element that differs.
    pub first: Option<u64>,
}

/// Compares `got` (rank `rank`'s result of `collective` over `n` ranks, `piece` elements a rank for
/// all_gather) with [`Collective::expected`].
pub fn compare(collective: Collective, n: usize, piece: u64, got: &[f64]) -> ResultCompare {
    let mut out = ResultCompare { compared: got.len() as u64, ..ResultCompare::default() };
    for (i, &v) in got.iter().enumerate() {
        if v != collective.expected(n, piece, i as u64) {
            out.differ += 1;
            out.first.get_or_insert(i as u64);
        }
    }
    out
}

/// The check of one rank's result.
pub fn check(collective: Collective, gpu: u32, n: usize, bytes: u64, c: &ResultCompare) -> Check {
    let want = match collective {
        Collective::AllReduce | Collective::ReduceScatter => format!("every element {}", n * (n + 1) / 2),
        Collective::AllGather => format!("piece r holding r+1 for r in 0..{n}"),
        Collective::Broadcast => "every element 1 (rank 0's)".to_owned(),
    };
    let detail = if c.differ == 0 {
        format!("{} elements compared, all right ({want})", c.compared)
    } else {
        format!(
            "{} of {} elements wrong, first at element {} (want {want})",
            c.differ,
            c.compared,
            c.first.unwrap_or(0)
        )
    };
    Check {
        name: format!("{} {} on GPU {gpu}", collective.name(), format_bytes(bytes)),
        passed: c.differ == 0 && c.compared > 0,
        detail,
    }
}

/// What the DDP step view measured.
#[derive(Debug, Clone)]
pub struct DdpMeasurement {
    pub plan: DdpPlan,
    pub dtype: Dtype,
    pub tokens: u32,
    pub bucket_cap_mb: u32,
    /// The backward pass's GEMMs alone, ms per step.
    pub compute_ms: Vec<f64>,
    /// Every bucket's all-reduce alone, back to back; `None` on one GPU.
    pub comm_ms: Option<Vec<f64>>,
    /// Both, each bucket's all-reduce on a second stream once its gradients are written; `None` on one GPU.
    pub overlapped_ms: Option<Vec<f64>>,
}

/// Everything a collectives run measured.
#[derive(Debug, Clone)]
pub struct CollectivesMeasurements {
    pub gpus: Vec<u32>,
    pub dtype: Dtype,
    pub samples: Vec<CollectiveSample>,
    pub checks: Vec<Check>,
    pub ddp: Option<DdpMeasurement>,
    /// "NCCL 2.28.3 (/usr/lib/…/libnccl.so.2)", or "simulated".
    pub library: String,
    /// The path's peak (NVLink or PCIe), GB/s one direction, with its label; `None` on one GPU.
    pub link_peak: Option<PathPeak>,
}

/// The figure `f` makes of each time: its median from the median time, and its min and max the smallest and
/// largest values of the figure itself (a time's min is the fastest repetition; a bandwidth's max is).
fn stats_of(times: &[f64], f: impl Fn(f64) -> f64) -> Option<Stats> {
    let t = summarize(times)?;
    let (a, b) = (f(t.min), f(t.max));
    Some(Stats { median: f(t.median), min: a.min(b), max: a.max(b), n: t.n })
}

/// busbw against size per collective, figures of time, algbw and busbw at each size, the checks, notes.
pub fn report(m: CollectivesMeasurements) -> RunResult {
    let n = m.gpus.len();
    let mut r = empty(
        ChartSpec::Lines { x_label: "bytes".into(), y_label: "busbw GB/s".into(), log_x: true, log_y: false },
        "GB/s",
    );
    for collective in Collective::ALL {
        let mut points = Vec::new();
        for s in m.samples.iter().filter(|s| s.collective == collective) {
            let name = format!("{} {}", collective.name(), format_bytes(s.bytes));
            r.figures.extend(figure(&format!("{name} time"), "µs", stats_of(&s.times_ms, |ms| ms * 1e3)));
            r.figures.extend(figure(
                &format!("{name} algbw"),
                "GB/s",
                stats_of(&s.times_ms, |ms| algbw_gbs(s.bytes, ms)),
            ));
            let busbw = stats_of(&s.times_ms, |ms| busbw_gbs(collective, n, s.bytes, ms));
            r.figures.extend(figure(&format!("{name} busbw"), "GB/s", busbw));
            if let Some(y) = busbw {
                points.push(Point { x: s.bytes as f64, y });
            }
        }
        if !points.is_empty() {
            r.series.push(Series { name: collective.name().to_owned(), points });
        }
    }
    if let Some(peak) = &m.link_peak {
        r.references.push(ReferenceLine { name: peak.label.clone(), value: peak.gbs });
    }
    r.checks = m.checks;
    r.notes.push(format!(
        "{} over GPUs {:?} ({} rank{}, one communicator per GPU in one process, ncclCommInitAll), {}.",
        m.library,
        m.gpus,
        n,
        if n == 1 { "" } else { "s" },
        m.dtype.name()
    ));
    r.notes.push(
        "Bandwidth as nccl-tests: algbw = bytes / time; busbw = algbw × 2(n−1)/n for all_reduce, × (n−1)/n for \
         all_gather and reduce_scatter (bytes: the whole gathered buffer), × 1 for broadcast. Time: CUDA events \
         around each call on every GPU's stream, the slowest rank's, median of the repetitions after warm-up."
            .into(),
    );
    r.notes.push(
        "Check: rank r fills its buffer with r+1 and every GPU's whole result is compared after the timed calls \
         (all_reduce and reduce_scatter: n(n+1)/2; all_gather: piece r holds r+1; broadcast: 1)."
            .into(),
    );
    if n == 1 {
        let ran: Vec<Collective> = m.samples.iter().map(|s| s.collective).collect();
        r.notes.push(one_gpu_note(&ran));
    }
    if let Some(ddp) = &m.ddp {
        ddp_view(&mut r, ddp, n);
    }
    r
}

/// The DDP step: compute, communication, the overlapped step and communication's share, in PyTorch's words.
fn ddp_view(r: &mut RunResult, d: &DdpMeasurement, n: usize) {
    let p = &d.plan;
    r.notes.push(format!(
        "DDP step (DistributedDataParallel): {:.2} B parameters as {} square layers, {} of {} gradients, in {} \
         buckets of bucket_cap_mb={} (the first capped at 1 MiB, as DDP does); backward = 2 × forward = 4 × \
         parameters × {} tokens = {:.1} TFLOP per GPU per step.",
        p.parameters as f64 / 1e9,
        p.layers,
        format_bytes(p.gradient_bytes),
        d.dtype.name(),
        p.buckets.len(),
        d.bucket_cap_mb,
        d.tokens,
        p.backward_flops / 1e12
    ));
    let compute = summarize(&d.compute_ms);
    r.figures.extend(figure("DDP step: compute (backward GEMMs)", "ms", compute));
    r.figures.extend(figure(
        "DDP step: compute throughput",
        "TFLOP/s",
        stats_of(&d.compute_ms, |ms| if ms > 0.0 { p.backward_flops / (ms * 1e-3) / 1e12 } else { 0.0 }),
    ));
    let (Some(comm), Some(both)) = (&d.comm_ms, &d.overlapped_ms) else {
        r.notes.push(format!(
            "DDP step on one GPU: the compute side and the bucket plan only. The communication side needs two GPUs: \
             each step all-reduces {} in {} buckets, which DDP overlaps with the backward pass on a second stream \
             (no_sync() skips it on accumulation steps).",
            format_bytes(p.gradient_bytes),
            p.buckets.len()
        ));
        return;
    };
    let comm_stats = summarize(comm);
    let both_stats = summarize(both);
    r.figures.extend(figure("DDP step: communication (bucket all-reduces)", "ms", comm_stats));
    r.figures.extend(figure("DDP step: overlapped step", "ms", both_stats));
    if let (Some(c), Some(b), Some(k)) = (comm_stats, both_stats, compute) {
        let share = if b.median > 0.0 { ((b.median - k.median) / b.median * 100.0).max(0.0) } else { 0.0 };
        r.figures.extend(figure(
            "DDP step: communication's share (time the step waits beyond compute)",
            "%",
            Some(Stats { median: share, min: share, max: share, n: 1 }),
        ));
        r.notes.push(format!(
            "DDP step over {n} GPUs: compute {:.2} ms, all-reduce {:.2} ms, overlapped {:.2} ms; {:.0}% of the step \
             is communication not hidden behind compute. Fewer, larger buckets (bucket_cap_mb) cost fewer calls; \
             no_sync() on gradient-accumulation steps skips the all-reduce entirely.",
            k.median, c.median, b.median, share
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::collectives::params::DdpParams;

    fn run(n: usize) -> RunResult {
        let gpus: Vec<u32> = (0..n as u32).collect();
        let sample = |c, bytes, ms| CollectiveSample { collective: c, bytes, times_ms: vec![ms; 3] };
        report(CollectivesMeasurements {
            gpus,
            dtype: Dtype::Fp32,
            samples: vec![sample(Collective::AllReduce, 1 << 30, 10.0), sample(Collective::AllGather, 1 << 30, 5.0)],
            checks: vec![],
            ddp: None,
            library: "NCCL 2.28.3 (test)".into(),
            link_peak: Some(PathPeak { label: "NVLink 4 × 18 links".into(), gbs: 450.0 }),
        })
    }

    #[test]
    fn busbw_series_follow_the_formulas() {
        let r = run(2);
        let ar = r.series.iter().find(|s| s.name == "all_reduce").unwrap();
        // 1 GiB in 10 ms: algbw 107.4 GB/s; two ranks: busbw = algbw.
        assert!((ar.points[0].y.median - 107.374).abs() < 1e-2, "{:?}", ar.points);
        let ag = r.figures.iter().find(|f| f.name == "all_gather 1.00 GiB busbw").unwrap();
        assert!((ag.stats.median - 107.374).abs() < 1e-2, "{ag:?}");
        assert_eq!(r.references[0].value, 450.0);
        assert!(!r.notes.iter().any(|n| n.contains("need two GPUs")));
        let one = run(1);
        let note = one.notes.iter().find(|n| n.starts_with("collectives need two GPUs to move data")).unwrap();
        assert!(note.contains("all_reduce, all_gather busbw is 0") && !note.contains("broadcast"), "{note}");
        assert_eq!(one.series[0].points[0].y.median, 0.0);
    }

    #[test]
    fn the_one_gpu_note_says_broadcast_is_a_local_copy() {
        let note = one_gpu_note(&Collective::ALL);
        assert!(note.contains("all_reduce, all_gather, reduce_scatter busbw is 0 by nccl-tests' formulas"), "{note}");
        assert!(note.contains("broadcast's busbw (factor 1) is a copy within the GPU's memory, not a link speed"));
        assert_eq!(
            one_gpu_note(&[Collective::Broadcast]),
            "collectives need two GPUs to move data; this checks that NCCL works here. With one rank nothing \
             crosses a bus: broadcast's busbw (factor 1) is a copy within the GPU's memory, not a link speed; so \
             the chart has no link peak."
        );
    }

    #[test]
    fn min_and_max_are_the_figures_own_smallest_and_largest() {
        let sample =
            CollectiveSample { collective: Collective::AllReduce, bytes: 1 << 30, times_ms: vec![10.0, 20.0, 40.0] };
        let r = report(CollectivesMeasurements {
            gpus: vec![0, 1],
            dtype: Dtype::Fp32,
            samples: vec![sample],
            checks: vec![],
            ddp: None,
            library: "test".into(),
            link_peak: None,
        });
        let stats = |name: &str| r.figures.iter().find(|f| f.name == name).unwrap().stats;
        let time = stats("all_reduce 1.00 GiB time");
        assert_eq!((time.min, time.median, time.max), (10_000.0, 20_000.0, 40_000.0), "µs: the fastest is the min");
        let bw = stats("all_reduce 1.00 GiB busbw");
        assert!(bw.min < bw.median && bw.median < bw.max, "{bw:?}");
        assert!((bw.max - algbw_gbs(1 << 30, 10.0)).abs() < 1e-9, "the fastest repetition is the highest busbw");
    }

    #[test]
    fn the_check_catches_a_wrong_sum() {
        let right = vec![3.0; 16];
        assert_eq!(compare(Collective::AllReduce, 2, 0, &right).differ, 0);
        // Max instead of sum over ranks 1 and 2: 2 everywhere.
        let wrong = compare(Collective::AllReduce, 2, 0, &[2.0; 16]);
        assert_eq!((wrong.differ, wrong.first), (16, Some(0)));
        let c = check(Collective::AllReduce, 1, 2, 64, &wrong);
        assert!(!c.passed && c.detail.contains("16 of 16 elements wrong"), "{c:?}");
        let gathered = [1.0, 1.0, 2.0, 2.0];
        assert_eq!(compare(Collective::AllGather, 2, 2, &gathered).differ, 0);
        assert_eq!(compare(Collective::AllGather, 2, 2, &[1.0, 1.0, 1.0, 2.0]).first, Some(2));
    }

    #[test]
    fn ddp_view_speaks_pytorch() {
        let plan = DdpParams::default().plan();
        let d = DdpMeasurement {
            plan,
            dtype: Dtype::Bf16,
            tokens: 4096,
            bucket_cap_mb: 25,
            compute_ms: vec![20.0],
            comm_ms: Some(vec![10.0]),
            overlapped_ms: Some(vec![25.0]),
        };
        let mut r = empty(ChartSpec::Bars { y_label: "ms".into() }, "ms");
        ddp_view(&mut r, &d, 2);
        let share = r.figures.iter().find(|f| f.name.starts_with("DDP step: communication's share")).unwrap();
        assert!((share.stats.median - 20.0).abs() < 1e-9);
        assert!(r.notes.iter().any(|n| n.contains("bucket_cap_mb=25") && n.contains("DistributedDataParallel")));
        let mut one = empty(ChartSpec::Bars { y_label: "ms".into() }, "ms");
        ddp_view(&mut one, &DdpMeasurement { comm_ms: None, overlapped_ms: None, ..d }, 1);
        assert!(one.notes.iter().any(|n| n.contains("needs two GPUs") && n.contains("no_sync()")));
    }
}
