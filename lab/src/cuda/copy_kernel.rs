//! Device-to-device copies by a kernel on the SMs, beside `cuMemcpyDtoDAsync`
//! (the `d2d` path, which is also what PyTorch's contiguous `copy_` calls).
//!
//! Each thread copies one 16-byte vector, in a single pass over the buffer, and
//! the first `n % 16` threads copy one byte of the tail each. Buffers that are not
//! both 16-byte aligned are copied byte by byte over a grid-stride loop.
//! Measured on the H200 with nvcc, held-stream events, read+write bytes
//! (tests/gpu/copy_kernels.cu): one vector per thread 4387 / 4208 / 4261 GB/s at
//! 16 MiB / 256 MiB / 1 GiB, the driver's memcpy 4315 / 4201 / 4241; a grid-stride
//! loop of four vectors over SM × 8 blocks only 4033 / 3817 / 3917.
#![allow(unsafe_code)]

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use shared::lab::Check;
use shared::units::format_bytes;

use super::{Fault, Session, cuda_err};
use crate::executor::ExperimentError;

/// The copy kernel's source, compiled with the session's other kernels.
pub(super) const SOURCE: &str = r#"
struct alignas(16) copy_vec16 { unsigned int x, y, z, w; };
extern "C" __global__ void copy_kernel(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                       unsigned long long n) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((((unsigned long long)src) | ((unsigned long long)dst)) & 15ull) == 0;
    if (!aligned) {
        const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        for (unsigned long long j = i; j < n; j += stride) { dst[j] = src[j]; }
        return;
    }
    const unsigned long long vecs = n / 16;
    if (i < vecs) {
        reinterpret_cast<copy_vec16*>(dst)[i] = reinterpret_cast<const copy_vec16*>(src)[i];
    }
    if (i < n % 16) { dst[vecs * 16 + i] = src[vecs * 16 + i]; }
}
"#;

/// Threads per block.
const THREADS: u32 = 256;
/// Bytes one thread copies: one 16-byte vector.
const BYTES_PER_THREAD: u64 = 16;
/// Blocks for `n` bytes: one vector per thread over the whole buffer (at least one block, for the tail).
/// An unaligned copy uses the same grid over its byte loop.
fn blocks_for(n: u64) -> u32 {
    u32::try_from(n.div_ceil(u64::from(THREADS) * BYTES_PER_THREAD)).unwrap_or(u32::MAX).max(1)
}

/// The compiled copy kernel.
pub(super) struct CopyKernel {
    f: CudaFunction,
    /// The `kernel-no-tail` fault: the kernel is told only the whole 16-byte vectors' bytes.
    no_tail: bool,
}

impl CopyKernel {
    /// Compiles (once per session) and loads the kernel.
    pub fn load(s: &mut Session) -> Result<Self, ExperimentError> {
        let no_tail = s.fault == Some(Fault::KernelNoTail);
        Ok(Self { f: s.kernel("copy_kernel")?, no_tail })
    }

    /// Queues a copy of `src` into `dst` (the same length) on `stream`.
    pub fn copy(
        &self,
        stream: &CudaStream,
        src: &CudaView<'_, u8>,
        dst: &mut CudaViewMut<'_, u8>,
    ) -> Result<(), ExperimentError> {
        if src.len() != dst.len() {
            return Err(ExperimentError::Cuda(format!(
                "copy_kernel: source of {} bytes, destination of {}",
                src.len(),
                dst.len()
            )));
        }
        let n = if self.no_tail { src.len() as u64 & !15 } else { src.len() as u64 };
        let cfg = LaunchConfig { grid_dim: (blocks_for(n), 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut args = stream.launch_builder(&self.f);
        args.arg(src).arg(dst).arg(&n);
        // SAFETY: copy_kernel takes (const u8*, u8*, u64) and touches bytes [0, n) of each; both views hold n bytes or more.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(cuda_err("launching copy_kernel"))
    }
}

/// Copies a written pattern with the kernel, once from aligned buffers with a byte tail and once between
/// unaligned offsets (the byte path), and compares both with the pattern on the host.
pub(super) fn check(
    s: &Session,
    kernel: &CopyKernel,
    src: &mut CudaSlice<u8>,
    dst: &mut CudaSlice<u8>,
    max: usize,
) -> Result<Check, ExperimentError> {
    let len = max.min(16 << 20).min(src.len()).min(dst.len());
    if len < 16 {
        return Err(ExperimentError::Cuda(format!("copy_kernel check: buffers of {len} bytes")));
    }
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect();
    let stream = &s.stream;
    stream.memcpy_htod(&pattern, &mut src.slice_mut(..len)).map_err(cuda_err("uploading the check pattern"))?;
    // Aligned, with a 13-byte tail after the last whole vector when len is a multiple of 16.
    stream.memset_zeros(dst).map_err(cuda_err("clearing the destination"))?;
    kernel.copy(stream, &src.slice(..len - 3), &mut dst.slice_mut(..len - 3))?;
    let mut aligned = vec![0u8; len];
    stream.memcpy_dtoh(&dst.slice(..len), &mut aligned).map_err(cuda_err("downloading the copy"))?;
    // Unaligned: source from byte 1, destination from byte 3.
    stream.memset_zeros(dst).map_err(cuda_err("clearing the destination"))?;
    kernel.copy(stream, &src.slice(1..len - 2), &mut dst.slice_mut(3..len))?;
    let mut shifted = vec![0u8; len];
    stream.memcpy_dtoh(&dst.slice(..len), &mut shifted).map_err(cuda_err("downloading the copy"))?;
    stream.synchronize().map_err(cuda_err("synchronizing after the check"))?;
    let differ = |got: &[u8], want: &[u8]| got.iter().zip(want).filter(|(a, b)| a != b).count();
    let aligned_bad = differ(&aligned[..len - 3], &pattern[..len - 3]) + differ(&aligned[len - 3..], &[0; 3]);
    let shifted_bad = differ(&shifted[3..], &pattern[1..len - 2]) + differ(&shifted[..3], &[0; 3]);
    Ok(Check {
        name: "d2d_kernel copies byte-exact (aligned with a byte tail, and unaligned)".into(),
        passed: aligned_bad == 0 && shifted_bad == 0,
        detail: format!(
            "{} copied twice: {aligned_bad} bytes differ aligned, {shifted_bad} unaligned (bytes past the copy \
             must stay zero)",
            format_bytes(len as u64 - 3)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vector_gets_a_thread_and_a_tail_still_gets_a_block() {
        assert_eq!(blocks_for(0), 1);
        assert_eq!(blocks_for(15), 1);
        assert_eq!(blocks_for(4096), 1);
        assert_eq!(blocks_for(4097), 2);
        assert_eq!(blocks_for(16 << 20), 4096);
        assert_eq!(blocks_for(1 << 30), 262_144);
    }

    #[test]
    fn the_kernel_source_defines_the_kernel_it_is_loaded_by() {
        assert!(SOURCE.contains(r#"extern "C" __global__ void copy_kernel("#));
        assert!(SOURCE.contains("alignas(16)"));
    }
}
