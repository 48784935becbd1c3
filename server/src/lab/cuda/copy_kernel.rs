//! Device-to-device copies by a kernel on the SMs, the way PyTorch's elementwise
//! copy moves data; the other D2D path, `cuMemcpyDtoDAsync`, runs on a copy engine.
//!
//! Each thread copies 16-byte vectors (four per pass of its loop, loads before
//! stores, so many bytes are in flight) over a grid-stride loop, then the bytes
//! after the last whole vector one at a time. Buffers that are not both 16-byte
//! aligned are copied byte by byte.
#![allow(unsafe_code)]

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use shared::lab::Check;
use shared::units::format_bytes;

use super::{Session, cuda_err};
use crate::lab::executor::ExperimentError;

/// The copy kernel's source, compiled with the session's other kernels.
pub(super) const SOURCE: &str = r#"
struct alignas(16) copy_vec16 { unsigned int x, y, z, w; };
extern "C" __global__ void copy_kernel(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                       unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((((unsigned long long)src) | ((unsigned long long)dst)) & 15ull) == 0;
    const unsigned long long vecs = aligned ? n / 16 : 0;
    const copy_vec16* s = reinterpret_cast<const copy_vec16*>(src);
    copy_vec16* d = reinterpret_cast<copy_vec16*>(dst);
    unsigned long long i = first;
    for (; i + 3 * stride < vecs; i += 4 * stride) {
        const copy_vec16 a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
        d[i] = a;
        d[i + stride] = b;
        d[i + 2 * stride] = c;
        d[i + 3 * stride] = e;
    }
    for (; i < vecs; i += stride) {
        d[i] = s[i];
    }
    for (unsigned long long j = vecs * 16 + first; j < n; j += stride) {
        dst[j] = src[j];
    }
}
"#;

/// Threads per block.
const THREADS: u32 = 256;
/// Blocks per SM at most: 8 × 256 threads fill an SM's 2048 thread slots (Hopper, Ampere).
const BLOCKS_PER_SM: u32 = 8;
/// Bytes one thread copies per pass of its loop: four 16-byte vectors.
const BYTES_PER_PASS: u64 = 64;

/// Blocks for `n` bytes: enough for one pass over small copies, a grid that fills every SM for large ones.
fn blocks_for(n: u64, max_blocks: u32) -> u32 {
    let needed = n.div_ceil(u64::from(THREADS) * BYTES_PER_PASS);
    u32::try_from(needed).unwrap_or(u32::MAX).clamp(1, max_blocks.max(1))
}

/// The compiled copy kernel and the grid that fills this GPU.
pub(super) struct CopyKernel {
    f: CudaFunction,
    max_blocks: u32,
}

impl CopyKernel {
    /// Compiles (once per session) and loads the kernel; reads the SM count for the grid.
    pub fn load(s: &mut Session) -> Result<Self, ExperimentError> {
        let f = s.kernel("copy_kernel")?;
        let sms = s.device_attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "the SM count")?;
        let sms = u32::try_from(sms).unwrap_or(1).max(1);
        Ok(Self { f, max_blocks: sms.saturating_mul(BLOCKS_PER_SM) })
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
        let n = src.len() as u64;
        let cfg = LaunchConfig {
            grid_dim: (blocks_for(n, self.max_blocks), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = stream.launch_builder(&self.f);
        args.arg(src).arg(dst).arg(&n);
        // SAFETY: copy_kernel takes (const u8*, u8*, u64) and touches bytes [0, n) of each; both views hold n bytes.
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
    fn small_copies_get_one_pass_and_large_ones_fill_the_gpu() {
        let h200 = 132 * BLOCKS_PER_SM;
        assert_eq!(blocks_for(0, h200), 1);
        assert_eq!(blocks_for(4096, h200), 1);
        assert_eq!(blocks_for(16 << 10, h200), 1);
        assert_eq!(blocks_for((16 << 10) + 1, h200), 2);
        assert_eq!(blocks_for(16 << 20, h200), 1024);
        assert_eq!(blocks_for(1 << 30, h200), 1056);
        assert_eq!(blocks_for(1 << 30, 0), 1);
    }

    #[test]
    fn the_kernel_source_defines_the_kernel_it_is_loaded_by() {
        assert!(SOURCE.contains(r#"extern "C" __global__ void copy_kernel("#));
        assert!(SOURCE.contains("alignas(16)"));
    }
}
