//! Usage accounting: who used how much GPU time, memory and energy. The rules are pure
//! arithmetic in [`account`]; [`engine`] runs them on its own thread over the telemetry hub's
//! process readings and flushes per-minute sums to `store::usage`; [`rows`] shapes stored sums
//! into the rows of `GET /api/usage`. The rules are written down in docs/ACCOUNTING.md.

pub mod account;
pub mod engine;

use std::collections::BTreeMap;

use shared::usage::{HIDDEN_USER, UsageQuery, UsageRow, date, day_of};

use store::usage::{Bucket, Sums};

const HOUR_S: f64 = 3600.0;
const KWH_J: f64 = 3.6e6;

/// A row's keys, in row order: day, user, GPU, workload (each `None` when the group has none).
type RowKey = (Option<u64>, Option<String>, Option<u32>, Option<String>);

/// Rows of `query`'s group from per-day buckets (days in its zone); with `hide_users` every user
/// is [`HIDDEN_USER`] (an anonymous viewer of a server with tokens). Largest GPU-hours first; rows
/// with a day by day.
pub fn rows(buckets: &[Bucket], query: UsageQuery, hide_users: bool) -> Vec<UsageRow> {
    let group = query.group;
    let mut groups: BTreeMap<RowKey, Sums> = BTreeMap::new();
    for bucket in buckets {
        let user = group.has_user().then(|| if hide_users { HIDDEN_USER.to_owned() } else { bucket.user.clone() });
        let day = group.has_day().then(|| day_of(bucket.start, query.utc_offset));
        let gpu = group.has_gpu().then_some(bucket.device);
        // A workload's name can name a person (a container "ana-train"): hidden like users.
        let workload = group.workload_part().and_then(|part| shared::workload::key_part(&bucket.workload, part));
        let workload = workload.map(|w| if hide_users { HIDDEN_USER.to_owned() } else { w.to_owned() });
        let sums = groups.entry((day, user, gpu, workload)).or_default();
        sums.gpu_s += bucket.sums.gpu_s;
        sums.memory_gib_s += bucket.sums.memory_gib_s;
        sums.idle_gib_s += bucket.sums.idle_gib_s;
        sums.energy_j += bucket.sums.energy_j;
    }
    let mut rows: Vec<UsageRow> = groups
        .into_iter()
        .map(|((day, user, gpu, workload), s)| UsageRow {
            user,
            gpu,
            day,
            workload,
            gpu_hours: s.gpu_s / HOUR_S,
            memory_gib_hours: s.memory_gib_s / HOUR_S,
            idle_gib_hours: s.idle_gib_s / HOUR_S,
            energy_kwh: s.energy_j / KWH_J,
        })
        .collect();
    if !group.has_day() {
        rows.sort_by(|a, b| {
            b.gpu_hours
                .total_cmp(&a.gpu_hours)
                .then_with(|| a.user.cmp(&b.user))
                .then(a.gpu.cmp(&b.gpu))
                .then_with(|| a.workload.cmp(&b.workload))
        });
    }
    rows
}

/// `rows` as CSV with a header: the group's keys, then the sums (days as `YYYY-MM-DD` in the
/// query's zone).
pub fn csv(rows: &[UsageRow], query: UsageQuery) -> String {
    let group = query.group;
    let mut header: Vec<&str> = Vec::new();
    if group.has_day() {
        header.push("day");
    }
    if group.has_user() {
        header.push("user");
    }
    if group.has_gpu() {
        header.push("gpu");
    }
    if group.workload_part().is_some() {
        header.push(group.name());
    }
    header.extend(["gpu_hours", "memory_gib_hours", "idle_gib_hours", "energy_kwh"]);
    let mut out = header.join(",") + "\n";
    for row in rows {
        let mut cells = Vec::new();
        if let Some(day) = row.day.filter(|_| group.has_day()) {
            cells.push(date(day, query.utc_offset));
        }
        if let Some(user) = row.user.as_ref().filter(|_| group.has_user()) {
            cells.push(csv_cell(user));
        }
        if let Some(gpu) = row.gpu.filter(|_| group.has_gpu()) {
            cells.push(gpu.to_string());
        }
        if group.workload_part().is_some() {
            cells.push(row.workload.as_deref().map(csv_cell).unwrap_or_default());
        }
        for value in [row.gpu_hours, row.memory_gib_hours, row.idle_gib_hours, row.energy_kwh] {
            cells.push(format!("{value:.6}"));
        }
        out += &(cells.join(",") + "\n");
    }
    out
}

/// A user or workload name as one CSV cell ([`shared::csv::cell`]: quoted, and guarded against formulas).
fn csv_cell(text: &str) -> String {
    shared::csv::cell(text).into_owned()
}

#[cfg(test)]
mod tests {
    use shared::usage::{DAY_MS, UsageGroup};

    use super::*;

    fn by(group: UsageGroup) -> UsageQuery {
        UsageQuery { from: 0, to: DAY_MS, group, utc_offset: 0 }
    }

    fn bucket(user: &str, device: u32, day: u64, gpu_s: f64) -> Bucket {
        Bucket {
            user: user.to_owned(),
            device,
            workload: String::new(),
            start: day * DAY_MS,
            sums: Sums { gpu_s, energy_j: 3.6e6, ..Sums::default() },
        }
    }

    #[test]
    fn rows_group_and_hide_users_for_anonymous_viewers() {
        let buckets = [bucket("ana", 0, 1, 3600.0), bucket("bo", 1, 1, 7200.0), bucket("ana", 1, 2, 3600.0)];
        let by_user = rows(&buckets, by(UsageGroup::User), false);
        assert_eq!(by_user.len(), 2);
        assert_eq!((by_user[0].user.as_deref(), by_user[0].gpu_hours), (Some("ana"), 2.0));
        assert_eq!(by_user[1].energy_kwh, 1.0);
        assert_eq!(by_user[0].gpu, None);
        let by_gpu = rows(&buckets, by(UsageGroup::Gpu), false);
        assert_eq!((by_gpu[0].gpu, by_gpu[0].gpu_hours, by_gpu[0].user.as_deref()), (Some(1), 3.0, None));
        let by_day = rows(&buckets, by(UsageGroup::Day), false);
        assert_eq!(by_day.iter().map(|r| r.day.unwrap() / DAY_MS).collect::<Vec<_>>(), [1, 2]);
        let hidden = rows(&buckets, by(UsageGroup::User), true);
        assert_eq!(hidden.len(), 1);
        assert_eq!((hidden[0].user.as_deref(), hidden[0].gpu_hours), (Some(HIDDEN_USER), 4.0));
        assert_eq!(rows(&buckets, by(UsageGroup::UserGpu), false).len(), 3);
    }

    #[test]
    fn rows_group_by_container_pod_namespace_and_job() {
        let mut in_pod = bucket("ml", 0, 1, 3600.0);
        in_pod.workload = "container=train;pod=ml/bert-0;namespace=ml".to_owned();
        let mut in_job = bucket("ana", 1, 1, 7200.0);
        in_job.workload = "job=4242".to_owned();
        let buckets = [in_pod, in_job, bucket("bo", 0, 1, 1800.0)];
        let names =
            |group| rows(&buckets, by(group), false).into_iter().map(|r| (r.workload, r.gpu_hours)).collect::<Vec<_>>();
        assert_eq!(names(UsageGroup::Job), [(Some("4242".to_owned()), 2.0), (None, 1.5)]);
        assert_eq!(names(UsageGroup::Pod), [(None, 2.5), (Some("ml/bert-0".to_owned()), 1.0)]);
        assert_eq!(names(UsageGroup::Namespace)[1], (Some("ml".to_owned()), 1.0));
        assert_eq!(names(UsageGroup::Container)[1], (Some("train".to_owned()), 1.0));
        let hidden = rows(&buckets, by(UsageGroup::Job), true);
        assert_eq!(hidden[0].workload.as_deref(), Some(HIDDEN_USER), "a workload's name can name a person");
        let text = csv(&rows(&buckets, by(UsageGroup::Job), false), by(UsageGroup::Job));
        assert_eq!(text.lines().next(), Some("job,gpu_hours,memory_gib_hours,idle_gib_hours,energy_kwh"));
        assert!(text.lines().any(|l| l.starts_with("4242,2.000000")), "{text}");
    }

    #[test]
    fn csv_has_a_header_and_safe_cells() {
        let buckets = [bucket("=cmd,x", 0, 20_423, 3600.0)];
        let text = csv(&rows(&buckets, by(UsageGroup::UserDay), false), by(UsageGroup::UserDay));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "day,user,gpu_hours,memory_gib_hours,idle_gib_hours,energy_kwh");
        assert_eq!(lines[1], "2025-12-01,\"'=cmd,x\",1.000000,0.000000,0.000000,1.000000");
        // The same day's start, read in UTC−5, is the evening before.
        let west = UsageQuery { utc_offset: -300, ..by(UsageGroup::Day) };
        assert!(csv(&rows(&buckets, west, false), west).lines().nth(1).unwrap().starts_with("2025-11-30,"));
    }
}
