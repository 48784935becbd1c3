//! Host↔device and device↔device bandwidth: pageable and pinned host buffers,
//! written before they are timed, each copy between two CUDA events. Every size of
//! every kind is verified: its source carries a pattern of its own (kind, size,
//! position), its destination is poisoned before the warm-ups and again between them
//! and the timed copies, and after the timed copies the destination is compared with
//! the pattern where it landed, so the check sees what the timed copies wrote. tests/gpu/pageable_copies.c,
//! the reference for the pageable rows, makes the same host writes between its copies, so both sides leave
//! the CPU caches in the same state before the timed copies.
#![allow(unsafe_code)]

use crate::experiments::transfer::params::{CopyKind, TransferParams};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice};
use shared::lab::RunResult;
use shared::units::format_bytes;

use super::copy_kernel::{self, CopyKernel};
use super::{Fault, Session, cuda_err};
use crate::checks::{self, CopyVerification, PatternCompare};
use crate::executor::{ExperimentError, RunContext};
use crate::experiments::transfer::report::{self, TransferSample};

/// A byte pattern that is not zero, so every page is really written.
fn fill(buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(4096).enumerate() {
        chunk.fill((i % 251) as u8 + 1);
    }
}

fn alloc(s: &Session, bytes: usize) -> Result<CudaSlice<u8>, ExperimentError> {
    // SAFETY: the buffer is filled with memset before anything reads it.
    let mut d = unsafe { s.stream.alloc::<u8>(bytes) }.map_err(cuda_err("allocating device memory"))?;
    s.stream.memset_zeros(&mut d).map_err(cuda_err("clearing device memory"))?;
    Ok(d)
}

struct Buffers<'a> {
    src: CudaSlice<u8>,
    dst: Option<CudaSlice<u8>>,
    /// Mapped once, so no call sits inside the timed region but the copy.
    pinned: Option<&'a mut [u8]>,
    pageable: PageAligned,
    /// For d2d_kernel copies.
    kernel: Option<CopyKernel>,
}

/// Ordinary (pageable) host memory starting on a page boundary, like the buffer
/// tests/gpu/lab_vs_torch.py gives PyTorch: a Vec one page longer, used from its
/// first page boundary, so both sides copy from the same alignment.
#[derive(Default)]
struct PageAligned {
    raw: Vec<u8>,
    offset: usize,
    len: usize,
}

impl PageAligned {
    const PAGE: usize = 4096;

    /// `len` bytes, written once by this thread before anything is timed.
    fn written(len: usize) -> Self {
        let raw = vec![0; len + Self::PAGE];
        let offset = raw.as_ptr().align_offset(Self::PAGE).min(Self::PAGE);
        let mut buffer = Self { raw, offset, len };
        fill(buffer.bytes_mut());
        buffer
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.offset..self.offset + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.offset..self.offset + self.len]
    }
}

pub fn run(s: &mut Session, p: &TransferParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
    let max = usize::try_from(p.sizes.iter().copied().max().unwrap_or(0))
        .map_err(|_| ExperimentError::Cuda("sizes too large for this host".into()))?;
    let wants = |kinds: &[CopyKind]| p.copies.iter().any(|c| kinds.contains(c));
    ctx.progress(0.0, "allocating and writing buffers");
    let mut pinned = None;
    if wants(&[CopyKind::H2dPinned, CopyKind::D2hPinned]) {
        // Flags 0: plain page-locked memory. The default (write-combined) is slow for the CPU to read.
        // SAFETY: the buffer is written in full just below, before any copy reads it.
        let buffer =
            unsafe { s.ctx.alloc_pinned_with_flags::<u8>(max, 0) }.map_err(cuda_err("allocating pinned memory"))?;
        pinned = Some(buffer);
    }
    let kernel = if wants(&[CopyKind::D2dKernel]) { Some(CopyKernel::load(s)?) } else { None };
    let mut b = Buffers {
        src: alloc(s, max)?,
        dst: if wants(&[CopyKind::D2d, CopyKind::D2dKernel]) { Some(alloc(s, max)?) } else { None },
        pinned: match pinned.as_mut() {
            Some(p) => Some(p.as_mut_slice().map_err(cuda_err("mapping pinned memory"))?),
            None => None,
        },
        pageable: PageAligned::default(),
        kernel,
    };
    if let Some(host) = b.pinned.as_deref_mut() {
        fill(host);
    }
    if wants(&[CopyKind::H2dPageable, CopyKind::D2hPageable]) {
        b.pageable = PageAligned::written(max);
    }
    s.sync()?;

    let hold = s.kernel("hold_kernel")?;
    let start = s.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("creating an event"))?;
    let end = s.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("creating an event"))?;
    let mut samples = Vec::new();
    let mut verified = Vec::new();
    let total = (p.copies.len() * p.sizes.len()) as f64;
    for (i, &copy) in p.copies.iter().enumerate() {
        for (j, &size) in p.sizes.iter().enumerate() {
            ctx.check()?;
            ctx.progress((i * p.sizes.len() + j) as f64 / total, &format!("{} {}", copy.name(), format_bytes(size)));
            let n = usize::try_from(size).unwrap_or(max).min(max);
            let seed = checks::copy_seed(copy, size);
            prepare_check(s, &mut b, copy, n, seed)?;
            for _ in 0..p.warmup {
                copy_once(s, &mut b, copy, n)?;
            }
            // The warm-ups wrote the destination: poison it again, so the check after the timed
            // copies sees what they wrote, not what a warm-up left.
            write_pattern(s, &mut b, ends(copy).1, n, checks::poison_seed(seed))?;
            s.stream.synchronize().map_err(cuda_err("synchronizing after warm-up"))?;
            let mut times = Vec::with_capacity(p.repetitions as usize);
            let batch = batch(copy, size);
            // `gpudash bench` with GPUDASH_BENCH_FAULT=skip-copy: the first kind and size's timed copies are not made.
            let skip = s.fault == Some(Fault::SkipCopy) && i == 0 && j == 0;
            for _ in 0..p.repetitions {
                // Pageable copies are staged by the host inside the call: their host cost is the figure.
                if held(copy) {
                    s.hold(&hold)?;
                }
                let window = timed(s, &start, &end, || {
                    (0..batch).filter(|_| !skip).try_for_each(|_| copy_once(s, &mut b, copy, n))
                })?;
                times.push(window / f64::from(batch));
            }
            samples.push(TransferSample { copy, bytes: size, times_ms: times });
            verified.push(CopyVerification { copy, bytes: size, compare: verify_copy(s, &mut b, copy, n, seed)? });
        }
    }
    let mut result = report::transfer(&samples, &ctx.probe.peaks(ctx.device));
    let timed: Vec<(CopyKind, u64)> = samples.iter().map(|t| (t.copy, t.bytes)).collect();
    result.checks.extend(checks::copies(&timed, &verified));
    report::mark_l2(&mut result, s.l2_bytes()?, "the CUDA device attribute");
    if let (Some(kernel), Some(dst)) = (&b.kernel, b.dst.as_mut()) {
        result.checks.push(copy_kernel::check(s, kernel, &mut b.src, dst, max)?);
    }
    Ok(result)
}

/// Whether a copy is timed behind [`Session::hold`]: pinned and device copies are queued by the host in
/// microseconds and run on the GPU alone, so the window holds only the copy (how nvbandwidth times them,
/// and what tests/gpu/lab_vs_torch.py does to PyTorch's side). A pageable copy's staging through the
/// host is part of what it costs, so its window starts when the host gets to it.
fn held(copy: CopyKind) -> bool {
    !matches!(copy, CopyKind::H2dPageable | CopyKind::D2hPageable)
}

/// Bytes a held copy's timing window moves at least: copies smaller than this are timed as a batch of
/// back to back copies and the window divided by their number.
pub const BATCH_BYTES: u64 = 64 << 20;

/// How many copies of `size` bytes one timing window holds: enough to move [`BATCH_BYTES`] (at most 64)
/// for held copies, so a window's fixed start (the hand-over from the spin kernel to the copy engine)
/// is shared: one 1 MiB pinned copy per window read 32.6 GB/s on the H200, against 53.9 at 16 MiB.
/// nvbandwidth loops its copies in one window too.
/// Pageable copies go one by one: each is staged through the host.
pub fn batch(copy: CopyKind, size: u64) -> u32 {
    if !held(copy) {
        return 1;
    }
    u32::try_from(BATCH_BYTES / size.max(1)).unwrap_or(u32::MAX).clamp(1, 64)
}

/// Milliseconds between two events around `f`'s work on the session's stream.
fn timed(
    s: &Session,
    start: &CudaEvent,
    end: &CudaEvent,
    f: impl FnOnce() -> Result<(), ExperimentError>,
) -> Result<f64, ExperimentError> {
    start.record(&s.stream).map_err(cuda_err("recording an event"))?;
    f()?;
    end.record(&s.stream).map_err(cuda_err("recording an event"))?;
    let ms = start.elapsed_ms(end).map_err(cuda_err("reading an event"))?;
    Ok(f64::from(ms))
}

fn copy_once(s: &Session, b: &mut Buffers<'_>, copy: CopyKind, n: usize) -> Result<(), ExperimentError> {
    let stream = &s.stream;
    let missing = || ExperimentError::Cuda("buffer missing for this copy".into());
    match copy {
        CopyKind::H2dPageable => stream.memcpy_htod(&b.pageable.bytes()[..n], &mut b.src.slice_mut(..n)),
        CopyKind::D2hPageable => stream.memcpy_dtoh(&b.src.slice(..n), &mut b.pageable.bytes_mut()[..n]),
        CopyKind::H2dPinned => {
            let host = b.pinned.as_deref().ok_or_else(missing)?;
            stream.memcpy_htod(&host[..n], &mut b.src.slice_mut(..n))
        }
        CopyKind::D2hPinned => {
            let host = b.pinned.as_deref_mut().ok_or_else(missing)?;
            stream.memcpy_dtoh(&b.src.slice(..n), &mut host[..n])
        }
        CopyKind::D2d => {
            let dst = b.dst.as_mut().ok_or_else(missing)?;
            stream.memcpy_dtod(&b.src.slice(..n), &mut dst.slice_mut(..n))
        }
        CopyKind::D2dKernel => {
            let (kernel, dst) = (b.kernel.as_ref().ok_or_else(missing)?, b.dst.as_mut().ok_or_else(missing)?);
            return kernel.copy(stream, &b.src.slice(..n), &mut dst.slice_mut(..n));
        }
    }
    .map_err(cuda_err("copying"))
}

/// A buffer a copy reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Pageable,
    Pinned,
    /// `Buffers::src`: the device end of host copies, the source of device copies.
    Device,
    /// `Buffers::dst`: the destination of device-to-device copies.
    DeviceDst,
}

/// Where a copy kind reads from and writes to, as `copy_once` copies.
fn ends(copy: CopyKind) -> (End, End) {
    match copy {
        CopyKind::H2dPageable => (End::Pageable, End::Device),
        CopyKind::H2dPinned => (End::Pinned, End::Device),
        CopyKind::D2hPageable => (End::Device, End::Pageable),
        CopyKind::D2hPinned => (End::Device, End::Pinned),
        CopyKind::D2d | CopyKind::D2dKernel => (End::Device, End::DeviceDst),
    }
}

/// Writes the pattern for `seed` over the first `n` bytes of `end`.
fn write_pattern(s: &mut Session, b: &mut Buffers<'_>, end: End, n: usize, seed: u64) -> Result<(), ExperimentError> {
    let missing = || ExperimentError::Cuda("buffer missing for this copy's check".into());
    match end {
        End::Pageable => checks::fill_pattern(&mut b.pageable.bytes_mut()[..n], seed, 0),
        End::Pinned => checks::fill_pattern(&mut b.pinned.as_deref_mut().ok_or_else(missing)?[..n], seed, 0),
        End::Device => s.fill_pattern(&mut b.src.slice_mut(..n), seed)?,
        End::DeviceDst => s.fill_pattern(&mut b.dst.as_mut().ok_or_else(missing)?.slice_mut(..n), seed)?,
    }
    Ok(())
}

/// The copy's source gets its own pattern, its destination a poison, before the copies of a size.
fn prepare_check(
    s: &mut Session,
    b: &mut Buffers<'_>,
    copy: CopyKind,
    n: usize,
    seed: u64,
) -> Result<(), ExperimentError> {
    let (from, to) = ends(copy);
    write_pattern(s, b, from, n, seed)?;
    write_pattern(s, b, to, n, checks::poison_seed(seed))?;
    s.stream.synchronize().map_err(cuda_err("synchronizing after writing the check pattern"))
}

/// The copy's destination after its timed copies, compared with the source's pattern where it landed.
fn verify_copy(
    s: &mut Session,
    b: &mut Buffers<'_>,
    copy: CopyKind,
    n: usize,
    seed: u64,
) -> Result<PatternCompare, ExperimentError> {
    s.stream.synchronize().map_err(cuda_err("synchronizing before the check"))?;
    let missing = || ExperimentError::Cuda("buffer missing for this copy's check".into());
    match ends(copy).1 {
        End::Pageable => Ok(checks::compare_pattern(&b.pageable.bytes()[..n], seed, 0)),
        End::Pinned => Ok(checks::compare_pattern(&b.pinned.as_deref().ok_or_else(missing)?[..n], seed, 0)),
        End::Device => s.compare_pattern(&b.src.slice(..n), seed),
        End::DeviceDst => s.compare_pattern(&b.dst.as_ref().ok_or_else(missing)?.slice(..n), seed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_held_copies_are_batched_to_64_mib_and_pageable_ones_go_alone() {
        assert_eq!(batch(CopyKind::H2dPinned, 1 << 20), 64);
        assert_eq!(batch(CopyKind::D2d, 16 << 20), 4);
        assert_eq!(batch(CopyKind::D2dKernel, 256 << 20), 1);
        assert_eq!(batch(CopyKind::D2hPinned, 4096), 64);
        assert_eq!(batch(CopyKind::H2dPageable, 1 << 20), 1);
        assert_eq!(batch(CopyKind::D2hPageable, 4096), 1);
    }
}
