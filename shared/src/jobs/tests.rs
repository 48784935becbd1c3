use super::*;
use crate::workload::{Container, Pod, SlurmJob};

const GIB_U: u64 = 1 << 30;

fn job(figures: JobFigures) -> Job {
    Job {
        id: 7,
        key: "process:42".into(),
        name: "python3 (group 42)".into(),
        owner: "ana".into(),
        runtime: Runtime::Process,
        gpus: vec![0, 1, 2, 3],
        started_ms: 0,
        watched_from_ms: 0,
        last_seen_ms: 6 * 3_600_000,
        ended_ms: Some(6 * 3_600_000),
        outcome: Outcome::Ended,
        figures,
        series: Vec::new(),
        pids: vec![42],
    }
}

/// Four GPUs for six hours, busy, half their memory, tensor cores used.
fn busy() -> JobFigures {
    let held = 4.0 * 6.0 * 3600.0;
    JobFigures {
        held_s: held,
        gpu_s: held,
        activity_s: held,
        sm_active_mean: Some(0.8),
        sm_active_p95: Some(0.95),
        tensor_active_mean: Some(0.4),
        dram_active_mean: Some(0.3),
        memory_peak_bytes: 60 * GIB_U,
        memory_capacity_bytes: 80 * GIB_U,
        memory_mean_bytes: 50.0 * GIB_U as f64,
        energy_j: 3.6e6 * 10.0,
        bf16_capable: true,
        ..JobFigures::default()
    }
}

fn rules(job: &Job) -> Vec<String> {
    verdicts(job, &Thresholds::default()).into_iter().map(|v| v.rule).collect()
}

#[test]
fn a_busy_job_is_busy_and_nothing_else() {
    let v = verdicts(&job(busy()), &Thresholds::default());
    assert_eq!(v.iter().map(|v| v.rule.as_str()).collect::<Vec<_>>(), ["busy"]);
    assert_eq!(v[0].words, "kept 4 GPUs busy for 6h at 80% SM activity");
    assert_eq!(worst(&v), Grade::Good);
    let part_idle = JobFigures { idle_s: 0.37 * busy().held_s, ..busy() };
    assert_eq!(
        verdicts(&job(part_idle), &Thresholds::default())[0].words,
        "kept 4 GPUs busy for 6h at 80% SM activity, idle 37% of the time"
    );
}

#[test]
fn an_idle_job_says_how_many_gpu_hours_were_idle() {
    let f = JobFigures { idle_s: 22.0 * 3600.0, sm_active_mean: Some(0.03), ..busy() };
    let v = verdicts(&job(f), &Thresholds::default());
    assert_eq!(v[0].rule, "idle");
    assert_eq!(v[0].words, "held 4 GPUs for 6h at 3% SM activity: 22 GPU-hours idle");
    assert_eq!(v[0].grade, Grade::Poor);
    // Just under the share, it is low activity instead.
    let f = JobFigures { idle_s: 0.49 * busy().held_s, sm_active_mean: Some(0.03), ..busy() };
    assert_eq!(rules(&job(f)), ["low_sm_activity"]);
}

#[test]
fn low_sm_activity_is_poor_and_says_when_the_figure_is_a_share() {
    let f = JobFigures { sm_active_mean: Some(0.12), shared_s: 3600.0, ..busy() };
    let v = verdicts(&job(f), &Thresholds::default());
    assert_eq!(v[0].rule, "low_sm_activity");
    assert!(v[0].words.contains("12% SM activity (its share of a shared GPU"), "{}", v[0].words);
    let f = JobFigures { sm_active_mean: Some(0.15), ..busy() };
    assert_eq!(rules(&job(f)), ["busy"], "at the limit it is not low");
}

#[test]
fn tensor_cores_unused_only_on_bf16_capable_gpus_that_work() {
    let f = JobFigures { tensor_active_mean: Some(0.002), ..busy() };
    assert_eq!(rules(&job(f.clone())), ["tensor_unused", "busy"]);
    assert!(
        verdicts(&job(f.clone()), &Thresholds::default())[0]
            .words
            .starts_with("tensor cores unused on bf16-capable GPUs")
    );
    assert_eq!(rules(&job(JobFigures { bf16_capable: false, ..f })), ["busy"], "a V100 has no bf16");
    assert_eq!(rules(&job(JobFigures { sm_active_mean: Some(0.05), ..f })), ["low_sm_activity"], "idle SMs say more");
}

#[test]
fn a_small_memory_peak_suggests_a_smaller_gpu() {
    let f = JobFigures { memory_peak_bytes: 9 * GIB_U, ..busy() };
    let v = verdicts(&job(f), &Thresholds::default());
    assert_eq!(v[0].rule, "memory_oversized");
    assert_eq!(v[0].words, "memory peak 9.0 GiB of 80 GiB: a smaller GPU or a MIG slice would do");
    assert_eq!(rules(&job(JobFigures { memory_peak_bytes: 20 * GIB_U, ..busy() })), ["busy"], "a quarter is not small");
}

#[test]
fn an_oom_is_told_even_for_a_short_job_and_short_jobs_are_not_judged() {
    let short = JobFigures { held_s: 60.0, idle_s: 60.0, ..busy() };
    assert!(rules(&job(short.clone())).is_empty());
    assert_eq!(
        JobReport::new(job(short.clone()), &Thresholds::default(), &EnergyTerms::default()).grade,
        Grade::Unjudged
    );
    let mut oom = job(short);
    oom.outcome = Outcome::Oom;
    assert_eq!(rules(&oom), ["oom"]);
    assert!(
        verdicts(&oom, &Thresholds::default())[0]
            .words
            .starts_with("ran out of GPU memory within 6h (peak 60 GiB of 80 GiB)")
    );
}

#[test]
fn a_job_is_its_slurm_job_pod_container_or_process_group() {
    let mut p = crate::testing::process(0, 4242);
    p.name = Some("python3".into());
    assert_eq!(identity(&p).key, "process:4242", "no group known: the PID");
    p.group = Some(4000);
    assert_eq!(
        identity(&p),
        JobIdentity { key: "process:4000".into(), runtime: Runtime::Process, name: "python3 (group 4000)".into() }
    );
    p.workload = Some(Workload {
        container: Some(Container { id: "abc123".into(), name: Some("trainer".into()), ..Container::default() }),
        ..Workload::default()
    });
    assert_eq!((identity(&p).key, identity(&p).name), ("container:abc123".to_owned(), "container trainer".to_owned()));
    p.workload.as_mut().unwrap().pod =
        Some(Pod { namespace: Some("ml".into()), name: Some("bert-0".into()), ..Pod::default() });
    assert_eq!(identity(&p).runtime, Runtime::Pod);
    let job = SlurmJob { id: "99".into(), user: Some("bo".into()), verified: false, ..SlurmJob::default() };
    p.workload.as_mut().unwrap().job = Some(job);
    assert_eq!(identity(&p).runtime, Runtime::Pod, "an unverified job is what the environment claims");
    p.workload.as_mut().unwrap().job.as_mut().unwrap().verified = true;
    assert_eq!(identity(&p).key, "slurm:99");
}

#[test]
fn queries_are_checked_and_say_what_is_allowed() {
    let parse = |pairs: &[(&str, &str)]| {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        JobsQuery::parse(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    };
    let q = parse(&[("owner", "ana b"), ("runtime", "slurm"), ("state", "ended"), ("before", "9"), ("limit", "5")])
        .unwrap();
    assert_eq!(q.query_string(), "limit=5&owner=ana%20b&runtime=slurm&state=ended&before=9");
    assert_eq!(parse(&[]).unwrap().limit, DEFAULT_LIMIT);
    assert!(parse(&[("limit", "0")]).unwrap_err().contains("from 1 to 1000"));
    assert!(parse(&[("limit", "1001")]).is_err());
    assert!(parse(&[("runtime", "vm")]).unwrap_err().contains("slurm, pod, container, process"));
    assert!(parse(&[("state", "done")]).unwrap_err().contains("all, running, ended"));
    assert!(parse(&[("before", "-1")]).unwrap_err().contains("job id"));
}

#[test]
fn running_jobs_are_matched_by_owner_runtime_state_and_page() {
    let mut j = job(busy());
    let q = |owner: Option<&str>, running: Option<bool>, before: Option<u64>| JobsQuery {
        owner: owner.map(str::to_owned),
        running,
        before,
        ..JobsQuery::default()
    };
    assert!(q(Some("ana"), Some(false), Some(8)).matches(&j));
    assert!(!q(Some("bo"), None, None).matches(&j));
    assert!(!q(None, Some(true), None).matches(&j));
    assert!(!q(None, None, Some(7)).matches(&j), "before is exclusive");
    j.ended_ms = None;
    assert!(q(None, Some(true), None).matches(&j));
}

#[test]
fn gpu_time_reads_in_its_unit_and_number() {
    assert_eq!(gpu_hours(22.0 * 3600.0), "22 GPU-hours");
    assert_eq!(gpu_hours(1.5 * 3600.0), "1.5 GPU-hours");
    assert_eq!(gpu_hours(70.0), "1 GPU-minute");
    assert_eq!(gpu_hours(40.0 * 60.0), "40 GPU-minutes");
    assert_eq!(gpu_hours(1.2), "1 GPU-second");
    assert_eq!(gpu_hours(0.2), "0 GPU-seconds");
}

#[test]
fn energy_terms_parse_and_price_a_job() {
    assert_eq!(EnergyTerms::parse_price("0.30 EUR").unwrap(), (0.30, "EUR".to_owned()));
    assert_eq!(EnergyTerms::parse_price("0.3").unwrap(), (0.3, String::new()));
    assert!(EnergyTerms::parse_price("0").unwrap_err().contains("above 0"));
    assert!(EnergyTerms::parse_price("0.3 euros").unwrap_err().contains("three capital letters"));
    assert!(EnergyTerms::parse_carbon("-1").is_err());
    let terms = EnergyTerms { price_per_kwh: Some(0.3), currency: "EUR".into(), carbon_g_per_kwh: Some(400.0) };
    let report = JobReport::new(job(busy()), &Thresholds::default(), &terms);
    assert_eq!((report.energy_kwh, report.cost.as_deref(), report.co2_kg), (10.0, Some("3.00 EUR"), Some(4.0)));
    let row = csv_row(&report);
    assert_eq!(row.split(',').count(), CSV_HEADER.split(',').count(), "{row}");
}

#[test]
fn the_tensor_and_length_limits_hold_on_both_sides() {
    let at = |t: f64| rules(&job(JobFigures { tensor_active_mean: Some(t), ..busy() }));
    assert_eq!(at(0.0099), ["tensor_unused", "busy"]);
    assert_eq!(at(0.01), ["busy"], "at the limit tensor cores count as used");
    let held = |s: f64| rules(&job(JobFigures { held_s: s, ..busy() }));
    assert_eq!(held(300.0), ["busy"], "five minutes of GPU time is judged");
    assert!(held(299.9).is_empty(), "less is too short");
}
