//! The transfer experiment's parameters.

use serde::{Deserialize, Serialize};

use crate::experiments::KIB;
pub use crate::values::CopyKind;

/// Host↔device and device↔device bandwidth over a sweep of sizes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TransferParams {
    /// Copy sizes in bytes, each 4 KiB to 1 GiB, at most 32 of them.
    /// Default: powers of 4 from 4 KiB to 1 GiB.
    pub sizes: Vec<u64>,
    /// Which copies to time. Default: all six.
    pub copies: Vec<CopyKind>,
    /// Untimed copies before timing each size (0 to 100). Default 3.
    pub warmup: u32,
    /// Timed copies per size (1 to 1000). Default 10.
    pub repetitions: u32,
}

impl Default for TransferParams {
    fn default() -> Self {
        Self {
            sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            copies: CopyKind::ALL.to_vec(),
            warmup: 3,
            repetitions: 10,
        }
    }
}
