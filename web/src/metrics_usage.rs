//! `/metrics`' usage counters: each owner's lifetime GPU-seconds, memory and idle memory
//! byte-seconds and joules, from the usage store's totals (`store::usage::totals`), so they carry
//! on across a restart and `increase(…[30d])` across hosts is right (docs/ACCOUNTING.md, "As Prometheus counters").
//!
//! An owner with processes on a GPU now but nothing charged yet is exported at 0, so the first
//! charge is an increase a Prometheus sees rather than the start of a series. A scraper that may
//! not see names gets every owner's sums under one `owner="(hidden)"`: sums of counters are counters.

use std::collections::BTreeMap;

use shared::processes::GpuProcess;
use shared::usage::HIDDEN_USER;

use base::prom_text::{Exposition, Kind, escape};
use store::usage::Sums;

const GIB: f64 = (1u64 << 30) as f64;

/// One usage counter family.
struct UsageCounter {
    name: &'static str,
    help: &'static str,
    read: fn(&Sums) -> f64,
}

/// The families, in the order they are written; their names are documented in docs/METRICS.md.
const COUNTERS: [UsageCounter; 4] = [
    UsageCounter {
        name: "gpudash_usage_gpu_seconds_total",
        help: "GPU time charged to an owner (each interval split between a GPU's processes by SM share).",
        read: |s| s.gpu_s,
    },
    UsageCounter {
        name: "gpudash_usage_memory_byte_seconds_total",
        help: "Device memory an owner's processes held, integrated over time (divide by 2^30 for GiB-seconds).",
        read: |s| s.memory_gib_s * GIB,
    },
    UsageCounter {
        name: "gpudash_usage_idle_memory_byte_seconds_total",
        help: "Device memory an owner held while its GPU computed nothing, integrated over time.",
        read: |s| s.idle_gib_s * GIB,
    },
    UsageCounter {
        name: "gpudash_usage_energy_joules_total",
        help: "GPU energy charged to an owner (each interval's joules split by SM share).",
        read: |s| s.energy_j,
    },
];

/// The usage families for `totals`, with the owners of `processes` not yet charged at 0; with
/// `names` false every owner is merged into [`HIDDEN_USER`].
pub fn families(hostname: &str, totals: &BTreeMap<String, Sums>, processes: &[GpuProcess], names: bool) -> String {
    let mut owners: BTreeMap<String, Sums> = BTreeMap::new();
    for (owner, sums) in totals {
        let total = owners.entry(if names { owner.clone() } else { HIDDEN_USER.to_owned() }).or_default();
        total.gpu_s += sums.gpu_s;
        total.memory_gib_s += sums.memory_gib_s;
        total.idle_gib_s += sums.idle_gib_s;
        total.energy_j += sums.energy_j;
    }
    for process in processes {
        let owner = if names { team::usage::account::user_of(process) } else { HIDDEN_USER.to_owned() };
        owners.entry(owner).or_default();
    }
    let host = escape(hostname);
    let mut out = Exposition::default();
    for counter in &COUNTERS {
        let samples = owners
            .iter()
            .map(|(owner, sums)| (format!("owner=\"{}\",Hostname=\"{host}\"", escape(owner)), (counter.read)(sums)));
        out.family(counter.name, counter.help, Kind::Counter, samples);
    }
    out.into_text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_counted_from_the_totals_and_hidden_when_names_are() {
        let totals = BTreeMap::from([
            ("ana".to_owned(), Sums { gpu_s: 10.0, memory_gib_s: 2.0, idle_gib_s: 0.5, energy_j: 300.0 }),
            ("bo\"x".to_owned(), Sums { gpu_s: 1.0, ..Sums::default() }),
        ]);
        let mut new = shared::testing::process(0, 7);
        new.user = Some("cy".to_owned());
        let text = families("h-1", &totals, &[new.clone()], true);
        assert!(text.contains("# TYPE gpudash_usage_gpu_seconds_total counter\n"), "{text}");
        assert!(text.contains("gpudash_usage_gpu_seconds_total{owner=\"ana\",Hostname=\"h-1\"} 10\n"), "{text}");
        assert!(text.contains("gpudash_usage_memory_byte_seconds_total{owner=\"ana\",Hostname=\"h-1\"} 2147483648\n"));
        assert!(
            text.contains("gpudash_usage_idle_memory_byte_seconds_total{owner=\"ana\",Hostname=\"h-1\"} 536870912\n")
        );
        assert!(text.contains("gpudash_usage_energy_joules_total{owner=\"ana\",Hostname=\"h-1\"} 300\n"));
        assert!(text.contains("gpudash_usage_gpu_seconds_total{owner=\"bo\\\"x\",Hostname=\"h-1\"} 1\n"), "{text}");
        assert!(text.contains("gpudash_usage_gpu_seconds_total{owner=\"cy\",Hostname=\"h-1\"} 0\n"), "{text}");
        let hidden = families("h-1", &totals, &[new], false);
        assert!(
            hidden.contains("gpudash_usage_gpu_seconds_total{owner=\"(hidden)\",Hostname=\"h-1\"} 11\n"),
            "{hidden}"
        );
        assert!(!hidden.contains("ana") && !hidden.contains("cy"), "{hidden}");
        assert_eq!(families("h", &BTreeMap::new(), &[], true), "", "no owner, no family");
    }
}
