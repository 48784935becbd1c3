//! The DDP step of the collectives experiment: the backward pass's GEMMs on each GPU's compute stream and
//! its gradient buckets all-reduced on a second stream as they are written, as `DistributedDataParallel`
//! does; timed as compute alone, communication alone and both overlapped.
#![allow(unsafe_code)]

use std::ffi::c_void;

use crate::experiments::collectives::params::{DdpParams, DdpPlan, element_bytes};
use crate::values::Dtype;
use cudarc::cublas::CudaBlas;
use cudarc::cublas::result::gemm_ex;
use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
use cudarc::driver::{CudaEvent, result};
use cudarc::nccl::sys::ncclRedOp_t;
use half::bf16;

use super::collectives::{Buffer, Rank, nccl_type, wait};
use super::nccl::Comms;
use super::{cuda_err, lib_err};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::collectives::report::DdpMeasurement;

/// One GPU's DDP buffers: a layer's weights, activations, output gradient, input gradient, and all gradients.
struct DdpBuffers {
    blas: CudaBlas,
    w: Buffer,
    x: Buffer,
    dy: Buffer,
    dx: Buffer,
    grads: Buffer,
}

fn ddp_buffers(r: &Rank, d: &DdpParams, parameters: u64) -> Result<DdpBuffers, ExperimentError> {
    let eb = element_bytes(d.dtype) as usize;
    let (h, t) = (d.hidden as usize, d.tokens as usize);
    let upload = |count: usize, seed: u64| -> Result<Buffer, ExperimentError> {
        let buf = Buffer::new(&r.ctx, count * eb)?;
        let mut rng = fastrand::Rng::with_seed(seed);
        let values: Vec<f32> = (0..count).map(|_| rng.f32() * 2.0 - 1.0).collect();
        // SAFETY: buf holds `count` elements of the type uploaded; the context is current (Buffer::new bound it).
        let copied = unsafe {
            if d.dtype == Dtype::Bf16 {
                let v: Vec<u16> = values.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
                result::memcpy_htod_sync(buf.ptr, &v)
            } else {
                result::memcpy_htod_sync(buf.ptr, &values)
            }
        };
        copied.map_err(cuda_err("uploading the DDP step's inputs"))?;
        Ok(buf)
    };
    let grads = Buffer::new(&r.ctx, usize::try_from(parameters).unwrap_or(usize::MAX).saturating_mul(eb))?;
    Ok(DdpBuffers {
        blas: CudaBlas::new(r.compute.clone()).map_err(lib_err("creating the cuBLAS handle"))?,
        w: upload(h * h, 1)?,
        x: upload(h * t, 2)?,
        dy: upload(h * t, 3)?,
        dx: Buffer::new(&r.ctx, h * t * eb)?,
        grads,
    })
}

/// One GEMM C[m×n] = op(A)·op(B) in column-major storage, fp32 accumulation.
#[allow(clippy::too_many_arguments)]
fn gemm(
    b: &DdpBuffers,
    dtype: Dtype,
    (m, n, k): (usize, usize, usize),
    a: *const c_void,
    bt: bool,
    bp: *const c_void,
    c: *mut c_void,
) -> Result<(), ExperimentError> {
    let data = if dtype == Dtype::Bf16 { cudaDataType_t::CUDA_R_16BF } else { cudaDataType_t::CUDA_R_32F };
    let dim = |v: usize| i32::try_from(v).map_err(|_| ExperimentError::Cuda("matrix too large".into()));
    let (m, n, k) = (dim(m)?, dim(n)?, dim(k)?);
    let ldb = if bt { n } else { k };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let op_b = if bt { CUBLAS_OP_T } else { CUBLAS_OP_N };
    // SAFETY: A is m×k, B is k×n (n×k when transposed), C is m×n, all live on this GPU; alpha and beta
    // are f32 host values as CUBLAS_COMPUTE_32F requires.
    unsafe {
        gemm_ex(
            *b.blas.handle(),
            CUBLAS_OP_N,
            op_b,
            m,
            n,
            k,
            (&raw const alpha).cast(),
            a,
            data,
            m,
            bp,
            data,
            ldb,
            (&raw const beta).cast(),
            c,
            data,
            m,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(lib_err("cublasGemmEx"))
}

/// How one timed DDP step runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StepMode {
    Compute,
    Comm,
    Overlapped,
}

/// Queues one step on every rank: per layer (backward order) dX = W·dY and dW = dY·Xᵀ into its gradients;
/// each bucket all-reduced on the comm stream once its last layer is written (Overlapped), or all
/// buckets alone (Comm). Returns each rank's (start, end) events on its compute stream.
fn step(
    comms: &mut Comms,
    ranks: &[Rank],
    bufs: &[DdpBuffers],
    d: &DdpParams,
    plan: &DdpPlan,
    mode: StepMode,
) -> Result<Vec<(CudaEvent, CudaEvent)>, ExperimentError> {
    let (h, t) = (d.hidden as usize, d.tokens as usize);
    let eb = element_bytes(d.dtype) as usize;
    let mut starts = Vec::new();
    for r in ranks {
        r.hold(&r.compute)?;
        let start = r.record(&r.compute)?;
        r.comm.wait(&start).map_err(cuda_err("joining the streams"))?;
        starts.push(start);
    }
    let nccl = comms.nccl.clone();
    for bucket in &plan.buckets {
        if mode != StepMode::Comm {
            for (r, b) in ranks.iter().zip(bufs) {
                r.ctx.bind_to_thread().map_err(cuda_err("binding a context"))?;
                for layer in bucket.first..bucket.first + bucket.layers {
                    let grad = b.grads.at(layer as usize * h * h * eb);
                    gemm(b, d.dtype, (h, t, h), b.w.at(0), false, b.dy.at(0), b.dx.at(0))?;
                    gemm(b, d.dtype, (h, h, t), b.dy.at(0), true, b.x.at(0), grad)?;
                }
            }
        }
        if mode == StepMode::Compute {
            continue;
        }
        for r in ranks {
            let written = r.record(&r.compute)?;
            r.comm.wait(&written).map_err(cuda_err("joining the streams"))?;
        }
        let offset = bucket.first as usize * h * h * eb;
        let count = (bucket.bytes / eb as u64) as usize;
        comms.group("all_reduce of a gradient bucket", |rank, comm| {
            let g = bufs[rank].grads.at(offset);
            // SAFETY: the bucket's `count` elements lie inside this rank's gradients; in place, as DDP reduces.
            unsafe {
                (nccl.all_reduce)(
                    g.cast_const(),
                    g,
                    count,
                    nccl_type(d.dtype),
                    ncclRedOp_t::ncclSum,
                    comm,
                    ranks[rank].stream(),
                )
            }
        })?;
    }
    let mut out = Vec::new();
    for (r, start) in ranks.iter().zip(starts) {
        let comm_done = r.record(&r.comm)?;
        r.compute.wait(&comm_done).map_err(cuda_err("joining the streams"))?;
        out.push((start, r.record(&r.compute)?));
    }
    Ok(out)
}

/// The DDP step: compute alone, and on several GPUs communication alone and both overlapped.
pub(super) fn ddp_step(
    comms: &mut Comms,
    ranks: &[Rank],
    d: &DdpParams,
    steps: u32,
    ctx: &RunContext<'_>,
) -> Result<DdpMeasurement, ExperimentError> {
    let plan = d.plan();
    let bufs = ranks.iter().map(|r| ddp_buffers(r, d, plan.parameters)).collect::<Result<Vec<_>, _>>()?;
    let modes: &[StepMode] =
        if ranks.len() > 1 { &[StepMode::Compute, StepMode::Comm, StepMode::Overlapped] } else { &[StepMode::Compute] };
    let mut times: Vec<Vec<f64>> = Vec::new();
    for (i, &mode) in modes.iter().enumerate() {
        ctx.progress(0.8 + 0.2 * i as f64 / modes.len() as f64, "DDP step");
        for _ in 0..2 {
            let warm = step(comms, ranks, &bufs, d, &plan, mode)?;
            wait(comms, &warm.iter().map(|(_, e)| e).collect::<Vec<_>>(), ctx)?;
        }
        let mut these = Vec::new();
        for _ in 0..steps.max(1) {
            let marks = step(comms, ranks, &bufs, d, &plan, mode)?;
            wait(comms, &marks.iter().map(|(_, e)| e).collect::<Vec<_>>(), ctx)?;
            let mut slowest = 0.0f64;
            for (s, e) in &marks {
                slowest = slowest.max(f64::from(s.elapsed_ms(e).map_err(cuda_err("reading an event"))?));
            }
            these.push(slowest);
        }
        times.push(these);
    }
    let mut times = times.into_iter();
    Ok(DdpMeasurement {
        compute_ms: times.next().unwrap_or_default(),
        comm_ms: times.next(),
        overlapped_ms: times.next(),
        plan,
        dtype: d.dtype,
        tokens: d.tokens,
        bucket_cap_mb: d.bucket_cap_mb,
    })
}
