//! Jobs: each workload from its first GPU process to its last, what it used and wasted, and
//! its verdict (the rules are `shared::jobs`). `tracker.rs` is the bookkeeping, pure;
//! `engine.rs` its thread, fed by the hub; the rows live in `store::jobs`; `notify/` tells owners.

pub mod engine;
pub mod notify;
pub mod tracker;

pub use engine::Jobs;

/// How jobs are judged and priced (`--job-verdict-after`, `--energy-price`, `--carbon-intensity`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobsOptions {
    pub limits: shared::jobs::Thresholds,
    pub energy: shared::jobs::EnergyTerms,
}
