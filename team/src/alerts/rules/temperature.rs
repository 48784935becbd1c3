//! `temperature`: at or above `celsius` for a while; critical from the GPU's own slowdown
//! threshold (the overview's rule); resolves 3 °C below.

use shared::alerts::{Rule, Severity, Silence};
use shared::severity::temperature_level;

use super::prom::{GPU, prom_duration, with_hysteresis};
use super::settings::number;
use super::{AlertRule, Book, Configured, Draft, Gpu, Key, Prom, for_, ms};

pub struct Temperature;

/// `[rules.temperature]`'s own key.
#[derive(Debug, Clone, PartialEq)]
pub struct Celsius {
    /// 30 to 120.
    pub celsius: u32,
}

impl AlertRule for Temperature {
    type Settings = Celsius;
    const KEYS: &[&str] = &["celsius"];

    fn defaults() -> Configured<Celsius> {
        Configured::on(Severity::Warning, 60, Celsius { celsius: 85 })
    }

    fn set(settings: &mut Celsius, _key: &str, value: &toml::Value) -> Result<(), String> {
        let celsius = number(value, 30.0..=120.0)?;
        if celsius.fract() != 0.0 {
            return Err("is not a whole number of degrees; use 30 to 120".to_owned());
        }
        settings.celsius = celsius as u32;
        Ok(())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<Celsius>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let (config, celsius) = (&rule.config, rule.settings.celsius);
        let key = Key::gpu(Rule::Temperature, &gpu.info.uuid);
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return book.resolve(&key, now);
        }
        let Some(t) = gpu.answering().and_then(|s| s.temperature_c) else { return };
        // How bad it is, the overview's own rule: critical from the GPU's slowdown threshold.
        let severity = config.severity.rated(temperature_level(Some(t), gpu.info.slowdown_temp_c));
        if book.is_firing(&key) {
            if t + 3 < celsius {
                book.resolve(&key, now);
            } else {
                book.rate(&key, severity);
            }
        } else if let Some(held) = book.held(&key, t >= celsius, ms(config.hold), now) {
            let message = format!("{} at {t} °C{}, at or above {celsius} °C", gpu.label(), for_(held));
            let action = "check the fans and the airflow; the GPU holds its clocks down to cool, so jobs slow down";
            let draft = Draft { severity, ..book.draft(config, key, gpu, message, action) };
            book.fire(draft, silences, now);
        }
    }

    fn condition(rule: &Configured<Celsius>, held: &str) -> String {
        let c = rule.settings.celsius;
        format!(
            "temperature ≥ {c} °C{held}; critical from the GPU's own slowdown threshold; resolves below {} °C",
            c.saturating_sub(3)
        )
    }

    fn prometheus(rule: &Configured<Celsius>) -> Option<Prom> {
        let (t, below) = (rule.settings.celsius, rule.settings.celsius.saturating_sub(3));
        let metric = "DCGM_FI_DEV_GPU_TEMP";
        Some(Prom {
            notes: vec![
                format!("Resolves below {below} °C, as gpudash does, by looking at its own firing alert;"),
                "gpudash makes it critical from the GPU's own slowdown threshold, which /metrics does not carry."
                    .to_owned(),
            ],
            expr: with_hysteresis(Rule::Temperature, &format!("{metric} >= {t}"), &format!("{metric} >= {below}")),
            hold: rule.config.hold,
            // The level depends on each GPU's own slowdown threshold, which `/metrics` does not
            // carry: the label keeps the rule's own severity.
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!("{GPU} at {{{{ $value }}}} °C (threshold {t} °C for {})", prom_duration(rule.config.hold)),
            description: "Check the fans, the airflow and the inlet temperature; the GPU will slow its clocks to cool \
                          down."
                .to_owned(),
        })
    }
}
