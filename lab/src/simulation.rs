//! The simulated executor's model parts, shared by each kind's `Experiment::simulate`
//! (`experiments/<kind>/`): the pacing of a run, model copies and GEMMs, jitter, timeline spans.
//!
//! Its correctness checks run the real check code ([`checks`]) on small model buffers and
//! matrices, really written and compared: right unless the probe says the GPU gives wrong
//! results (`--simulate-fault wrong-result:INDEX`), then each experiment observes a fault of its
//! kind, so tests can show every check failing on one.

use std::time::Duration;

use shared::lab::TimelineSpan;

use super::checks::{self, GemmErrors, GemmSampler, GemmSums, PatternCompare};
use super::executor::{ExperimentError, RunContext};

/// The simulated GPU's L2: an H200's 60 MiB (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE on the lent H200).
pub const SIMULATED_L2_BYTES: u64 = 60 << 20;

/// What a simulated run is paced by: each step sleeps `step`, so progress, the queue and cancel show.
#[derive(Debug, Clone, Copy)]
pub struct Simulation {
    step: Duration,
}

impl Simulation {
    /// Each step of a run sleeps `step`.
    pub fn new(step: Duration) -> Self {
        Self { step }
    }

    /// Stops if the run was cancelled or timed out, reports progress, sleeps a step, checks again.
    pub fn pace(&self, ctx: &RunContext<'_>, fraction: f64, message: &str) -> Result<(), ExperimentError> {
        ctx.check()?;
        ctx.progress(fraction, message);
        std::thread::sleep(self.step);
        ctx.check()
    }
}

/// Bytes of a model buffer the simulated executor copies and compares (its figures are a model).
const MODEL_BYTES: u64 = 64 << 10;

/// A model copy of `bytes` carrying the pattern of `seed`, really written and compared by the
/// check code; `wrong` flips a bit of its last byte, as a faulty copy would.
pub(crate) fn model_copy(seed: u64, bytes: u64, wrong: bool) -> PatternCompare {
    let mut dst = vec![0u8; usize::try_from(bytes.min(MODEL_BYTES)).unwrap_or(0)];
    checks::fill_pattern(&mut dst, seed, 0);
    if let Some(last) = dst.last_mut().filter(|_| wrong) {
        *last ^= 1;
    }
    checks::compare_pattern(&dst, seed, 0)
}

/// Model tiles of a GEMM of order min(size, 64), one per repetition, read from the exact product
/// (`wrong`: spoiled by one where each tile is read), compared by the GPU path's own tile check.
pub(crate) fn model_tiles(size: u32, repetitions: u32, wrong: bool) -> checks::GemmTiles {
    let n = (size as usize).clamp(1, 64);
    let mut rng = fastrand::Rng::with_seed(u64::from(size) + 1);
    let mut matrix = || (0..n * n).map(|_| rng.f64() * 2.0 - 1.0).collect::<Vec<f64>>();
    let (a, b) = (matrix(), matrix());
    let seed = u64::from(size);
    let mut tiles = checks::GemmTiles::new(n, seed);
    let t = checks::GEMM_TILE.min(n);
    for repetition in 0..repetitions {
        let (i0, j0) = checks::tile_at(n, seed, repetition);
        let mut got: Vec<f64> = (0..t * t)
            .map(|k| (i0 + k % t, j0 + k / t))
            .map(|(i, j)| (0..n).map(|l| a[i + l * n] * b[l + j * n]).sum())
            .collect();
        if wrong {
            got[0] += 1.0;
        }
        tiles.add((i0, j0), &got, |i| a[i], |i| b[i]);
    }
    tiles
}

/// A model GEMM of order min(size, 64) on random data, compared by the GPU's sampler; `wrong` spoils
/// one element of the last row by 4, away from the first rows and columns (past every type's tolerance, the sums' too).
pub(crate) fn model_gemm(size: u32, wrong: bool) -> (GemmErrors, GemmSums) {
    let n = (size as usize).clamp(1, 64);
    let mut rng = fastrand::Rng::with_seed(u64::from(size));
    let mut matrix = || (0..n * n).map(|_| rng.f64() * 2.0 - 1.0).collect::<Vec<f64>>();
    let (a, b) = (matrix(), matrix());
    let mut c = vec![0.0; n * n];
    for j in 0..n {
        for l in 0..n {
            for i in 0..n {
                c[i + j * n] += a[i + l * n] * b[l + j * n];
            }
        }
    }
    if wrong {
        c[(n - 1) + (n / 2) * n] += 4.0;
    }
    let mut sampler = GemmSampler::new(n, |i| a[i]);
    for (k, chunk) in c.chunks(8 * n).enumerate() {
        sampler.columns(8 * k, chunk, |i| a[i], |i| b[i]);
    }
    sampler.finish(|i| a[i])
}

/// `n` samples around `value`, ±2%.
pub(crate) fn jitter(value: f64, n: u32) -> Vec<f64> {
    (0..n).map(|_| value * (0.98 + 0.04 * fastrand::f64())).collect()
}

/// One span of a simulated timeline.
pub(crate) fn span(phase: &str, stream: u32, label: &str, start_ms: f64, end_ms: f64) -> TimelineSpan {
    TimelineSpan { phase: phase.to_owned(), stream, label: label.to_owned(), start_ms, end_ms }
}
