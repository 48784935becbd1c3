//! The verdict rules: what each says of a job and the figures it rests on, with the limits
//! they judge by (docs/JOBS.md, "Verdicts").

use serde::{Deserialize, Serialize};

use super::{GIB, Job, JobFigures, Outcome};

/// The figures a verdict's words rest on, as the page and notices show them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Evidence {
    pub name: String,
    pub value: String,
}

/// How much a verdict matters: a poor one is told to the owner when the job ends.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Grade {
    /// No verdict: too short to judge (`--job-verdict-after`).
    Unjudged,
    Good,
    Hint,
    Poor,
}

/// One rule's judgement of a job.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The rule's name ([`RULES`]).
    pub rule: String,
    pub grade: Grade,
    pub words: String,
    pub evidence: Vec<Evidence>,
}

/// The limits the rules judge by, fixed before any job runs (documented in docs/JOBS.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Jobs that held GPUs for less (GPU-seconds) are too short to judge.
    pub min_held_s: f64,
    /// At least this share of held time idle: "idle".
    pub idle_share: f64,
    /// Mean SM activity under this: "low SM activity".
    pub low_sm_active: f64,
    /// Tensor activity under this while the SMs work at least `low_sm_active`: "tensor cores unused".
    pub tensor_unused: f64,
    /// Peak memory under this share of the GPU's: "a smaller GPU would do".
    pub memory_small: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self { min_held_s: 300.0, idle_share: 0.5, low_sm_active: 0.15, tensor_unused: 0.01, memory_small: 0.25 }
    }
}

/// The rules, in the order their verdicts are listed.
pub const RULES: [&str; 6] = ["oom", "idle", "low_sm_activity", "tensor_unused", "memory_oversized", "busy"];

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// GPU time in the unit that reads best: "22 GPU-hours", "1.5 GPU-hours", "40 GPU-minutes", "9 GPU-seconds".
pub fn gpu_hours(seconds: f64) -> String {
    let hours = seconds / 3600.0;
    let whole = |n: f64, unit: &str| {
        let n = n.round();
        if n == 1.0 { format!("1 GPU-{unit}") } else { format!("{n:.0} GPU-{unit}s") }
    };
    match seconds {
        s if s >= 36_000.0 => whole(hours, "hour"),
        s if s >= 3600.0 => format!("{hours:.1} GPU-hours"),
        s if s >= 60.0 => whole(s / 60.0, "minute"),
        s => whole(s, "second"),
    }
}

fn gib(bytes: f64) -> String {
    let g = bytes / GIB;
    if g >= 10.0 { format!("{g:.0} GiB") } else { format!("{g:.1} GiB") }
}

fn evidence(pairs: &[(&str, String)]) -> Vec<Evidence> {
    pairs.iter().map(|(n, v)| Evidence { name: (*n).to_owned(), value: v.clone() }).collect()
}

/// " (its share of shared GPUs for 40% of the time)" when a figure is a share.
fn share_note(f: &JobFigures) -> &'static str {
    if f.shared_s > 0.0 { " (its share of a shared GPU for part of the time)" } else { "" }
}

/// The verdicts on `job` by `limits`: every rule that holds, worst first; a job too short to
/// judge gets none but an OOM; a job no rule faults is "busy".
pub fn verdicts(job: &Job, limits: &Thresholds) -> Vec<Verdict> {
    let f = &job.figures;
    let gpus = job.gpus.len().max(1);
    // What the figures cover: a job gpudash found running is judged over the time it watched.
    let length = crate::time::duration(job.watched_ms());
    let mut out = Vec::new();
    if job.outcome == Outcome::Oom {
        out.push(Verdict {
            rule: "oom".into(),
            grade: Grade::Poor,
            // The bridge saw an out-of-memory error; the job may have caught it and gone on.
            words: if f.memory_capacity_bytes > 0 {
                format!(
                    "ran out of GPU memory within {length} (peak {} of {})",
                    gib(f.memory_peak_bytes as f64),
                    gib(f.memory_capacity_bytes as f64)
                )
            } else {
                format!("ran out of GPU memory within {length}")
            },
            evidence: evidence(&[
                ("memory peak", gib(f.memory_peak_bytes as f64)),
                ("GPU memory", gib(f.memory_capacity_bytes as f64)),
            ]),
        });
    }
    if f.held_s < limits.min_held_s {
        return out;
    }
    let sm = f.sm_active_mean;
    let sm_words =
        sm.map_or_else(|| "SM activity unknown (no GPM)".to_owned(), |a| format!("{} SM activity", percent(a)));
    if f.idle_share() >= limits.idle_share {
        out.push(Verdict {
            rule: "idle".into(),
            grade: Grade::Poor,
            words: format!(
                "held {gpus} GPU{} for {length} at {sm_words}: {} idle",
                if gpus == 1 { "" } else { "s" },
                gpu_hours(f.idle_s)
            ),
            evidence: evidence(&[
                ("idle share", percent(f.idle_share())),
                ("idle", gpu_hours(f.idle_s)),
                ("held", gpu_hours(f.held_s)),
            ]),
        });
    } else if let Some(a) = sm.filter(|&a| a < limits.low_sm_active) {
        out.push(Verdict {
            rule: "low_sm_activity".into(),
            grade: Grade::Poor,
            words: format!(
                "held {gpus} GPU{} for {length} at {} SM activity{}: most of the GPUs' time went unused",
                if gpus == 1 { "" } else { "s" },
                percent(a),
                share_note(f)
            ),
            evidence: evidence(&[
                ("SM activity (mean)", percent(a)),
                ("SM activity (p95)", f.sm_active_p95.map_or("n/a".into(), percent)),
                ("held", gpu_hours(f.held_s)),
            ]),
        });
    }
    if let (true, Some(a), Some(t)) = (f.bf16_capable, sm, f.tensor_active_mean)
        && a >= limits.low_sm_active
        && t < limits.tensor_unused
    {
        out.push(Verdict {
                rule: "tensor_unused".into(),
                grade: Grade::Hint,
                words: format!(
                    "tensor cores unused on bf16-capable GPUs ({} tensor activity at {} SM activity): bf16 autocast or TF32 matmuls could run it faster",
                    percent(t),
                    percent(a)
                ),
                evidence: evidence(&[("tensor activity (mean)", format!("{:.1}%", t * 100.0)), ("SM activity (mean)", percent(a))]),
            });
    }
    if f.memory_capacity_bytes > 0
        && job.outcome != Outcome::Oom
        && (f.memory_peak_bytes as f64) < limits.memory_small * f.memory_capacity_bytes as f64
    {
        out.push(Verdict {
            rule: "memory_oversized".into(),
            grade: Grade::Hint,
            words: format!(
                "memory peak {} of {}: a smaller GPU or a MIG slice would do",
                gib(f.memory_peak_bytes as f64),
                gib(f.memory_capacity_bytes as f64)
            ),
            evidence: evidence(&[
                ("memory peak", gib(f.memory_peak_bytes as f64)),
                ("memory mean", gib(f.memory_mean_bytes)),
                ("GPU memory", gib(f.memory_capacity_bytes as f64)),
            ]),
        });
    }
    if !out.iter().any(|v| v.grade == Grade::Poor) {
        out.push(Verdict {
            rule: "busy".into(),
            grade: Grade::Good,
            words: format!(
                "kept {gpus} GPU{} busy for {length} at {sm_words}{}{}",
                if gpus == 1 { "" } else { "s" },
                share_note(f),
                // An idle part too small for the idle rule is still said.
                if f.idle_share() >= 0.1 {
                    format!(", idle {} of the time", percent(f.idle_share()))
                } else {
                    String::new()
                }
            ),
            evidence: evidence(&[
                ("SM activity (mean)", sm.map_or("n/a".into(), percent)),
                ("held", gpu_hours(f.held_s)),
            ]),
        });
    }
    crate::order::sort_by(&mut out, |a, b| b.grade.cmp(&a.grade));
    out
}

/// The worst grade of `verdicts` (`Unjudged` when none).
pub fn worst(verdicts: &[Verdict]) -> Grade {
    verdicts.iter().map(|v| v.grade).max().unwrap_or(Grade::Unjudged)
}

impl Grade {
    pub fn name(self) -> &'static str {
        match self {
            Self::Unjudged => "unjudged",
            Self::Good => "good",
            Self::Hint => "hint",
            Self::Poor => "poor",
        }
    }
}
