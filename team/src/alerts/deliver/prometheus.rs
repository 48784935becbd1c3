//! `gpudash alerts export-prometheus`: the alerts file's rules as a Prometheus alerting-rules
//! file over the series `/metrics` exposes (`web/metrics.rs`), for teams who run Alertmanager.
//!
//! Every string value is written as a JSON string, which YAML reads as a double-quoted
//! scalar, so nothing in a rule can break the file. Where PromQL cannot say exactly what the
//! engine does, the rule says the nearest thing and a comment above it says the difference.

use std::fmt::Write as _;

use shared::alerts::Rule;

use crate::alerts::config::AlertsConfig;
use crate::alerts::rules::Prom;
pub use crate::alerts::rules::prom::{alert_name, prom_duration};

/// The whole rules file for `config`; `source` names where the rules came from (for the header).
pub fn rules_yaml(config: &AlertsConfig, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Prometheus alerting rules: gpudash's alert rules over the series its /metrics exposes.");
    let _ = writeln!(
        out,
        "# Written by `gpudash alerts export-prometheus` (gpudash {}) from {}.",
        env!("CARGO_PKG_VERSION"),
        comment_text(source)
    );
    let _ = writeln!(out, "# Load it with `rule_files:` in prometheus.yml; check it with `promtool check rules`.");
    let _ = writeln!(
        out,
        "# Rules turned off in the alerts file are left out, and so is oom (the Python client reports it)."
    );
    out.push_str("groups:\n  - name: \"gpudash\"\n    rules:");
    let rules: Vec<(Rule, Prom)> = Rule::ALL
        .into_iter()
        .filter(|r| config.rules.rule(*r).enabled)
        .filter_map(|r| Some((r, config.rules.prometheus(r)?)))
        .collect();
    if rules.is_empty() {
        out.push_str(" []\n");
        return out;
    }
    out.push('\n');
    for (rule, prom) in rules {
        write_rule(&mut out, rule, &prom);
    }
    out
}

fn write_rule(out: &mut String, rule: Rule, prom: &Prom) {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    for note in &prom.notes {
        let _ = writeln!(out, "      # {}", comment_text(note));
    }
    let _ = writeln!(out, "      - alert: {}", q(&alert_name(rule)));
    let _ = writeln!(out, "        expr: {}", q(&prom.expr));
    if !prom.hold.is_zero() {
        let _ = writeln!(out, "        for: {}", q(&prom_duration(prom.hold)));
    }
    let _ = writeln!(
        out,
        "        labels:\n          severity: {}\n          rule: {}",
        q(&prom.severity),
        q(rule.as_str())
    );
    let _ = writeln!(
        out,
        "        annotations:\n          summary: {}\n          description: {}",
        q(&prom.summary),
        q(&prom.description)
    );
}

/// Text safe in a YAML comment: one line, no control characters.
fn comment_text(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn names_and_durations_are_prometheus_ones() {
        assert_eq!(alert_name(Rule::GpuFree), "GpudashGpuFree");
        assert_eq!(alert_name(Rule::Temperature), "GpudashTemperature");
        let cases = [(90_000, "90s"), (300_000, "5m"), (7_200_000, "2h"), (250, "250ms"), (0, "0s")];
        for (ms, text) in cases {
            assert_eq!(prom_duration(Duration::from_millis(ms)), text);
        }
    }

    #[test]
    fn disabled_rules_are_left_out_and_thresholds_carried() {
        let text = "[rules.temperature]\ncelsius = 80\nfor = \"10s\"\n[rules.gpu_free]\nenabled = false\n";
        let config = AlertsConfig::parse(text, "a.toml").unwrap();
        let yaml = rules_yaml(&config, "a.toml");
        assert!(!yaml.contains("GpudashGpuFree"));
        assert!(yaml.contains("expr: \"DCGM_FI_DEV_GPU_TEMP >= 80 or (DCGM_FI_DEV_GPU_TEMP >= 77 and on(UUID)"));
        assert!(yaml.contains("for: \"10s\""));
        assert_eq!(yaml.matches("- alert: ").count(), Rule::ALL.len() - 2);
    }

    #[test]
    fn nothing_from_the_file_can_break_the_yaml() {
        let mut config = AlertsConfig::default();
        config.rules.xid.settings.ignore = vec![43];
        let yaml = rules_yaml(&config, "evil\n- name: x\"");
        assert!(yaml.contains("from evil?- name: x\"."), "{yaml}");
        assert!(yaml.contains("DCGM_FI_DEV_XID_ERRORS > 0 != 43 and"));
        assert!(yaml.contains("if eq $value 79.0 }}GPU has fallen off the bus{{ else if"));
    }

    #[test]
    fn severities_follow_the_overviews_levels_as_the_engine_does() {
        let yaml = rules_yaml(&AlertsConfig::default(), "defaults");
        let xid = "severity: \"{{ if or (eq $value 13.0) (eq $value 31.0) (eq $value 43.0) (eq $value 45.0) }}warning\
                   {{ else }}critical{{ end }}\"";
        assert!(yaml.contains(xid), "{yaml}");
        assert!(yaml.contains("{{ if ge $value 98.0 }}critical{{ else if ge $value 90.0 }}warning{{ else }}warning"));
        let clocks = yaml.split("GpudashClockEvents").nth(1).unwrap();
        assert!(clocks.split("- alert").next().unwrap().contains("severity: \"critical\""), "thermal is ✖");
        let mut critical = AlertsConfig::default();
        critical.rules.xid.config.severity = shared::alerts::Severity::Critical;
        assert!(rules_yaml(&critical, "c").contains("severity: \"critical\"\n          rule: \"xid\""));
    }
}
