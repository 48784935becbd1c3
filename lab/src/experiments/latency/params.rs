//! The latency experiment's parameters.

use serde::{Deserialize, Serialize};

/// Launch, event and synchronize latency with an empty kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyParams {
    /// Untimed calls first (0 to 10000). Default 100.
    pub warmup: u32,
    /// Timed calls of each kind (10 to 100000). Default 2000.
    pub repetitions: u32,
}

impl Default for LatencyParams {
    fn default() -> Self {
        Self { warmup: 100, repetitions: 2000 }
    }
}
