//! The p2p experiment's parameters.

use serde::{Deserialize, Serialize};

use crate::experiments::MIB;

/// Two GPUs (NVML indexes) copied between, both directions.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct GpuPair {
    pub a: u32,
    pub b: u32,
}

/// Bandwidth and latency between GPUs, with peer access enabled and disabled
/// (then the driver stages each copy through pinned host memory), like
/// cuda-samples' p2pBandwidthLatencyTest.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct P2pParams {
    /// Bytes of each bandwidth copy (1 MiB to 4 GiB). Default 256 MiB.
    pub size: u64,
    /// Untimed copies before timing each pair and mode (0 to 20). Default 3.
    pub warmup: u32,
    /// Timed copies per pair and mode (1 to 100). Default 10. Latency takes 10× as many 4-byte copies.
    pub repetitions: u32,
    /// Pairs to measure, each in both directions. Empty (the default): every pair of the server's GPUs.
    /// The server fills in the pairs it will measure, so a stored run lists them.
    pub pairs: Vec<GpuPair>,
}

impl Default for P2pParams {
    fn default() -> Self {
        Self { size: 256 * MIB, warmup: 3, repetitions: 10, pairs: Vec::new() }
    }
}

impl P2pParams {
    /// Every GPU the pairs involve, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<u32> = self.pairs.iter().flat_map(|p| [p.a, p.b]).collect();
        shared::order::sort(&mut devices);
        devices.dedup();
        devices
    }
}
