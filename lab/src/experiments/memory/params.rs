//! The memory experiment's parameters.

use serde::{Deserialize, Serialize};

use crate::experiments::MIB;

/// The caching allocator made visible.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryParams {
    /// Size of each block, bytes (1 MiB to 16 GiB). Default 256 MiB.
    pub block_bytes: u64,
    /// Blocks to allocate (1 to 64). Default 8.
    pub blocks: u32,
    /// Free every k-th block before allocating again (1 frees all, 2 every other). Default 2.
    pub free_every: u32,
    /// Timed pool-served vs fresh allocations (1 to 100). Default 10.
    pub repetitions: u32,
}

impl Default for MemoryParams {
    fn default() -> Self {
        Self { block_bytes: 256 * MIB, blocks: 8, free_every: 2, repetitions: 10 }
    }
}
