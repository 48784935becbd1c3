//! NCCL collectives on one process's GPUs, like nccl-tests' `*_perf -g N`: a context, two streams and
//! send/receive buffers on each GPU, one communicator per GPU ([`nccl::Comms`]), every collective and size
//! timed with CUDA events after warm-up, every GPU's whole result checked on the device afterwards. Then
//! the DDP step (`ddp.rs`).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use base::clock::Deadline;

use crate::experiments::collectives::params::{Collective, CollectivesParams, element_bytes};
use crate::values::Dtype;
use cudarc::driver::sys::{self, CUevent_flags};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg, result};
use cudarc::nccl::sys::{cudaStream_t, ncclDataType_t, ncclRedOp_t};
use half::bf16;
use shared::lab::RunResult;

use super::nccl::{self, Comms};
use super::{Fault, cuda_err, lib_err, ordinal_for};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::collectives::report::{self, CollectiveSample, CollectivesMeasurements, ResultCompare};

/// Longest wait for one batch of collectives or one DDP step before the communicators are aborted.
const WAIT_LIMIT: Duration = Duration::from_secs(60);
/// Longest wait for ncclCommInitAll.
const INIT_LIMIT: Duration = Duration::from_secs(60);
/// ~100 µs of spinning, so the host's cost of submitting a call stays outside its timed window.
const HOLD_CYCLES: i64 = 200_000;

const KERNELS: &str = r#"
extern "C" __global__ void hold_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
extern "C" __global__ void nccl_check(const void* buf, unsigned long long n, unsigned int is_bf16,
                                      unsigned long long piece, float want, unsigned long long* out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long differ = 0, first = ~0ULL;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = is_bf16 ? __uint_as_float(((unsigned int)((const unsigned short*)buf)[i]) << 16)
                          : ((const float*)buf)[i];
        float w = piece ? (float)(i / piece + 1ULL) : want;
        if (!(v == w)) { differ += 1; if (i < first) first = i; }
    }
    if (differ > 0) { atomicAdd(&out[0], differ); atomicMin(&out[1], first); }
}
"#;

/// Device memory from `cuMemAlloc` in one GPU's context, freed on drop.
pub(super) struct Buffer {
    ctx: Arc<CudaContext>,
    pub(super) ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Buffer {
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, ExperimentError> {
        ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
        // SAFETY: the context is current; every reader of the buffer is preceded by a write (fill or memset).
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(cuda_err("allocating device memory"))?;
        Ok(Self { ctx: ctx.clone(), ptr, bytes })
    }

    pub(super) fn at(&self, offset: usize) -> *mut c_void {
        (self.ptr + offset as u64) as *mut c_void
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemAlloc in this context and freed once; the run synchronized its streams
        // or aborted its communicators (which ends their kernels) first.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// One GPU of the run.
pub(super) struct Rank {
    index: u32,
    pub(super) ctx: Arc<CudaContext>,
    /// Collectives run here; in the DDP step, the gradient all-reduces.
    pub(super) comm: Arc<CudaStream>,
    /// The DDP step's GEMMs.
    pub(super) compute: Arc<CudaStream>,
    hold: CudaFunction,
    check: CudaFunction,
    send: Buffer,
    recv: Buffer,
}

impl Rank {
    fn open(index: u32, ordinal: usize, bytes: usize, ptx: &cudarc::nvrtc::Ptx) -> Result<Self, ExperimentError> {
        let ctx = CudaContext::new(ordinal).map_err(cuda_err("opening a CUDA context"))?;
        // SAFETY: the run synchronizes (or aborts) every stream before a buffer is reused elsewhere or freed.
        unsafe { ctx.disable_event_tracking() };
        let module = ctx.load_module(ptx.clone()).map_err(cuda_err("loading the check kernels"))?;
        Ok(Self {
            index,
            comm: ctx.new_stream().map_err(cuda_err("creating a stream"))?,
            compute: ctx.new_stream().map_err(cuda_err("creating a stream"))?,
            hold: module.load_function("hold_kernel").map_err(cuda_err("finding hold_kernel"))?,
            check: module.load_function("nccl_check").map_err(cuda_err("finding nccl_check"))?,
            send: Buffer::new(&ctx, bytes)?,
            recv: Buffer::new(&ctx, bytes)?,
            ctx,
        })
    }

    pub(super) fn stream(&self) -> cudaStream_t {
        self.comm.cu_stream() as cudaStream_t
    }

    pub(super) fn record(&self, stream: &CudaStream) -> Result<CudaEvent, ExperimentError> {
        stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("recording an event"))
    }

    pub(super) fn hold(&self, stream: &CudaStream) -> Result<(), ExperimentError> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut args = stream.launch_builder(&self.hold);
        args.arg(&HOLD_CYCLES);
        // SAFETY: hold_kernel takes one long long and touches no memory.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(cuda_err("launching hold_kernel"))
    }

    /// Fills `count` elements of `buf` with `value` on the comm stream.
    fn fill(&self, buf: &Buffer, count: usize, dtype: Dtype, value: f32) -> Result<(), ExperimentError> {
        self.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
        let stream = self.comm.cu_stream();
        // SAFETY: `buf` holds at least `count` elements of the type (the caller sized it); the stream is this context's.
        let rc = unsafe {
            match dtype {
                Dtype::Bf16 => sys::cuMemsetD16Async(buf.ptr, bf16::from_f32(value).to_bits(), count, stream),
                _ => sys::cuMemsetD32Async(buf.ptr, value.to_bits(), count, stream),
            }
        };
        rc.result().map_err(cuda_err("filling a buffer"))
    }

    /// Poisons all of `recv` (0xff bytes are NaN in fp32 and bf16, equal to nothing).
    fn poison(&self) -> Result<(), ExperimentError> {
        self.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
        // SAFETY: recv holds `bytes` bytes; the stream is this context's.
        unsafe { sys::cuMemsetD8Async(self.recv.ptr, 0xff, self.recv.bytes, self.comm.cu_stream()) }
            .result()
            .map_err(cuda_err("poisoning the result buffer"))
    }

    /// Counts the elements of `recv[..count]` that differ from what `collective` must leave there.
    fn compare(
        &self,
        c: Collective,
        n: usize,
        count: u64,
        piece: u64,
        dtype: Dtype,
    ) -> Result<ResultCompare, ExperimentError> {
        let mut out = self.comm.clone_htod(&[0u64, u64::MAX]).map_err(cuda_err("allocating the check's result"))?;
        let is_bf16 = u32::from(dtype == Dtype::Bf16);
        let piece = if c == Collective::AllGather { piece } else { 0 };
        let want = c.expected(n, 1, 0) as f32;
        let ptr = self.recv.ptr;
        let mut launch = self.comm.launch_builder(&self.check);
        launch.arg(&ptr).arg(&count).arg(&is_bf16).arg(&piece).arg(&want).arg(&mut out);
        let blocks = u32::try_from(count.div_ceil(256).clamp(1, 4096)).unwrap_or(4096);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: nccl_check reads `count` elements of recv (sized for them) and updates out[0..2].
        unsafe { launch.launch(cfg) }.map_err(cuda_err("launching nccl_check"))?;
        let answer = self.comm.clone_dtoh(&out).map_err(cuda_err("reading the check's result"))?;
        self.comm.synchronize().map_err(cuda_err("synchronizing after the check"))?;
        Ok(ResultCompare { compared: count, differ: answer[0], first: (answer[0] > 0).then_some(answer[1]) })
    }
}

pub(super) fn nccl_type(dtype: Dtype) -> ncclDataType_t {
    if dtype == Dtype::Bf16 { ncclDataType_t::ncclBfloat16 } else { ncclDataType_t::ncclFloat32 }
}

/// Issues `c` on every rank, in one group.
fn issue(
    comms: &mut Comms,
    ranks: &[Rank],
    c: Collective,
    counts: (u64, u64),
    dtype: Dtype,
) -> Result<(), ExperimentError> {
    let nccl = comms.nccl.clone();
    let (send, recv) = (counts.0 as usize, counts.1 as usize);
    let dt = nccl_type(dtype);
    comms.group(c.name(), |rank, comm| {
        let r = &ranks[rank];
        let (s, d, st) = (r.send.at(0).cast_const(), r.recv.at(0), r.stream());
        // SAFETY: send holds `send` and recv `recv` elements of `dt` on this rank's GPU; the stream is its own;
        // the call is inside ncclGroupStart/End, as one thread driving several GPUs must issue it.
        unsafe {
            match c {
                Collective::AllReduce => (nccl.all_reduce)(s, d, send, dt, ncclRedOp_t::ncclSum, comm, st),
                Collective::AllGather => (nccl.all_gather)(s, d, send, dt, comm, st),
                Collective::ReduceScatter => (nccl.reduce_scatter)(s, d, recv, dt, ncclRedOp_t::ncclSum, comm, st),
                Collective::Broadcast => (nccl.broadcast)(s, d, send, dt, 0 as c_int, comm, st),
            }
        }
    })
}

/// Waits for `events` (each rank's last), aborting the communicators on an error, a cancel or the time limit.
pub(super) fn wait(comms: &mut Comms, events: &[&CudaEvent], ctx: &RunContext<'_>) -> Result<(), ExperimentError> {
    comms.wait(Deadline::after(WAIT_LIMIT), || {
        ctx.check()?;
        for e in events {
            if !e.try_is_complete().map_err(cuda_err("waiting for the collectives"))? {
                return Ok(false);
            }
        }
        Ok(true)
    })
}

/// Times `p.repetitions` calls of `c` at `size` after warm-up, then checks every rank's result. With `skip`
/// (the `skip-collective` fault) the timed calls are not made: the windows are timed empty.
#[allow(clippy::too_many_arguments)]
fn measure(
    comms: &mut Comms,
    ranks: &[Rank],
    c: Collective,
    size: u64,
    p: &CollectivesParams,
    ctx: &RunContext<'_>,
    skip: bool,
) -> Result<(CollectiveSample, Vec<shared::lab::Check>), ExperimentError> {
    let n = ranks.len();
    let elem = element_bytes(p.dtype);
    let counts = c.counts(size, elem, n);
    for (rank, r) in ranks.iter().enumerate() {
        r.fill(&r.send, counts.0 as usize, p.dtype, (rank + 1) as f32)?;
    }
    for _ in 0..p.warmup {
        issue(comms, ranks, c, counts, p.dtype)?;
    }
    for r in ranks {
        r.poison()?;
    }
    let mut marks = Vec::new();
    for _ in 0..p.repetitions {
        ctx.check()?;
        let mut starts = Vec::new();
        for r in ranks {
            r.hold(&r.comm)?;
            starts.push(r.record(&r.comm)?);
        }
        if !skip {
            issue(comms, ranks, c, counts, p.dtype)?;
        }
        let ends = ranks.iter().map(|r| r.record(&r.comm)).collect::<Result<Vec<_>, _>>()?;
        marks.push((starts, ends));
    }
    let last: Vec<CudaEvent> = ranks.iter().map(|r| r.record(&r.comm)).collect::<Result<_, _>>()?;
    wait(comms, &last.iter().collect::<Vec<_>>(), ctx)?;
    let mut times = Vec::new();
    for (starts, ends) in &marks {
        let mut slowest = 0.0f64;
        for (s, e) in starts.iter().zip(ends) {
            slowest = slowest.max(f64::from(s.elapsed_ms(e).map_err(cuda_err("reading an event"))?));
        }
        times.push(slowest);
    }
    let bytes = c.bytes(size, elem, n);
    let mut checks = Vec::new();
    for r in ranks {
        let got = r.compare(c, n, counts.1, counts.0, p.dtype)?;
        checks.push(report::check(c, r.index, n, bytes, &got));
    }
    Ok((CollectiveSample { collective: c, bytes, times_ms: times }, checks))
}

/// Runs the experiment on `p.gpus` (already resolved); `gpus` maps NVML indexes to UUIDs. `fault` is
/// `gpudash bench`'s injected fault, if any.
pub fn run(
    gpus: &[(u32, String)],
    p: &CollectivesParams,
    ctx: &RunContext<'_>,
    fault: Option<Fault>,
) -> Result<RunResult, ExperimentError> {
    let lib = nccl::load().map_err(|e| ExperimentError::Cuda(e.to_string()))?;
    let max = p.sizes.iter().copied().max().unwrap_or(0);
    let bytes = usize::try_from(max + 64).map_err(|_| ExperimentError::Cuda("size too large for this host".into()))?;
    ctx.progress(0.0, &format!("opening GPUs {:?} and NCCL {}", p.gpus, nccl::version_text(lib.version)));
    let ordinal_of = |index: u32| {
        let fallback = index as usize;
        gpus.iter().find(|(i, _)| *i == index).map_or(fallback, |(_, u)| ordinal_for(u, fallback))
    };
    let first = p.gpus.first().map_or(0, |&g| ordinal_of(g));
    let (major, minor) = CudaContext::new(first)
        .and_then(|c| c.compute_capability())
        .map_err(cuda_err("reading the compute capability"))?;
    let options = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture=sm_{major}{minor}")],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNELS, options).map_err(lib_err("NVRTC compile"))?;
    let mut ranks = Vec::new();
    for &index in &p.gpus {
        ranks.push(Rank::open(index, ordinal_of(index), bytes, &ptx)?);
    }
    let ordinals: Vec<c_int> = ranks.iter().map(|r| c_int::try_from(r.ctx.ordinal()).unwrap_or(0)).collect();
    ctx.progress(0.02, "ncclCommInitAll");
    let mut comms = Comms::init(lib.clone(), &ordinals, INIT_LIMIT)?;
    let mut samples = Vec::new();
    let mut checks = Vec::new();
    let total = (p.collectives.len() * p.sizes.len()) as f64;
    for (i, &c) in p.collectives.iter().enumerate() {
        for (j, &size) in p.sizes.iter().enumerate() {
            let done = (i * p.sizes.len() + j) as f64 / total * 0.8;
            ctx.progress(done, &format!("{} {}", c.name(), shared::units::format_bytes(size)));
            let skip = fault == Some(Fault::SkipCollective) && i == 0 && j == 0;
            let (sample, check) = measure(&mut comms, &ranks, c, size, p, ctx, skip)?;
            samples.push(sample);
            checks.extend(check);
        }
    }
    let ddp = match &p.ddp {
        Some(d) => Some(super::ddp::ddp_step(&mut comms, &ranks, d, p.repetitions.min(10), ctx)?),
        None => None,
    };
    for r in &ranks {
        r.ctx.synchronize().map_err(cuda_err("synchronizing"))?;
    }
    comms.close();
    drop(ranks);
    let library = format!("NCCL {} ({})", nccl::version_text(lib.version), lib.path);
    let gpus = p.gpus.clone();
    let link_peak = crate::experiments::collectives::link_peak(&gpus, ctx, false);
    Ok(report::report(CollectivesMeasurements { gpus, dtype: p.dtype, samples, checks, ddp, library, link_peak }))
}
