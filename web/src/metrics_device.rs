//! `/metrics`' per-GPU families from the samples and health readings: dcgm-exporter's
//! `DCGM_FI_DEV_*` names, help texts and units first, then `gpudash_*` for what it lacks.
//! The profiling families are `metrics_gpm.rs`; `metrics.rs` writes them all.

use shared::health::DeviceHealth;
use shared::{DeviceInfo, DeviceSample};

use base::prom_text::Kind;

pub(super) const MIB: f64 = 1024.0 * 1024.0;

/// Where a per-GPU series reads its value; `None` leaves that GPU out of the family.
#[derive(Clone, Copy)]
pub(super) enum Read {
    /// From the latest sample (the device is passed for figures derived from its totals).
    Sample(fn(&DeviceInfo, &DeviceSample) -> Option<f64>),
    /// From the slow-path health readings.
    Health(fn(&DeviceHealth) -> Option<f64>),
    /// A count (errors, retries, energy, bytes) from the slow-path health readings.
    Count(fn(&DeviceHealth) -> Option<u64>),
}

/// One per-GPU metric family: its name, type, help text and value.
pub(super) struct DeviceMetric {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) help: &'static str,
    pub(super) read: Read,
}

pub(super) const fn gauge(
    name: &'static str,
    help: &'static str,
    read: fn(&DeviceInfo, &DeviceSample) -> Option<f64>,
) -> DeviceMetric {
    DeviceMetric { name, kind: Kind::Gauge, help, read: Read::Sample(read) }
}

/// A gauge of the health readings.
const fn health(name: &'static str, help: &'static str, read: fn(&DeviceHealth) -> Option<f64>) -> DeviceMetric {
    DeviceMetric { name, kind: Kind::Gauge, help, read: Read::Health(read) }
}

/// A counter of the health readings: a count that only grows (until a reset or reboot).
const fn counter(name: &'static str, help: &'static str, read: fn(&DeviceHealth) -> Option<u64>) -> DeviceMetric {
    DeviceMetric { name, kind: Kind::Counter, help, read: Read::Count(read) }
}

/// A count of the health readings that is a gauge (a rate).
const fn health_count(name: &'static str, help: &'static str, read: fn(&DeviceHealth) -> Option<u64>) -> DeviceMetric {
    DeviceMetric { name, kind: Kind::Gauge, help, read: Read::Count(read) }
}

/// The per-GPU families, in exposition order: dcgm-exporter's first, then `gpudash_*`.
pub(super) const DEVICE_METRICS: &[DeviceMetric] = &[
    gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |_, s| s.gpu_util.map(f64::from)),
    gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", |_, s| s.mem_util.map(f64::from)),
    gauge("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", |_, s| s.encoder_util.map(f64::from)),
    gauge("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", |_, s| s.decoder_util.map(f64::from)),
    gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |_, s| s.memory_used.map(mib)),
    gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", |_, s| s.memory_free.map(mib)),
    gauge("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", |d, s| {
        d.memory_total.checked_sub(s.memory_used? + s.memory_free?).map(mib)
    }),
    gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |_, s| s.temperature_c.map(f64::from)),
    gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |_, s| s.power_draw_mw.map(watts)),
    gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", |_, s| s.power_limit_mw.map(watts)),
    gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", |_, s| s.sm_clock_mhz.map(f64::from)),
    gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", |_, s| s.mem_clock_mhz.map(f64::from)),
    gauge("DCGM_FI_DEV_PSTATE", "Performance state (P-State) 0-15. 0=highest.", |_, s| s.pstate.map(f64::from)),
    gauge("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in 0-100%).", |_, s| {
        s.fan_speeds.as_ref()?.first().copied().map(f64::from)
    }),
    gauge("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation.", |_, s| {
        s.pcie_link.map(|l| f64::from(l.generation))
    }),
    gauge("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width.", |_, s| s.pcie_link.map(|l| f64::from(l.width))),
    counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", |h| h.energy_mj),
    counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", |h| h.pcie_replays),
    health("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", |h| {
        Some(h.xids.last().map_or(0.0, |x| x.code as f64))
    }),
    counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", |h| {
        h.ecc_volatile.corrected
    }),
    counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", |h| {
        h.ecc_volatile.uncorrected
    }),
    counter("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", |h| {
        h.ecc_aggregate.corrected
    }),
    counter("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", |h| {
        h.ecc_aggregate.uncorrected
    }),
    counter("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", |h| {
        h.retired_pages.single_bit
    }),
    counter("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", |h| {
        h.retired_pages.double_bit
    }),
    health("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", |h| {
        h.retired_pages.pending.map(f64::from)
    }),
    counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.", |h| {
        h.remapped_rows.correctable
    }),
    counter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.", |h| {
        h.remapped_rows.uncorrectable
    }),
    health("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", |h| {
        h.remapped_rows.failed.map(f64::from)
    }),
    health("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending (needs a reset).", |h| {
        h.remapped_rows.pending.map(f64::from)
    }),
    health("DCGM_FI_DEV_BAR1_USED", "Used BAR1 (in MiB).", |h| h.bar1_used.map(mib)),
    health_count("gpudash_pcie_tx_bytes_per_second", "PCIe transmit throughput over NVML's 20 ms window.", |h| {
        h.pcie_tx_bytes_per_s
    }),
    health_count("gpudash_pcie_rx_bytes_per_second", "PCIe receive throughput over NVML's 20 ms window.", |h| {
        h.pcie_rx_bytes_per_s
    }),
    health("gpudash_nvlink_active_links", "NVLink links up.", |h| {
        (!h.nvlinks.is_empty()).then(|| h.nvlinks.iter().filter(|l| l.active).count() as f64)
    }),
];

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / MIB).round()
}

fn watts(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}
