//! What the smallest operations cost: launching an empty NVRTC kernel,
//! recording an event, synchronizing a stream (host clock); empty kernels
//! queued back to back (CUDA events: the launch rate); and the GPU's own time
//! per empty kernel, from one launch of a CUDA graph of many (CUDA events).
//! A counting kernel shows that every kernel launched, queued or in a graph, ran.
#![allow(unsafe_code)]

use base::clock::Stopwatch;
use std::sync::Arc;

use crate::experiments::latency::params::LatencyParams;
use cudarc::driver::sys::{self, CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice, CudaStream, LaunchConfig, PushKernelArg, result};
use shared::lab::RunResult;

use super::{Fault, Session, cuda_err};
use crate::executor::{ExperimentError, RunContext};
use crate::latency::{self, GRAPH_COUNT_LAUNCHES, GRAPH_KERNELS, LatencyMeasurements, QUEUED_KERNELS};

/// The counting kernel, compiled with the session's other kernels.
pub(super) const SOURCE: &str = r#"
extern "C" __global__ void count_kernel(unsigned int* counter) { atomicAdd(counter, 1u); }
"#;

/// Launches between synchronizations, so the launch queue never fills while timing.
const BATCH: u32 = 256;

const ONE: LaunchConfig = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };

fn launch(stream: &CudaStream, f: &CudaFunction) -> Result<(), ExperimentError> {
    // SAFETY: empty_kernel takes no arguments and touches no memory.
    unsafe { stream.launch_builder(f).launch(ONE) }.map(|_| ()).map_err(cuda_err("launching empty_kernel"))
}

fn count(stream: &CudaStream, f: &CudaFunction, counter: &CudaSlice<u32>) -> Result<(), ExperimentError> {
    let mut args = stream.launch_builder(f);
    args.arg(counter);
    // SAFETY: count_kernel adds one to the single u32 it is given, which `counter` holds.
    unsafe { args.launch(ONE) }.map(|_| ()).map_err(cuda_err("launching count_kernel"))
}

/// A graph of the `n` launches `one` makes, captured from `stream` and instantiated.
fn capture(
    stream: &Arc<CudaStream>,
    n: u32,
    one: impl Fn() -> Result<(), ExperimentError>,
) -> Result<CudaGraph, ExperimentError> {
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(cuda_err("beginning a stream capture"))?;
    let launched = (0..n).try_for_each(|_| one());
    // Ended even when a launch failed, so the stream leaves capture mode.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(cuda_err("ending the stream capture"));
    launched?;
    graph?.ok_or_else(|| ExperimentError::Cuda("the stream capture produced no graph".into()))
}

/// How many nodes the graph holds.
fn nodes(graph: &CudaGraph) -> Result<u64, ExperimentError> {
    let mut count = 0usize;
    // SAFETY: the graph lives as long as `graph`; a null node array asks for the count only.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &raw mut count) }
        .result()
        .map_err(cuda_err("counting the graph's nodes"))?;
    Ok(count as u64)
}

fn micros(start: Stopwatch) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

pub fn run(s: &mut Session, p: &LatencyParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    ctx.progress(0.0, "compiling the kernels");
    let f = s.kernel("empty_kernel")?;
    let counter_kernel = s.kernel("count_kernel")?;
    for _ in 0..p.warmup {
        launch(&s.stream, &f)?;
    }
    s.stream.synchronize().map_err(cuda_err("synchronizing"))?;
    let host_us = host_calls(s, &f, p, ctx)?;

    ctx.progress(0.7, "empty kernels queued back to back");
    let queued_us = queued(s, &f, p, ctx)?;
    ctx.progress(0.8, "a CUDA graph of empty kernels");
    let (graph_us, graph_nodes) = graph(s, &f, p, ctx)?;
    ctx.progress(0.9, "counting the kernels that ran");
    let (queued_counted, graph_counted) = counted(s, &counter_kernel)?;
    Ok(latency::report(&LatencyMeasurements {
        host_us,
        queued_us,
        graph_us,
        graph_nodes,
        queued_counted,
        graph_counted,
    }))
}

/// Slices the host-call samples are taken in: each slice times every host figure in turn (launches,
/// event records, idle synchronizes and round trips), so each figure's samples spread over the whole
/// run. On the lent H200 (a VM) a core's speed changes for milliseconds at a time (event record read
/// 0.85 or 1.2–1.36 µs from one run to the next, on both sides); a figure timed in one block of its own
/// caught one state, so two runs compared their luck, not their code.
const SLICES: u32 = 10;

/// Host clock around each launch, event record, idle synchronize, and launch + synchronize: the driver
/// calls themselves (the context is bound once, before the clock starts), as tests/gpu/cuda_latency.c
/// times them, so the figure is the driver's cost and not cudarc's per-call bookkeeping.
fn host_calls(
    s: &Session,
    f: &CudaFunction,
    p: &LatencyParams,
    ctx: &RunContext<'_>,
) -> Result<[Vec<f64>; 4], ExperimentError> {
    s.ctx.bind_to_thread().map_err(cuda_err("binding the context"))?;
    let (stream, function) = (s.stream.cu_stream(), f.cu_function());
    let event = s.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("creating an event"))?;
    let cu_event = event.cu_event();
    // SAFETY (the three calls): the stream and the event live as long as `s` and `event`, both outlive the
    // closures; empty_kernel takes no arguments and touches no memory.
    let sync = || {
        // SAFETY: see above.
        unsafe { result::stream::synchronize(stream) }.map_err(cuda_err("synchronizing"))
    };
    let launch = || {
        // SAFETY: see above.
        unsafe { result::launch_kernel(function, (1, 1, 1), (1, 1, 1), 0, stream, &mut []) }
            .map_err(cuda_err("launching empty_kernel"))
    };
    let record = || {
        // SAFETY: see above.
        unsafe { result::event::record(cu_event, stream) }.map_err(cuda_err("recording an event"))
    };
    let per_slice = (p.repetitions / SLICES).max(1);
    let n = (per_slice * SLICES) as usize;
    let (mut launches, mut records) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut idle_syncs, mut round_trips) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for slice in 0..SLICES {
        ctx.check()?;
        ctx.progress(0.1 + 0.6 * f64::from(slice) / f64::from(SLICES), "host calls: launch, record, synchronize");
        for i in 0..per_slice {
            let start = Stopwatch::start();
            launch()?;
            launches.push(micros(start));
            if i % BATCH == BATCH - 1 {
                sync()?;
            }
        }
        sync()?;
        for i in 0..per_slice {
            let start = Stopwatch::start();
            record()?;
            records.push(micros(start));
            if i % BATCH == BATCH - 1 {
                sync()?;
            }
        }
        sync()?;
        for _ in 0..per_slice {
            let start = Stopwatch::start();
            sync()?;
            idle_syncs.push(micros(start));
            let start = Stopwatch::start();
            launch()?;
            sync()?;
            round_trips.push(micros(start));
        }
    }
    Ok([launches, records, idle_syncs, round_trips])
}

/// µs per kernel: events around [`QUEUED_KERNELS`] empty kernels launched back to back.
fn queued(s: &Session, f: &CudaFunction, p: &LatencyParams, ctx: &RunContext<'_>) -> Result<Vec<f64>, ExperimentError> {
    let batches = (p.repetitions / QUEUED_KERNELS).max(10);
    let mut per_kernel = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        ctx.check()?;
        let start = s.record(&s.stream)?;
        for _ in 0..QUEUED_KERNELS {
            launch(&s.stream, f)?;
        }
        let end = s.record(&s.stream)?;
        let ms = start.elapsed_ms(&end).map_err(cuda_err("reading an event"))?;
        per_kernel.push(f64::from(ms) * 1e3 / f64::from(QUEUED_KERNELS));
    }
    Ok(per_kernel)
}

/// µs per kernel: events around one launch of a graph of [`GRAPH_KERNELS`] empty kernels; and its node count.
fn graph(
    s: &Session,
    f: &CudaFunction,
    p: &LatencyParams,
    ctx: &RunContext<'_>,
) -> Result<(Vec<f64>, u64), ExperimentError> {
    let stream = &s.stream;
    stream.synchronize().map_err(cuda_err("synchronizing before the capture"))?;
    let graph = capture(stream, GRAPH_KERNELS, || launch(stream, f))?;
    let nodes = nodes(&graph)?;
    graph.upload().map_err(cuda_err("uploading the graph"))?;
    // One untimed launch: the first pays for setting the graph up on the device.
    graph.launch().map_err(cuda_err("launching the graph"))?;
    stream.synchronize().map_err(cuda_err("synchronizing after the graph"))?;
    let samples = (p.repetitions / 100).max(10);
    let mut per_kernel = Vec::with_capacity(samples as usize);
    for _ in 0..samples {
        ctx.check()?;
        let start = s.record(stream)?;
        graph.launch().map_err(cuda_err("launching the graph"))?;
        let end = s.record(stream)?;
        let ms = start.elapsed_ms(&end).map_err(cuda_err("reading an event"))?;
        per_kernel.push(f64::from(ms) * 1e3 / f64::from(GRAPH_KERNELS));
    }
    Ok((per_kernel, nodes))
}

/// The device counter after [`QUEUED_KERNELS`] queued counting kernels, and after
/// [`GRAPH_COUNT_LAUNCHES`] launches of a graph of [`GRAPH_KERNELS`] of them.
fn counted(s: &Session, f: &CudaFunction) -> Result<(u64, u64), ExperimentError> {
    let stream = &s.stream;
    let read = |counter: &CudaSlice<u32>| -> Result<u64, ExperimentError> {
        let mut value = [0u32; 1];
        stream.memcpy_dtoh(counter, &mut value[..]).map_err(cuda_err("reading the counter"))?;
        stream.synchronize().map_err(cuda_err("synchronizing"))?;
        Ok(u64::from(value[0]))
    };
    let mut counter = stream.alloc_zeros::<u32>(1).map_err(cuda_err("allocating the counter"))?;
    let launched = if s.fault == Some(Fault::SkipLaunch) { QUEUED_KERNELS - 1 } else { QUEUED_KERNELS };
    for _ in 0..launched {
        count(stream, f, &counter)?;
    }
    let queued = read(&counter)?;
    stream.memset_zeros(&mut counter).map_err(cuda_err("clearing the counter"))?;
    stream.synchronize().map_err(cuda_err("synchronizing before the capture"))?;
    let graph = capture(stream, GRAPH_KERNELS, || count(stream, f, &counter))?;
    for _ in 0..GRAPH_COUNT_LAUNCHES {
        graph.launch().map_err(cuda_err("launching the counting graph"))?;
    }
    let in_graph = read(&counter)?;
    Ok((queued, in_graph))
}
