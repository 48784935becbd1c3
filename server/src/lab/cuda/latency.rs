//! What the smallest operations cost: launching an empty NVRTC kernel,
//! recording an event, synchronizing a stream.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig};
use shared::lab::{LatencyParams, RunResult};

use super::{Session, cuda_err};
use crate::lab::executor::{ExperimentError, RunContext};
use crate::lab::report;

/// Launches between synchronizations, so the launch queue never fills while timing.
const BATCH: u32 = 256;

fn launch(stream: &CudaStream, f: &CudaFunction) -> Result<(), ExperimentError> {
    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: empty_kernel takes no arguments and touches no memory.
    unsafe { stream.launch_builder(f).launch(one) }.map(|_| ()).map_err(cuda_err("launching empty_kernel"))
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

pub fn run(s: &mut Session, p: &LatencyParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    ctx.progress(0.0, "compiling the empty kernel");
    let f = s.kernel("empty_kernel")?;
    let stream = s.stream.clone();
    let sync = || stream.synchronize().map_err(cuda_err("synchronizing"));
    for _ in 0..p.warmup {
        launch(&stream, &f)?;
    }
    sync()?;

    ctx.progress(0.1, "kernel launch");
    let mut launches = Vec::with_capacity(p.repetitions as usize);
    for i in 0..p.repetitions {
        let start = Instant::now();
        launch(&stream, &f)?;
        launches.push(micros(start));
        if i % BATCH == BATCH - 1 {
            sync()?;
            ctx.check()?;
        }
    }
    sync()?;

    ctx.progress(0.3, "event record");
    let event = s.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("creating an event"))?;
    let mut records = Vec::with_capacity(p.repetitions as usize);
    for i in 0..p.repetitions {
        let start = Instant::now();
        event.record(&stream).map_err(cuda_err("recording an event"))?;
        records.push(micros(start));
        if i % BATCH == BATCH - 1 {
            sync()?;
            ctx.check()?;
        }
    }
    sync()?;

    ctx.progress(0.5, "synchronize");
    let mut idle_syncs = Vec::with_capacity(p.repetitions as usize);
    let mut round_trips = Vec::with_capacity(p.repetitions as usize);
    for i in 0..p.repetitions {
        let start = Instant::now();
        sync()?;
        idle_syncs.push(micros(start));
        let start = Instant::now();
        launch(&stream, &f)?;
        sync()?;
        round_trips.push(micros(start));
        if i % BATCH == 0 {
            ctx.check()?;
        }
    }

    ctx.progress(0.8, "back-to-back kernels on the GPU");
    let per_batch = 100;
    let batches = (p.repetitions / per_batch).max(10);
    let mut gpu = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        ctx.check()?;
        let start = s.record(&stream)?;
        for _ in 0..per_batch {
            launch(&stream, &f)?;
        }
        let end = s.record(&stream)?;
        let ms = start.elapsed_ms(&end).map_err(cuda_err("reading an event"))?;
        gpu.push(f64::from(ms) * 1e3 / f64::from(per_batch));
    }
    Ok(report::latency(&[
        ("kernel launch (host)", launches),
        ("event record (host)", records),
        ("synchronize, idle stream (host)", idle_syncs),
        ("launch + synchronize (host)", round_trips),
        ("empty kernel back to back (GPU, events)", gpu),
    ]))
}
