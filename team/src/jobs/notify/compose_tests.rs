use shared::jobs::{EnergyTerms, Job, JobFigures, Outcome, Runtime, Thresholds};

use super::*;

const GIB_U: u64 = 1 << 30;

fn report(id: u64, owner: &str, idle_s: f64) -> JobReport {
    let job = Job {
        id,
        key: format!("process:{id}"),
        name: "python3 <train>".into(),
        owner: owner.into(),
        runtime: Runtime::Process,
        gpus: vec![0, 1],
        started_ms: 1_000,
        watched_from_ms: 1_000,
        last_seen_ms: 7_201_000,
        ended_ms: Some(7_201_000),
        outcome: Outcome::Ended,
        figures: JobFigures {
            held_s: 14_400.0,
            gpu_s: 14_400.0,
            idle_s,
            activity_s: 14_400.0,
            sm_active_mean: Some(0.03),
            sm_active_p95: Some(0.09),
            tensor_active_mean: Some(0.0),
            dram_active_mean: Some(0.02),
            memory_peak_bytes: 9 * GIB_U,
            memory_capacity_bytes: 80 * GIB_U,
            memory_mean_bytes: 8.0 * GIB_U as f64,
            energy_j: 3.6e6,
            bf16_capable: true,
            ..JobFigures::default()
        },
        series: Vec::new(),
        pids: vec![42],
    };
    let energy = EnergyTerms { price_per_kwh: Some(0.3), currency: "EUR".into(), carbon_g_per_kwh: Some(400.0) };
    JobReport::new(job, &Thresholds::default(), &energy)
}

fn origin(simulated: bool) -> Origin {
    Origin { host: "gpu1".into(), page: Some("https://gpu1.example.org/".into()), simulated }
}

#[test]
fn a_notice_says_what_was_poor_with_its_figures_and_where_to_look() {
    let r = report(42, "ana", 10_000.0);
    assert_eq!(r.grade, Grade::Poor);
    let m = notice(&origin(false), &r);
    assert_eq!((m.kind, m.owner.as_str()), (Kind::JobNotice, "ana"));
    assert!(m.subject.starts_with("gpudash on gpu1: job 42 (python3 <train>) ended: "), "{}", m.subject);
    assert!(m.text.contains(
        "Your job 42 \"python3 <train>\" (process, GPU 0, 1) on gpu1 ended at 1970-01-01 02:00 UTC after 2h."
    ));
    for verdict in r.verdicts.iter().filter(|v| v.grade == Grade::Poor) {
        assert!(m.text.contains(&verdict.words), "{} missing from {}", verdict.words, m.text);
    }
    assert!(m.text.contains("held 4.0 GPU-hours, 2.8 GPU-hours of it idle (69%)"), "{}", m.text);
    assert!(m.text.contains("SM activity 3% (p95 9%), tensor 0%, DRAM 2%"));
    assert!(m.text.contains("memory peak 9.0 GiB of 80 GiB"));
    assert!(m.text.contains("energy 1.000 kWh, 0.30 EUR, 0.40 kg CO2"), "{}", m.text);
    assert!(m.text.contains("See it: https://gpu1.example.org/#jobs?job=42"));
    assert!(m.text.contains("switch it off on the Jobs tab"));
    assert!(!m.text.contains("simulated"));
    assert_eq!(m.detail["id"], 42);
}

#[test]
fn simulated_gpus_are_said_so_and_no_link_without_a_public_url() {
    let m = notice(&Origin { page: None, ..origin(true) }, &report(7, "ana", 10_000.0));
    assert!(m.subject.ends_with("[simulated GPUs]"));
    assert!(m.text.contains("simulated GPUs"));
    assert!(!m.text.contains("See it"));
}

#[test]
fn a_digest_sums_the_period_and_names_the_worst_jobs_first() {
    let mut reports: Vec<JobReport> = (1..=12).map(|id| report(id, "ana", 10_000.0)).collect();
    reports[4].job.figures.held_s = 90_000.0;
    reports.push(report(13, "ana", 0.0));
    let summary = DigestSummary {
        from_ms: 0,
        to_ms: 86_400_000,
        jobs: reports.len(),
        held_gpu_hours: 52.0,
        idle_gpu_hours: 33.3,
        energy_kwh: 13.0,
        poor: 12,
        hint: 1,
        good: 0,
        unjudged: 0,
        held_back: 3,
    };
    let m = digest(&origin(false), "ana b", &summary, &reports);
    assert_eq!(m.kind, Kind::JobDigest);
    assert_eq!(m.subject, "gpudash on gpu1: your 13 jobs from 1970-01-01 00:00 UTC to 1970-01-02 00:00 UTC");
    assert!(m.text.contains("- 13 jobs ended: 12 poor, 1 with a hint, 0 good, 0 too short to judge"), "{}", m.text);
    assert!(m.text.contains("- 52 GPU-hours held, 33 GPU-hours of it idle (64%)"));
    assert!(m.text.contains("- 3 end-of-job notices were held back"));
    let first = m.text.find("- job 5 ").expect("the longest job is named");
    assert!(first < m.text.find("- job 1 ").unwrap(), "most GPU time first");
    let poor = reports.iter().filter(|r| r.grade == Grade::Poor).count();
    assert!(poor > DIGEST_NAMED);
    assert!(m.text.contains(&format!("- and {} more", poor - DIGEST_NAMED)), "{poor} poor, {DIGEST_NAMED} named");
    assert!(m.text.contains("#jobs?owner=ana%20b"));
    assert_eq!(m.detail["held_back"], 3);
}

#[test]
fn each_webhook_format_carries_the_message() {
    let m = notice(&origin(true), &report(42, "ana", 10_000.0));
    let generic = payload(WebhookFormat::Generic, &origin(true), &m);
    let body: serde_json::Value = serde_json::from_str(&generic.body).unwrap();
    assert_eq!((body["kind"].as_str(), body["owner"].as_str()), (Some("job_notice"), Some("ana")));
    assert_eq!((body["job"]["id"].as_u64(), body["simulated"].as_bool()), (Some(42), Some(true)));
    assert_eq!(body["job"]["grade"], "poor");
    let slack = payload(WebhookFormat::Slack, &origin(true), &m);
    let text = serde_json::from_str::<serde_json::Value>(&slack.body).unwrap()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("python3 &lt;train&gt;") && !text.contains("<train>"), "{text}");
    let ntfy = payload(WebhookFormat::Ntfy, &origin(false), &m);
    let title = &ntfy.headers.iter().find(|(n, _)| *n == "Title").unwrap().1;
    assert!(title.chars().all(|c| (' '..='~').contains(&c)));
    assert!(ntfy.headers.contains(&("Tags", "gpudash,job_notice".to_owned())));
    assert_eq!(ntfy.body, m.text);
}
