//! The precision experiment's parameters.

use serde::{Deserialize, Serialize};

pub use crate::values::Dtype;

/// cuBLAS GEMM throughput and correctness per element type.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionParams {
    /// Square matrix orders (64 to 16384), at most 8. Default 1024, 4096, 8192.
    pub sizes: Vec<u32>,
    /// Default: all four.
    pub dtypes: Vec<Dtype>,
    /// Untimed GEMMs first (0 to 50). Default 3.
    pub warmup: u32,
    /// Timed GEMMs (1 to 200). Default 10.
    pub repetitions: u32,
}

impl Default for PrecisionParams {
    fn default() -> Self {
        Self { sizes: vec![1024, 4096, 8192], dtypes: Dtype::ALL.to_vec(), warmup: 3, repetitions: 10 }
    }
}
