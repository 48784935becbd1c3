//! The caching allocator made visible: blocks from the device's stream-ordered
//! pool, allocated vs reserved vs NVML's used at every step, then a trim.
#![allow(unsafe_code)]

use base::clock::Stopwatch;

use crate::experiments::memory::params::MemoryParams;
use cudarc::driver::{CudaSlice, result};
use shared::lab::{MemoryStep, RunResult};

use super::{Fault, Session, cuda_err};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::memory::report::{self, MemoryMeasurements};

fn alloc(s: &Session, bytes: u64) -> Result<CudaSlice<u8>, ExperimentError> {
    let len = usize::try_from(bytes).map_err(|_| ExperimentError::Cuda("block too large for this host".into()))?;
    // SAFETY: the bytes are never read before being written; this experiment only holds them.
    let block = unsafe { s.stream.alloc::<u8>(len) }.map_err(cuda_err("allocating from the pool"))?;
    s.stream.synchronize().map_err(cuda_err("synchronizing after an allocation"))?;
    Ok(block)
}

/// A block of `bytes` from the pool and the host µs of the driver calls that got it: cuMemAllocAsync and a
/// stream synchronize, with the context bound before the clock starts, as tests/gpu/memory_pool.c times
/// them. Through cudarc's `alloc` the window also held its context check and bookkeeping (~0.1 µs of a
/// ~0.9 µs pool-served allocation in the session 10 H200 rounds that were not disturbed).
fn timed_alloc(s: &Session, bytes: u64) -> Result<(CudaSlice<u8>, f64), ExperimentError> {
    let len = usize::try_from(bytes).map_err(|_| ExperimentError::Cuda("block too large for this host".into()))?;
    s.ctx.bind_to_thread().map_err(cuda_err("binding the context"))?;
    let stream = s.stream.cu_stream();
    let start = Stopwatch::start();
    // SAFETY: the stream belongs to the session's live, bound context.
    let ptr = unsafe { result::malloc_async(stream, len) }.map_err(cuda_err("allocating from the pool"))?;
    // SAFETY: as above.
    let synced = unsafe { result::stream::synchronize(stream) };
    let us = start.elapsed().as_secs_f64() * 1e6;
    // SAFETY: `ptr` is a live allocation of `len` bytes made on this stream; the slice frees it on drop, and its
    // bytes are never read before being written (this experiment only holds them).
    let block = unsafe { s.stream.upgrade_device_ptr::<u8>(ptr, len) };
    synced.map_err(cuda_err("synchronizing after an allocation"))?;
    Ok((block, us))
}

fn free(s: &Session, block: CudaSlice<u8>) -> Result<(), ExperimentError> {
    drop(block);
    s.stream.synchronize().map_err(cuda_err("synchronizing after a free"))
}

pub fn run(s: &mut Session, p: &MemoryParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    // Start from an empty pool, so the steps show this experiment alone.
    s.trim_to(0)?;
    let reading = |s: &Session, label: String| -> Result<MemoryStep, ExperimentError> {
        s.stream.synchronize().map_err(cuda_err("synchronizing"))?;
        let usage = s.usage()?;
        Ok(MemoryStep {
            label,
            allocated: usage.used,
            reserved: usage.reserved,
            nvml_used: ctx.probe.memory(ctx.device).map(|m| m.used),
        })
    };
    let total = f64::from(p.blocks) + f64::from(p.repetitions) + 3.0;
    let mut steps = vec![reading(s, "start".into())?];
    let mut blocks = Vec::new();
    for i in 0..p.blocks {
        ctx.check()?;
        ctx.progress(f64::from(i) / total, &format!("allocating block {} of {}", i + 1, p.blocks));
        blocks.push(Some(alloc(s, p.block_bytes)?));
        steps.push(reading(s, format!("alloc block {}", i + 1))?);
    }
    let mut freed = 0;
    for (i, block) in blocks.iter_mut().enumerate() {
        let due = i % p.free_every as usize == p.free_every as usize - 1;
        if let Some(b) = block.take_if(|_| due) {
            free(s, b)?;
            freed += 1;
        }
    }
    steps.push(reading(s, format!("free {freed} blocks"))?);

    let (mut pooled_us, mut fresh_us) = (Vec::new(), Vec::new());
    for rep in 0..p.repetitions {
        ctx.check()?;
        ctx.progress((f64::from(p.blocks) + f64::from(rep)) / total, "timing pool-served vs fresh allocations");
        // Hand every cached block back, so the next allocation must come from the driver.
        s.trim_to(0)?;
        let (block, us) = timed_alloc(s, p.block_bytes)?;
        fresh_us.push(us);
        free(s, block)?;
        let (block, us) = timed_alloc(s, p.block_bytes)?;
        pooled_us.push(us);
        free(s, block)?;
    }
    blocks.clear();
    steps.push(reading(s, "free all".into())?);
    ctx.progress((total - 1.0) / total, "empty_cache");
    if s.fault != Some(Fault::SkipTrim) {
        s.trim_to(0)?;
    }
    steps.push(reading(s, "empty_cache".into())?);
    let mut result = report::memory(MemoryMeasurements { steps, pooled_us, fresh_us });
    result.notes.push("Allocation times are host-side: cuMemAllocAsync plus a stream synchronize.".into());
    Ok(result)
}
