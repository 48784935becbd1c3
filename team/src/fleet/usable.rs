//! Whether a fleet GPU can take new work, by the rule a GPU on its own page follows
//! (`shared::usability`): what is wrong with it, read through one PromQL query for every fault
//! the overview rates (a recent XID, uncorrectable ECC errors, row remaps, page retirement, clock
//! events) into the `shared::severity::Condition` this host fills from NVML; and whether someone
//! holds it.

use shared::fleet::FleetUser;
use shared::in_use;
use shared::severity::{Condition, XID_RECENT_MS};
use shared::telemetry::CLOCK_EVENT_NAMES;

use super::client::Series;

/// The `fault` label each part of [`promql`] gives its series.
const XID: &str = "xid";
const ECC_UNCORRECTED: &str = "ecc_uncorrected";
const ROW_REMAP_FAILED: &str = "row_remap_failed";
const ROW_REMAP_PENDING: &str = "row_remap_pending";
const RETIREMENT_PENDING: &str = "retirement_pending";
/// gpudash's `gpudash_clock_event_active{reason=…}`: one series per active reason.
const CLOCK_EVENT: &str = "clock_event";
/// dcgm-exporter's clock-event (throttle) reasons: one bitmask, NVML's bits.
const CLOCK_REASONS: &str = "clock_reasons";

/// One query for every fault, each series tagged with its `fault` label: only what is wrong
/// comes back (zero readings are left out). Figures are the last within `window` (a stale
/// node keeps its last ones), or with `instant` the current ones (cheaper: no look-back over
/// every GPU's series); an XID counts while it is recent ([`XID_RECENT_MS`]), as on a
/// GPU's own page: its series changed within that time, or began within it (a node that
/// started with it). `sel` writes a metric's selector (adding a target matcher, if any).
pub fn promql(window: &str, sel: &dyn Fn(&str) -> String, instant: bool) -> String {
    let tag = |expr: String, fault: &str| format!("label_replace({expr}, \"fault\", \"{fault}\", \"\", \"\")");
    let last = |metric: &str| {
        if instant { format!("{} > 0", sel(metric)) } else { format!("last_over_time({}[{window}]) > 0", sel(metric)) }
    };
    let recent = format!("{}s", XID_RECENT_MS / 1000);
    let x = sel("DCGM_FI_DEV_XID_ERRORS");
    let xid = format!(
        "({}) and on(instance, gpu) \
         (changes({x}[{recent}]) > 0 \
         or ({x} unless on(instance, gpu) {x} offset {recent}))",
        last("DCGM_FI_DEV_XID_ERRORS")
    );
    [
        tag(xid, XID),
        tag(last("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), ECC_UNCORRECTED),
        tag(last("DCGM_FI_DEV_ROW_REMAP_FAILURE"), ROW_REMAP_FAILED),
        tag(last("DCGM_FI_DEV_ROW_REMAP_PENDING"), ROW_REMAP_PENDING),
        tag(last("DCGM_FI_DEV_RETIRED_PENDING"), RETIREMENT_PENDING),
        tag(last("gpudash_clock_event_active"), CLOCK_EVENT),
        tag(last("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), CLOCK_REASONS),
        tag(last("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), CLOCK_REASONS),
    ]
    .join(" or ")
}

/// A GPU's condition from its `lost` flag and its [`promql`] series. What Prometheus does not
/// hold (temperature thresholds, memory: the Fleet shows those figures apart) stays unknown.
pub fn condition(lost: bool, faults: &[&Series]) -> Condition {
    let mut condition = Condition { lost, ..Condition::default() };
    for series in faults {
        let value = series.value;
        match series.label("fault").unwrap_or_default() {
            XID => push_once(&mut condition.recent_xids, value as u64),
            ECC_UNCORRECTED => condition.ecc_volatile.uncorrected = Some(value as u64),
            ROW_REMAP_FAILED => condition.row_remap_failed = true,
            ROW_REMAP_PENDING => condition.row_remap_pending = true,
            RETIREMENT_PENDING => condition.page_retirement_pending = true,
            CLOCK_EVENT => {
                if let Some(reason) = series.label("reason") {
                    push_once(&mut condition.clock_events, reason.to_owned());
                }
            }
            CLOCK_REASONS => {
                let bits = value as u64;
                for (bit, name) in CLOCK_EVENT_NAMES.iter().enumerate() {
                    if bits & (1 << bit) != 0 {
                        push_once(&mut condition.clock_events, (*name).to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    condition
}

/// Whether someone holds a GPU: its processes (gpudash) or its pod, when the node says (`users`),
/// or its figures by the rule a GPU on its own page follows ([`in_use::by_figures`]: any
/// utilization, or 256 MiB of its memory used (1% of a small GPU); a node listing no process on a busy GPU cannot see
/// them). Without users, unknown figures count as held. `None` for a stale GPU, whose holders are
/// not known now.
pub fn held(
    stale: bool,
    users: Option<&[FleetUser]>,
    used: Option<u64>,
    total: Option<u64>,
    util: Option<f64>,
) -> Option<bool> {
    let by_figures = in_use::by_figures(used, total, util).is_some();
    (!stale).then(|| match users {
        Some(users) => !users.is_empty() || by_figures,
        None => by_figures || used.is_none() || total.is_none_or(|t| t == 0) || util.is_none(),
    })
}

fn push_once<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::usability::unhealthy;

    fn fault(fault: &str, extra: &[(&str, &str)], value: f64) -> Series {
        let mut labels: Vec<(&str, &str)> = vec![("instance", "a:7070"), ("gpu", "0"), ("fault", fault)];
        labels.extend_from_slice(extra);
        Series { labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(), value }
    }

    fn reason(faults: &[Series], lost: bool) -> Option<String> {
        unhealthy(&condition(lost, &faults.iter().collect::<Vec<_>>()))
    }

    #[test]
    fn each_fault_reads_as_on_the_gpus_own_page() {
        assert_eq!(reason(&[], false), None);
        assert_eq!(reason(&[], true).as_deref(), Some("lost"));
        assert_eq!(reason(&[fault(XID, &[], 79.0)], false).as_deref(), Some("XID 79"));
        assert_eq!(reason(&[fault(XID, &[], 13.0)], false), None, "an application's XID leaves the GPU usable");
        assert_eq!(reason(&[fault(ECC_UNCORRECTED, &[], 2.0)], false).as_deref(), Some("ECC: 2 uncorrected"));
        assert_eq!(
            reason(&[fault(ROW_REMAP_PENDING, &[], 1.0)], false).as_deref(),
            Some("row remap pending: reset the GPU")
        );
        assert_eq!(reason(&[fault(ROW_REMAP_FAILED, &[], 1.0)], false).as_deref(), Some("row remapping failed"));
        let thermal = fault(CLOCK_EVENT, &[("reason", "sw_thermal_slowdown")], 1.0);
        let cap = fault(CLOCK_EVENT, &[("reason", "sw_power_cap")], 1.0);
        assert_eq!(reason(&[thermal, cap.clone()], false).as_deref(), Some("throttled: thermal"));
        assert_eq!(reason(&[cap], false), None, "a power cap only warns");
    }

    #[test]
    fn held_by_processes_or_by_the_figures_the_page_uses() {
        let held_by = |used, total, util| held(false, None, used, total, util);
        assert_eq!(held_by(Some(0), Some(100), Some(0.0)), Some(false));
        assert_eq!(held_by(Some(2), Some(100), Some(0.0)), Some(true), "2% of memory used is not free");
        assert_eq!(held_by(Some(0), Some(100), Some(1.0)), Some(true));
        assert_eq!(held_by(None, Some(100), Some(0.0)), Some(true), "unknown figures are not free");
        assert_eq!(held(true, Some(&[]), None, None, None), None, "a stale GPU's holders are not known");
        assert_eq!(held(false, Some(&[]), Some(0), Some(100), Some(0.0)), Some(false), "no process, idle figures");
        assert_eq!(
            held(false, Some(&[]), Some(90), Some(100), Some(99.0)),
            Some(true),
            "a node that lists no process on a busy GPU cannot see them: in use, not free"
        );
    }

    #[test]
    fn dcgm_exporters_bitmask_reads_as_nvmls_reasons() {
        // 0x20 sw thermal, 0x80 power brake, 0x1 idle.
        let c = condition(false, &[&fault(CLOCK_REASONS, &[], f64::from(0x20 | 0x80 | 0x1))]);
        assert_eq!(c.clock_events, ["idle", "sw_thermal_slowdown", "hw_power_brake_slowdown"]);
        assert_eq!(unhealthy(&c).as_deref(), Some("throttled: thermal, power brake"));
    }

    #[test]
    fn a_fleet_gpu_with_a_critical_fault_is_unhealthy_not_free() {
        use super::super::model::{Answers, Query, join};
        let gpu = |i: &str, extra: &[(&str, &str)], value| {
            let mut labels = vec![("instance", "a:7070"), ("gpu", i), ("Hostname", "node-a")];
            labels.extend_from_slice(extra);
            Series { labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(), value }
        };
        let both = |value| vec![gpu("0", &[], value), gpu("1", &[], value)];
        let info = Series { labels: [("instance".to_owned(), "a:7070".to_owned())].into(), value: 1.0 };
        let mut answers: Answers = [
            (Query::Up, vec![info.clone()]),
            (Query::Info, vec![info]),
            (Query::FbUsed, both(0.0)),
            (Query::FbFree, both(80_000.0)),
            (Query::GpuUtil, both(0.0)),
            (Query::Present, both(1.0)),
        ]
        .into();
        assert_eq!(join(&answers).summary.free_gpus, 2);
        answers.insert(Query::Faults, vec![gpu("1", &[("fault", XID)], 79.0)]);
        let view = join(&answers);
        let states: Vec<(u32, bool, Option<&str>)> =
            view.gpus.iter().map(|g| (g.gpu, g.free, g.unhealthy.as_deref())).collect();
        assert_eq!(states, [(0, true, None), (1, false, Some("XID 79"))]);
        assert_eq!((view.summary.free_gpus, view.nodes[0].free_gpus), (1, 1));
    }

    #[test]
    fn the_query_tags_every_fault_and_keeps_xids_recent() {
        let q = promql("600s", &|m: &str| m.to_owned(), false);
        for fault in [XID, ECC_UNCORRECTED, ROW_REMAP_FAILED, ROW_REMAP_PENDING, RETIREMENT_PENDING, CLOCK_EVENT] {
            assert!(q.contains(&format!("\"fault\", \"{fault}\"")), "{fault}: {q}");
        }
        assert!(q.contains("changes(DCGM_FI_DEV_XID_ERRORS[600s])"), "{q}");
        let now = promql("600s", &|m: &str| format!("{m}{{instance=\"a:1\"}}"), true);
        assert!(now.contains("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{instance=\"a:1\"} > 0"), "{now}");
        assert!(!now.contains("last_over_time(DCGM_FI_DEV_ECC"), "instant: no look-back: {now}");
    }
}
