//! The p2p experiment's pure parts: which pairs a request means, and the
//! timings of every ordered pair turned into heatmaps, figures and notes.
//! Shared by the CUDA and the simulated executor.

use shared::lab::{ChartSpec, Check, Figure, Matrix, RunResult, Stats};
use crate::experiments::p2p::params::{GpuPair, P2pParams};

use crate::stats::{rates, summarize};

/// Bytes of each latency copy, as PyTorch's and cuda-samples' latency figures use.
pub const LATENCY_BYTES: usize = 4;
/// Latency copies per direction and mode, as a multiple of `repetitions`.
pub const LATENCY_REPETITIONS_PER_REPETITION: u32 = 10;

/// What one sample timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pMode {
    /// One copy `from` → `to`.
    Unidirectional,
    /// `from` → `to` and `to` → `from` at once, on a stream of each GPU.
    Bidirectional,
    /// One [`LATENCY_BYTES`] copy `from` → `to`.
    Latency,
}

/// Timings of one ordered pair in one mode, ms per copy (per pair of copies when bidirectional).
#[derive(Debug, Clone)]
pub struct P2pSample {
    pub from: u32,
    pub to: u32,
    /// Peer access enabled (direct), or disabled (the driver stages through pinned host memory).
    pub peer: bool,
    pub mode: P2pMode,
    pub times_ms: Vec<f64>,
}

/// Everything a p2p run measured.
#[derive(Debug, Clone, Default)]
pub struct P2pMeasurements {
    /// The GPUs involved, ascending: the heatmaps' rows and columns.
    pub devices: Vec<u32>,
    /// Bytes of each bandwidth copy.
    pub size: u64,
    pub samples: Vec<P2pSample>,
    /// Pairs whose GPUs cannot access each other (cuDeviceCanAccessPeer = 0): no "enabled" figures.
    pub no_peer_access: Vec<GpuPair>,
    pub checks: Vec<Check>,
}

/// Why a p2p request's pairs cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairsError {
    /// The server has fewer than two GPUs: no request can fix that (409, not 400).
    #[error("P2P needs two GPUs; this server has {}", count_in_words(.0))]
    TooFewGpus(usize),
    #[error("'pairs' must join two different GPUs, got {0} and {0}")]
    SameGpu(u32),
    #[error("'pairs' names GPU {0}, which this server does not have")]
    UnknownGpu(u32),
}

/// "one" for a lone GPU (reads better in the sentence), digits otherwise.
fn count_in_words(count: &usize) -> String {
    if *count == 1 { "one".to_owned() } else { count.to_string() }
}

/// Fills in every pair of `gpus` when the request names none, and checks the ones it names.
/// Pairs come out with `a < b`, each once, in order.
pub fn resolve_pairs(params: &mut P2pParams, gpus: &[u32]) -> Result<(), PairsError> {
    if gpus.len() < 2 {
        return Err(PairsError::TooFewGpus(gpus.len()));
    }
    let mut pairs = Vec::new();
    if params.pairs.is_empty() {
        for (i, &a) in gpus.iter().enumerate() {
            for &b in &gpus[i + 1..] {
                pairs.push(GpuPair { a: a.min(b), b: a.max(b) });
            }
        }
    } else {
        for pair in &params.pairs {
            if pair.a == pair.b {
                return Err(PairsError::SameGpu(pair.a));
            }
            if let Some(missing) = [pair.a, pair.b].into_iter().find(|d| !gpus.contains(d)) {
                return Err(PairsError::UnknownGpu(missing));
            }
            let pair = GpuPair { a: pair.a.min(pair.b), b: pair.a.max(pair.b) };
            if !pairs.contains(&pair) {
                pairs.push(pair);
            }
        }
    }
    params.pairs = pairs;
    Ok(())
}

fn mode_name(mode: P2pMode) -> &'static str {
    match mode {
        P2pMode::Unidirectional => "unidirectional",
        P2pMode::Bidirectional => "bidirectional",
        P2pMode::Latency => "latency",
    }
}

fn peer_name(peer: bool) -> &'static str {
    if peer { "peer access enabled" } else { "peer access disabled" }
}

/// The sample's figure: bandwidth in GB/s (both directions' bytes when bidirectional) or latency in µs.
fn stats(sample: &P2pSample, size: u64) -> Option<Stats> {
    match sample.mode {
        P2pMode::Unidirectional => rates(size as f64, &sample.times_ms, 1e-9),
        P2pMode::Bidirectional => rates(2.0 * size as f64, &sample.times_ms, 1e-9),
        P2pMode::Latency => summarize(&sample.times_ms.iter().map(|ms| ms * 1e3).collect::<Vec<_>>()),
    }
}

/// Heatmaps (uni-, bidirectional bandwidth and latency, each with peer access enabled and disabled),
/// a figure per pair and mode for the table, the checks, and notes.
pub fn report(m: P2pMeasurements) -> RunResult {
    let mut r = RunResult {
        chart: ChartSpec::Heatmap { row_label: "from GPU".into(), col_label: "to GPU".into() },
        unit: "GB/s".into(),
        series: Vec::new(),
        references: Vec::new(),
        figures: Vec::new(),
        checks: m.checks,
        memory_steps: Vec::new(),
        timeline: Vec::new(),
        notes: Vec::new(),
        matrices: Vec::new(),
        l2_bytes: None,
    };
    let n = m.devices.len();
    let at = |d: u32| m.devices.iter().position(|&x| x == d);
    for mode in [P2pMode::Unidirectional, P2pMode::Bidirectional, P2pMode::Latency] {
        for peer in [true, false] {
            let mut cells = vec![vec![None; n]; n];
            for s in m.samples.iter().filter(|s| s.mode == mode && s.peer == peer) {
                let (Some(row), Some(col), Some(st)) = (at(s.from), at(s.to), stats(s, m.size)) else { continue };
                cells[row][col] = Some(st.median);
                if mode == P2pMode::Bidirectional {
                    // Both directions at once: the same figure read either way.
                    cells[col][row] = Some(st.median);
                }
                let arrow = if mode == P2pMode::Bidirectional { "↔" } else { "→" };
                r.figures.push(Figure {
                    name: format!("GPU {}{arrow}{} {}, {}", s.from, s.to, mode_name(mode), peer_name(peer)),
                    unit: if mode == P2pMode::Latency { "µs" } else { "GB/s" }.into(),
                    stats: st,
                });
            }
            r.matrices.push(Matrix {
                name: format!("{}, {}", mode_name(mode), peer_name(peer)),
                unit: if mode == P2pMode::Latency { "µs" } else { "GB/s" }.into(),
                devices: m.devices.clone(),
                cells,
                higher_is_better: mode != P2pMode::Latency,
            });
        }
    }
    r.notes.push(format!(
        "Bandwidth: one {} copy (cuMemcpyPeerAsync) between two CUDA events on the source GPU's stream, median \
         of the repetitions; bidirectional runs both directions at once on a stream of each GPU and counts the \
         bytes of both.",
        shared::units::format_bytes(m.size)
    ));
    r.notes.push(format!(
        "Latency: one {LATENCY_BYTES}-byte copy between two CUDA events, median of {LATENCY_REPETITIONS_PER_REPETITION}× \
         the repetitions."
    ));
    r.notes.push(
        "Peer access disabled: the same copies with cuCtxEnablePeerAccess off, so the driver stages them through \
         pinned host memory (cuda-samples' p2pBandwidthLatencyTest, P2P=Disabled)."
            .into(),
    );
    for pair in &m.no_peer_access {
        r.notes.push(format!(
            "GPUs {} and {} cannot access each other's memory (cuDeviceCanAccessPeer = 0): no peer-enabled figures.",
            pair.a, pair.b
        ));
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_by_default_and_named_pairs_checked() {
        let mut p = P2pParams::default();
        resolve_pairs(&mut p, &[0, 1, 2]).unwrap();
        assert_eq!(p.pairs, vec![GpuPair { a: 0, b: 1 }, GpuPair { a: 0, b: 2 }, GpuPair { a: 1, b: 2 }]);
        let mut one = P2pParams::default();
        assert_eq!(resolve_pairs(&mut one, &[0]).unwrap_err().to_string(), "P2P needs two GPUs; this server has one");
        assert_eq!(resolve_pairs(&mut one, &[]).unwrap_err().to_string(), "P2P needs two GPUs; this server has 0");
        let mut named =
            P2pParams { pairs: vec![GpuPair { a: 1, b: 0 }, GpuPair { a: 0, b: 1 }], ..P2pParams::default() };
        resolve_pairs(&mut named, &[0, 1]).unwrap();
        assert_eq!(named.pairs, vec![GpuPair { a: 0, b: 1 }]);
        let mut bad = P2pParams { pairs: vec![GpuPair { a: 0, b: 3 }], ..P2pParams::default() };
        assert_eq!(
            resolve_pairs(&mut bad, &[0, 1]).unwrap_err().to_string(),
            "'pairs' names GPU 3, which this server does not have"
        );
        let mut same = P2pParams { pairs: vec![GpuPair { a: 1, b: 1 }], ..P2pParams::default() };
        assert_eq!(
            resolve_pairs(&mut same, &[0, 1]).unwrap_err().to_string(),
            "'pairs' must join two different GPUs, got 1 and 1"
        );
    }

    #[test]
    fn samples_become_heatmaps_with_bidirectional_bytes_counted_twice() {
        let sample = |from, to, peer, mode, ms| P2pSample { from, to, peer, mode, times_ms: vec![ms; 3] };
        let gib = 1u64 << 30;
        let r = report(P2pMeasurements {
            devices: vec![0, 1],
            size: gib,
            samples: vec![
                sample(0, 1, true, P2pMode::Unidirectional, 2.72),
                sample(1, 0, true, P2pMode::Unidirectional, 2.725),
                sample(0, 1, true, P2pMode::Bidirectional, 2.9),
                sample(0, 1, false, P2pMode::Latency, 0.012),
            ],
            ..P2pMeasurements::default()
        });
        assert_eq!(r.matrices.len(), 6);
        let uni = &r.matrices[0];
        assert_eq!(uni.name, "unidirectional, peer access enabled");
        assert_eq!(uni.cells[0][0], None);
        assert!((uni.cells[0][1].unwrap() - 395.0).abs() < 1.0, "{:?}", uni.cells);
        let bidi = &r.matrices[2];
        assert_eq!(bidi.cells[0][1], bidi.cells[1][0]);
        assert!((bidi.cells[0][1].unwrap() - 740.5).abs() < 1.0, "{:?}", bidi.cells);
        let latency = &r.matrices[5];
        assert_eq!(latency.unit, "µs");
        assert!(!latency.higher_is_better);
        assert!((latency.cells[0][1].unwrap() - 12.0).abs() < 1e-9);
        assert!(r.figures.iter().any(|f| f.name == "GPU 0↔1 bidirectional, peer access enabled"));
    }
}
