use super::*;
use shared::workload::{Container, Workload};

const GIB: u64 = 1 << 30;
const H100: GpuFacts = GpuFacts { index: 0, memory_total: 80 * GIB, bf16: true };

fn gpus(n: u32) -> Vec<GpuFacts> {
    (0..n).map(|index| GpuFacts { index, ..H100 }).collect()
}

fn process(device: u32, pid: u32, user: &str, gib: u64, sm: Option<u32>) -> GpuProcess {
    GpuProcess {
        used_memory: Some(gib * GIB),
        sm_util: sm,
        user: Some(user.to_owned()),
        name: Some("python3".to_owned()),
        started_ms: Some(500),
        group: Some(pid),
        ..shared::testing::process(device, pid)
    }
}

fn in_container(mut p: GpuProcess, name: &str) -> GpuProcess {
    p.workload = Some(Workload {
        container: Some(Container { id: format!("id-{name}"), name: Some(name.into()), ..Container::default() }),
        ..Workload::default()
    });
    p.owner = shared::workload::owner_of(p.user.as_deref(), p.workload.as_ref(), shared::workload::DEFAULT_OWNER_LABEL);
    p
}

/// A GPM window at `sm` and `tensor` (shares; GPM's figures are percent).
fn window(at_ms: u64, sm: f64, tensor: f64) -> Activity {
    Activity {
        timestamp_ms: at_ms,
        window_ms: 1000,
        sm_active: Some(sm * 100.0),
        tensor_active: Some(tensor * 100.0),
        dram_active: Some(10.0),
        ..Activity::default()
    }
}

/// One reading per second of each GPU's processes (`on(gpu, second)`), with a GPM window at
/// `sm` on every GPU; returns every change.
fn run(
    tracker: &mut Tracker,
    seconds: std::ops::Range<u64>,
    on: impl Fn(u32, u64) -> Vec<GpuProcess>,
    sm: f64,
    n_gpus: u32,
) -> Changes {
    let mut all = Changes::default();
    for s in seconds {
        let at = s * 1000;
        let lists: Vec<Vec<GpuProcess>> = (0..n_gpus).map(|g| on(g, s)).collect();
        for g in 0..n_gpus {
            tracker.window(g, &window(at, sm, sm / 2.0));
        }
        let readings: Vec<Reading<'_>> = lists
            .iter()
            .enumerate()
            .map(|(g, list)| Reading {
                device: g as u32,
                at_ms: at,
                energy_mj: Some(s * 300_000),
                gpu_util: Some(if list.iter().any(|p| p.sm_util.unwrap_or(0) > 0) { 90 } else { 0 }),
                processes: list.iter().collect(),
            })
            .collect();
        let changes = tracker.observe(&readings);
        all.started.extend(changes.started);
        all.ended.extend(changes.ended);
    }
    all
}

#[test]
fn a_job_starts_and_ends_with_its_owner_and_figures() {
    let mut t = Tracker::new(1000, &gpus(1), 5);
    let busy = |_, s| if (1..=10).contains(&s) { vec![process(0, 42, "ana", 4, Some(90))] } else { vec![] };
    let changes = run(&mut t, 0..14, busy, 0.8, 1);
    assert_eq!(changes.started.len(), 1);
    assert_eq!(changes.ended.len(), 1, "{changes:?}");
    let job = &changes.ended[0];
    assert_eq!((job.id, job.owner.as_str(), job.runtime), (5, "ana", jobs::Runtime::Process));
    assert_eq!((job.started_ms, job.watched_from_ms, job.ended_ms), (500, 1000, Some(10_000)));
    assert_eq!((job.outcome, job.gpus.as_slice()), (Outcome::Ended, &[0][..]));
    let f = &job.figures;
    // Charged from its start (0.5 s) to its last reading (10 s); the first interval is 0 to 1 s.
    assert_eq!((f.held_s, f.gpu_s, f.idle_s, f.shared_s), (9.5, 9.5, 0.0, 0.0));
    assert!((f.sm_active_mean.unwrap() - 0.8).abs() < 1e-9, "{f:?}");
    assert_eq!(f.sm_active_p95, Some(0.8));
    assert!((f.tensor_active_mean.unwrap() - 0.4).abs() < 1e-9);
    assert_eq!((f.memory_peak_bytes, f.memory_capacity_bytes), (4 * GIB, 80 * GIB));
    assert!((f.memory_mean_bytes - (4 * GIB) as f64).abs() < 1.0);
    assert!((f.energy_j - 10.0 * 300.0).abs() < 1e-6, "every interval it ran in: {}", f.energy_j);
    assert!(f.bf16_capable);
    assert_eq!(job.series.len(), 1, "nine seconds fit one 10 s step");
    assert_eq!(job.series[0].memory_bytes, 4 * GIB);
    assert!(t.running(false).is_empty());
}

#[test]
fn a_process_that_moves_between_gpus_stays_one_job() {
    let mut t = Tracker::new(1000, &gpus(2), 1);
    let moving = |g, s| match (g, s) {
        (0, 0..5) | (1, 5..10) => vec![process(g, 42, "ana", 2, Some(50))],
        _ => vec![],
    };
    let changes = run(&mut t, 0..12, moving, 0.5, 2);
    assert_eq!((changes.started.len(), changes.ended.len()), (1, 1), "{changes:?}");
    assert_eq!(changes.ended[0].gpus, [0, 1]);
    // From its start (0.5 s) to 4 s on GPU 0, and 4 s to 9 s on GPU 1.
    assert_eq!(changes.ended[0].figures.held_s, 8.5);
}

#[test]
fn a_job_restarted_in_the_same_container_is_a_new_job_but_one_missed_listing_is_not() {
    let mut t = Tracker::new(1000, &gpus(1), 1);
    // Listed at 0–3, missed at 4, listed at 5–7, gone at 8–10, back at 11–13.
    let listed = |s: u64| s < 8 && s != 4 || (11..14).contains(&s);
    let on = |_, s| {
        if listed(s) {
            vec![in_container(process(0, 100 + s as u32 / 5, "root", 1, Some(30)), "trainer")]
        } else {
            vec![]
        }
    };
    let changes = run(&mut t, 0..17, on, 0.3, 1);
    let ids: Vec<u64> = changes.ended.iter().map(|j| j.id).collect();
    assert_eq!(ids, [1, 2], "second 4 missed once: one job; 8 to 10 gone: a new one");
    assert!(changes.ended.iter().all(|j| j.key == "container:id-trainer" && j.owner == "container trainer"));
    assert_eq!(changes.ended[0].ended_ms, Some(7_000));
}

#[test]
fn a_shared_gpu_splits_activity_by_sm_share_and_says_so() {
    let mut t = Tracker::new(1000, &gpus(1), 1);
    let two = |_, s| {
        if s < 6 { vec![process(0, 1, "ana", 1, Some(60)), process(0, 2, "bo", 1, Some(20))] } else { vec![] }
    };
    run(&mut t, 0..5, two, 0.8, 1);
    let running = t.running(false);
    let of = |owner: &str| running.iter().find(|j| j.owner == owner).unwrap().figures.clone();
    let (ana, bo) = (of("ana"), of("bo"));
    assert!((ana.sm_active_mean.unwrap() - 0.6).abs() < 1e-9, "0.8 × 0.75: {ana:?}");
    assert!((bo.sm_active_mean.unwrap() - 0.2).abs() < 1e-9, "0.8 × 0.25: {bo:?}");
    assert_eq!((ana.held_s, ana.shared_s, ana.gpu_s), (3.5, 3.5, 0.75 * 3.5));
}

#[test]
fn a_job_holding_memory_on_a_quiet_gpu_is_idle_and_a_marked_one_ends_as_marked() {
    let mut t = Tracker::new(1000, &gpus(1), 1);
    let idle = |_, s| if s < 6 { vec![process(0, 7, "cy", 20, None)] } else { vec![] };
    assert!(!t.mark(99, Outcome::Oom, 1_000), "no job has PID 99");
    let first = run(&mut t, 1..3, idle, 0.0, 1);
    assert_eq!(first.started.len(), 1);
    assert!(!t.mark(7, Outcome::Oom, 100), "an OOM from before the job started (a reused PID)");
    assert!(t.mark(7, Outcome::Oom, 2_500));
    assert!(t.mark(7, Outcome::Killed, 2_600), "the OOM stays");
    let changes = run(&mut t, 3..9, idle, 0.0, 1);
    let job = &changes.ended[0];
    // The first reading (1 s) is the baseline: 1 s to 5 s charged.
    assert_eq!((job.figures.idle_s, job.figures.held_s), (4.0, 4.0));
    assert_eq!(job.outcome, Outcome::Oom);
    assert_eq!(t.recent_ended().map(|j| j.id).collect::<Vec<_>>(), [job.id], "kept while its end is written");
}

#[test]
fn unknown_memory_and_utilization_are_not_zero() {
    let mut t = Tracker::new(1000, &gpus(1), 1);
    let blind = |_, s| {
        let mut p = process(0, 9, "ana", 0, None);
        p.used_memory = None;
        if s < 5 { vec![p] } else { vec![] }
    };
    // No utilization gauge either (`gpu_util: None` under MIG): nothing says the GPU was idle.
    for s in 0..8u64 {
        let list = blind(0, s);
        let reading =
            Reading { device: 0, at_ms: s * 1000, energy_mj: None, gpu_util: None, processes: list.iter().collect() };
        t.observe(&[reading]);
    }
    let job = t.recent_ended().next().unwrap();
    assert_eq!((job.figures.memory_peak_bytes, job.figures.memory_capacity_bytes), (0, 0), "no peak from no figure");
    assert_eq!(job.figures.idle_s, 0.0, "no gauge, no idle: {:?}", job.figures);
    assert!(job.figures.held_s > 0.0);
}

#[test]
fn readings_further_apart_than_a_step_merge_by_time() {
    let mut t = Tracker::new(15_000, &gpus(1), 1);
    let busy = |_, _| vec![process(0, 42, "ana", 4, Some(90))];
    // A reading every 15 s: the 10 s steps hold one reading each, some buckets empty.
    let mut changes = Changes::default();
    for r in 0..(jobs::MAX_POINTS as u64 * 2) {
        let list = busy(0, r);
        t.window(0, &window(r * 15_000, 0.5, 0.25));
        let reading = Reading {
            device: 0,
            at_ms: r * 15_000,
            energy_mj: None,
            gpu_util: Some(90),
            processes: list.iter().collect(),
        };
        changes.ended.extend(t.observe(&[reading]).ended);
    }
    let job = &t.running(true)[0];
    let steps: Vec<u64> = job.series.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
    let step = steps.iter().copied().min().unwrap();
    assert!(steps.iter().all(|s| s % step == 0), "every point on its bucket: {steps:?}");
    assert!(job.series.iter().all(|p| p.at_ms % step == 0), "bucket starts: {:?}", &job.series[..4]);
}

#[test]
fn a_long_job_keeps_a_bounded_series() {
    let mut t = Tracker::new(1000, &gpus(1), 1);
    let busy = |_, _| vec![process(0, 42, "ana", 4, Some(90))];
    let seconds = (jobs::MAX_POINTS as u64 + 50) * FIRST_STEP_MS / 1000;
    run(&mut t, 0..seconds, busy, 0.5, 1);
    let job = &t.running(true)[0];
    assert!(job.series.len() <= jobs::MAX_POINTS && job.series.len() > jobs::MAX_POINTS / 2, "{}", job.series.len());
    let step = job.series[1].at_ms - job.series[0].at_ms;
    assert_eq!(step, 2 * FIRST_STEP_MS);
    assert!(job.series.iter().all(|p| (p.sm_active.unwrap() - 0.5).abs() < 1e-9));
}
