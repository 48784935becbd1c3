//! The slow loop's health reading of one GPU: persistence, MIG, ECC, retired
//! pages, remapped rows, BAR1, NVLink state, PCIe replays (the facts, every 30 s),
//! PCIe traffic and energy (every pass).

use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, PcieUtilCounter, RetirementCause};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};
use shared::DeviceInfo;
use shared::health::{DeviceHealth, EccCounts, MigInstance, NvLinkState, RemappedRows, RetiredPages};

use super::info::{as_u64, compute_mode_name};
use super::{NvmlSource, lock};

/// How often the facts that change rarely are read (modes, ECC, retired pages, remapped rows, BAR1,
/// NVLink state, PCIe replays, power limit, PCIe width), unless an XID or a GPU answering again calls for them sooner.
pub(super) const FACTS_PERIOD: Duration = Duration::from_secs(30);

/// A GPU's facts as last read, and when.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    health: DeviceHealth,
    read: Instant,
}

impl NvmlSource {
    /// The slow loop's health of one GPU: its facts (read again when [`FACTS_PERIOD`] has passed
    /// or [`NvmlSource::facts_due`] names it), then what changes every pass: PCIe traffic (from the
    /// last GPM window where GPM reads it) and energy (the counter every 30 s, the power draw
    /// integrated between: [`super::energy`]).
    pub(super) fn health(&self, info: &DeviceInfo, timestamp_ms: u64) -> Option<DeviceHealth> {
        let index = info.index;
        let device = self.handle(index).ok()?;
        let cached = lock(&self.facts).get(&index).cloned();
        let due = lock(&self.facts_due).remove(&index);
        let mut h = match cached {
            Some(facts) if !due && self.clock.now().duration_since(facts.read) < FACTS_PERIOD => {
                self.refresh_slow_fields(index, &device, false);
                facts.health
            }
            _ => {
                let health = self.facts(info, &device, timestamp_ms);
                lock(&self.facts).insert(index, Facts { health: health.clone(), read: self.clock.now() });
                health
            }
        };
        h.timestamp_ms = timestamp_ms;
        if let Some((tx, rx)) = self.gpm_pcie.fresh(index) {
            (h.pcie_tx_bytes_per_s, h.pcie_rx_bytes_per_s) = (Some(tx), Some(rx));
        } else {
            // Each blocks for NVML's 20 ms sampling window and costs ~0.7 ms of CPU: only without GPM.
            let kb_per_s = |counter| self.read(index, "PCIe throughput", || device.pcie_throughput(counter));
            h.pcie_tx_bytes_per_s = kb_per_s(PcieUtilCounter::Send).map(|kb| u64::from(kb) * 1024);
            h.pcie_rx_bytes_per_s = kb_per_s(PcieUtilCounter::Receive).map(|kb| u64::from(kb) * 1024);
        }
        h.energy_mj = self.energy(index, &device);
        Some(h)
    }

    /// The GPU's energy in mJ: the counter when it is due, else the power integrated since.
    fn energy(&self, index: u32, device: &Device<'_>) -> Option<u64> {
        // The power integral is a measurement: real time, whatever clock schedules the reads.
        let now = base::clock::Stopwatch::now();
        if lock(&self.energy).get(&index).is_none_or(|e| e.due(now)) {
            // A failed read keeps the estimate going; the next pass asks again.
            if let Some(counter) = self.read(index, "energy", || device.total_energy_consumption()) {
                let drift = lock(&self.energy).entry(index).or_default().counter(counter, now);
                if let Some(d) = drift {
                    // tests/gpu/h200.sh reads these lines (GPUDASH_LOG=telemetry::nvml=debug) to show the estimate's error.
                    tracing::debug!(
                        index,
                        drift_mj = d.drift_mj,
                        counted_mj = d.counted_mj,
                        "energy: the power integrated since the last counter read, against the counter"
                    );
                }
            }
        }
        lock(&self.energy).get_mut(&index).and_then(super::energy::EnergyEstimate::serve)
    }

    /// Reads the facts that change rarely, stamped `facts_ms`.
    fn facts(&self, info: &DeviceInfo, device: &Device<'_>, timestamp_ms: u64) -> DeviceHealth {
        let index = info.index;
        self.refresh_slow_fields(index, device, true);
        let mut h = DeviceHealth { index, timestamp_ms, facts_ms: Some(timestamp_ms), ..DeviceHealth::default() };
        h.persistence_mode = self.read(index, "persistence", || device.is_in_persistent_mode());
        h.compute_mode =
            self.read(index, "compute mode", || device.compute_mode()).map(|m| compute_mode_name(&m).to_owned());
        if let Some(mig) = self.read(index, "MIG mode", || device.mig_mode()) {
            h.mig_enabled = Some(mig.current == 1);
            h.mig_pending = Some(mig.pending == 1);
            if mig.current == 1 {
                h.mig_instances = self.mig_instances(device, index);
            }
        }
        if let Some(ecc) = self.read(index, "ECC mode", || device.is_ecc_enabled()) {
            h.ecc_enabled = Some(ecc.currently_enabled);
            let count = |kind, counter| self.read(index, "ECC counts", || device.total_ecc_errors(kind, counter));
            h.ecc_volatile = EccCounts {
                corrected: count(MemoryError::Corrected, EccCounter::Volatile),
                uncorrected: count(MemoryError::Uncorrected, EccCounter::Volatile),
            };
            h.ecc_aggregate = EccCounts {
                corrected: count(MemoryError::Corrected, EccCounter::Aggregate),
                uncorrected: count(MemoryError::Uncorrected, EccCounter::Aggregate),
            };
        }
        let pages = |cause| self.read(index, "retired pages", || device.retired_pages(cause)).map(|p| p.len() as u64);
        h.retired_pages = RetiredPages {
            single_bit: pages(RetirementCause::MultipleSingleBitEccErrors),
            double_bit: pages(RetirementCause::DoubleBitEccError),
            pending: self.read(index, "retired pages pending", || device.are_pages_pending_retired()),
        };
        h.remapped_rows = self.remapped_rows(device, index);
        h.pcie_replays = self.read(index, "PCIe replays", || device.pcie_replay_counter()).map(u64::from);
        if let Some(bar1) = self.read(index, "BAR1", || device.bar1_memory_info()) {
            h.bar1_total = Some(bar1.total);
            h.bar1_used = Some(bar1.used);
        }
        h.nvlinks = (0..info.nvlink_links)
            .filter_map(|link| {
                let active = self.read(index, "NVLink state", || device.link_wrapper_for(link).is_active())?;
                Some(NvLinkState { link, active })
            })
            .collect();
        h
    }

    fn mig_instances(&self, device: &Device<'_>, index: u32) -> Vec<MigInstance> {
        let count = self.read(index, "MIG count", || device.mig_device_count()).unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let mig = device.mig_device_by_index(i).ok()?;
                let memory = mig.memory_info().ok();
                Some(MigInstance {
                    index: i,
                    uuid: mig.uuid().unwrap_or_default(),
                    name: mig.name().unwrap_or_else(|_| "MIG instance".to_owned()),
                    memory_total: memory.as_ref().map(|m| m.total),
                    memory_used: memory.as_ref().map(|m| m.used),
                })
            })
            .collect()
    }

    fn remapped_rows(&self, device: &Device<'_>, index: u32) -> RemappedRows {
        let ids = [
            NVML_FI_DEV_REMAPPED_COR,
            NVML_FI_DEV_REMAPPED_UNC,
            NVML_FI_DEV_REMAPPED_PENDING,
            NVML_FI_DEV_REMAPPED_FAILURE,
        ]
        .map(FieldId);
        let Some(values) = self.read(index, "remapped rows", || device.field_values_for(&ids)) else {
            return RemappedRows::default();
        };
        let value =
            |i: usize| values.get(i).and_then(|v| v.as_ref().ok()).and_then(|v| v.value.as_ref().ok()).and_then(as_u64);
        RemappedRows {
            correctable: value(0),
            uncorrectable: value(1),
            pending: value(2).map(|v| v != 0),
            failed: value(3).map(|v| v != 0),
        }
    }
}
