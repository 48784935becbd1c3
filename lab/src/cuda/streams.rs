//! Copy/compute overlap and concurrent kernels, with a per-stream timeline
//! built from CUDA events. Before each timed phase the copy's destination and the GEMM's output are
//! poisoned (outside the windows), and after it the GPU counts what is still poisoned, so every timed
//! copy and GEMM is seen to have written; after the rounds, the last GEMM's output is checked on the
//! host and every spin kernel's output is read.
#![allow(unsafe_code)]

use std::sync::Arc;

use crate::experiments::streams::params::StreamsParams;
use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use shared::lab::{RunResult, TimelineSpan};

use super::{Fault, Session, cuda_err, lib_err};
use crate::checks::{self, PatternCompare, StreamsOutputs, TimedGemms};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::streams::report::{self, StreamsMeasurements};

/// Copy, compute and both, ms.
type SerialTimes = (f64, f64, f64);

/// The buffers and handles of one experiment.
struct Work<'a> {
    s: &'a Session,
    copy_stream: Arc<CudaStream>,
    blas: Arc<CudaBlas>,
    host: &'a [u8],
    dev: CudaSlice<u8>,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    n: i32,
    spin: CudaFunction,
    cycles: i64,
    /// Cycles each spin kernel of a round spun: the one-stream arm's slots, then the k streams'.
    spun: CudaSlice<u64>,
    kernel_streams: Vec<Arc<CudaStream>>,
    /// The device halves of the per-phase checks: `fill_pattern`, `compare_pattern` and `count_word`.
    fill: CudaFunction,
    compare: CudaFunction,
    count: CudaFunction,
    /// The faults this run injects into its timed rounds (`gpudash bench` only).
    skip_copy: bool,
    skip_gemm: bool,
    skip_spin: bool,
}

/// Where the per-phase checks land: two words (differing bytes, first) per timed copy, one word
/// (values still poisoned) per timed GEMM.
struct PhaseChecks {
    copies: CudaSlice<u64>,
    gemms: CudaSlice<u64>,
    seed: u64,
}

fn ms(from: &CudaEvent, to: &CudaEvent) -> Result<f64, ExperimentError> {
    from.elapsed_ms(to).map(f64::from).map_err(cuda_err("reading an event"))
}

fn span(
    phase: &str,
    stream: u32,
    label: &str,
    origin: &CudaEvent,
    from: &CudaEvent,
    to: &CudaEvent,
) -> Result<TimelineSpan, ExperimentError> {
    Ok(TimelineSpan {
        phase: phase.to_owned(),
        stream,
        label: label.to_owned(),
        start_ms: ms(origin, from)?,
        end_ms: ms(origin, to)?,
    })
}

impl Work<'_> {
    fn copy_on(&mut self, stream: &Arc<CudaStream>) -> Result<(), ExperimentError> {
        if self.skip_copy {
            return Ok(());
        }
        let n = self.host.len();
        stream.memcpy_htod(self.host, &mut self.dev.slice_mut(..n)).map_err(cuda_err("copying"))
    }

    fn gemm(&mut self) -> Result<(), ExperimentError> {
        if self.skip_gemm {
            return Ok(());
        }
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: self.n,
            n: self.n,
            k: self.n,
            alpha: 1.0f32,
            lda: self.n,
            ldb: self.n,
            beta: 0.0f32,
            ldc: self.n,
        };
        // SAFETY: A, B and C each hold n×n f32 values, matching the configuration.
        unsafe { self.blas.gemm(cfg, &self.a, &self.b, &mut self.c) }.map_err(lib_err("cuBLAS sgemm"))
    }

    /// One spin kernel on `stream`, writing how long it spun into `slot`.
    fn spin(&self, stream: &CudaStream, slot: usize) -> Result<(), ExperimentError> {
        let slots = u32::try_from(self.spun.len()).unwrap_or(u32::MAX);
        let slot = u32::try_from(slot).ok().filter(|&s| s < slots);
        let slot = slot.ok_or_else(|| ExperimentError::Cuda("spin kernel slot out of range".into()))?;
        if self.skip_spin && slot + 1 == slots {
            return Ok(());
        }
        let mut launch = stream.launch_builder(&self.spin);
        launch.arg(&self.cycles).arg(&self.spun).arg(&slot).arg(&slots);
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: spin_kernel takes a long long, a u64 buffer of `slots` values and writes only spun[slot < slots].
        unsafe { launch.launch(one) }.map(|_| ()).map_err(cuda_err("launching spin_kernel"))
    }

    /// Poisons the copy's destination and the GEMM's output on the main stream, before a timed phase.
    fn poison(&mut self, seed: u64) -> Result<(), ExperimentError> {
        self.s.fill_pattern_with(&self.fill, &mut self.dev.slice_mut(..), checks::poison_seed(seed))?;
        self.s.poison_nan(&mut self.c)
    }

    /// After timed phase `k` (on the main stream, which has joined every stream of the phase): how
    /// much of the destination differs from the pattern and how much of C is still poison.
    fn check_phase(&mut self, into: &mut PhaseChecks, k: usize) -> Result<(), ExperimentError> {
        let (copies, gemms) = (&mut into.copies, &mut into.gemms);
        self.s.queue_compare(&self.compare, &self.dev.slice(..), into.seed, &mut copies.slice_mut(2 * k..2 * k + 2))?;
        self.s.queue_count_poison(&self.count, &self.c, &mut gemms.slice_mut(k..=k))
    }

    /// Copy then GEMM on one stream: (copy, compute, total) ms and spans.
    fn serial(&mut self) -> Result<(SerialTimes, Vec<TimelineSpan>), ExperimentError> {
        let main = self.s.stream.clone();
        let e0 = self.s.record(&main)?;
        self.copy_on(&main)?;
        let e1 = self.s.record(&main)?;
        self.gemm()?;
        let e2 = self.s.record(&main)?;
        let phase = "copy+compute, one stream";
        let spans = vec![span(phase, 0, "copy", &e0, &e0, &e1)?, span(phase, 0, "gemm", &e0, &e1, &e2)?];
        Ok(((ms(&e0, &e1)?, ms(&e1, &e2)?, ms(&e0, &e2)?), spans))
    }

    /// GEMM on the main stream while the copy runs on a second one.
    fn overlapped(&mut self) -> Result<(f64, Vec<TimelineSpan>), ExperimentError> {
        let main = self.s.stream.clone();
        let side = self.copy_stream.clone();
        let origin = self.s.record(&main)?;
        side.wait(&origin).map_err(cuda_err("joining streams"))?;
        let copy_start = self.s.record(&side)?;
        self.copy_on(&side)?;
        let copy_end = self.s.record(&side)?;
        self.gemm()?;
        let gemm_end = self.s.record(&main)?;
        main.wait(&copy_end).map_err(cuda_err("joining streams"))?;
        let end = self.s.record(&main)?;
        let phase = "copy+compute, two streams";
        let spans = vec![
            span(phase, 0, "gemm", &origin, &origin, &gemm_end)?,
            span(phase, 1, "copy", &origin, &copy_start, &copy_end)?,
        ];
        Ok((ms(&origin, &end)?, spans))
    }

    /// The spin kernels on one stream, then one per stream. Both arms are timed the same way, by
    /// events on the main stream around the whole batch; no event is read before both arms are
    /// queued, since reading one waits for it and would put the host between kernels.
    fn kernels(&mut self) -> Result<((f64, f64), Vec<TimelineSpan>), ExperimentError> {
        let main = self.s.stream.clone();
        let k = self.kernel_streams.len();
        let one = format!("{k} kernels, one stream");
        let many = format!("{k} kernels, {k} streams");
        let serial_origin = self.s.record(&main)?;
        let mut serial = Vec::with_capacity(k);
        for slot in 0..k {
            let start = self.s.record(&main)?;
            self.spin(&main, slot)?;
            serial.push((start, self.s.record(&main)?));
        }
        let serial_done = self.s.record(&main)?;
        let origin = self.s.record(&main)?;
        let mut ends = Vec::with_capacity(k);
        for (i, stream) in self.kernel_streams.iter().enumerate() {
            stream.wait(&origin).map_err(cuda_err("joining streams"))?;
            let start = self.s.record(stream)?;
            self.spin(stream, k + i)?;
            let end = self.s.record(stream)?;
            ends.push((i, start, end));
        }
        for (_, _, end) in &ends {
            main.wait(end).map_err(cuda_err("joining streams"))?;
        }
        let done = self.s.record(&main)?;
        let mut spans = Vec::with_capacity(2 * k);
        for (start, end) in &serial {
            spans.push(span(&one, 0, "spin", &serial_origin, start, end)?);
        }
        for (i, start, end) in &ends {
            spans.push(span(&many, u32::try_from(*i).unwrap_or(0), "spin", &origin, start, end)?);
        }
        Ok(((ms(&serial_origin, &serial_done)?, ms(&origin, &done)?), spans))
    }
}

pub fn run(s: &mut Session, p: &StreamsParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    ctx.progress(0.0, "preparing buffers and kernels");
    let spin = s.kernel("spin_kernel")?;
    let (fill, compare, count) = (s.kernel("fill_pattern")?, s.kernel("compare_pattern")?, s.kernel("count_word")?);
    let blas = s.blas()?;
    let khz = s
        .ctx
        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
        .map_err(cuda_err("reading the clock rate"))?;
    let cycles = i64::from(khz) * i64::from(p.kernel_us) / 1000;
    let bytes = usize::try_from(p.copy_bytes).map_err(|_| ExperimentError::Cuda("copy too large".into()))?;
    // SAFETY: written in full below before any copy reads it.
    let mut pinned =
        unsafe { s.ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(cuda_err("allocating pinned memory"))?;
    let host = pinned.as_mut_slice().map_err(cuda_err("mapping pinned memory"))?;
    let seed = checks::copy_seed(crate::values::CopyKind::H2dPinned, p.copy_bytes);
    checks::fill_pattern(host, seed, 0);
    let n = p.gemm_size as usize;
    let mut rng = fastrand::Rng::with_seed(7);
    let values: Vec<f32> = (0..n * n).map(|_| rng.f32() * 2.0 - 1.0).collect();
    let stream = s.stream.clone();
    let upload = |v: &[f32]| stream.clone_htod(v).map_err(cuda_err("uploading matrices"));
    // SAFETY: `dev` is poisoned just below, before anything reads it; C is GEMM output.
    let (dev, c) = unsafe { (stream.alloc::<u8>(bytes), stream.alloc::<f32>(n * n)) };
    let mut dev = dev.map_err(cuda_err("allocating device memory"))?;
    // A poison the copies must overwrite: a copy that never happened fails the check.
    s.fill_pattern(&mut dev.slice_mut(..), checks::poison_seed(seed))?;
    let spun = stream.alloc_zeros::<u64>(2 * p.kernels as usize).map_err(cuda_err("allocating device memory"))?;
    let mut kernel_streams = Vec::new();
    for _ in 0..p.kernels {
        kernel_streams.push(s.ctx.new_stream().map_err(cuda_err("creating a stream"))?);
    }
    let copy_stream = s.ctx.new_stream().map_err(cuda_err("creating a stream"))?;
    let mut w = Work {
        s,
        copy_stream,
        blas,
        host,
        dev,
        a: upload(&values)?,
        b: upload(&values)?,
        c: c.map_err(cuda_err("allocating device memory"))?,
        n: i32::try_from(n).unwrap_or(i32::MAX),
        spin,
        cycles,
        spun,
        kernel_streams,
        fill,
        compare,
        count,
        skip_copy: false,
        skip_gemm: false,
        skip_spin: false,
    };
    let timed_phases = 2 * p.repetitions as usize;
    let mut phases = PhaseChecks {
        copies: stream
            .clone_htod(&[0, u64::MAX].repeat(timed_phases))
            .map_err(cuda_err("allocating the phases' checks"))?,
        gemms: stream.alloc_zeros(timed_phases).map_err(cuda_err("allocating the phases' checks"))?,
        seed,
    };
    w.s.sync()?;

    let mut m = StreamsMeasurements { kernels: p.kernels, ..Default::default() };
    let rounds = p.warmup + p.repetitions;
    for round in 0..rounds {
        ctx.check()?;
        ctx.progress(f64::from(round) / f64::from(rounds), if round < p.warmup { "warm-up" } else { "timing" });
        // Each round's kernels must write their own outputs.
        w.s.stream.memset_zeros(&mut w.spun).map_err(cuda_err("clearing the kernels' outputs"))?;
        let timed = round.checked_sub(p.warmup).map(|k| 2 * k as usize);
        // `gpudash bench` with GPUDASH_BENCH_FAULT: the timed rounds' copies, GEMMs or last spin kernel are not made.
        w.skip_copy = timed.is_some() && w.s.fault == Some(Fault::SkipStreamCopy);
        w.skip_gemm = timed.is_some() && w.s.fault == Some(Fault::SkipGemm);
        w.skip_spin = timed.is_some() && w.s.fault == Some(Fault::SkipSpin);
        if timed.is_some() {
            w.poison(seed)?;
        }
        let ((copy, compute, serial), mut spans) = w.serial()?;
        if let Some(k) = timed {
            w.check_phase(&mut phases, k)?;
            w.poison(seed)?;
        }
        let (overlapped, more) = w.overlapped()?;
        if let Some(k) = timed {
            w.check_phase(&mut phases, k + 1)?;
        }
        spans.extend(more);
        let ((one, many), more) = w.kernels()?;
        spans.extend(more);
        w.s.sync()?;
        if round >= p.warmup {
            m.copy_ms.push(copy);
            m.compute_ms.push(compute);
            m.serial_ms.push(serial);
            m.overlapped_ms.push(overlapped);
            m.kernels_one_stream_ms.push(one);
            m.kernels_many_streams_ms.push(many);
            m.timeline = spans;
        }
    }
    w.s.sync()?;
    ctx.progress(1.0, "checking the outputs");
    let Work { dev, c, spun, .. } = w;
    let spun = s.stream.clone_dtoh(&spun).map_err(cuda_err("reading the kernels' outputs"))?;
    let copy_phases = s.stream.clone_dtoh(&phases.copies).map_err(cuda_err("reading the phases' checks"))?;
    let gemm_phases = s.stream.clone_dtoh(&phases.gemms).map_err(cuda_err("reading the phases' checks"))?;
    s.sync()?;
    let mut copied = s.compare_pattern(&dev.slice(..), seed)?;
    for pair in copy_phases.chunks_exact(2) {
        let (differ, first) = (pair[0], pair[1]);
        copied.add(PatternCompare { compared: bytes as u64, differ, first: (differ > 0).then_some(first) });
    }
    let (gemm, gemm_sums) = super::precision::check_output::<f32>(s, &c, &values, &values, n, ctx)?;
    let outputs = StreamsOutputs {
        copied,
        gemm,
        gemm_sums,
        poisoned: TimedGemms { checked: gemm_phases.len(), expected: timed_phases, poisoned: gemm_phases.iter().sum() },
        spun,
        cycles: u64::try_from(cycles).unwrap_or(0),
        launched: 2 * p.kernels as usize,
    };
    drop((dev, c));
    drop(pinned);
    m.outputs = Some(outputs);
    Ok(report::streams(m))
}
