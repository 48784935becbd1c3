//! `idle_held`: a process holds memory on a GPU that computes nothing. Telemetry flags the process
//! after `--idle-after` (`telemetry/idle.rs`); this rule's `for` holds on top of that.

use shared::activity::IDLE_SM_PERCENT;
use shared::alerts::{Rule, Severity, Silence};

use super::prom::GPU;
use super::{AlertRule, Book, Configured, Gpu, Key, Prom, gib, ms};

pub struct IdleHeld;

impl AlertRule for IdleHeld {
    type Settings = ();
    const NEEDS_PROCESSES: bool = true;

    fn defaults() -> Configured<()> {
        Configured::on(Severity::Warning, 0, ())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<()>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let computing = gpu.answering().is_some_and(|s| match s.activity.as_ref().and_then(|a| a.sm_active) {
            Some(sm) => sm >= IDLE_SM_PERCENT,
            None => s.gpu_util.is_some_and(|u| u > 0),
        });
        for p in gpu.processes {
            let key = Key { rule: Rule::IdleHeld, gpu_uuid: gpu.info.uuid.clone(), pid: Some(p.pid) };
            if let Some(firing) = book.firing.get_mut(&key) {
                // After a restart the idle tracker starts its clock again: until it flags the process
                // anew, only a GPU that computes ends the alert.
                if firing.adopted && p.idle.is_none() {
                    if computing {
                        book.resolve(&key, now);
                    }
                } else if p.idle.is_none() {
                    book.resolve(&key, now);
                } else {
                    firing.adopted = false;
                }
                continue;
            }
            let idle_for = p.idle.map(|idle| now.saturating_sub(idle.since_ms));
            let holds = idle_for.is_some_and(|held| held >= ms(rule.config.hold));
            let idle_since = p.idle.map_or(now, |idle| idle.since_ms);
            if book.held(&key, holds, 0, now).is_some() {
                // Who it is and what it runs travel in `user` (left out for anonymous viewers), never in
                // the message, which every viewer reads.
                let memory = p.used_memory.map_or_else(String::new, |b| format!(" {}", gib(b)));
                let sample = gpu.answering();
                let sm = sample.and_then(|s| s.activity.as_ref()).and_then(|a| a.sm_active);
                // A moment, not a length: the message is written once and read for as long as the alert
                // fires (the page shows the moment in the reader's zone; the row says how long it fires).
                let since = format!("since {}", shared::time::utc_minute(idle_since));
                // "Computed nothing" would be false at high util: say what was seen instead.
                let message = match shared::activity::idle_despite_util(sample.and_then(|s| s.gpu_util), sm, &since) {
                    Some(why) => format!("PID {} holds{memory} on {} and looks idle: {why}", p.pid, gpu.label()),
                    None => format!("PID {} holds{memory} on {} and has computed nothing {since}", p.pid, gpu.label()),
                };
                let action = "ask its owner to finish or restart it (a notebook kernel left open?) so the memory goes \
                              back to the team";
                let mut draft = book.draft(&rule.config, key, gpu, message, action);
                draft.user = p.owner_name().map(str::to_owned);
                book.fire(draft, silences, now);
            }
        }
    }

    fn condition(_rule: &Configured<()>, held: &str) -> String {
        format!("a process holds memory on a GPU that computes nothing (see --idle-after){held}")
    }

    fn prometheus(rule: &Configured<()>) -> Option<Prom> {
        Some(Prom {
            notes: vec![
                "gpudash flags a process idle after --idle-after without computing; this adds the rule's `for`."
                    .to_owned(),
            ],
            expr: format!("gpudash_process_idle_seconds >= {}", rule.config.hold.as_secs_f64()),
            // The `for` is in the expression: the series carries how long it has held.
            hold: std::time::Duration::ZERO,
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!(
                "{GPU}: pid {{{{ $labels.pid }}}} ({{{{ $labels.user }}}}, {{{{ $labels.command }}}}) holds memory \
                 and computes nothing for {{{{ $value | humanizeDuration }}}}"
            ),
            description: "Ask its owner to free the GPU (end the process or release its memory) so others can use it."
                .to_owned(),
        })
    }
}
