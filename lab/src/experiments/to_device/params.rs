//! The to_device experiment's parameters.

use serde::{Deserialize, Serialize};

use crate::experiments::MIB;

/// One tensor copied to the GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ToDeviceParams {
    /// The tensor's size, bytes (4 KiB to 1 GiB). Default 256 MiB.
    pub bytes: u64,
    /// Untimed copies first (0 to 100). Default 3.
    pub warmup: u32,
    /// Timed copies of each kind (1 to 1000). Default 10.
    pub repetitions: u32,
}

impl Default for ToDeviceParams {
    fn default() -> Self {
        Self { bytes: 256 * MIB, warmup: 3, repetitions: 10 }
    }
}
