//! The one writer of Prometheus' text exposition format (version 0.0.4), used by `/metrics`
//! (`web/metrics.rs`) and the alerts' webhook counters (`alerts/deliver`): each family's
//! `# HELP` and `# TYPE` once, then its samples; label values escaped as the format says.
//!
//! Written by hand rather than through `prometheus-client`: that crate emits OpenMetrics and
//! appends `_total` to counters, which would rename dcgm-exporter's
//! `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` and break the dashboards `/metrics` exists for.

use std::fmt::Write as _;

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a series only grows (Prometheus `counter`) or goes up and down (`gauge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
pub fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Text in the exposition format, family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric family: `samples` are (labels already written as `name="value",…`, value).
    /// A family without samples is left out.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind, samples: impl Iterator<Item = (String, f64)>) {
        let mut samples = samples.peekable();
        if samples.peek().is_none() {
            return;
        }
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
        for (labels, value) in samples {
            let _ = writeln!(self.text, "{name}{{{labels}}} {value}");
        }
    }

    /// The text written so far.
    pub fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn help_and_type_once_per_family_and_empty_families_left_out() {
        let mut out = Exposition::default();
        out.family(
            "a_total",
            "As.",
            Kind::Counter,
            [("x=\"1\"".to_owned(), 3.0), ("x=\"2\"".to_owned(), 0.5)].into_iter(),
        );
        out.family("b", "Bs.", Kind::Gauge, std::iter::empty());
        assert_eq!(
            out.into_text(),
            "# HELP a_total As.\n# TYPE a_total counter\na_total{x=\"1\"} 3\na_total{x=\"2\"} 0.5\n"
        );
    }
}
