//! `gpu_free`: a GPU that was in use has no process left, for a while (a job restarting within
//! the `for` does not count). Free by the one rule (`shared::usability`): an unhealthy GPU whose
//! jobs ended is not.

use std::time::Duration;

use shared::alerts::{Rule, Severity, Silence};
use shared::in_use::{IN_USE_MEMORY_BYTES, IN_USE_MEMORY_SHARE};
use shared::severity::Condition;
use shared::usability::unhealthy;

use super::prom::{GPU, prom_duration};
use super::{AlertRule, Book, Configured, Gpu, Key, Prom, ms};

/// How long after a GPU came free Prometheus still knows it had a process (see the export's notes).
const FREE_LOOKBACK: Duration = Duration::from_secs(3600);

pub struct GpuFree;

impl AlertRule for GpuFree {
    type Settings = ();
    const NEEDS_PROCESSES: bool = true;

    fn defaults() -> Configured<()> {
        Configured::on(Severity::Info, 30, ())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<()>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let key = Key::gpu(Rule::GpuFree, &gpu.info.uuid);
        let unhealthy = unhealthy(&Condition::of(gpu.info, gpu.sample, gpu.health)).is_some();
        let memory = book.gpus.entry(gpu.info.uuid.clone()).or_default();
        if gpu.answering().is_none() || unhealthy {
            // Lost, faulty (or not sampled yet): neither free nor in use; start over when it is fine.
            memory.had_process = false;
            return book.resolve(&key, now);
        }
        if let Some(p) = gpu.processes.first() {
            memory.had_process = true;
            memory.last_user = p.owner_name().map(str::to_owned).or(memory.last_user.take());
            return book.resolve(&key, now);
        }
        // No process listed, but its memory or utilization says someone uses it: in use, not free.
        if gpu.sample.and_then(shared::in_use::unseen).is_some() {
            memory.had_process = true;
            return book.resolve(&key, now);
        }
        let (had, user) = (memory.had_process, memory.last_user.clone());
        if let Some(held) = book.held(&key, had, ms(rule.config.hold), now) {
            // A moment, as the idle alert says it: the message is read for as long as the alert fires.
            let free_since = shared::time::utc_minute(now.saturating_sub(held));
            let message = format!("{} is free: no process has held it since {free_since}", gpu.label());
            let action = "it is yours to use; say so to the team if you take it";
            let mut draft = book.draft(&rule.config, key, gpu, message, action);
            draft.user = user;
            book.fire(draft, silences, now);
        }
    }

    fn condition(_rule: &Configured<()>, held: &str) -> String {
        format!("a GPU that was in use has no process left{held}")
    }

    fn prometheus(rule: &Configured<()>) -> Option<Prom> {
        let floor_mib = IN_USE_MEMORY_BYTES >> 20;
        let window = prom_duration(rule.config.hold + FREE_LOOKBACK);
        let processes = "gpudash_process_memory_bytes";
        Some(Prom {
            notes: vec![
                format!(
                    "A GPU with no process now that had one within the last {window}: Prometheus forgets the previous"
                ),
                format!(
                    "process {} after it ended, so this resolves then (gpudash keeps it until a process appears) and",
                    prom_duration(FREE_LOOKBACK)
                ),
                "names no last user. Processes whose memory NVML cannot read are not in the series. As on gpudash's"
                    .to_owned(),
                format!(
                    "own page, a GPU with any utilization or {floor_mib} MiB of its memory used ({:.0}% of a smaller GPU's) is in",
                    IN_USE_MEMORY_SHARE * 100.0
                ),
                "use, listed or not.".to_owned(),
            ],
            expr: format!(
                "(DCGM_FI_DEV_FB_USED unless on(UUID) {processes}) \
                 and on(UUID) (DCGM_FI_DEV_GPU_UTIL == 0) \
                 and on(UUID) (DCGM_FI_DEV_FB_USED < {IN_USE_MEMORY_SHARE} * (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)) \
                 and on(UUID) (DCGM_FI_DEV_FB_USED < {floor_mib}) \
                 and on(UUID) count without (pid, user, command) (last_over_time({processes}[{window}]))"
            ),
            hold: rule.config.hold,
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!("{GPU} is free"),
            description: "Nothing runs on it any more: it can take a new job.".to_owned(),
        })
    }
}
