//! The digest's timing and sums.

use super::*;
use shared::jobs::notices::DigestEvery;

const HOUR: u64 = 3_600_000;

fn report(held_s: f64, idle_s: f64, energy_j: f64, grade: Grade) -> JobReport {
    let job = Job {
        id: 1,
        key: "process:1".into(),
        name: "python3".into(),
        owner: "ana".into(),
        runtime: shared::jobs::Runtime::Process,
        gpus: vec![0],
        started_ms: 0,
        watched_from_ms: 0,
        last_seen_ms: 1,
        ended_ms: Some(1),
        outcome: shared::jobs::Outcome::Ended,
        figures: shared::jobs::JobFigures { held_s, idle_s, energy_j, ..Default::default() },
        series: Vec::new(),
        pids: Vec::new(),
    };
    let mut r = JobReport::new(job, &shared::jobs::Thresholds::default(), &shared::jobs::EnergyTerms::default());
    r.grade = grade;
    r
}

#[test]
fn a_summary_adds_the_periods_jobs_and_counts_them_by_grade() {
    let reports = [
        report(7_200.0, 3_600.0, 3.6e6, Grade::Poor),
        report(3_600.0, 0.0, 1.8e6, Grade::Good),
        report(1_800.0, 900.0, 0.0, Grade::Poor),
        report(10.0, 0.0, 0.0, Grade::Unjudged),
    ];
    let s = summarize(5, 9, &reports, 2);
    assert_eq!((s.from_ms, s.to_ms, s.jobs, s.held_back), (5, 9, 4, 2));
    assert!((s.held_gpu_hours - (12_610.0 / 3600.0)).abs() < 1e-9, "{}", s.held_gpu_hours);
    assert!((s.idle_gpu_hours - 1.25).abs() < 1e-9);
    assert!((s.energy_kwh - 1.5).abs() < 1e-9, "{}", s.energy_kwh);
    assert_eq!((s.poor, s.hint, s.good, s.unjudged), (2, 0, 1, 1));
}

#[test]
fn a_digest_is_due_once_per_period_after_its_grace_and_after_a_restart_that_missed_it() {
    let daily = Schedule { every: DigestEvery::Daily, at_minute: 8 * 60, weekday: 0 };
    let end = daily.last_end(100 * DAY_MS).unwrap();
    let grace = GRACE_MS;
    // Never sent (a fresh database, or digests just turned on): nothing for the past period.
    assert_eq!(due(&daily, None, end + HOUR), (None, Some(end)));
    // Sent for the period that just ended: nothing until the next end.
    assert_eq!(due(&daily, Some(end), end + HOUR), (None, Some(end)));
    // The next end: due once its grace has passed, not before.
    let next = end + DAY_MS;
    assert_eq!(due(&daily, Some(end), next + grace - 1), (None, Some(end)));
    assert_eq!(due(&daily, Some(end), next + grace), (Some(next), Some(next)));
    // Down across the next end: sent when it starts again.
    assert_eq!(due(&daily, Some(end), next + 5 * HOUR), (Some(next), Some(next)));
    // Down across two ends: the newest missed period only.
    assert_eq!(due(&daily, Some(end), end + 2 * DAY_MS + HOUR), (Some(end + 2 * DAY_MS), Some(end + 2 * DAY_MS)));
    // Down longer (or digests off a while): no catch-up, the next end is the first.
    assert_eq!(due(&daily, Some(end), end + 3 * DAY_MS + HOUR), (None, Some(end + 3 * DAY_MS)));
    // Off: nothing, and what was sent is kept for when they come back on.
    assert_eq!(due(&Schedule::default(), Some(end), end + 5 * DAY_MS), (None, Some(end)));
}
