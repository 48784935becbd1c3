//! Jobs: a workload (a Slurm job, a pod, a container, or a plain process group) from its first
//! GPU process to its last, what it used, and the verdict rules that judge it. The server keeps
//! the figures (`team::jobs`); the rules live here so the API, the digests and the page agree.

use serde::{Deserialize, Serialize};

use crate::processes::GpuProcess;
use crate::workload::{self, Workload};

pub mod notices;
mod query;
mod verdicts;

pub use query::{CSV_HEADER, DEFAULT_LIMIT, JobsQuery, MAX_LIMIT, QUERY_PARAMETERS, csv_row};
pub use verdicts::{Evidence, Grade, RULES, Thresholds, Verdict, gpu_hours, verdicts, worst};

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

#[cfg(test)]
mod tests;
