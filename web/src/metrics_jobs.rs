//! `/metrics`' job series: one set per **running** job that has held GPUs for
//! `--job-verdict-after`, so the series stay as many as the jobs on the GPUs now (and a test
//! that touches CUDA for a second makes none) (an ended job's series end with it; its report stays in `/api/jobs`). The
//! figures carry only `job` (its id) and `Hostname`; `gpudash_job_info` joins the owner, name and
//! runtime to them, and no device series carries a job label.

use shared::jobs::Job;
use shared::usage::HIDDEN_USER;

use base::prom_text::{Exposition, Kind, escape};

/// One per-job gauge family.
struct JobGauge {
    name: &'static str,
    help: &'static str,
    read: fn(&Job) -> Option<f64>,
}

/// The figures, in the order they are written; documented in docs/METRICS.md.
const GAUGES: [JobGauge; 7] = [
    JobGauge {
        name: "gpudash_job_gpus",
        help: "GPUs a running job has had a process on.",
        read: |j| Some(j.gpus.len() as f64),
    },
    JobGauge {
        name: "gpudash_job_held_gpu_seconds",
        help: "GPU-seconds a running job has held so far (each GPU it has a process on).",
        read: |j| Some(j.figures.held_s),
    },
    JobGauge {
        name: "gpudash_job_idle_ratio",
        help: "Share of a running job's held GPU time its GPUs did nothing.",
        read: |j| Some(j.figures.idle_share()),
    },
    JobGauge {
        name: "gpudash_job_sm_active_ratio",
        help: "A running job's mean SM activity so far (GPM; its SM share of a shared GPU).",
        read: |j| j.figures.sm_active_mean,
    },
    JobGauge {
        name: "gpudash_job_tensor_active_ratio",
        help: "A running job's mean tensor-pipe activity so far (GPM; its SM share of a shared GPU).",
        read: |j| j.figures.tensor_active_mean,
    },
    JobGauge {
        name: "gpudash_job_memory_peak_bytes",
        help: "The most device memory a running job has held on one GPU.",
        read: |j| Some(j.figures.memory_peak_bytes as f64),
    },
    JobGauge {
        name: "gpudash_job_energy_joules",
        help: "GPU energy charged to a running job so far (a shared GPU's split by SM share).",
        read: |j| Some(j.figures.energy_j),
    },
];

/// The job families for `running`; with `names` false owners are hidden and names are runtimes.
pub fn families(hostname: &str, running: &[Job], names: bool) -> String {
    if running.is_empty() {
        return String::new();
    }
    let host = escape(hostname);
    let mut out = Exposition::default();
    let info = running.iter().map(|j| {
        let (owner, name) = if names { (j.owner.as_str(), j.name.as_str()) } else { (HIDDEN_USER, j.runtime.name()) };
        let labels = format!(
            "job=\"{}\",name=\"{}\",owner=\"{}\",runtime=\"{}\",Hostname=\"{host}\"",
            j.id,
            escape(name),
            escape(owner),
            j.runtime.name()
        );
        (labels, 1.0)
    });
    out.family("gpudash_job_info", "A running job: its owner, name and runtime (value 1).", Kind::Gauge, info);
    for gauge in &GAUGES {
        let samples =
            running.iter().filter_map(|j| Some((format!("job=\"{}\",Hostname=\"{host}\"", j.id), (gauge.read)(j)?)));
        out.family(gauge.name, gauge.help, Kind::Gauge, samples);
    }
    out.into_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::jobs::{JobFigures, Outcome, Runtime};

    fn job() -> Job {
        Job {
            id: 12,
            key: "slurm:4242".into(),
            name: "Slurm job 4242".into(),
            owner: "a\"na".into(),
            runtime: Runtime::Slurm,
            gpus: vec![0, 1],
            started_ms: 0,
            watched_from_ms: 0,
            last_seen_ms: 1,
            ended_ms: None,
            outcome: Outcome::Running,
            figures: JobFigures { held_s: 20.0, idle_s: 5.0, sm_active_mean: Some(0.5), ..JobFigures::default() },
            series: Vec::new(),
            pids: vec![1],
        }
    }

    #[test]
    fn running_jobs_are_one_info_series_and_figures_by_id() {
        let text = families("h", &[job()], true);
        assert!(
            text.contains(
                "gpudash_job_info{job=\"12\",name=\"Slurm job 4242\",owner=\"a\\\"na\",runtime=\"slurm\",Hostname=\"h\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("gpudash_job_gpus{job=\"12\",Hostname=\"h\"} 2\n"), "{text}");
        assert!(text.contains("gpudash_job_idle_ratio{job=\"12\",Hostname=\"h\"} 0.25\n"), "{text}");
        assert!(text.contains("gpudash_job_sm_active_ratio{job=\"12\",Hostname=\"h\"} 0.5\n"), "{text}");
        assert!(!text.contains("gpudash_job_tensor_active_ratio{"), "no figure, no sample: {text}");
        let hidden = families("h", &[job()], false);
        assert!(
            hidden.contains("owner=\"(hidden)\"") && !hidden.contains("a\\\"na") && !hidden.contains("4242"),
            "{hidden}"
        );
        assert_eq!(families("h", &[], true), "");
    }
}
