//! `gpudash alerts export-prometheus`: the alerts file's rules as a Prometheus alerting-rules
//! file over the series `/metrics` exposes (`web/metrics.rs`), for teams who run Alertmanager.
//!
//! Every string value is written as a JSON string, which YAML reads as a double-quoted
//! scalar, so nothing in a rule can break the file. Where PromQL cannot say exactly what the
//! engine does, the rule says the nearest thing and a comment above it says the difference.

use std::fmt::Write as _;
use std::time::Duration;

use shared::alerts::Rule;
use shared::in_use::{IN_USE_MEMORY_BYTES, IN_USE_MEMORY_SHARE};
use shared::severity::{APPLICATION_XIDS, Level, MEMORY_CRITICAL, MEMORY_WARNING, clock_event};

use crate::alerts::config::{AlertsConfig, Rules};

/// How long after a GPU came free Prometheus still knows it had a process (see `gpu_free`).
const FREE_LOOKBACK: Duration = Duration::from_secs(3600);

/// One alerting rule as written.
struct PromRule {
    rule: Rule,
    /// Comment lines above the rule: where it differs from the engine.
    notes: Vec<String>,
    expr: String,
    hold: Duration,
    summary: String,
    description: String,
}

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
    let rules: Vec<PromRule> = Rule::ALL
        .into_iter()
        .filter(|r| config.rules.rule(*r).enabled)
        .filter_map(|r| prom_rule(&config.rules, r))
        .collect();
    if rules.is_empty() {
        out.push_str(" []\n");
        return out;
    }
    out.push('\n');
    for rule in rules {
        write_rule(&mut out, &config.rules, &rule);
    }
    out
}

fn write_rule(out: &mut String, rules: &Rules, rule: &PromRule) {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    for note in &rule.notes {
        let _ = writeln!(out, "      # {}", comment_text(note));
    }
    let _ = writeln!(out, "      - alert: {}", q(&alert_name(rule.rule)));
    let _ = writeln!(out, "        expr: {}", q(&rule.expr));
    if !rule.hold.is_zero() {
        let _ = writeln!(out, "        for: {}", q(&prom_duration(rule.hold)));
    }
    let _ = writeln!(
        out,
        "        labels:\n          severity: {}\n          rule: {}",
        q(&severity_label(rules, rule.rule)),
        q(rule.rule.as_str())
    );
    let _ = writeln!(
        out,
        "        annotations:\n          summary: {}\n          description: {}",
        q(&rule.summary),
        q(&rule.description)
    );
}

/// The alert's `severity` label: the rule's own, raised to the level the overview gives the
/// reading (`Severity::rated`), as gpudash's engine does; a template over `$value` where the
/// level depends on it (an XID's code, the share of memory used). The temperature's level depends
/// on each GPU's own slowdown threshold, which `/metrics` does not carry: it keeps the rule's own.
fn severity_label(rules: &Rules, rule: Rule) -> String {
    let own = rules.rule(rule).severity;
    let rated = |level| own.rated(level).as_str();
    match rule {
        Rule::Xid if rated(Level::Warning) != rated(Level::Critical) => {
            let application: Vec<String> =
                APPLICATION_XIDS.iter().map(|code| format!("(eq $value {code}.0)")).collect();
            format!(
                "{{{{ if or {} }}}}{}{{{{ else }}}}{}{{{{ end }}}}",
                application.join(" "),
                rated(Level::Warning),
                rated(Level::Critical)
            )
        }
        Rule::ClockEvents => {
            let level = rules.clock_event_reasons.iter().filter_map(|r| clock_event(r)).map(|(l, _)| l).max();
            rated(level.unwrap_or_default()).to_owned()
        }
        Rule::MemoryFull if rated(Level::Critical) != rated(Level::Ok) => format!(
            "{{{{ if ge $value {:.1} }}}}{}{{{{ else if ge $value {:.1} }}}}{}{{{{ else }}}}{}{{{{ end }}}}",
            MEMORY_CRITICAL * 100.0,
            rated(Level::Critical),
            MEMORY_WARNING * 100.0,
            rated(Level::Warning),
            rated(Level::Ok)
        ),
        _ => own.as_str().to_owned(),
    }
}

/// Ties a rule's expression to the same alert firing, so it resolves only past the hysteresis.
fn with_hysteresis(rule: Rule, fire: &str, hold_on: &str) -> String {
    format!("{fire} or ({hold_on} and on(UUID) ALERTS{{alertname=\"{}\",alertstate=\"firing\"}})", alert_name(rule))
}

/// `None` for `oom`: no metric carries an out-of-memory error, the Python client reports it to gpudash.
fn prom_rule(rules: &Rules, rule: Rule) -> Option<PromRule> {
    let hold = rules.rule(rule).hold;
    let gpu = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}";
    let (notes, expr, summary, description): (Vec<String>, String, String, String) = match rule {
        Rule::Temperature => {
            let (t, below) = (rules.temperature_celsius, rules.temperature_celsius.saturating_sub(3));
            let metric = "DCGM_FI_DEV_GPU_TEMP";
            (
                vec![
                    format!("Resolves below {below} °C, as gpudash does, by looking at its own firing alert;"),
                    "gpudash makes it critical from the GPU's own slowdown threshold, which /metrics does not carry."
                        .to_owned(),
                ],
                with_hysteresis(rule, &format!("{metric} >= {t}"), &format!("{metric} >= {below}")),
                format!("{gpu} at {{{{ $value }}}} °C (threshold {t} °C for {})", prom_duration(hold)),
                "Check the fans, the airflow and the inlet temperature; the GPU will slow its clocks to cool down."
                    .to_owned(),
            )
        }
        Rule::ClockEvents => (
            vec![format!("Any of: {}.", rules.clock_event_reasons.join(", "))],
            format!(
                "max without (reason) (gpudash_clock_event_active{{reason=~\"{}\"}}) == 1",
                rules.clock_event_reasons.join("|")
            ),
            format!("{gpu}: clocks held down by a thermal slowdown or the power brake for {}", prom_duration(hold)),
            "Work runs slower than it should: check cooling, the power supply and the power brake signal.".to_owned(),
        ),
        Rule::Xid => xid_rule(rules, gpu),
        Rule::Ecc => (
            vec![
                "Any of: an uncorrectable volatile ECC error, a failed row remap, a row remap pending a reset.".into(),
            ],
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 or DCGM_FI_DEV_ROW_REMAP_FAILURE == 1 \
             or DCGM_FI_DEV_ROW_REMAP_PENDING == 1"
                .to_owned(),
            format!("{gpu}: uncorrectable ECC error or row remapping failure/pending"),
            "Drain the GPU and reset it (nvidia-smi -r) to apply pending remaps; a failed remap means the GPU \
             should be replaced."
                .to_owned(),
        ),
        Rule::DeviceLost => (
            Vec::new(),
            "gpudash_device_lost == 1".to_owned(),
            format!("{gpu} stopped answering (fallen off the bus)"),
            "Check the GPU's power and seating and the kernel log (XID 79); the node usually needs a reboot."
                .to_owned(),
        ),
        Rule::MemoryFull => memory_rule(rules, gpu),
        Rule::IdleHeld => (
            vec![
                "gpudash flags a process idle after --idle-after without computing; this adds the rule's `for`."
                    .to_owned(),
            ],
            format!("gpudash_process_idle_seconds >= {}", hold.as_secs_f64()),
            format!(
                "{gpu}: pid {{{{ $labels.pid }}}} ({{{{ $labels.user }}}}, {{{{ $labels.command }}}}) holds memory \
                 and computes nothing for {{{{ $value | humanizeDuration }}}}"
            ),
            "Ask its owner to free the GPU (end the process or release its memory) so others can use it.".to_owned(),
        ),
        Rule::GpuFree => free_rule(rules, gpu),
        Rule::ReservationIntruder => (
            vec!["A process whose user is not the holder of the GPU's reservation in force (advisory).".to_owned()],
            "(gpudash_process_memory_bytes unless on(UUID, user) gpudash_reservation_active) \
             and on(UUID) gpudash_reservation_active"
                .to_owned(),
            format!("{gpu}: pid {{{{ $labels.pid }}}} ({{{{ $labels.user }}}}) runs on a reserved GPU"),
            "Ask the process's owner to move off the GPU, or the holder to release the reservation; nothing is \
             enforced."
                .to_owned(),
        ),
        Rule::Oom => return None,
    };
    // The `for` of idle_held is in its expression: the series carries how long it has held.
    let hold = if rule == Rule::IdleHeld { Duration::ZERO } else { hold };
    Some(PromRule { rule, notes, expr, hold, summary, description })
}

type Parts = (Vec<String>, String, String, String);

fn xid_rule(rules: &Rules, gpu: &str) -> Parts {
    let quiet = prom_duration(rules.xid_quiet);
    let ignored: String = rules.xid_ignore.iter().map(|code| format!(" != {code}")).collect();
    let mut meaning = String::new();
    for code in 1..=1000u64 {
        let text = shared::health::xid_meaning(code);
        if text != shared::health::xid_meaning(0) {
            let _ = write!(
                meaning,
                "{{{{ {}if eq $value {code}.0 }}}}{text}",
                if meaning.is_empty() { "" } else { "else " }
            );
        }
    }
    meaning.push_str("{{ else }}see NVIDIA's XID catalogue{{ end }}");
    (
        vec![
            "DCGM_FI_DEV_XID_ERRORS holds only the last code: a repeat of the same code is not seen as new, and the"
                .to_owned(),
            format!("alert resolves {quiet} after the value last changed (gpudash counts every XID event)."),
        ],
        format!("DCGM_FI_DEV_XID_ERRORS > 0{ignored} and changes(DCGM_FI_DEV_XID_ERRORS[{quiet}]) > 0"),
        format!("{gpu}: XID {{{{ $value }}}} ({meaning})"),
        "See https://docs.nvidia.com/deploy/xid-errors/ for the code; check the kernel log (dmesg) for the \
         process involved, and drain the GPU if it repeats."
            .to_owned(),
    )
}

fn memory_rule(rules: &Rules, gpu: &str) -> Parts {
    let percent = rules.memory_full_percent;
    let below = percent - 2.0;
    let share = "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE \
                 + (DCGM_FI_DEV_FB_RESERVED or DCGM_FI_DEV_FB_USED * 0))";
    (
        vec![
            format!("Resolves below {below}%, as gpudash does, by looking at its own firing alert;"),
            "the figures are whole MiB, so the share can differ from gpudash's in the last digits.".to_owned(),
        ],
        with_hysteresis(Rule::MemoryFull, &format!("{share} >= {percent}"), &format!("{share} >= {below}")),
        format!(
            "{gpu}: memory {{{{ $value | humanize }}}}% used (threshold {percent}% for {})",
            prom_duration(rules.memory_full.hold)
        ),
        "New allocations will fail: find the process holding the most memory and free what it does not need."
            .to_owned(),
    )
}

fn free_rule(rules: &Rules, gpu: &str) -> Parts {
    let floor_mib = IN_USE_MEMORY_BYTES >> 20;
    let hold = rules.gpu_free.hold;
    let window = prom_duration(hold + FREE_LOOKBACK);
    let processes = "gpudash_process_memory_bytes";
    (
        vec![
            format!("A GPU with no process now that had one within the last {window}: Prometheus forgets the previous"),
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
        format!(
            "(DCGM_FI_DEV_FB_USED unless on(UUID) {processes}) \
             and on(UUID) (DCGM_FI_DEV_GPU_UTIL == 0) \
             and on(UUID) (DCGM_FI_DEV_FB_USED < {IN_USE_MEMORY_SHARE} * (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)) \
             and on(UUID) (DCGM_FI_DEV_FB_USED < {floor_mib}) \
             and on(UUID) count without (pid, user, command) (last_over_time({processes}[{window}]))"
        ),
        format!("{gpu} is free"),
        "Nothing runs on it any more: it can take a new job.".to_owned(),
    )
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

/// Text safe in a YAML comment: one line, no control characters.
fn comment_text(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
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
        config.rules.xid_ignore = vec![43];
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
        critical.rules.xid.severity = shared::alerts::Severity::Critical;
        assert!(rules_yaml(&critical, "c").contains("severity: \"critical\"\n          rule: \"xid\""));
    }
}
