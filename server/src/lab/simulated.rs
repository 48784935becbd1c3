//! An executor without a GPU: figures from a model of an H200 on PCIe Gen5,
//! with jitter, paced by sleeps so progress, the queue and cancel can be seen
//! and tested. Every run it makes is labelled simulated. Each kind's model is its
//! `Experiment::simulate` (`experiments/<kind>/`); this file holds the executor and
//! the model's parts they share.
//!
//! Its correctness checks run the real check code ([`checks`]) on small model buffers and
//! matrices, really written and compared: right unless the probe says the GPU gives wrong
//! results (`--simulate-fault wrong-result:INDEX`), then each experiment observes a fault of its
//! kind, so tests can show every check failing on one.

use std::time::Duration;

use shared::lab::{ExperimentParams, RunResult, TimelineSpan};

use super::checks::{self, GemmErrors, GemmSampler, PatternCompare};
use super::executor::{Executor, ExperimentError, PoolUsage, RunContext};
use super::experiments;
use super::plan::footprint;

/// The simulated GPU's L2: an H200's 60 MiB (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE on the lent H200).
pub const SIMULATED_L2_BYTES: u64 = 60 << 20;

/// The simulated GPU's pool: what a run left cached, while its "context" is open.
#[derive(Debug)]
pub struct SimulatedExecutor {
    sim: Simulation,
    pool: Option<PoolUsage>,
}

impl SimulatedExecutor {
    /// Each step of an experiment sleeps `step`.
    pub fn new(step: Duration) -> Self {
        Self { sim: Simulation { step }, pool: None }
    }
}

/// What a simulated run is paced by: each step sleeps `step`, so progress, the queue and cancel show.
#[derive(Debug, Clone, Copy)]
pub struct Simulation {
    step: Duration,
}

impl Simulation {
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
/// one element of the last row, away from the first rows and columns.
pub(crate) fn model_gemm(size: u32, wrong: bool) -> GemmErrors {
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
        c[(n - 1) + (n / 2) * n] += 1.0;
    }
    let mut sampler = GemmSampler::new(n, |i| a[i]);
    for (k, chunk) in c.chunks(8 * n).enumerate() {
        sampler.columns(8 * k, chunk, |i| a[i], |i| b[i]);
    }
    sampler.errors
}

/// `n` samples around `value`, ±2%.
pub(crate) fn jitter(value: f64, n: u32) -> Vec<f64> {
    (0..n).map(|_| value * (0.98 + 0.04 * fastrand::f64())).collect()
}

impl Executor for SimulatedExecutor {
    fn simulated(&self) -> bool {
        true
    }

    fn run(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        self.pool.get_or_insert_with(PoolUsage::default);
        if let Some(error) = ctx.probe.injected_failure(ctx.device) {
            // Fail mid-run with buffers still allocated, as a real out-of-memory or kernel fault would.
            self.pool = Some(PoolUsage { reserved: footprint(params).device.max(1 << 30), used: 1 << 30 });
            self.sim.pace(ctx, 0.3, "running")?;
            return Err(ExperimentError::Cuda(error));
        }
        let experiment = experiments::of(params);
        let result = experiment.simulate(params, &self.sim, ctx)?;
        // Like the real pool, freed buffers stay cached until empty_cache or release.
        if experiment.caches_in_pool() {
            self.pool = Some(PoolUsage { reserved: footprint(params).device, used: 0 });
        }
        ctx.progress(1.0, "done");
        Ok(result)
    }

    fn pool(&mut self) -> Option<PoolUsage> {
        self.pool
    }

    fn empty_cache(&mut self) -> Result<(), ExperimentError> {
        if let Some(pool) = &mut self.pool {
            pool.reserved = pool.used;
        }
        Ok(())
    }

    fn release(&mut self) {
        self.pool = None;
    }
}

/// One span of a simulated timeline.
pub(crate) fn span(phase: &str, stream: u32, label: &str, start_ms: f64, end_ms: f64) -> TimelineSpan {
    TimelineSpan { phase: phase.to_owned(), stream, label: label.to_owned(), start_ms, end_ms }
}
