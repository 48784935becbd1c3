//! The fleet's refresh, cheap at 1,000 hosts: one round of instant queries over the whole fleet
//! (no look-back: an instant selector reads one sample per series), one query per figure family
//! where PromQL allows, labels dropped where the join does not read them, and only the figures a
//! host's line needs (temperature and power, 2 of every 3 gauge series, are read for the GPUs a
//! listing shows: [`GAUGES`]); then, only for the targets that are down or gone (usually none),
//! the windowed [`Query`] set restricted to them, so their last figures stay listed for the window.
//!
//! Both rounds fill the same [`Answers`] the join reads, so one join serves both.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::client::Series;
use super::model::{Answers, Query};
use super::usable;

/// Above this many silent targets, the second round asks over the whole fleet rather than
/// naming each target in a regular expression.
pub const MAX_NAMED_STALE: usize = 200;

/// The labels of dcgm-exporter's series that no page reads.
const UNREAD: &str = "pci_bus_id, device, DCGM_FI_DRIVER_VERSION";

/// One instant query of the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sweep {
    /// `up`, with the time of the last good scrape of each target that is up.
    UpSeen,
    /// Targets scraped within the window that Prometheus no longer scrapes.
    Gone,
    /// Memory used, per GPU: also says which GPUs are live. Their other labels (model, UUID,
    /// host name) come from [`Self::Identity`], kept ([`super::kept`]), and pods from [`Self::Pods`].
    FbUsed,
    /// Free + reserved memory, per GPU: with used, the GPU's total. Kept ([`super::kept`]).
    FreeReserved,
    /// Memory used with every label a page reads (model, UUID, host name, pod). Kept.
    Identity,
    /// The GPUs assigned to a Kubernetes pod, with its labels: who holds them, fresh each refresh.
    Pods,
    /// Utilization (what says a held GPU is idle).
    Util,
    /// `gpudash_info`, `gpudash_simulated`, `gpudash_reservation_active`: one query, by metric name.
    Gpudash,
    /// GPUs that fell off the bus (only those).
    Lost,
    /// Memory and process count per user per GPU.
    Processes,
    /// What is wrong with each GPU, now.
    Faults,
}

impl Sweep {
    pub const ALL: [Self; 11] = [
        Self::UpSeen,
        Self::Gone,
        Self::FbUsed,
        Self::FreeReserved,
        Self::Identity,
        Self::Pods,
        Self::Util,
        Self::Gpudash,
        Self::Lost,
        Self::Processes,
        Self::Faults,
    ];

    /// Whether its answer does not change between refreshes, so it is kept ([`super::kept`]).
    pub fn kept(self) -> bool {
        matches!(self, Self::FreeReserved | Self::Identity)
    }

    /// The PromQL; `window` only bounds [`Self::Gone`] and the recent-XID rule.
    pub fn promql(self, window: Duration) -> String {
        let w = format!("{}s", window.as_secs().max(60));
        // A target scraped by two jobs reports each GPU twice: `max by` keeps one reading.
        let processes = "max by (instance, gpu, user, pid) (gpudash_process_memory_bytes)";
        match self {
            // `timestamp(up == 1)` answers nothing on VictoriaMetrics (its `timestamp` reads raw
            // samples only). `or` matches label sets without the metric name, so a target that is
            // down answers its `up` of 0 and one that is up the time of its last scrape: the same
            // on both engines, and half the engine's work of `timestamp(up) and on (…) up == 1`.
            Self::UpSeen => "up == 0 or timestamp(up)".to_owned(),
            Self::Gone => format!("group by (instance, job) (last_over_time(up[{w}])) unless on(instance) up"),
            Self::FbUsed => "max by (instance, gpu) (DCGM_FI_DEV_FB_USED)".to_owned(),
            // Every label but the exporter's per-device ones no page reads (the metric name,
            // PCI bus, device file, driver version), which are a third of this answer's bytes.
            Self::Identity => format!("max without ({UNREAD}) (DCGM_FI_DEV_FB_USED)"),
            Self::Pods => format!(
                "max without ({UNREAD}) (DCGM_FI_DEV_FB_USED{{pod!=\"\"}} or DCGM_FI_DEV_FB_USED{{exported_pod!=\"\"}})"
            ),
            Self::FreeReserved => "sum by (instance, gpu) (max by (__name__, instance, gpu) \
                 ({__name__=~\"DCGM_FI_DEV_FB_(FREE|RESERVED)\"}))"
                .to_owned(),
            Self::Util => "max by (instance, gpu) (DCGM_FI_DEV_GPU_UTIL)".to_owned(),
            Self::Gpudash => "{__name__=~\"gpudash_info|gpudash_simulated|gpudash_reservation_active\"}".to_owned(),
            // Only the series above 0 are grouped (the engine groups none on a healthy fleet);
            // the maximum of those is 1 exactly when the maximum of all is.
            Self::Lost => "max by (instance, gpu) (gpudash_device_lost > 0) == 1".to_owned(),
            // One series per process, summed per user here: one pass over the series, not two.
            Self::Processes => processes.to_owned(),
            Self::Faults => usable::promql(&w, &|m: &str| m.to_owned(), true),
        }
    }
}

/// The first round's answers as the join reads them, and the targets whose last figures the
/// second round must fetch (down now, or gone within the window).
pub fn into_answers(results: Vec<(Sweep, Vec<(String, Series)>)>) -> (Answers, BTreeSet<String>) {
    let mut answers = Answers::new();
    let mut silent = BTreeSet::new();
    let mut push = |q: Query, s: Series| answers.entry(q).or_default().push(s);
    let mut processes: BTreeMap<(String, String, String), (f64, u32)> = BTreeMap::new();
    for (sweep, series) in results {
        for (name, s) in series {
            match sweep {
                Sweep::UpSeen if s.value <= 0.0 => {
                    silent.extend(s.label("instance").map(str::to_owned));
                    push(Query::Up, s);
                }
                Sweep::UpSeen => {
                    push(Query::Up, Series { labels: s.labels.clone(), value: 1.0 });
                    push(Query::LastSeen, s);
                }
                Sweep::Gone => silent.extend(s.label("instance").map(str::to_owned)),
                Sweep::FbUsed => {
                    push(Query::Present, s.clone());
                    push(Query::FbUsed, s);
                }
                Sweep::FreeReserved => push(Query::FbFree, s),
                Sweep::Util => push(Query::GpuUtil, s),
                Sweep::Gpudash => match name.as_str() {
                    "gpudash_info" => push(Query::Info, s),
                    "gpudash_simulated" => push(Query::Simulated, s),
                    "gpudash_reservation_active" => push(Query::Reserved, s),
                    _ => {}
                },
                Sweep::Lost => push(Query::Lost, s),
                Sweep::Processes => {
                    let key = |l: &str| s.label(l).unwrap_or_default().to_owned();
                    let entry = processes.entry((key("instance"), key("gpu"), key("user"))).or_default();
                    entry.0 += s.value.max(0.0);
                    entry.1 += 1;
                }
                Sweep::Faults => push(Query::Faults, s),
                // Worn by the used-memory series already ([`super::kept::dress`]).
                Sweep::Identity | Sweep::Pods => {}
            }
        }
    }
    for ((instance, gpu, user), (memory, count)) in processes {
        let labels = [("instance", instance), ("gpu", gpu), ("user", user)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .chain([("processes".to_owned(), count.to_string())])
            .collect();
        push(Query::Processes, Series { labels, value: memory });
    }
    (answers, silent)
}

/// Temperature and power, one query by metric name, for the GPUs of the targets `matcher` selects
/// (all when empty): read when a listing shows GPUs, not on every refresh.
pub fn gauges(matcher: &str) -> String {
    let sel = if matcher.is_empty() { String::new() } else { format!(", {matcher}") };
    format!("max by (__name__, instance, gpu) ({{__name__=~\"DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE)\"{sel}}})")
}

/// Which [`Query`] answers of the second round join the first's: the windowed figures of silent
/// targets. (Live-only answers — `up`, presence, processes, reservations — the first round has.)
pub fn second_round(query: Query) -> bool {
    !matches!(query, Query::Up | Query::Present | Query::Processes | Query::Reserved)
}

/// A label matcher selecting exactly these instances (`instance=~"…"`), or `None` for too many.
pub fn matcher(instances: &BTreeSet<String>) -> Option<String> {
    (instances.len() <= MAX_NAMED_STALE).then(|| {
        let alternatives: Vec<String> = instances.iter().map(|i| escape_regex(i)).collect();
        format!("instance=~\"{}\"", alternatives.join("|"))
    })
}

/// A matcher for one instance (`instance="…"`), its value escaped for a PromQL string.
pub fn instance_matcher(instance: &str) -> String {
    format!("instance=\"{}\"", instance.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `value` as an RE2 pattern matching only itself, written as a PromQL string's contents.
fn escape_regex(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '/' | '@' | ',') => out.push(c),
            // `\\` in a PromQL string is one backslash for the regex; `"` needs the string's escape.
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\\\\\"),
            c => {
                out.push_str("\\\\");
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series { labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(), value }
    }

    #[test]
    fn the_first_round_has_no_look_back_over_gpu_series() {
        let window = Duration::from_secs(600);
        for sweep in Sweep::ALL {
            let q = sweep.promql(window);
            assert!(!q.contains("last_over_time(DCGM") && !q.contains("[600s:"), "{sweep:?}: {q}");
        }
        let all: BTreeSet<String> = Sweep::ALL.iter().map(|s| s.promql(window)).collect();
        assert_eq!(all.len(), Sweep::ALL.len());
    }

    #[test]
    fn answers_split_by_family_and_silent_targets_are_named() {
        let gpu = [("instance", "a:1"), ("gpu", "0")];
        let (answers, silent) = into_answers(vec![
            (
                Sweep::UpSeen,
                vec![
                    (String::new(), series(&[("instance", "a:1"), ("job", "g")], 1_700_000_000.0)),
                    ("up".to_owned(), series(&[("instance", "b:1"), ("job", "g")], 0.0)),
                ],
            ),
            (Sweep::Gone, vec![(String::new(), series(&[("instance", "c:1"), ("job", "g")], 1.0))]),
            (Sweep::Util, vec![(String::new(), series(&gpu, 50.0))]),
            (
                Sweep::Processes,
                vec![
                    (String::new(), series(&[("instance", "a:1"), ("gpu", "0"), ("user", "ana"), ("pid", "7")], 1e9)),
                    (String::new(), series(&[("instance", "a:1"), ("gpu", "0"), ("user", "ana"), ("pid", "8")], 2e9)),
                ],
            ),
        ]);
        assert_eq!(silent.into_iter().collect::<Vec<_>>(), ["b:1", "c:1"]);
        let up: Vec<f64> = answers[&Query::Up].iter().map(|s| s.value).collect();
        assert_eq!(up, [1.0, 0.0]);
        assert_eq!(answers[&Query::LastSeen][0].value, 1_700_000_000.0);
        assert_eq!(answers[&Query::GpuUtil][0].value, 50.0);
        assert!(!answers.contains_key(&Query::Temperature), "temperature is read for listings only");
        let p = &answers[&Query::Processes];
        assert_eq!((p.len(), p[0].value, p[0].label("processes")), (1, 3e9, Some("2")));
    }

    #[test]
    fn matchers_name_instances_exactly() {
        let set: BTreeSet<String> = ["10.0.0.1:9400", "gpu-07:7070", "[::1]:9400"].map(str::to_owned).into();
        assert_eq!(matcher(&set).unwrap(), r#"instance=~"10\\.0\\.0\\.1:9400|\\[::1\\]:9400|gpu-07:7070""#);
        let many: BTreeSet<String> = (0..=MAX_NAMED_STALE).map(|i| format!("h{i}:1")).collect();
        assert_eq!(matcher(&many), None);
        assert_eq!(instance_matcher(r#"a"b:1"#), r#"instance="a\"b:1""#);
    }

    #[test]
    fn temperature_and_power_are_read_for_a_listing_only() {
        assert!(Sweep::ALL.iter().all(|s| !s.promql(Duration::from_secs(600)).contains("GPU_TEMP")));
        assert_eq!(
            gauges(r#"instance=~"a:1""#),
            r#"max by (__name__, instance, gpu) ({__name__=~"DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE)", instance=~"a:1"})"#
        );
        assert_eq!(
            gauges(""),
            r#"max by (__name__, instance, gpu) ({__name__=~"DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE)"})"#
        );
    }
}
