//! Device-side halves of the lab's correctness checks: a kernel that writes the check
//! pattern ([`crate::checks::pattern_word`]) into device memory and one that counts the bytes of
//! a buffer that differ from it, so copies are verified where they land without
//! downloading them.
#![allow(unsafe_code)]

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaView, CudaViewMut, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg, result,
};

use super::{Session, cuda_err};
use crate::checks::PatternCompare;
use crate::executor::ExperimentError;

/// The check kernels, compiled with [`super::KERNELS`]. `pattern_word` must stay the same
/// function as [`crate::checks::pattern_word`]: a difference fails every copy check loudly.
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
extern "C" __global__ void count_word(const float* buf, unsigned long long n, unsigned int word, unsigned long long* out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x, found = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (__float_as_uint(buf[i]) == word) found += 1;
    }
    if (found > 0) atomicAdd(out, found);
}
"#;

/// The bits [`Session::poison_nan`] leaves in each 32-bit word.
pub const NAN_POISON: u32 = u32::MAX;

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
        self.fill_pattern_with(&f, buf, seed)
    }

    /// [`Session::fill_pattern`] with the kernel already loaded (`f`: `fill_pattern`).
    pub fn fill_pattern_with(
        &self,
        f: &CudaFunction,
        buf: &mut CudaViewMut<'_, u8>,
        seed: u64,
    ) -> Result<(), ExperimentError> {
        let len = buf.len();
        let n = len as u64;
        let mut launch = self.stream.launch_builder(f);
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

    /// Fills `buf` with all-ones bytes on the session's stream: NaN in fp32, fp16 and bf16, so a GEMM
    /// that did not write its output leaves values no check accepts.
    pub fn poison_nan<T: DeviceRepr>(&self, buf: &mut CudaSlice<T>) -> Result<(), ExperimentError> {
        let bytes = buf.num_bytes();
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: writes the `bytes` bytes `buf` holds, ordered on the session's stream like its other work.
        unsafe { result::memset_d8_async(ptr, 0xff, bytes, self.stream.cu_stream()) }
            .map_err(cuda_err("poisoning with NaN"))
    }

    /// Queues a comparison of `buf` with the pattern for `seed` (`f`: the `compare_pattern` kernel) that
    /// adds the differing bytes into `out[0]` and lowers `out[1]` to the first; nothing waits for it.
    pub fn queue_compare(
        &self,
        f: &CudaFunction,
        buf: &CudaView<'_, u8>,
        seed: u64,
        out: &mut CudaViewMut<'_, u64>,
    ) -> Result<(), ExperimentError> {
        if out.len() < 2 {
            return Err(ExperimentError::Cuda("a compare's result needs two words".into()));
        }
        let n = buf.len() as u64;
        let mut launch = self.stream.launch_builder(f);
        launch.arg(buf).arg(&n).arg(&seed).arg(out);
        // SAFETY: compare_pattern reads buf[0..n) and updates out[0] and out[1], which exist (checked above).
        unsafe { launch.launch(over(buf.len())) }.map(|_| ()).map_err(cuda_err("launching compare_pattern"))
    }

    /// Queues a count of `buf`'s values still holding [`NAN_POISON`] into `out[0]` (`f`: the `count_word`
    /// kernel); nothing waits for it.
    pub fn queue_count_poison(
        &self,
        f: &CudaFunction,
        buf: &CudaSlice<f32>,
        out: &mut CudaViewMut<'_, u64>,
    ) -> Result<(), ExperimentError> {
        if out.is_empty() {
            return Err(ExperimentError::Cuda("a count needs a word to land in".into()));
        }
        let n = buf.len() as u64;
        let mut launch = self.stream.launch_builder(f);
        launch.arg(buf).arg(&n).arg(&NAN_POISON).arg(out);
        // SAFETY: count_word reads buf[0..n) as 32-bit floats and adds into out[0], which exists (checked above).
        unsafe { launch.launch(over(buf.len())) }.map(|_| ()).map_err(cuda_err("launching count_word"))
    }
}
