//! The streams experiment's parameters.

use serde::{Deserialize, Serialize};

use crate::experiments::MIB;

/// Copy/compute overlap and concurrent kernels.
///
/// The defaults make each phase long (copy ~5 ms, GEMM ~22 ms on an H200) so launch and
/// join costs stay under the overlap check's +2%; phases under 10 ms are judged more loosely.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsParams {
    /// Pinned host-to-device copy, bytes (1 MiB to 4 GiB). Default 256 MiB.
    pub copy_bytes: u64,
    /// The compute kernel is an fp32 GEMM of this order (256 to 16384). Default 8192.
    pub gemm_size: u32,
    /// Independent kernels launched on 1 stream, then on as many streams (2 to 32). Default 8.
    pub kernels: u32,
    /// How long each independent kernel spins, µs (10 to 100000). Default 500.
    pub kernel_us: u32,
    /// Untimed rounds first (0 to 20). Default 2.
    pub warmup: u32,
    /// Timed rounds (1 to 100). Default 5.
    pub repetitions: u32,
}

impl Default for StreamsParams {
    fn default() -> Self {
        Self { copy_bytes: 256 * MIB, gemm_size: 8192, kernels: 8, kernel_us: 500, warmup: 2, repetitions: 5 }
    }
}
