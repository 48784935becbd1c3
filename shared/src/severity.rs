//! How bad a GPU's state is: one rule for the overview rows and the cards, so a
//! figure is flagged the same way wherever it shows.
//!
//! Every finding carries its words as well as its level: the page shows both,
//! never colour alone.

use crate::{DeviceInfo, DeviceSample, health::DeviceHealth};

/// How far below the GPU's own slowdown threshold a temperature starts to warn, °C.
pub const TEMPERATURE_MARGIN_C: u32 = 5;
/// Memory used from which a GPU warns (fraction of its total).
pub const MEMORY_WARNING: f64 = 0.90;
/// Memory used from which a GPU is critical: the next allocation will likely fail.
pub const MEMORY_CRITICAL: f64 = 0.98;

/// A level, ordered: `Ok < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    #[default]
    Ok,
    /// Amber: worth a look (near the slowdown threshold, memory nearly full, a power cap).
    Warning,
    /// Red: the GPU is slowed down, erring or gone.
    Critical,
}

impl Level {
    /// The class the page styles it by: `sev-ok`, `sev-warning`, `sev-critical`.
    pub fn class(self) -> &'static str {
        match self {
            Level::Ok => "sev-ok",
            Level::Warning => "sev-warning",
            Level::Critical => "sev-critical",
        }
    }

    /// A word for screen readers and tooltips.
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }

    /// The sign before a finding's text: none for ok, "⚠" for a warning, "✖" when critical.
    pub fn sign(self) -> &'static str {
        match self {
            Level::Ok => "",
            Level::Warning => "⚠",
            Level::Critical => "✖",
        }
    }
}

/// One thing wrong with a GPU, in words: "84 °C, near slowdown 87 °C", "throttled: thermal".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub text: String,
}

impl Finding {
    fn new(level: Level, text: impl Into<String>) -> Self {
        Self { level, text: text.into() }
    }

    /// The text with the level's sign: "⚠ power cap".
    pub fn label(&self) -> String {
        format!("{} {}", self.level.sign(), self.text).trim().to_owned()
    }
}

/// A temperature against the GPU's own slowdown threshold: critical from the threshold,
/// a warning within [`TEMPERATURE_MARGIN_C`] of it; ok when either is unknown.
pub fn temperature_level(temperature_c: Option<u32>, slowdown_c: Option<u32>) -> Level {
    match (temperature_c, slowdown_c) {
        (Some(t), Some(slowdown)) if t >= slowdown => Level::Critical,
        (Some(t), Some(slowdown)) if t + TEMPERATURE_MARGIN_C >= slowdown => Level::Warning,
        _ => Level::Ok,
    }
}

/// Memory used against the total: a warning from 90 %, critical from 98 %.
pub fn memory_level(used: Option<u64>, total: u64) -> Level {
    match used {
        Some(used) if total > 0 => {
            let fraction = used as f64 / total as f64;
            if fraction >= MEMORY_CRITICAL {
                Level::Critical
            } else if fraction >= MEMORY_WARNING {
                Level::Warning
            } else {
                Level::Ok
            }
        }
        _ => Level::Ok,
    }
}

/// A clock event (`shared::telemetry::CLOCK_EVENT_NAMES`) and what it says in a badge: thermal
/// and hardware slowdowns are critical, the software power cap a warning, the rest (idle,
/// application clocks, sync boost) nothing.
pub fn clock_event(name: &str) -> Option<(Level, &'static str)> {
    Some(match name {
        "sw_thermal_slowdown" | "hw_thermal_slowdown" => (Level::Critical, "thermal"),
        "hw_slowdown" => (Level::Critical, "hardware slowdown"),
        "hw_power_brake_slowdown" => (Level::Critical, "power brake"),
        "sw_power_cap" => (Level::Warning, "power cap"),
        _ => return None,
    })
}

/// Everything wrong with one GPU, most severe first (ties keep the order: lost, temperature,
/// memory, clocks, XID, ECC, rows): empty when all is well.
pub fn assess(info: &DeviceInfo, latest: Option<&DeviceSample>, health: Option<&DeviceHealth>) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(sample) = latest {
        if sample.lost.is_some() {
            // A lost GPU reads nothing else; what it read before is no longer true.
            return vec![Finding::new(Level::Critical, "lost")];
        }
        findings.extend(temperature_finding(sample.temperature_c, info.slowdown_temp_c));
        findings.extend(memory_finding(sample.memory_used, info.memory_total));
        findings.extend(clock_findings(sample.clock_events.as_deref().unwrap_or_default()));
    }
    if let Some(health) = health {
        findings.extend(health_findings(health));
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.level));
    findings
}

/// The most severe level among `findings`; `Ok` when there are none.
pub fn worst(findings: &[Finding]) -> Level {
    findings.iter().map(|f| f.level).max().unwrap_or_default()
}

fn temperature_finding(temperature_c: Option<u32>, slowdown_c: Option<u32>) -> Option<Finding> {
    let (t, slowdown) = (temperature_c?, slowdown_c?);
    match temperature_level(Some(t), Some(slowdown)) {
        Level::Ok => None,
        Level::Warning => Some(Finding::new(Level::Warning, format!("{t} °C, near slowdown {slowdown} °C"))),
        Level::Critical => Some(Finding::new(Level::Critical, format!("{t} °C, slowdown at {slowdown} °C"))),
    }
}

fn memory_finding(used: Option<u64>, total: u64) -> Option<Finding> {
    let level = memory_level(used, total);
    let percent = (used? as f64 / total as f64 * 100.0).floor();
    match level {
        Level::Ok => None,
        Level::Warning => Some(Finding::new(level, format!("memory {percent:.0}% used"))),
        Level::Critical => Some(Finding::new(level, format!("memory {percent:.0}% full"))),
    }
}

/// "throttled: thermal, power brake" (red) and "power cap" (amber), each once.
fn clock_findings(events: &[String]) -> Vec<Finding> {
    let mut red: Vec<&str> = Vec::new();
    let mut amber: Vec<&str> = Vec::new();
    for (level, words) in events.iter().filter_map(|e| clock_event(e)) {
        let list = if level == Level::Critical { &mut red } else { &mut amber };
        if !list.contains(&words) {
            list.push(words);
        }
    }
    let mut findings = Vec::new();
    if !red.is_empty() {
        findings.push(Finding::new(Level::Critical, format!("throttled: {}", red.join(", "))));
    }
    findings.extend(amber.into_iter().map(|words| Finding::new(Level::Warning, words)));
    findings
}

/// XID errors, ECC errors since the driver loaded, and rows or pages waiting for a reset.
fn health_findings(health: &DeviceHealth) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut codes: Vec<u64> = Vec::new();
    for xid in &health.xids {
        if !codes.contains(&xid.code) {
            codes.push(xid.code);
        }
    }
    if !codes.is_empty() {
        let codes: Vec<String> = codes.iter().map(u64::to_string).collect();
        findings.push(Finding::new(Level::Critical, format!("XID {}", codes.join(", "))));
    }
    // Volatile counts: since the driver loaded. The aggregate ones keep a GPU's whole past.
    match health.ecc_volatile {
        ecc if ecc.uncorrected.is_some_and(|n| n > 0) => {
            let n = ecc.uncorrected.unwrap_or_default();
            findings.push(Finding::new(Level::Critical, format!("ECC: {n} uncorrected")));
        }
        ecc if ecc.corrected.is_some_and(|n| n > 0) => {
            let n = ecc.corrected.unwrap_or_default();
            findings.push(Finding::new(Level::Warning, format!("ECC: {n} corrected")));
        }
        _ => {}
    }
    if health.remapped_rows.failed == Some(true) {
        findings.push(Finding::new(Level::Critical, "row remapping failed"));
    } else if health.remapped_rows.pending == Some(true) {
        findings.push(Finding::new(Level::Critical, "row remap pending: reset the GPU"));
    }
    if health.retired_pages.pending == Some(true) {
        findings.push(Finding::new(Level::Critical, "page retirement pending: reset the GPU"));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{EccCounts, RemappedRows, RetiredPages, XidEvent};

    fn info(slowdown: Option<u32>) -> DeviceInfo {
        DeviceInfo { memory_total: 100, slowdown_temp_c: slowdown, ..crate::testing::device(0) }
    }

    fn texts(findings: &[Finding]) -> Vec<(Level, &str)> {
        findings.iter().map(|f| (f.level, f.text.as_str())).collect()
    }

    #[test]
    fn temperature_warns_five_degrees_below_the_gpus_own_slowdown_and_is_critical_from_it() {
        assert_eq!(temperature_level(Some(81), Some(87)), Level::Ok);
        assert_eq!(temperature_level(Some(82), Some(87)), Level::Warning);
        assert_eq!(temperature_level(Some(86), Some(87)), Level::Warning);
        assert_eq!(temperature_level(Some(87), Some(87)), Level::Critical);
        assert_eq!(temperature_level(Some(95), Some(87)), Level::Critical);
        // Another GPU's threshold moves the boundary with it.
        assert_eq!(temperature_level(Some(86), Some(95)), Level::Ok);
        assert_eq!(temperature_level(Some(90), Some(95)), Level::Warning);
        assert_eq!(temperature_level(Some(99), None), Level::Ok, "no threshold, no verdict");
        assert_eq!(temperature_level(None, Some(87)), Level::Ok);
    }

    #[test]
    fn memory_warns_from_ninety_percent_and_is_critical_from_ninety_eight() {
        assert_eq!(memory_level(Some(89), 100), Level::Ok);
        assert_eq!(memory_level(Some(90), 100), Level::Warning);
        assert_eq!(memory_level(Some(97), 100), Level::Warning);
        assert_eq!(memory_level(Some(98), 100), Level::Critical);
        assert_eq!(memory_level(Some(100), 100), Level::Critical);
        assert_eq!(memory_level(None, 100), Level::Ok);
        assert_eq!(memory_level(Some(5), 0), Level::Ok, "no total, no verdict");
    }

    #[test]
    fn throttling_is_red_a_power_cap_amber_and_idle_nothing() {
        for red in ["sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown", "hw_power_brake_slowdown"] {
            assert_eq!(clock_event(red).map(|(l, _)| l), Some(Level::Critical), "{red}");
        }
        assert_eq!(clock_event("sw_power_cap"), Some((Level::Warning, "power cap")));
        for none in ["idle", "applications_clocks_setting", "sync_boost", "display_clock_setting", "new_reason"] {
            assert_eq!(clock_event(none), None, "{none}");
        }
        let events = ["idle", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_power_cap"];
        let findings = clock_findings(&events.map(String::from));
        assert_eq!(
            texts(&findings),
            [(Level::Critical, "throttled: thermal, power brake"), (Level::Warning, "power cap")]
        );
    }

    #[test]
    fn findings_read_in_words_most_severe_first() {
        let sample = DeviceSample {
            temperature_c: Some(84),
            memory_used: Some(99),
            clock_events: Some(vec!["sw_power_cap".into()]),
            ..Default::default()
        };
        let findings = assess(&info(Some(87)), Some(&sample), None);
        assert_eq!(
            texts(&findings),
            [
                (Level::Critical, "memory 99% full"),
                (Level::Warning, "84 °C, near slowdown 87 °C"),
                (Level::Warning, "power cap")
            ]
        );
        assert_eq!(worst(&findings), Level::Critical);
        assert_eq!(findings[1].label(), "⚠ 84 °C, near slowdown 87 °C");
        let hot = DeviceSample { temperature_c: Some(90), ..Default::default() };
        assert_eq!(texts(&assess(&info(Some(87)), Some(&hot), None)), [(Level::Critical, "90 °C, slowdown at 87 °C")]);
        let cool = DeviceSample { temperature_c: Some(40), memory_used: Some(10), ..Default::default() };
        assert!(assess(&info(Some(87)), Some(&cool), None).is_empty());
        assert_eq!(worst(&[]), Level::Ok);
    }

    #[test]
    fn a_lost_gpu_is_critical_and_nothing_else() {
        let lost = DeviceSample { lost: Some("gone".into()), temperature_c: Some(99), ..Default::default() };
        let health = DeviceHealth { xids: vec![xid(79)], ..Default::default() };
        assert_eq!(texts(&assess(&info(Some(87)), Some(&lost), Some(&health))), [(Level::Critical, "lost")]);
    }

    fn xid(code: u64) -> XidEvent {
        XidEvent { device: 0, timestamp_ms: 1, code, meaning: String::new() }
    }

    #[test]
    fn xids_ecc_and_remaps_are_flagged_and_corrected_ecc_only_warns() {
        let health = DeviceHealth {
            xids: vec![xid(13), xid(79), xid(13)],
            ecc_volatile: EccCounts { corrected: Some(4), uncorrected: Some(2) },
            remapped_rows: RemappedRows { pending: Some(true), ..Default::default() },
            retired_pages: RetiredPages { pending: Some(true), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(
            texts(&health_findings(&health)),
            [
                (Level::Critical, "XID 13, 79"),
                (Level::Critical, "ECC: 2 uncorrected"),
                (Level::Critical, "row remap pending: reset the GPU"),
                (Level::Critical, "page retirement pending: reset the GPU"),
            ]
        );
        let corrected = DeviceHealth {
            ecc_volatile: EccCounts { corrected: Some(3), uncorrected: Some(0) },
            // The aggregate remembers the GPU's past: not a finding.
            ecc_aggregate: EccCounts { corrected: Some(9), uncorrected: Some(9) },
            remapped_rows: RemappedRows { failed: Some(true), pending: Some(true), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(
            texts(&health_findings(&corrected)),
            [(Level::Warning, "ECC: 3 corrected"), (Level::Critical, "row remapping failed")]
        );
        assert!(health_findings(&DeviceHealth::default()).is_empty());
    }
}
