//! `memory_full`: memory used at or above `percent` of the total for a while; resolves 2 points below.

use shared::alerts::{Rule, Severity, Silence};
use shared::severity::{Level, MEMORY_CRITICAL, MEMORY_WARNING, memory_level};

use super::prom::{GPU, prom_duration, rated, with_hysteresis};
use super::settings::number;
use super::{AlertRule, Book, Configured, Draft, Gpu, Key, Prom, for_, ms};

pub struct MemoryFull;

/// `[rules.memory_full]`'s own key.
#[derive(Debug, Clone, PartialEq)]
pub struct Percent {
    /// Share of the total memory, 50 to 100.
    pub percent: f64,
}

impl AlertRule for MemoryFull {
    type Settings = Percent;
    const KEYS: &[&str] = &["percent"];

    fn defaults() -> Configured<Percent> {
        Configured::on(Severity::Warning, 300, Percent { percent: 95.0 })
    }

    fn set(settings: &mut Percent, _key: &str, value: &toml::Value) -> Result<(), String> {
        settings.percent = number(value, 50.0..=100.0)?;
        Ok(())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<Percent>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let (config, percent) = (&rule.config, rule.settings.percent);
        let key = Key::gpu(Rule::MemoryFull, &gpu.info.uuid);
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return book.resolve(&key, now);
        }
        let total = gpu.info.memory_total;
        let Some(used) = gpu.answering().and_then(|s| s.memory_used).filter(|_| total > 0) else { return };
        let share = used as f64 / total as f64 * 100.0;
        let severity = config.severity.rated(memory_level(Some(used), total));
        if book.is_firing(&key) {
            if share < percent - 2.0 {
                book.resolve(&key, now);
            } else {
                book.rate(&key, severity);
            }
        } else if let Some(held) = book.held(&key, share >= percent, ms(config.hold), now) {
            let message =
                format!("{} has {share:.1}% of its memory in use{} (threshold {percent}%)", gpu.label(), for_(held));
            let action = "the next allocation on it may fail with out-of-memory: see who holds it on the Processes \
                          view, and free what is not needed";
            let draft = Draft { severity, ..book.draft(config, key, gpu, message, action) };
            book.fire(draft, silences, now);
        }
    }

    fn condition(rule: &Configured<Percent>, held: &str) -> String {
        let p = rule.settings.percent;
        format!("memory used ≥ {p}%{held}; resolves below {}%", p - 2.0)
    }

    fn prometheus(rule: &Configured<Percent>) -> Option<Prom> {
        let percent = rule.settings.percent;
        let below = percent - 2.0;
        let share = "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE \
                     + (DCGM_FI_DEV_FB_RESERVED or DCGM_FI_DEV_FB_USED * 0))";
        let own = rule.config.severity;
        // The level depends on the share used: a template over `$value` where the rating changes it.
        let severity = if rated(own, Level::Critical) == rated(own, Level::Ok) {
            own.as_str().to_owned()
        } else {
            format!(
                "{{{{ if ge $value {:.1} }}}}{}{{{{ else if ge $value {:.1} }}}}{}{{{{ else }}}}{}{{{{ end }}}}",
                MEMORY_CRITICAL * 100.0,
                rated(own, Level::Critical),
                MEMORY_WARNING * 100.0,
                rated(own, Level::Warning),
                rated(own, Level::Ok)
            )
        };
        Some(Prom {
            notes: vec![
                format!("Resolves below {below}%, as gpudash does, by looking at its own firing alert;"),
                "the figures are whole MiB, so the share can differ from gpudash's in the last digits.".to_owned(),
            ],
            expr: with_hysteresis(Rule::MemoryFull, &format!("{share} >= {percent}"), &format!("{share} >= {below}")),
            hold: rule.config.hold,
            severity,
            summary: format!(
                "{GPU}: memory {{{{ $value | humanize }}}}% used (threshold {percent}% for {})",
                prom_duration(rule.config.hold)
            ),
            description: "New allocations will fail: find the process holding the most memory and free what it does \
                          not need."
                .to_owned(),
        })
    }
}
