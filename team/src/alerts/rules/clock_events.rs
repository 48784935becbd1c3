//! `clock_events`: clocks held down by a thermal slowdown or the power brake for a while.

use shared::alerts::{Rule, Severity, Silence};
use shared::severity::clock_event;

use super::prom::{GPU, prom_duration, rated};
use super::settings::list;
use super::{AlertRule, Book, Configured, Draft, Gpu, Key, Prom, for_, ms};

/// Clock events that mean the GPU is being protected from heat or a power emergency.
const DEFAULT_CLOCK_EVENT_REASONS: [&str; 3] =
    ["sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"];

pub struct ClockEvents;

/// `[rules.clock_events]`'s own key.
#[derive(Debug, Clone, PartialEq)]
pub struct Reasons {
    /// Clock-event names (as in `DeviceSample::clock_events`) that count.
    pub reasons: Vec<String>,
}

impl AlertRule for ClockEvents {
    type Settings = Reasons;
    const KEYS: &[&str] = &["reasons"];

    fn defaults() -> Configured<Reasons> {
        let reasons = DEFAULT_CLOCK_EVENT_REASONS.iter().map(|s| (*s).to_owned()).collect();
        Configured::on(Severity::Warning, 60, Reasons { reasons })
    }

    fn set(settings: &mut Reasons, _key: &str, value: &toml::Value) -> Result<(), String> {
        let known = shared::telemetry::CLOCK_EVENT_NAMES;
        let names = known.join(", ");
        let reasons = list(value, |v| v.as_str().map(str::to_owned), &format!("the clock events {names}"))?;
        if let Some(bad) = reasons.iter().find(|r| !known.contains(&r.as_str())) {
            return Err(format!("names '{bad}', which is not a clock event; use {names}"));
        }
        if reasons.is_empty() {
            return Err("is empty; name at least one, or set enabled = false".to_owned());
        }
        settings.reasons = reasons;
        Ok(())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<Reasons>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rule.config;
        let key = Key::gpu(Rule::ClockEvents, &gpu.info.uuid);
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return book.resolve(&key, now);
        }
        let Some(events) = gpu.answering().and_then(|s| s.clock_events.as_ref()) else { return };
        let active: Vec<&str> =
            events.iter().filter(|e| rule.settings.reasons.contains(e)).map(String::as_str).collect();
        let level = active.iter().filter_map(|e| clock_event(e)).map(|(level, _)| level).max().unwrap_or_default();
        let severity = config.severity.rated(level);
        if book.is_firing(&key) {
            if active.is_empty() {
                book.resolve(&key, now);
            } else {
                book.rate(&key, severity);
            }
        } else if let Some(held) = book.held(&key, !active.is_empty(), ms(config.hold), now) {
            let message = format!("{} has its clocks held down by {}{}", gpu.label(), active.join(", "), for_(held));
            let action = "the GPU protects itself from heat or a power emergency: check cooling, power supply and \
                          `nvidia-smi -q -d PERFORMANCE`; jobs run slower until it clears";
            let draft = Draft { severity, ..book.draft(config, key, gpu, message, action) };
            book.fire(draft, silences, now);
        }
    }

    fn condition(rule: &Configured<Reasons>, held: &str) -> String {
        format!("clocks held down by {}{held}", rule.settings.reasons.join(" or "))
    }

    fn prometheus(rule: &Configured<Reasons>) -> Option<Prom> {
        let reasons = &rule.settings.reasons;
        let level = reasons.iter().filter_map(|r| clock_event(r)).map(|(l, _)| l).max();
        Some(Prom {
            notes: vec![format!("Any of: {}.", reasons.join(", "))],
            expr: format!(
                "max without (reason) (gpudash_clock_event_active{{reason=~\"{}\"}}) == 1",
                reasons.join("|")
            ),
            hold: rule.config.hold,
            severity: rated(rule.config.severity, level.unwrap_or_default()).to_owned(),
            summary: format!(
                "{GPU}: clocks held down by a thermal slowdown or the power brake for {}",
                prom_duration(rule.config.hold)
            ),
            description: "Work runs slower than it should: check cooling, the power supply and the power brake signal."
                .to_owned(),
        })
    }
}
