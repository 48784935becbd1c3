//! Copies between GPUs through cudarc, like cuda-samples' p2pBandwidthLatencyTest:
//! for each pair, one way each direction, both ways at once, and 4-byte copies,
//! first with peer access disabled (the driver stages through pinned host
//! memory), then enabled. Peer access is left disabled at the end. In each mode,
//! each GPU's source carries a pattern of its own; each destination is poisoned again
//! after every block of warm-ups and compared with the other GPU's pattern after the
//! timed copies of that block, so every timed block is seen to have written.
//!
//! Buffers come from `cuMemAlloc`, not the lab's stream-ordered pool:
//! `cuCtxEnablePeerAccess` governs `cuMemAlloc` memory, while pool memory would
//! need `cuMemPoolSetAccess`, and the figures should mean what cuda-samples' mean.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::Arc;

use crate::experiments::p2p::params::P2pParams;
use cudarc::driver::sys::{self, CUevent_flags, cudaError_enum};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, result};
use shared::lab::RunResult;
use shared::units::format_bytes;

use super::{Fault, cuda_err, ordinal_for};
use crate::checks::{self, PatternCompare};
use crate::executor::{ExperimentError, RunContext};
use crate::p2p::{self, LATENCY_BYTES, LATENCY_REPETITIONS_PER_REPETITION, P2pMeasurements, P2pMode, P2pSample};

/// Bytes of each checked stretch of a buffer; up to [`CHECK_STRETCHES`] spread over it, the first
/// and last bytes included, carry the pattern and are compared.
const CHECK_BYTES: usize = 16 << 20;
const CHECK_STRETCHES: usize = 4;

/// Device memory from `cuMemAlloc` in one GPU's context, freed on drop.
struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl DeviceBuffer {
    fn new(ctx: &Arc<CudaContext>, bytes: usize, fill: u8) -> Result<Self, ExperimentError> {
        ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
        // SAFETY: the context is current; the buffer is set in full just below, before anything reads it.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(cuda_err("allocating device memory (cuMemAlloc)"))?;
        let buffer = Self { ctx: ctx.clone(), ptr };
        // SAFETY: `ptr` holds `bytes` bytes.
        unsafe { result::memset_d8_sync(ptr, fill, bytes) }.map_err(cuda_err("clearing device memory"))?;
        Ok(buffer)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemAlloc in this context, freed once; the run synchronized every stream first.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// One GPU of the run: its primary context, a stream, a source and a destination buffer, two events.
struct Gpu {
    index: u32,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    src: DeviceBuffer,
    dst: DeviceBuffer,
    start: CudaEvent,
    end: CudaEvent,
    /// The skip-p2p-copy fault: copies from this GPU are not made while set.
    skip: Cell<bool>,
}

impl Gpu {
    fn open(index: u32, ordinal: usize, bytes: usize) -> Result<Self, ExperimentError> {
        let ctx = CudaContext::new(ordinal).map_err(cuda_err("opening a CUDA context"))?;
        let stream = ctx.new_stream().map_err(cuda_err("creating a stream"))?;
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("creating an event"));
        Ok(Self {
            index,
            src: DeviceBuffer::new(&ctx, bytes, 1)?,
            dst: DeviceBuffer::new(&ctx, bytes, 0)?,
            start: event()?,
            end: event()?,
            stream,
            ctx,
            skip: Cell::new(false),
        })
    }

    fn sync(&self) -> Result<(), ExperimentError> {
        self.stream.synchronize().map_err(cuda_err("synchronizing a stream"))
    }
}

/// `bytes` from `from.src` to `to.dst`, on `from`'s stream.
fn copy(from: &Gpu, to: &Gpu, bytes: usize) -> Result<(), ExperimentError> {
    from.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
    if from.skip.get() {
        return Ok(());
    }
    // SAFETY: both buffers are live and hold at least `bytes`; the stream belongs to `from`'s context.
    unsafe {
        result::memcpy_peer_async(
            to.ctx.cu_ctx(),
            to.dst.ptr,
            from.ctx.cu_ctx(),
            from.src.ptr,
            bytes,
            from.stream.cu_stream(),
        )
    }
    .map_err(cuda_err("cuMemcpyPeerAsync"))
}

/// Milliseconds of one copy `from` → `to`, between events on `from`'s stream.
fn one_way(from: &Gpu, to: &Gpu, bytes: usize) -> Result<f64, ExperimentError> {
    from.start.record(&from.stream).map_err(cuda_err("recording an event"))?;
    copy(from, to, bytes)?;
    from.end.record(&from.stream).map_err(cuda_err("recording an event"))?;
    from.start.elapsed_ms(&from.end).map(f64::from).map_err(cuda_err("reading an event"))
}

/// Milliseconds of `a` → `b` and `b` → `a` at once, each on its source's stream, timed on `a`'s.
fn both_ways(a: &Gpu, b: &Gpu, bytes: usize) -> Result<f64, ExperimentError> {
    a.start.record(&a.stream).map_err(cuda_err("recording an event"))?;
    b.stream.wait(&a.start).map_err(cuda_err("joining the GPUs' streams"))?;
    copy(a, b, bytes)?;
    copy(b, a, bytes)?;
    b.end.record(&b.stream).map_err(cuda_err("recording an event"))?;
    a.stream.wait(&b.end).map_err(cuda_err("joining the GPUs' streams"))?;
    a.end.record(&a.stream).map_err(cuda_err("recording an event"))?;
    a.start.elapsed_ms(&a.end).map(f64::from).map_err(cuda_err("reading an event"))
}

fn tolerate(result: Result<(), DriverError>, harmless: cudaError_enum) -> Result<(), DriverError> {
    match result {
        Err(DriverError(code)) if code == harmless => Ok(()),
        other => other,
    }
}

/// Turns peer access between `a` and `b` on or off, both ways.
fn set_peer_access(a: &Gpu, b: &Gpu, on: bool) -> Result<(), ExperimentError> {
    for (this, peer) in [(a, b), (b, a)] {
        this.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
        // SAFETY: both contexts are live primary contexts; this one is current.
        let result = unsafe {
            if on {
                tolerate(
                    sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0).result(),
                    cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                )
            } else {
                tolerate(
                    sys::cuCtxDisablePeerAccess(peer.ctx.cu_ctx()).result(),
                    cudaError_enum::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
                )
            }
        };
        result.map_err(cuda_err(if on { "cuCtxEnablePeerAccess" } else { "cuCtxDisablePeerAccess" }))?;
    }
    Ok(())
}

fn can_access_peer(a: &Gpu, b: &Gpu) -> Result<bool, ExperimentError> {
    let mut both = true;
    for (this, peer) in [(a, b), (b, a)] {
        let mut can = 0;
        // SAFETY: `can` outlives the call; both devices come from live contexts.
        unsafe { sys::cuDeviceCanAccessPeer(&raw mut can, this.ctx.cu_device(), peer.ctx.cu_device()).result() }
            .map_err(cuda_err("cuDeviceCanAccessPeer"))?;
        both &= can == 1;
    }
    Ok(both)
}

/// Runs the experiment on the pairs of `p` (already resolved); `gpus` maps NVML indexes to UUIDs.
pub fn run(
    gpus: &[(u32, String)],
    p: &P2pParams,
    ctx: &RunContext<'_>,
    fault: Option<Fault>,
) -> Result<RunResult, ExperimentError> {
    let bytes = usize::try_from(p.size).map_err(|_| ExperimentError::Cuda("size too large for this host".into()))?;
    let devices = p.devices();
    ctx.progress(0.0, &format!("opening GPUs {devices:?}, {} ×2 on each", format_bytes(p.size)));
    let count = result::device::get_count().map_err(cuda_err("counting CUDA devices"))?;
    let mut open = Vec::new();
    for &index in &devices {
        let uuid = gpus.iter().find(|(i, _)| *i == index).map(|(_, u)| u.as_str());
        let fallback = index as usize;
        let ordinal = uuid.map_or(fallback, |u| ordinal_for(u, fallback));
        if ordinal >= usize::try_from(count).unwrap_or(0) {
            return Err(ExperimentError::Cuda(format!("CUDA sees {count} GPUs; GPU {index} is not among them")));
        }
        open.push(Gpu::open(index, ordinal, bytes)?);
    }
    let gpu = |index: u32| open.iter().find(|g| g.index == index);
    let mut m = P2pMeasurements { devices, size: p.size, ..P2pMeasurements::default() };
    let steps = (p.pairs.len() * 2) as f64;
    for (i, pair) in p.pairs.iter().enumerate() {
        let (Some(a), Some(b)) = (gpu(pair.a), gpu(pair.b)) else { continue };
        let peer_ok = can_access_peer(a, b)?;
        if !peer_ok {
            m.no_peer_access.push(*pair);
        }
        for (j, peer) in [false, true].into_iter().enumerate() {
            if peer && !peer_ok {
                continue;
            }
            ctx.check()?;
            let mode = if peer { "peer access enabled" } else { "peer access disabled" };
            ctx.progress((2 * i + j) as f64 / steps, &format!("GPU {} ↔ {}, {mode}", pair.a, pair.b));
            set_peer_access(a, b, peer)?;
            let seeds = prepare_check(a, b, bytes, peer)?;
            // `gpudash bench` with GPUDASH_BENCH_FAULT=skip-p2p-copy: the first pair's first mode's timed copies are not made.
            let skip = fault == Some(Fault::SkipP2pCopy) && i == 0 && m.samples.is_empty();
            let pair = Pair { a, b, bytes, peer, seeds, skip };
            let measured = measure_pair(&pair, p, ctx);
            // Leave peer access off whatever happened, so other experiments see the default.
            let restored = set_peer_access(a, b, false);
            let (samples, landed_on_a, landed_on_b) = measured?;
            m.samples.extend(samples);
            restored?;
            m.checks.push(checks::p2p_destination(a.index, b.index, peer, &landed_on_b));
            m.checks.push(checks::p2p_destination(b.index, a.index, peer, &landed_on_a));
        }
    }
    for g in &open {
        g.sync()?;
    }
    drop(open);
    Ok(p2p::report(m))
}

/// One pair in one mode: the GPUs, the copy size, the sources' seeds (a, b) and the skip fault.
struct Pair<'a> {
    a: &'a Gpu,
    b: &'a Gpu,
    bytes: usize,
    peer: bool,
    seeds: (u64, u64),
    skip: bool,
}

impl Pair<'_> {
    /// The seed of the pattern that must land on `to` (the other GPU's source).
    fn seed_landing_on(&self, to: &Gpu) -> u64 {
        if to.index == self.a.index { self.seeds.1 } else { self.seeds.0 }
    }

    /// Between warm-ups and timed copies: poison the first `bytes` of `to`'s destination and, with the
    /// fault, stop copies from `from`.
    fn before_timed(&self, from: &Gpu, to: &Gpu, bytes: usize) -> Result<(), ExperimentError> {
        from.sync()?;
        to.sync()?;
        poison(to, bytes)?;
        from.skip.set(self.skip);
        Ok(())
    }

    /// After timed copies: what landed on `to` in its first `bytes`.
    fn after_timed(&self, from: &Gpu, to: &Gpu, bytes: usize) -> Result<PatternCompare, ExperimentError> {
        from.skip.set(false);
        from.sync()?;
        compare(to, bytes, self.seed_landing_on(to))
    }
}

/// Both directions one way, both ways at once, and latency both directions, in one mode: the
/// samples, and what landed on `a` and on `b` after each timed block.
fn measure_pair(
    pair: &Pair<'_>,
    p: &P2pParams,
    ctx: &RunContext<'_>,
) -> Result<(Vec<P2pSample>, PatternCompare, PatternCompare), ExperimentError> {
    let (a, b, bytes, peer) = (pair.a, pair.b, pair.bytes, pair.peer);
    let mut samples = Vec::new();
    let (mut on_a, mut on_b) = (PatternCompare::default(), PatternCompare::default());
    let mut landed = |to: &Gpu, compare: PatternCompare| {
        if to.index == a.index { on_a.add(compare) } else { on_b.add(compare) }
    };
    let sample =
        |from: &Gpu, to: &Gpu, mode, times_ms| P2pSample { from: from.index, to: to.index, peer, mode, times_ms };
    for (from, to) in [(a, b), (b, a)] {
        for _ in 0..p.warmup {
            copy(from, to, bytes)?;
        }
        pair.before_timed(from, to, bytes)?;
        let mut times = Vec::new();
        for _ in 0..p.repetitions {
            ctx.check()?;
            times.push(one_way(from, to, bytes)?);
        }
        landed(to, pair.after_timed(from, to, bytes)?);
        samples.push(sample(from, to, P2pMode::Unidirectional, times));
    }
    for _ in 0..p.warmup {
        both_ways(a, b, bytes)?;
    }
    pair.before_timed(a, b, bytes)?;
    pair.before_timed(b, a, bytes)?;
    let mut times = Vec::new();
    for _ in 0..p.repetitions {
        ctx.check()?;
        times.push(both_ways(a, b, bytes)?);
    }
    landed(b, pair.after_timed(a, b, bytes)?);
    landed(a, pair.after_timed(b, a, bytes)?);
    samples.push(sample(a, b, P2pMode::Bidirectional, times));
    let latency_n = p.repetitions * LATENCY_REPETITIONS_PER_REPETITION;
    for (from, to) in [(a, b), (b, a)] {
        for _ in 0..p.warmup.max(10) {
            copy(from, to, LATENCY_BYTES)?;
        }
        pair.before_timed(from, to, LATENCY_BYTES)?;
        let mut times = Vec::new();
        for k in 0..latency_n {
            if k % 100 == 0 {
                ctx.check()?;
            }
            times.push(one_way(from, to, LATENCY_BYTES)?);
        }
        landed(to, pair.after_timed(from, to, LATENCY_BYTES)?);
        samples.push(sample(from, to, P2pMode::Latency, times));
    }
    a.sync()?;
    b.sync()?;
    Ok((samples, on_a, on_b))
}

/// Fills the first `bytes` of `gpu`'s destination with the poison no pattern byte run matches.
fn poison(gpu: &Gpu, bytes: usize) -> Result<(), ExperimentError> {
    gpu.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
    // SAFETY: dst holds at least `bytes` bytes (the run's size, or the latency copies' fewer); the context is current.
    unsafe { result::memset_d8_sync(gpu.dst.ptr, 0xa5, bytes) }.map_err(cuda_err("poisoning the destination"))?;
    // On the legacy stream: finish it before the copies' streams start.
    gpu.ctx.synchronize().map_err(cuda_err("synchronizing after poisoning"))
}

/// Where the checked stretches of a `bytes` buffer start.
fn stretches(bytes: usize) -> Vec<usize> {
    if bytes <= CHECK_STRETCHES * CHECK_BYTES {
        return (0..bytes).step_by(CHECK_BYTES).collect();
    }
    checks::spread(bytes - CHECK_BYTES + 1, CHECK_STRETCHES)
}

/// Writes the pattern for `seed` over the checked stretches of `gpu.src`.
fn write_pattern(gpu: &Gpu, bytes: usize, seed: u64) -> Result<(), ExperimentError> {
    gpu.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
    let mut chunk = vec![0u8; CHECK_BYTES.min(bytes)];
    for start in stretches(bytes) {
        let len = CHECK_BYTES.min(bytes - start);
        checks::fill_pattern(&mut chunk[..len], seed, start as u64);
        // SAFETY: src holds `bytes` bytes and start + len ≤ bytes.
        unsafe { result::memcpy_htod_sync(gpu.src.ptr + start as u64, &chunk[..len]) }
            .map_err(cuda_err("uploading the check pattern"))?;
    }
    Ok(())
}

/// Compares the checked stretches of `gpu.dst` with the pattern for `seed`.
fn compare(gpu: &Gpu, bytes: usize, seed: u64) -> Result<PatternCompare, ExperimentError> {
    gpu.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
    gpu.ctx.synchronize().map_err(cuda_err("synchronizing before the check"))?;
    let mut chunk = vec![0u8; CHECK_BYTES.min(bytes)];
    let mut total = PatternCompare::default();
    for start in stretches(bytes) {
        let len = CHECK_BYTES.min(bytes - start);
        // SAFETY: dst holds `bytes` bytes and start + len ≤ bytes; every copy into it has completed.
        unsafe { result::memcpy_dtoh_sync(&mut chunk[..len], gpu.dst.ptr + start as u64) }
            .map_err(cuda_err("downloading the check"))?;
        total.add(checks::compare_pattern(&chunk[..len], seed, start as u64));
    }
    Ok(total)
}

/// Before one mode's copies: each GPU's source gets a pattern of its own, each destination a
/// poison, so a copy that did not happen, or came from elsewhere, fails. Returns the seeds (a, b).
fn prepare_check(a: &Gpu, b: &Gpu, bytes: usize, peer: bool) -> Result<(u64, u64), ExperimentError> {
    let seed = |gpu: &Gpu| checks::pattern_word(bytes as u64, u64::from(gpu.index) << 1 | u64::from(peer));
    for gpu in [a, b] {
        write_pattern(gpu, bytes, seed(gpu))?;
        poison(gpu, bytes)?;
    }
    Ok((seed(a), seed(b)))
}
