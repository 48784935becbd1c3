//! Jobs: a workload (a Slurm job, a pod, a container, or a plain process group) from its first
//! GPU process to its last, what it used, and the verdict rules that judge it. The server keeps
//! the figures (`team::jobs`); the rules live here so the API, the digests and the page agree.

use serde::{Deserialize, Serialize};

use crate::processes::GpuProcess;
use crate::workload::{self, Workload};

const GIB: f64 = (1u64 << 30) as f64;

/// What a job runs in, the most specific part first (a job in a container is the Slurm job's).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    Slurm,
    Pod,
    Container,
    /// A process group outside any of those: the shell's job (a `torchrun` and its workers).
    Process,
}

impl Runtime {
    pub const ALL: [Runtime; 4] = [Self::Slurm, Self::Pod, Self::Container, Self::Process];

    pub fn name(self) -> &'static str {
        match self {
            Self::Slurm => "slurm",
            Self::Pod => "pod",
            Self::Container => "container",
            Self::Process => "process",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == text)
    }
}

/// How a job ended.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Running,
    /// Its last GPU process went away.
    Ended,
    /// A process of it was stopped through gpudash (`--allow-signals`).
    Killed,
    /// The PyTorch bridge saw it run out of GPU memory.
    Oom,
    /// gpudash stopped while it ran: its end is when gpudash last saw it.
    Unknown,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ended => "ended",
            Self::Killed => "killed",
            Self::Oom => "oom",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Running, Self::Ended, Self::Killed, Self::Oom, Self::Unknown].into_iter().find(|o| o.name() == text)
    }

    /// What the Jobs tab says.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ended => "ended",
            Self::Killed => "stopped through gpudash",
            Self::Oom => "ran out of GPU memory",
            Self::Unknown => "end not seen (gpudash stopped)",
        }
    }
}

/// Which job a GPU process belongs to: its key (unique among running jobs), runtime and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobIdentity {
    pub key: String,
    pub runtime: Runtime,
    pub name: String,
}

/// The job of `process`: its verified Slurm job, else its pod, else its container, else its
/// process group (`group`, the PID when unknown). An unverified Slurm job (what the process's
/// environment claims) is not believed: the process is judged by where it really runs.
pub fn identity(process: &GpuProcess) -> JobIdentity {
    let empty = Workload::default();
    let w = process.workload.as_ref().unwrap_or(&empty);
    if let Some(job) = workload::verified_job(w) {
        return JobIdentity {
            key: format!("slurm:{}", job.id),
            runtime: Runtime::Slurm,
            name: format!("Slurm job {}", job.id),
        };
    }
    if let Some(pod) = &w.pod {
        let id = match (&pod.namespace, &pod.name) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => name.clone(),
            _ => pod.uid.clone().unwrap_or_else(|| "?".to_owned()),
        };
        return JobIdentity { key: format!("pod:{id}"), runtime: Runtime::Pod, name: format!("pod {id}") };
    }
    if let Some(container) = &w.container {
        return JobIdentity {
            key: format!("container:{}", container.id),
            runtime: Runtime::Container,
            name: format!("container {}", container.shown_name()),
        };
    }
    let group = process.group.unwrap_or(process.pid);
    let command = process.name.as_deref().unwrap_or("process");
    JobIdentity {
        key: format!("process:{group}"),
        runtime: Runtime::Process,
        name: format!("{command} (group {group})"),
    }
}

/// Points a job's activity series keeps; when full, neighbours merge and the step doubles.
pub const MAX_POINTS: usize = 360;

/// One step of a job's series: its own share of the activity of the GPUs it held.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct JobPoint {
    /// Start of the step, ms since the epoch.
    pub at_ms: u64,
    /// Mean SM activity over the step (0–1), over the GPU-seconds with a GPM window.
    pub sm_active: Option<f64>,
    pub tensor_active: Option<f64>,
    pub dram_active: Option<f64>,
    /// Device memory the job held, summed over its GPUs, at the step's peak.
    pub memory_bytes: u64,
}

/// What a job used, summed over its GPUs and its life so far.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct JobFigures {
    /// GPU-seconds held: each GPU it had a process on, for as long as it had one.
    pub held_s: f64,
    /// GPU-seconds charged as usage charges them (a shared GPU split by SM share).
    pub gpu_s: f64,
    /// Held GPU-seconds on a GPU that did nothing (no kernel ran, utilization 0), or while
    /// the idle rule flagged its process.
    pub idle_s: f64,
    /// Held GPU-seconds on a GPU another job also used: over those, the activity figures are
    /// its SM share of the GPU's.
    pub shared_s: f64,
    /// Held GPU-seconds covered by a GPM window (the activity figures' base).
    pub activity_s: f64,
    /// Mean SM, tensor and DRAM activity (0–1) over `activity_s`; `None` without GPM.
    pub sm_active_mean: Option<f64>,
    pub sm_active_p95: Option<f64>,
    pub tensor_active_mean: Option<f64>,
    pub dram_active_mean: Option<f64>,
    /// The most device memory it held on one GPU, and that GPU's memory.
    pub memory_peak_bytes: u64,
    pub memory_capacity_bytes: u64,
    /// Mean device memory per held GPU (memory GiB-seconds over held seconds), bytes.
    pub memory_mean_bytes: f64,
    /// GPU energy charged to it, joules (a shared GPU's split by SM share).
    pub energy_j: f64,
    /// Whether every GPU it held can run bf16 on tensor cores (compute capability 8.0 or later).
    #[serde(default)]
    pub bf16_capable: bool,
}

impl JobFigures {
    /// Share of the held time the GPU did nothing.
    pub fn idle_share(&self) -> f64 {
        if self.held_s > 0.0 { (self.idle_s / self.held_s).clamp(0.0, 1.0) } else { 0.0 }
    }

    /// Share of the held time on a shared GPU.
    pub fn shared_share(&self) -> f64 {
        if self.held_s > 0.0 { (self.shared_s / self.held_s).clamp(0.0, 1.0) } else { 0.0 }
    }

    pub fn energy_kwh(&self) -> f64 {
        self.energy_j / 3.6e6
    }
}

/// One job, as the API serves it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Job {
    pub id: u64,
    /// Its [`JobIdentity::key`].
    pub key: String,
    pub name: String,
    pub owner: String,
    pub runtime: Runtime,
    /// GPU indices it had a process on, ascending.
    pub gpus: Vec<u32>,
    /// When its first process started (from /proc), else when gpudash first saw it.
    pub started_ms: u64,
    /// When gpudash first saw it: its figures cover the time since (a job already running when
    /// gpudash started is watched from then).
    pub watched_from_ms: u64,
    /// When gpudash last saw one of its processes.
    pub last_seen_ms: u64,
    /// Its end (its last reading with a process); `None` while it runs.
    pub ended_ms: Option<u64>,
    pub outcome: Outcome,
    pub figures: JobFigures,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<JobPoint>,
    /// The first PIDs it had (at most [`MAX_PIDS`]).
    #[serde(default)]
    pub pids: Vec<u32>,
}

/// PIDs a job remembers, to find it from an out-of-memory record or a signal.
pub const MAX_PIDS: usize = 64;

impl Job {
    /// Its length so far: start to end, or to when it was last seen.
    pub fn length_ms(&self) -> u64 {
        self.ended_ms.unwrap_or(self.last_seen_ms).saturating_sub(self.started_ms)
    }

    /// How long gpudash watched it (what its figures cover): from when it first saw it.
    pub fn watched_ms(&self) -> u64 {
        self.ended_ms.unwrap_or(self.last_seen_ms).saturating_sub(self.watched_from_ms)
    }
}

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
fn gpu_hours(seconds: f64) -> String {
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

/// What energy costs, from `--energy-price` and `--carbon-intensity`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct EnergyTerms {
    /// Price per kWh, and its currency's code ("EUR"), when set.
    pub price_per_kwh: Option<f64>,
    #[serde(default)]
    pub currency: String,
    /// Grams of CO2-equivalent per kWh, when set.
    pub carbon_g_per_kwh: Option<f64>,
}

impl EnergyTerms {
    /// Parses `--energy-price`: "0.30 EUR", "0.30EUR" or "0.30".
    pub fn parse_price(text: &str) -> Result<(f64, String), String> {
        let text = text.trim();
        let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
        let (number, currency) = (text[..split].trim(), text[split..].trim());
        let price: f64 = number.parse().map_err(|_| format!("'{text}' is not a price per kWh; write e.g. 0.30 EUR"))?;
        if !(price.is_finite() && price > 0.0 && price <= 100.0) {
            return Err(format!("'{text}': a price per kWh must be above 0 and at most 100"));
        }
        if !(currency.is_empty() || (currency.len() == 3 && currency.chars().all(|c| c.is_ascii_uppercase()))) {
            return Err(format!("'{currency}' is not a currency code; use three capital letters such as EUR or USD"));
        }
        Ok((price, currency.to_owned()))
    }

    /// Parses `--carbon-intensity` (g CO2e per kWh).
    pub fn parse_carbon(text: &str) -> Result<f64, String> {
        match text.trim().parse::<f64>() {
            Ok(g) if g.is_finite() && (0.0..=2000.0).contains(&g) => Ok(g),
            _ => Err(format!("'{text}' is not a carbon intensity; give grams of CO2e per kWh, 0 to 2000 (e.g. 350)")),
        }
    }

    /// "0.42 EUR" for `kwh`, when a price is set.
    pub fn cost(&self, kwh: f64) -> Option<String> {
        self.price_per_kwh.map(|p| {
            let amount = kwh * p;
            if self.currency.is_empty() { format!("{amount:.2}") } else { format!("{amount:.2} {}", self.currency) }
        })
    }

    /// Kilograms of CO2e for `kwh`, when an intensity is set.
    pub fn co2_kg(&self, kwh: f64) -> Option<f64> {
        self.carbon_g_per_kwh.map(|g| kwh * g / 1000.0)
    }
}

/// A job with what the server derives from it: its verdicts and what its energy cost.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct JobReport {
    #[serde(flatten)]
    pub job: Job,
    pub verdicts: Vec<Verdict>,
    pub grade: Grade,
    pub energy_kwh: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2_kg: Option<f64>,
}

impl JobReport {
    pub fn new(job: Job, limits: &Thresholds, energy: &EnergyTerms) -> Self {
        let verdicts = verdicts(&job, limits);
        let kwh = job.figures.energy_kwh();
        Self {
            grade: worst(&verdicts),
            cost: energy.cost(kwh),
            co2_kg: energy.co2_kg(kwh),
            energy_kwh: kwh,
            verdicts,
            job,
        }
    }
}

/// `GET /api/jobs`' answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct JobsResponse {
    pub jobs: Vec<JobReport>,
    /// More jobs match past the last one (ask again with `before` = its id).
    pub more: bool,
    pub simulated: bool,
    /// Jobs outlive the server (the history database); false with `--no-history`.
    pub persistent: bool,
}

/// Most jobs one answer lists.
pub const MAX_LIMIT: u32 = 1000;
pub const DEFAULT_LIMIT: u32 = 100;

/// Which jobs `GET /api/jobs` lists: newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobsQuery {
    pub owner: Option<String>,
    pub runtime: Option<Runtime>,
    /// Only running jobs (`state=running`) or only ended ones (`state=ended`).
    pub running: Option<bool>,
    /// Only jobs whose id is below this (the next page).
    pub before: Option<u64>,
    pub limit: u32,
}

/// The parameters of `GET /api/jobs`.
pub const QUERY_PARAMETERS: &str = "owner, runtime, state, before, limit";

impl JobsQuery {
    /// Reads the query's parameters; each error says what is allowed.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let owner = get("owner").filter(|o| !o.is_empty());
        if owner.as_ref().is_some_and(|o| o.chars().count() > workload::MAX_TEXT) {
            return Err(format!("owner is longer than {} characters", workload::MAX_TEXT));
        }
        let runtime = match get("runtime").as_deref() {
            None | Some("") | Some("all") => None,
            Some(r) => Some(
                Runtime::parse(r)
                    .ok_or_else(|| format!("runtime '{r}' is not one of all, slurm, pod, container, process"))?,
            ),
        };
        let running = match get("state").as_deref() {
            None | Some("") | Some("all") => None,
            Some("running") => Some(true),
            Some("ended") => Some(false),
            Some(s) => return Err(format!("state '{s}' is not one of all, running, ended")),
        };
        let before = match get("before") {
            None => None,
            Some(b) => Some(b.parse::<u64>().map_err(|_| format!("before '{b}' is not a job id (a whole number)"))?),
        };
        let limit = match get("limit") {
            None => DEFAULT_LIMIT,
            Some(l) => match l.parse::<u32>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => return Err(format!("limit '{l}' is not a whole number from 1 to {MAX_LIMIT}")),
            },
        };
        Ok(Self { owner, runtime, running, before, limit })
    }

    /// The query string that asks for it (the page's requests and deep links).
    pub fn query_string(&self) -> String {
        let mut parts = vec![format!("limit={}", self.limit)];
        if let Some(o) = &self.owner {
            parts.push(format!("owner={}", crate::text::url_encode(o)));
        }
        if let Some(r) = self.runtime {
            parts.push(format!("runtime={}", r.name()));
        }
        if let Some(r) = self.running {
            parts.push(format!("state={}", if r { "running" } else { "ended" }));
        }
        if let Some(b) = self.before {
            parts.push(format!("before={b}"));
        }
        parts.join("&")
    }

    /// Whether `job` is one it asks for (the running jobs, held in memory, are filtered by this).
    pub fn matches(&self, job: &Job) -> bool {
        self.owner.as_ref().is_none_or(|o| &job.owner == o)
            && self.runtime.is_none_or(|r| job.runtime == r)
            && self.running.is_none_or(|r| r == job.ended_ms.is_none())
            && self.before.is_none_or(|b| job.id < b)
    }
}

/// The CSV's header; one row per job ([`csv_row`]).
pub const CSV_HEADER: &str = "id,name,owner,runtime,gpus,started_utc,ended_utc,length_s,outcome,held_gpu_s,gpu_s,idle_share,shared_share,sm_active_mean,sm_active_p95,tensor_active_mean,dram_active_mean,memory_peak_gib,memory_capacity_gib,energy_kwh,cost,co2_kg,grade,verdicts";

/// One job as a CSV row, every cell escaped by [`crate::csv::cell`].
pub fn csv_row(r: &JobReport) -> String {
    let j = &r.job;
    let f = &j.figures;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    let gpus = j.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
    let words = r.verdicts.iter().map(|v| v.words.as_str()).collect::<Vec<_>>().join("; ");
    let grade = r.grade.name();
    let cells = [
        j.id.to_string(),
        j.name.clone(),
        j.owner.clone(),
        j.runtime.name().to_owned(),
        gpus,
        crate::time::utc_minute(j.started_ms),
        j.ended_ms.map(crate::time::utc_minute).unwrap_or_default(),
        format!("{:.1}", j.length_ms() as f64 / 1000.0),
        j.outcome.name().to_owned(),
        format!("{:.1}", f.held_s),
        format!("{:.1}", f.gpu_s),
        format!("{:.4}", f.idle_share()),
        format!("{:.4}", f.shared_share()),
        opt(f.sm_active_mean),
        opt(f.sm_active_p95),
        opt(f.tensor_active_mean),
        opt(f.dram_active_mean),
        format!("{:.3}", f.memory_peak_bytes as f64 / GIB),
        format!("{:.3}", f.memory_capacity_bytes as f64 / GIB),
        format!("{:.6}", r.energy_kwh),
        r.cost.clone().unwrap_or_default(),
        r.co2_kg.map_or(String::new(), |c| format!("{c:.4}")),
        grade.to_owned(),
        words,
    ];
    cells.iter().map(|c| crate::csv::cell(c)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests;
