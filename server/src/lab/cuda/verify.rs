//! Device-side halves of the lab's correctness checks: a kernel that writes the check
//! pattern ([`crate::lab::checks::pattern_word`]) into device memory and one that counts the bytes of
//! a buffer that differ from it, so copies are verified where they land without
//! downloading them.
#![allow(unsafe_code)]

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

use super::{Session, cuda_err};
use crate::lab::checks::PatternCompare;
use crate::lab::executor::ExperimentError;

/// The check kernels, compiled with [`super::KERNELS`]. `pattern_word` must stay the same
/// function as [`crate::lab::checks::pattern_word`]: a difference fails every copy check loudly.
pub(super) const CHECK_KERNELS: &str = r#"
__device__ static inline unsigned long long pattern_word(unsigned long long seed, unsigned long long word) {
    unsigned long long x = seed ^ (word * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 29;
    x = x * 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 32;
    return x;
}
__device__ static inline unsigned char pattern_byte(unsigned long long seed, unsigned long long i) {
    return (unsigned char)(pattern_word(seed, i >> 3) >> ((i & 7ULL) * 8ULL));
}
extern "C" __global__ void fill_pattern(unsigned char* buf, unsigned long long n, unsigned long long seed) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        buf[i] = pattern_byte(seed, i);
    }
}
extern "C" __global__ void compare_pattern(const unsigned char* buf, unsigned long long n, unsigned long long seed,
                                           unsigned long long* out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long differ = 0, first = ~0ULL;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (buf[i] != pattern_byte(seed, i)) {
            differ += 1;
            if (i < first) first = i;
        }
    }
    if (differ > 0) {
        atomicAdd(&out[0], differ);
        atomicMin(&out[1], first);
    }
}
"#;

/// A grid-stride launch over `n` bytes: 256 threads a block, at most 4096 blocks.
fn over(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 4096);
    LaunchConfig {
        grid_dim: (u32::try_from(blocks).unwrap_or(4096), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Session {
    /// Writes the check pattern for `seed` over `buf`, on the session's stream.
    pub fn fill_pattern(&mut self, buf: &mut CudaViewMut<'_, u8>, seed: u64) -> Result<(), ExperimentError> {
        let f = self.kernel("fill_pattern")?;
        let len = buf.len();
        let n = len as u64;
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(buf).arg(&n).arg(&seed);
        // SAFETY: fill_pattern writes buf[0..n), and buf holds n bytes.
        unsafe { launch.launch(over(len)) }.map(|_| ()).map_err(cuda_err("launching fill_pattern"))
    }

    /// Compares `buf` with the check pattern for `seed` on the device; waits for the answer.
    pub fn compare_pattern(&mut self, buf: &CudaView<'_, u8>, seed: u64) -> Result<PatternCompare, ExperimentError> {
        let f = self.kernel("compare_pattern")?;
        let n = buf.len() as u64;
        let mut out = self.stream.clone_htod(&[0u64, u64::MAX]).map_err(cuda_err("allocating the compare's result"))?;
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(buf).arg(&n).arg(&seed).arg(&mut out);
        // SAFETY: compare_pattern reads buf[0..n) and updates out[0] and out[1]; out holds two u64.
        unsafe { launch.launch(over(buf.len())) }.map_err(cuda_err("launching compare_pattern"))?;
        let answer = self.stream.clone_dtoh(&out).map_err(cuda_err("reading the compare's result"))?;
        self.stream.synchronize().map_err(cuda_err("synchronizing after the compare"))?;
        let (differ, first) = (answer[0], answer[1]);
        Ok(PatternCompare { compared: n, differ, first: (differ > 0).then_some(first) })
    }
}
