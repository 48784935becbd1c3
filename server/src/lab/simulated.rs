//! An executor without a GPU: figures from a model of an H200 on PCIe Gen5,
//! with jitter, paced by sleeps so progress, the queue and cancel can be seen
//! and tested. Every run it makes is labelled simulated.
//!
//! Its correctness checks run the real check code ([`checks`]) on small model buffers and
//! matrices, really written and compared: right unless the probe says the GPU gives wrong
//! results (`--simulate-fault wrong-result:INDEX`), then each experiment observes a fault of its
//! kind, so tests can show every check failing on one.

use std::time::Duration;

use shared::lab::{
    CopyKind, ExperimentParams, LatencyParams, MemoryParams, MemoryStep, P2pParams, PrecisionParams, RunResult,
    StreamsParams, TimelineSpan, TransferParams,
};

use super::checks::{self, CopyVerification, GemmErrors, GemmSampler, PatternCompare, StreamsOutputs};
use super::executor::{Executor, ExperimentError, PoolUsage, RunContext};
use super::guards::LinkPeaks;
use super::latency::{self, GRAPH_COUNT_LAUNCHES, GRAPH_KERNELS, LatencyMeasurements, QUEUED_KERNELS};
use super::p2p::{self, LATENCY_REPETITIONS_PER_REPETITION, P2pMeasurements, P2pMode, P2pSample};
use super::plan::{CONTEXT_OVERHEAD, footprint};
use super::report::{self, GemmSample, MemoryMeasurements, StreamsMeasurements, TransferSample};

/// The simulated GPU's L2: an H200's 60 MiB (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE on the lent H200).
pub const SIMULATED_L2_BYTES: u64 = 60 << 20;

/// The simulated GPU's pool: what a run left cached, while its "context" is open.
#[derive(Debug)]
pub struct SimulatedExecutor {
    step: Duration,
    pool: Option<PoolUsage>,
}

impl SimulatedExecutor {
    /// Each step of an experiment sleeps `step`.
    pub fn new(step: Duration) -> Self {
        Self { step, pool: None }
    }

    fn pace(&self, ctx: &RunContext<'_>, fraction: f64, message: &str) -> Result<(), ExperimentError> {
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
fn model_copy(seed: u64, bytes: u64, wrong: bool) -> PatternCompare {
    let mut dst = vec![0u8; usize::try_from(bytes.min(MODEL_BYTES)).unwrap_or(0)];
    checks::fill_pattern(&mut dst, seed, 0);
    if let Some(last) = dst.last_mut().filter(|_| wrong) {
        *last ^= 1;
    }
    checks::compare_pattern(&dst, seed, 0)
}

/// Model tiles of a GEMM of order min(size, 64), one per repetition, read from the exact product
/// (`wrong`: spoiled by one where each tile is read), compared by the GPU path's own tile check.
fn model_tiles(size: u32, repetitions: u32, wrong: bool) -> checks::GemmTiles {
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
fn model_gemm(size: u32, wrong: bool) -> GemmErrors {
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
fn jitter(value: f64, n: u32) -> Vec<f64> {
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
            self.pace(ctx, 0.3, "running")?;
            return Err(ExperimentError::Cuda(error));
        }
        let result = match params {
            ExperimentParams::Memory(p) => self.memory(p, ctx)?,
            ExperimentParams::Transfer(p) => self.transfer(p, ctx, &ctx.probe.peaks(ctx.device))?,
            ExperimentParams::Streams(p) => self.streams(p, ctx)?,
            ExperimentParams::Precision(p) => self.precision(p, ctx)?,
            ExperimentParams::Latency(p) => self.latency(p, ctx)?,
            ExperimentParams::P2p(p) => self.p2p(p, ctx)?,
        };
        // Like the real pool, freed buffers stay cached until empty_cache or release.
        if !matches!(params, ExperimentParams::Memory(_) | ExperimentParams::P2p(_)) {
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

impl SimulatedExecutor {
    fn memory(&mut self, p: &MemoryParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        // A faulty pool caches nothing: what is freed is gone at once.
        let caches = !ctx.probe.wrong_results(ctx.device);
        let base = ctx.probe.memory(ctx.device).map_or(0, |m| m.used) + CONTEXT_OVERHEAD;
        let mut steps = Vec::new();
        let (mut allocated, mut reserved) = (0u64, 0u64);
        let step = |label: String, allocated: u64, reserved: u64| MemoryStep {
            label,
            allocated,
            reserved,
            nvml_used: Some(base + reserved),
        };
        steps.push(step("start".into(), 0, 0));
        let total = f64::from(p.blocks) + 4.0;
        for i in 0..p.blocks {
            allocated += p.block_bytes;
            reserved = reserved.max(allocated);
            steps.push(step(format!("alloc block {}", i + 1), allocated, reserved));
            self.pace(ctx, f64::from(i) / total, &format!("allocating block {} of {}", i + 1, p.blocks))?;
        }
        let freed = (0..p.blocks).filter(|i| i % p.free_every == p.free_every - 1).count() as u64;
        allocated -= freed * p.block_bytes;
        reserved = if caches { reserved } else { allocated };
        steps.push(step(format!("free {freed} blocks"), allocated, reserved));
        self.pace(ctx, (total - 4.0) / total, "timing pool-served vs fresh allocations")?;
        let pooled_us = jitter(3.0, p.repetitions);
        let fresh_us = jitter(40.0 + p.block_bytes as f64 / 1e9 * 120.0, p.repetitions);
        steps.push(step("free all".into(), 0, if caches { reserved } else { 0 }));
        self.pace(ctx, (total - 2.0) / total, "empty_cache")?;
        steps.push(step("empty_cache".into(), 0, 0));
        Ok(report::memory(MemoryMeasurements { steps, pooled_us, fresh_us }))
    }

    fn transfer(
        &mut self,
        p: &TransferParams,
        ctx: &RunContext<'_>,
        peaks: &LinkPeaks,
    ) -> Result<RunResult, ExperimentError> {
        let mut samples = Vec::new();
        let mut verified = Vec::new();
        let wrong = ctx.probe.wrong_results(ctx.device);
        let total = (p.copies.len() * p.sizes.len()) as f64;
        for (i, &copy) in p.copies.iter().enumerate() {
            let (gbps, latency_us) = match copy {
                CopyKind::H2dPinned => (55.3, 8.0),
                CopyKind::D2hPinned => (55.1, 8.0),
                CopyKind::H2dPageable => (7.0, 15.0),
                CopyKind::D2hPageable => (11.5, 15.0),
                CopyKind::D2d => (4230.0, 4.0),
                CopyKind::D2dKernel => (4230.0, 3.0),
            };
            for (j, &bytes) in p.sizes.iter().enumerate() {
                let moved = if copy.on_device() { 2 * bytes } else { bytes } as f64;
                // A device copy whose two buffers fit in L2 runs faster than HBM allows: both paths read
                // 4.9 TB/s at 16 MiB on the H200 (tests/gpu/lab.sh), 4.2 TB/s at 256 MiB and above.
                let gbps = if copy.on_device() && 2 * bytes <= SIMULATED_L2_BYTES { 4900.0 } else { gbps };
                let ms = latency_us / 1e3 + moved / (gbps * 1e9) * 1e3;
                samples.push(TransferSample { copy, bytes, times_ms: jitter(ms, p.repetitions) });
                // A faulty GPU spoils one size of each kind.
                let spoilt = wrong && j == p.sizes.len() / 2;
                let compare = model_copy(checks::copy_seed(copy, bytes), bytes, spoilt);
                verified.push(CopyVerification { copy, bytes, compare });
                let done = (i * p.sizes.len() + j) as f64 / total;
                if j % 3 == 2 {
                    self.pace(ctx, done, &format!("{} {}", copy.name(), shared::units::format_bytes(bytes)))?;
                }
            }
        }
        let mut result = report::transfer(&samples, peaks);
        let timed: Vec<(CopyKind, u64)> = samples.iter().map(|s| (s.copy, s.bytes)).collect();
        result.checks.extend(checks::copies(&timed, &verified));
        report::mark_l2(&mut result, SIMULATED_L2_BYTES, "simulated: an H200's");
        Ok(result)
    }

    fn streams(&mut self, p: &StreamsParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let copy = p.copy_bytes as f64 / 55.3e9 * 1e3;
        let compute = 2.0 * f64::from(p.gemm_size).powi(3) / 51e12 * 1e3;
        let kernel = f64::from(p.kernel_us) / 1e3;
        let k = p.kernels;
        let mut timeline = vec![
            span("copy+compute, one stream", 0, "copy", 0.0, copy),
            span("copy+compute, one stream", 0, "gemm", copy, copy + compute),
            span("copy+compute, two streams", 0, "gemm", 0.0, compute),
            span("copy+compute, two streams", 1, "copy", 0.0, copy),
        ];
        for s in 0..k {
            let start = f64::from(s) * kernel;
            timeline.push(span(&format!("{k} kernels, one stream"), 0, "spin", start, start + kernel));
            let lag = 0.002 * f64::from(s);
            timeline.push(span(&format!("{k} kernels, {k} streams"), s, "spin", lag, lag + kernel));
        }
        for (i, phase) in ["copy alone", "compute alone", "one stream", "two streams", "kernels"].iter().enumerate() {
            self.pace(ctx, i as f64 / 5.0, phase)?;
        }
        let n = p.repetitions;
        let wrong = ctx.probe.wrong_results(ctx.device);
        let cycles = u64::from(p.kernel_us) * 1_980;
        let mut spun = vec![cycles + 40; 2 * k as usize];
        if wrong {
            spun[k as usize] = 0;
        }
        let outputs = StreamsOutputs {
            copied: model_copy(checks::copy_seed(CopyKind::H2dPinned, p.copy_bytes), p.copy_bytes, wrong),
            gemm: model_gemm(p.gemm_size, wrong),
            spun,
            cycles,
            launched: 2 * k as usize,
        };
        let copy_ms = jitter(copy, n);
        let compute_ms = jitter(compute, n);
        // Each round's overlapped time follows that round's own phases, as on a GPU: the longer phase plus
        // 5% of the shorter (the join and the copy's memory traffic; the H200 showed +0.8% at the defaults).
        // Jittered on its own it could stray past the overlap check and fail a sound simulated run.
        let overlapped_ms = copy_ms.iter().zip(&compute_ms).map(|(c, g)| c.max(*g) + 0.05 * c.min(*g)).collect();
        Ok(report::streams(StreamsMeasurements {
            serial_ms: copy_ms.iter().zip(&compute_ms).map(|(c, g)| c + g).collect(),
            copy_ms,
            compute_ms,
            overlapped_ms,
            kernels: k,
            kernels_one_stream_ms: jitter(kernel * f64::from(k), n),
            kernels_many_streams_ms: jitter(kernel * 1.05, n),
            timeline,
            outputs: Some(outputs),
        }))
    }

    fn precision(&mut self, p: &PrecisionParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let mut samples = Vec::new();
        let total = (p.sizes.len() * p.dtypes.len()) as f64;
        for (i, &size) in p.sizes.iter().enumerate() {
            for (j, &dtype) in p.dtypes.iter().enumerate() {
                let peak = match dtype {
                    shared::lab::Dtype::Fp32 => 51.0,
                    shared::lab::Dtype::Tf32 => 414.0,
                    shared::lab::Dtype::Fp16 => 770.0,
                    shared::lab::Dtype::Bf16 => 799.0,
                };
                let n3 = f64::from(size).powi(3);
                let efficiency = n3 / (n3 + 1024f64.powi(3));
                let ms = 2.0 * n3 / (peak * 1e12 * efficiency) * 1e3;
                let wrong = ctx.probe.wrong_results(ctx.device);
                let errors = model_gemm(size, wrong);
                let tiles = model_tiles(size, p.repetitions, wrong);
                samples.push(GemmSample { dtype, size, times_ms: jitter(ms, p.repetitions), errors, tiles });
                self.pace(ctx, (i * p.dtypes.len() + j) as f64 / total, &format!("{} {size}", dtype.name()))?;
            }
        }
        Ok(report::precision(&samples))
    }

    fn latency(&mut self, p: &LatencyParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let n = p.repetitions;
        let steps = ["kernel launch", "event record", "synchronize", "queued kernels", "a CUDA graph"];
        for (i, step) in steps.iter().enumerate() {
            self.pace(ctx, i as f64 / steps.len() as f64, step)?;
        }
        // Simulated: no kernel ran; the counters say what a GPU where every launch ran would read.
        Ok(latency::report(&LatencyMeasurements {
            host_us: [jitter(4.0, n), jitter(1.4, n), jitter(1.5, n), jitter(8.9, n)],
            queued_us: jitter(1.9, (n / QUEUED_KERNELS).max(10)),
            graph_us: jitter(0.9, (n / 100).max(10)),
            graph_nodes: u64::from(GRAPH_KERNELS),
            queued_counted: u64::from(QUEUED_KERNELS),
            graph_counted: u64::from(GRAPH_KERNELS) * u64::from(GRAPH_COUNT_LAUNCHES),
        }))
    }
}

impl SimulatedExecutor {
    /// Two H200s on NV18: ~395 GB/s one way (PyTorch's figure on the lent pair), staged through the
    /// host with peer access off; pairs the simulated topology gives no P2P are measured staged only.
    fn p2p(&mut self, p: &P2pParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let size = p.size as f64;
        let ms = |gbps: f64, latency_us: f64, bytes: f64| latency_us / 1e3 + bytes / (gbps * 1e9) * 1e3;
        let mut samples = Vec::new();
        let mut checks = Vec::new();
        let latency_n = p.repetitions * LATENCY_REPETITIONS_PER_REPETITION;
        let mut no_peer_access = Vec::new();
        for (i, pair) in p.pairs.iter().enumerate() {
            // As on hardware: where the topology says the GPUs cannot reach each other, no peer-enabled copies.
            let peer_ok = ctx.probe.peer_access(pair.a, pair.b) != Some(false);
            if !peer_ok {
                no_peer_access.push(*pair);
            }
            for peer in [true, false].into_iter().filter(|&peer| peer_ok || !peer) {
                let (uni, bidi, latency_us) = if peer { (395.0, 740.0, 2.4) } else { (21.0, 33.0, 11.5) };
                for (from, to) in [(pair.a, pair.b), (pair.b, pair.a)] {
                    // Copies to a faulty GPU land wrong.
                    let seed = checks::copy_seed(CopyKind::D2d, p.size) ^ u64::from(from) ^ u64::from(peer) << 8;
                    let compare = model_copy(seed, p.size, ctx.probe.wrong_results(to));
                    checks.push(checks::p2p_destination(from, to, peer, &compare));
                    let sample = |mode, times_ms| P2pSample { from, to, peer, mode, times_ms };
                    samples.push(sample(P2pMode::Unidirectional, jitter(ms(uni, 8.0, size), p.repetitions)));
                    samples.push(sample(P2pMode::Latency, jitter(latency_us / 1e3, latency_n)));
                }
                let both = P2pSample { from: pair.a, to: pair.b, peer, mode: P2pMode::Bidirectional, times_ms: vec![] };
                samples.push(P2pSample { times_ms: jitter(ms(bidi, 8.0, 2.0 * size), p.repetitions), ..both });
                let mode = if peer { "peer access enabled" } else { "peer access disabled" };
                let done = (2 * i + usize::from(!peer)) as f64 / (2 * p.pairs.len()) as f64;
                self.pace(ctx, done, &format!("GPU {} ↔ {}, {mode}", pair.a, pair.b))?;
            }
        }
        Ok(p2p::report(P2pMeasurements { devices: p.devices(), size: p.size, samples, no_peer_access, checks }))
    }
}

fn span(phase: &str, stream: u32, label: &str, start_ms: f64, end_ms: f64) -> TimelineSpan {
    TimelineSpan { phase: phase.to_owned(), stream, label: label.to_owned(), start_ms, end_ms }
}
