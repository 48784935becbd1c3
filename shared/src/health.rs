//! Device health read on slower loops: error counters, modes, links, PCIe
//! traffic, energy and XID events.

use serde::{Deserialize, Serialize};

/// Corrected and uncorrected ECC error counts.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EccCounts {
    pub corrected: Option<u64>,
    pub uncorrected: Option<u64>,
}

/// Memory pages retired after ECC errors (pre-Ampere GPUs).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetiredPages {
    pub single_bit: Option<u64>,
    pub double_bit: Option<u64>,
    pub pending: Option<bool>,
}

/// Rows remapped after ECC errors (Ampere and newer).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemappedRows {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
    pub pending: Option<bool>,
    pub failed: Option<bool>,
}

/// A MIG instance carved out of a GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total: Option<u64>,
    pub memory_used: Option<u64>,
}

/// One NVLink link's state.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
}

/// An XID error reported by the driver.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct XidEvent {
    pub device: u32,
    pub timestamp_ms: u64,
    pub code: u64,
    /// What the code means, from NVIDIA's XID catalogue.
    pub meaning: String,
}

/// What changes rarely or costs too much for the fast loop.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct DeviceHealth {
    pub index: u32,
    pub timestamp_ms: u64,
    pub persistence_mode: Option<bool>,
    /// "default", "exclusive_process" or "prohibited".
    pub compute_mode: Option<String>,
    pub mig_enabled: Option<bool>,
    pub mig_pending: Option<bool>,
    pub mig_instances: Vec<MigInstance>,
    pub ecc_enabled: Option<bool>,
    pub ecc_volatile: EccCounts,
    pub ecc_aggregate: EccCounts,
    pub retired_pages: RetiredPages,
    pub remapped_rows: RemappedRows,
    pub bar1_total: Option<u64>,
    pub bar1_used: Option<u64>,
    pub nvlinks: Vec<NvLinkState>,
    /// PCIe traffic over NVML's 20 ms window, bytes/s.
    pub pcie_tx_bytes_per_s: Option<u64>,
    pub pcie_rx_bytes_per_s: Option<u64>,
    pub pcie_replays: Option<u64>,
    /// Energy since the driver loaded, millijoules.
    pub energy_mj: Option<u64>,
    /// The most recent XID errors, newest last.
    pub xids: Vec<XidEvent>,
    /// When the facts that change rarely (modes, MIG, ECC, retired pages, remapped rows, BAR1,
    /// NVLink state) were read: every 30 s on hardware, and at once after an XID error or a GPU
    /// answering again; the traffic, replay and energy figures above are read on every pass.
    /// `None` where a source reads everything on every pass.
    pub facts_ms: Option<u64>,
}

/// Meaning of the XID codes an operator most often meets (NVIDIA's XID catalogue).
pub fn xid_meaning(code: u64) -> &'static str {
    match code {
        13 => "graphics engine exception (often an application bug: illegal address, bad instruction)",
        31 => "GPU memory page fault (often an application bug)",
        32 => "invalid or corrupted push buffer stream",
        43 => "GPU stopped processing (a user application fault)",
        45 => "preemptive cleanup, due to a previous error",
        48 => "double-bit ECC error",
        61 => "internal micro-controller breakpoint/warning",
        62 => "internal micro-controller halt",
        63 => "ECC page retirement or row remapping recording event",
        64 => "ECC page retirement or row remapper recording failure",
        68 => "video processor exception",
        69 => "graphics engine class error",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout error",
        119 => "GSP RPC timeout",
        120 => "GSP error",
        121 => "C2C link error",
        140 => "unrecovered ECC error",
        _ => "see NVIDIA's XID catalogue",
    }
}
