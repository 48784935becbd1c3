//! cuBLAS GEMM throughput in fp32, tf32, fp16 and bf16 on random data, each
//! result checked on the host over whole rows and columns spread across the output, every row's
//! and column's sum, and a random tile of every timed repetition (C is NaN before each).
#![allow(unsafe_code)]

use crate::experiments::precision::params::{Dtype, PrecisionParams};
use cudarc::cublas::result::gemm_ex;
use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use shared::lab::RunResult;

use super::{Fault, Session, cuda_err, lib_err};
use crate::checks::{self, GEMM_TILE, GemmErrors, GemmSampler, GemmSums, GemmTiles};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::precision::report::{self, GemmSample};

/// Columns of C downloaded at once for the check (at most 64 × 16384 values).
const CHECK_COLUMNS: usize = 64;

/// Element types cuBLAS multiplies here, and how they convert.
pub(super) trait Element: DeviceRepr + ValidAsZeroBits + Copy + Unpin + Sync {
    const DATA: cudaDataType_t;
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const DATA: cudaDataType_t = cudaDataType_t::CUDA_R_32F;
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for f16 {
    const DATA: cudaDataType_t = cudaDataType_t::CUDA_R_16F;
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

impl Element for bf16 {
    const DATA: cudaDataType_t = cudaDataType_t::CUDA_R_16BF;
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

/// Column-major n×n inputs, uniform in [-1, 1], the same for every type of one size.
fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let mut gen_matrix = || (0..n * n).map(|_| rng.f32() * 2.0 - 1.0).collect::<Vec<f32>>();
    (gen_matrix(), gen_matrix())
}

pub fn run(s: &mut Session, p: &PrecisionParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    let blas = s.blas()?;
    let hold = s.kernel("hold_kernel")?;
    let mut samples = Vec::new();
    let total = (p.sizes.len() * p.dtypes.len()) as f64;
    for (i, &size) in p.sizes.iter().enumerate() {
        let n = size as usize;
        ctx.progress((i * p.dtypes.len()) as f64 / total, &format!("generating {n}×{n} random inputs"));
        let (a, b) = inputs(n);
        for (j, &dtype) in p.dtypes.iter().enumerate() {
            ctx.check()?;
            ctx.progress((i * p.dtypes.len() + j) as f64 / total, &format!("{} GEMM {n}", dtype.name()));
            let handle = *blas.handle();
            // `gpudash bench` with GPUDASH_BENCH_FAULT=corrupt-tile: the first type and size's tiles are spoiled.
            let first = i == 0 && j == 0;
            let fault = |f: Fault| first && s.fault == Some(f);
            let g = Gemm {
                hold: &hold,
                handle,
                n,
                corrupt: fault(Fault::CorruptTile),
                skip: fault(Fault::SkipGemm),
                corrupt_elsewhere: fault(Fault::CorruptRandom),
            };
            let (times, (errors, sums), tiles) = match dtype {
                Dtype::Fp32 => measure::<f32>(s, &g, &a, &b, cublasComputeType_t::CUBLAS_COMPUTE_32F, p, ctx)?,
                Dtype::Tf32 => {
                    measure::<f32>(s, &g, &a, &b, cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32, p, ctx)?
                }
                Dtype::Fp16 => measure::<f16>(s, &g, &a, &b, cublasComputeType_t::CUBLAS_COMPUTE_32F, p, ctx)?,
                Dtype::Bf16 => measure::<bf16>(s, &g, &a, &b, cublasComputeType_t::CUBLAS_COMPUTE_32F, p, ctx)?,
            };
            samples.push(GemmSample { dtype, size, times_ms: times, errors, sums, tiles });
        }
    }
    Ok(report::precision(&samples))
}

/// What one size's GEMMs share: the spin kernel, cuBLAS, the order, and whether to spoil the tiles.
struct Gemm<'a> {
    hold: &'a cudarc::driver::CudaFunction,
    handle: cudarc::cublas::sys::cublasHandle_t,
    n: usize,
    /// The corrupt-tile fault: zero each repetition's tile before it is read back.
    corrupt: bool,
    /// The skip-gemm fault: time the repetitions' windows empty.
    skip: bool,
    /// The corrupt-random fault: zero a tile no check samples, after the last repetition.
    corrupt_elsewhere: bool,
}

/// One type and size's timings (ms), its output's sampled and summed comparison, and its tiles.
type Measured = (Vec<f64>, (GemmErrors, GemmSums), GemmTiles);

/// Uploads A and B as `T`, times `repetitions` GEMMs after `warmup`, reads back a random tile of
/// each timed repetition's output, and checks C's sampled rows and columns after the last.
fn measure<T: Element>(
    s: &Session,
    g: &Gemm<'_>,
    a: &[f32],
    b: &[f32],
    compute: cublasComputeType_t,
    p: &PrecisionParams,
    ctx: &RunContext<'_>,
) -> Result<Measured, ExperimentError> {
    let (hold, handle, n) = (g.hold, g.handle, g.n);
    let a_t: Vec<T> = a.iter().map(|&v| T::from_f32(v)).collect();
    let b_t: Vec<T> = b.iter().map(|&v| T::from_f32(v)).collect();
    let stream = &s.stream;
    let da = stream.clone_htod(&a_t).map_err(cuda_err("uploading A"))?;
    let db = stream.clone_htod(&b_t).map_err(cuda_err("uploading B"))?;
    let mut dc: CudaSlice<T> = stream.alloc_zeros(n * n).map_err(cuda_err("allocating C"))?;
    let dim = i32::try_from(n).map_err(|_| ExperimentError::Cuda("matrix too large".into()))?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let gemm = |dc: &mut CudaSlice<T>| -> Result<(), ExperimentError> {
        let (pa, _ra) = da.device_ptr(stream);
        let (pb, _rb) = db.device_ptr(stream);
        let (pc, _rc) = dc.device_ptr_mut(stream);
        // SAFETY: A, B and C are live n×n buffers of T on this stream; alpha and beta are f32
        // host values, as the fp32 compute types require.
        unsafe {
            gemm_ex(
                handle,
                CUBLAS_OP_N,
                CUBLAS_OP_N,
                dim,
                dim,
                dim,
                (&raw const alpha).cast(),
                pa as *const _,
                T::DATA,
                dim,
                pb as *const _,
                T::DATA,
                dim,
                (&raw const beta).cast(),
                pc as *mut _,
                T::DATA,
                dim,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(lib_err("cublasGemmEx"))
    };
    for _ in 0..p.warmup {
        gemm(&mut dc)?;
    }
    let mut times = Vec::with_capacity(p.repetitions as usize);
    let mut tiles = GemmTiles::new(n, fastrand::u64(..));
    let t = GEMM_TILE.min(n);
    // Each repetition's tile is copied on the device, queued behind its GEMM and outside its window;
    // all are read back and compared after the last, so the GEMMs still run back to back.
    let mut kept: CudaSlice<T> =
        stream.alloc_zeros(t * t * p.repetitions as usize).map_err(cuda_err("allocating the tiles"))?;
    let mut at = Vec::with_capacity(p.repetitions as usize);
    for repetition in 0..p.repetitions {
        ctx.check()?;
        // C is NaN before every timed GEMM, outside its window: a GEMM that did not run (or wrote only
        // part of C) leaves NaN where the checks look, not the warm-ups' right answer.
        s.poison_nan(&mut dc)?;
        // Queued behind a spin kernel, so the host's cost of submitting the GEMM is outside the window.
        s.hold(hold)?;
        let start = s.record(stream)?;
        if !g.skip {
            gemm(&mut dc)?;
        }
        let end = s.record(stream)?;
        let tile = checks::tile_at(n, tiles.seed, repetition);
        if g.corrupt {
            corrupt_tile(s, &mut dc, n, tile)?;
        }
        keep_tile(
            s,
            &dc,
            n,
            tile,
            &mut kept.slice_mut(repetition as usize * t * t..(repetition as usize + 1) * t * t),
        )?;
        at.push(tile);
        times.push(f64::from(start.elapsed_ms(&end).map_err(cuda_err("reading an event"))?));
    }
    let kept = stream.clone_dtoh(&kept).map_err(cuda_err("reading the tiles back"))?;
    stream.synchronize().map_err(cuda_err("synchronizing"))?;
    for (tile, got) in at.into_iter().zip(kept.chunks_exact(t * t)) {
        ctx.check()?;
        let got: Vec<f64> = got.iter().map(|v| v.to_f64()).collect();
        tiles.add(tile, &got, |i| a_t[i].to_f64(), |i| b_t[i].to_f64());
    }
    if g.corrupt_elsewhere {
        corrupt_tile(s, &mut dc, n, unsampled_tile(n, fastrand::u64(..)))?;
    }
    let errors = check_output(s, &dc, &a_t, &b_t, n, ctx)?;
    drop((da, db, dc));
    stream.synchronize().map_err(cuda_err("synchronizing"))?;
    Ok((times, errors, tiles))
}

/// Copies the [`GEMM_TILE`]-square tile of C (column-major n×n) at `(i0, j0)` into `into`, column by
/// column, on the stream.
fn keep_tile<T: Element>(
    s: &Session,
    dc: &CudaSlice<T>,
    n: usize,
    (i0, j0): (usize, usize),
    into: &mut cudarc::driver::CudaViewMut<'_, T>,
) -> Result<(), ExperimentError> {
    let t = GEMM_TILE.min(n);
    for (dj, j) in (j0..j0 + t).enumerate() {
        let column = dc.slice(j * n + i0..j * n + i0 + t);
        s.stream.memcpy_dtod(&column, &mut into.slice_mut(dj * t..(dj + 1) * t)).map_err(cuda_err("keeping a tile"))?;
    }
    Ok(())
}

/// The corrupt-random fault's tile: a random place whose rows and columns are none of the sampled
/// ones (at n ≥ 1024 the sampled lines are over 32 apart, so such places exist).
fn unsampled_tile(n: usize, seed: u64) -> (usize, usize) {
    let t = GEMM_TILE.min(n);
    let sampled = checks::spread(n, checks::GEMM_SAMPLED);
    let clear = |x0: usize| !sampled.iter().any(|&x| (x0..x0 + t).contains(&x));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut pick = || (0..1000).map(|_| rng.usize(0..=n - t)).find(|&x| clear(x)).unwrap_or(n / 2);
    (pick(), pick())
}

/// The corrupt-tile fault: zeroes the tile at `(i0, j0)` of C.
fn corrupt_tile<T: Element>(
    s: &Session,
    dc: &mut CudaSlice<T>,
    n: usize,
    (i0, j0): (usize, usize),
) -> Result<(), ExperimentError> {
    let t = GEMM_TILE.min(n);
    for j in j0..j0 + t {
        s.stream.memset_zeros(&mut dc.slice_mut(j * n + i0..j * n + i0 + t)).map_err(cuda_err("spoiling a tile"))?;
    }
    Ok(())
}

/// Compares C (column-major n×n, on the device) with A·B computed on the host over the sampler's
/// whole rows and columns, downloading C a few columns at a time.
pub(super) fn check_output<T: Element>(
    s: &Session,
    dc: &CudaSlice<T>,
    a: &[T],
    b: &[T],
    n: usize,
    ctx: &RunContext<'_>,
) -> Result<(GemmErrors, GemmSums), ExperimentError> {
    let mut sampler = GemmSampler::new(n, |i| a[i].to_f64());
    for j0 in (0..n).step_by(CHECK_COLUMNS) {
        ctx.check()?;
        let j1 = (j0 + CHECK_COLUMNS).min(n);
        let chunk = s.stream.clone_dtoh(&dc.slice(j0 * n..j1 * n)).map_err(cuda_err("downloading C"))?;
        s.stream.synchronize().map_err(cuda_err("synchronizing"))?;
        let values: Vec<f64> = chunk.iter().map(|v| v.to_f64()).collect();
        sampler.columns(j0, &values, |i| a[i].to_f64(), |i| b[i].to_f64());
    }
    Ok(sampler.finish(|i| a[i].to_f64()))
}
