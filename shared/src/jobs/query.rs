//! Which jobs `GET /api/jobs` lists (its parameters, checked here for the server and built
//! here by the page) and a job as a CSV row.

use super::{GIB, Job, JobReport, Runtime};
use crate::workload;

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
