//! What the rules' Prometheus twins share: the alert's name, Prometheus' durations, the tie of a
//! rule to its own firing alert (hysteresis) and the severity label rated like the engine's.

use std::time::Duration;

use shared::alerts::{Rule, Severity};
use shared::severity::Level;

/// A GPU in an alert's summary, as a template over the labels `/metrics` sets.
pub const GPU: &str = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}";

/// The alert's name in Prometheus, e.g. `GpudashTemperature`.
pub fn alert_name(rule: Rule) -> String {
    let camel: String = rule
        .as_str()
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    format!("Gpudash{camel}")
}

/// A duration as Prometheus writes it: "90s", "5m", "2h", "250ms".
pub fn prom_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    match s {
        0 => "0s".to_owned(),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Ties a rule's expression to the same alert firing, so it resolves only past the hysteresis.
pub fn with_hysteresis(rule: Rule, fire: &str, hold_on: &str) -> String {
    format!("{fire} or ({hold_on} and on(UUID) ALERTS{{alertname=\"{}\",alertstate=\"firing\"}})", alert_name(rule))
}

/// The severity label of a reading at `level`, for a rule whose own severity is `own`: raised to
/// the level the overview gives the reading (`Severity::rated`), as the engine does.
pub fn rated(own: Severity, level: Level) -> &'static str {
    own.rated(level).as_str()
}
