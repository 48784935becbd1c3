//! The fleet per owner (`GET /api/fleet/owners`): free GPUs now (from the cached refresh, so
//! reservations and health count as on each host), idle holders and usage over a range (small
//! `sum by (owner)` queries, asked concurrently: their answers have one series per owner, not
//! per GPU, so they stay cheap at any fleet size).
//!
//! A target scraped twice (two jobs) counts once: every query takes the `max` per instance first.
//! A query that fails leaves its part empty and says why in `error`; the others still answer.

use std::collections::BTreeMap;

use shared::activity::GpuState;
use shared::fleet::FleetResponse;
use shared::fleet_owners::{FleetFreeHost, FleetIdleHolder, FleetOwnerUsage, FleetOwners};

use super::Fleet;
use super::client::Series;

const GIB: f64 = (1u64 << 30) as f64;

/// The per-owner figures the usage part reads, one query each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    GpuSeconds,
    MemoryByteSeconds,
    IdleByteSeconds,
    Joules,
    UsageHosts,
    IdleBytes,
    IdleLongest,
    IdleHosts,
    IdleGpus,
}

impl Figure {
    const ALL: [Self; 9] = [
        Self::GpuSeconds,
        Self::MemoryByteSeconds,
        Self::IdleByteSeconds,
        Self::Joules,
        Self::UsageHosts,
        Self::IdleBytes,
        Self::IdleLongest,
        Self::IdleHosts,
        Self::IdleGpus,
    ];

    /// The PromQL, over `range_s` for usage.
    fn promql(self, range_s: u64) -> String {
        let increase =
            |family: &str| format!("sum by (owner) (max by (instance, owner) (increase({family}[{range_s}s])))");
        // Idle-flagged processes only: a host exports `gpudash_process_idle_seconds` for those alone.
        let idle = "max by (instance, gpu, user, pid) (gpudash_process_idle_seconds)";
        match self {
            Self::GpuSeconds => increase("gpudash_usage_gpu_seconds_total"),
            Self::MemoryByteSeconds => increase("gpudash_usage_memory_byte_seconds_total"),
            Self::IdleByteSeconds => increase("gpudash_usage_idle_memory_byte_seconds_total"),
            Self::Joules => increase("gpudash_usage_energy_joules_total"),
            Self::UsageHosts => format!(
                "count by (owner) (max by (instance, owner) (increase(gpudash_usage_gpu_seconds_total[{range_s}s])) > 0)"
            ),
            Self::IdleBytes => format!(
                "sum by (user) (max by (instance, gpu, user, pid) (gpudash_process_memory_bytes) and on (instance, gpu, user, pid) {idle})"
            ),
            Self::IdleLongest => format!("max by (user) ({idle})"),
            Self::IdleHosts => format!("count by (user) (count by (user, instance) ({idle}))"),
            Self::IdleGpus => format!("count by (user) (count by (user, instance, gpu) ({idle}))"),
        }
    }

    /// The owner a series is about: usage counters say `owner`, process series `user`.
    fn owner(self, series: &Series) -> Option<&str> {
        series.label(if matches!(self, Self::IdleBytes | Self::IdleLongest | Self::IdleHosts | Self::IdleGpus) {
            "user"
        } else {
            "owner"
        })
    }
}

impl Fleet {
    /// Free GPUs now, idle holders and usage per owner over the last `range_s` seconds.
    pub async fn owners(&self, range_s: u64) -> FleetOwners {
        let started = self.config.clock.now();
        // At the engine's now, not this viewer's (whose clock may be off).
        let asked = Figure::ALL.map(|figure| {
            let promql = figure.promql(range_s);
            async move { (figure, self.client.query_at(&promql, None).await) }
        });
        let (snapshot, answers) =
            futures_util::future::join(self.snapshot(), futures_util::future::join_all(asked)).await;
        let mut error = snapshot.error.clone();
        let mut figures = Vec::new();
        let mut at_s = None;
        for (figure, result) in answers {
            match result {
                Ok(answered) => {
                    at_s = at_s.or(answered.at_s);
                    figures.push((figure, answered.series.into_iter().map(|(_, s)| s).collect()));
                }
                Err(e) => {
                    tracing::warn!("fleet owners: {e}");
                    error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        let (idle, usage) = per_owner(&figures);
        FleetOwners {
            prometheus: self.client.base().to_string(),
            queried_ms: at_s
                .filter(|t| t.is_finite())
                .map_or_else(|| self.config.clock.now_ms(), |t| (t * 1000.0) as u64),
            query_ms: u64::try_from(self.config.clock.now().duration_since(started).as_millis()).unwrap_or(u64::MAX),
            error,
            range_s,
            free: free_hosts(&snapshot),
            idle,
            usage,
        }
    }
}

/// Hosts with free GPUs in `fleet` (the state the host lines count), most free first.
pub fn free_hosts(fleet: &FleetResponse) -> Vec<FleetFreeHost> {
    let mut hosts: BTreeMap<&str, FleetFreeHost> = BTreeMap::new();
    for gpu in fleet.gpus.iter().filter(|g| g.state() == GpuState::Free) {
        let host = hosts.entry(&gpu.instance).or_insert_with(|| FleetFreeHost {
            instance: gpu.instance.clone(),
            hostname: gpu.hostname.clone(),
            url: fleet.nodes.iter().find(|n| n.instance == gpu.instance).and_then(|n| n.url.clone()),
            ..FleetFreeHost::default()
        });
        host.gpus.push(gpu.gpu);
        if let Some(model) = gpu.model.as_ref().filter(|m| !host.models.contains(m)) {
            host.models.push(model.clone());
        }
    }
    let mut hosts: Vec<FleetFreeHost> = hosts.into_values().collect();
    hosts.sort_by(|a, b| b.gpus.len().cmp(&a.gpus.len()).then_with(|| a.hostname.cmp(&b.hostname)));
    hosts.iter_mut().for_each(|h| h.gpus.sort_unstable());
    hosts
}

/// Idle holders (most memory first) and usage rows (most GPU time first) from the answers.
fn per_owner(figures: &[(Figure, Vec<Series>)]) -> (Vec<FleetIdleHolder>, Vec<FleetOwnerUsage>) {
    let mut idle: BTreeMap<String, FleetIdleHolder> = BTreeMap::new();
    let mut usage: BTreeMap<String, FleetOwnerUsage> = BTreeMap::new();
    for (figure, series) in figures {
        for s in series {
            let Some(owner) = figure.owner(s) else { continue };
            let value = s.value.max(0.0);
            let whole = value.round() as u32;
            let holder = idle.entry(owner.to_owned()).or_insert_with(|| FleetIdleHolder::named(owner));
            let row = usage.entry(owner.to_owned()).or_insert_with(|| FleetOwnerUsage::named(owner));
            match figure {
                Figure::GpuSeconds => row.gpu_seconds = value,
                Figure::MemoryByteSeconds => row.memory_gib_seconds = value / GIB,
                Figure::IdleByteSeconds => row.idle_gib_seconds = value / GIB,
                Figure::Joules => row.energy_joules = value,
                Figure::UsageHosts => row.hosts = whole,
                Figure::IdleBytes => holder.memory_bytes = value as u64,
                Figure::IdleLongest => holder.longest_idle_s = value as u64,
                Figure::IdleHosts => holder.hosts = whole,
                Figure::IdleGpus => holder.gpus = whole,
            }
        }
    }
    let mut idle: Vec<FleetIdleHolder> = idle.into_values().filter(|h| h.memory_bytes > 0 || h.gpus > 0).collect();
    idle.sort_by(|a, b| b.memory_bytes.cmp(&a.memory_bytes).then_with(|| a.owner.cmp(&b.owner)));
    let mut usage: Vec<FleetOwnerUsage> =
        usage.into_values().filter(|u| u.gpu_seconds > 0.0 || u.memory_gib_seconds > 0.0).collect();
    usage.sort_by(|a, b| b.gpu_seconds.total_cmp(&a.gpu_seconds).then_with(|| a.owner.cmp(&b.owner)));
    (idle, usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series { labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(), value }
    }

    #[test]
    fn every_query_sums_per_owner_after_one_reading_per_instance() {
        for figure in Figure::ALL {
            let q = figure.promql(86_400);
            assert!(q.contains("by (instance"), "a host scraped twice counts once: {q}");
            assert!(
                q.starts_with("sum by (owner)") || q.contains("by (user)") || q.starts_with("count by (owner)"),
                "{q}"
            );
        }
        assert_eq!(
            Figure::GpuSeconds.promql(3600),
            "sum by (owner) (max by (instance, owner) (increase(gpudash_usage_gpu_seconds_total[3600s])))"
        );
    }

    #[test]
    fn answers_become_rows_per_owner() {
        let figures = vec![
            (Figure::GpuSeconds, vec![series(&[("owner", "ana")], 7200.0), series(&[("owner", "bo")], 0.0)]),
            (Figure::MemoryByteSeconds, vec![series(&[("owner", "ana")], 2.0 * GIB)]),
            (Figure::UsageHosts, vec![series(&[("owner", "ana")], 2.0)]),
            (Figure::IdleBytes, vec![series(&[("user", "cy")], 8.0 * GIB), series(&[("user", "ana")], GIB)]),
            (Figure::IdleLongest, vec![series(&[("user", "cy")], 900.4)]),
            (Figure::IdleHosts, vec![series(&[("user", "cy")], 2.0)]),
            (Figure::IdleGpus, vec![series(&[("user", "cy")], 3.0), series(&[], 1.0)]),
        ];
        let (idle, usage) = per_owner(&figures);
        assert_eq!(usage.len(), 1, "bo used nothing in the range: {usage:?}");
        assert_eq!((usage[0].owner.as_str(), usage[0].gpu_seconds, usage[0].memory_gib_seconds), ("ana", 7200.0, 2.0));
        assert_eq!(usage[0].hosts, 2);
        assert_eq!(idle.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>(), ["cy", "ana"]);
        assert_eq!((idle[0].memory_bytes, idle[0].longest_idle_s, idle[0].hosts, idle[0].gpus), (8 << 30, 900, 2, 3));
    }
}
