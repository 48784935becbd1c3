//! How bad a GPU's state is: one rule for the overview rows and the cards, so a
//! figure is flagged the same way wherever it shows.
//!
//! Every finding carries its words as well as its level: the page shows both,
//! never colour alone.

use crate::{
    DeviceInfo, DeviceSample,
    health::{DeviceHealth, EccCounts},
};

/// How far below the GPU's own slowdown threshold a temperature starts to warn, °C.
pub const TEMPERATURE_MARGIN_C: u32 = 5;
/// Memory used from which a GPU warns (fraction of its total).
pub const MEMORY_WARNING: f64 = 0.90;
/// Memory used from which a GPU is critical: the next allocation will likely fail.
pub const MEMORY_CRITICAL: f64 = 0.98;
/// How long an XID counts against its GPU after the driver reported it, ms (the `xid` alert
/// rule's default `quiet`): older ones are history, shown in the card's health section only.
pub const XID_RECENT_MS: u64 = 10 * 60 * 1000;
/// XIDs that an application's own fault raises (an illegal address or instruction, a context
/// stopped, the cleanup after one): its owner needs telling, the GPU itself is fine. Every other
/// code (79 off the bus, 48 double-bit ECC, 63/64 remapping, 94/95 ECC, 119/120 GSP...) is critical.
pub const APPLICATION_XIDS: [u64; 4] = [13, 31, 43, 45];

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

/// How bad an XID is: a warning for an application's fault ([`APPLICATION_XIDS`]), critical for
/// everything else (the hardware, the driver, the GSP).
pub fn xid_level(code: u64) -> Level {
    if APPLICATION_XIDS.contains(&code) { Level::Warning } else { Level::Critical }
}

/// One GPU's condition as the severity rules read it: this host fills it from a sample and a
/// health reading ([`Condition::of`]); the Fleet from the figures Prometheus holds. What it
/// leaves `None` or empty is not known, and counts as nothing wrong.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    /// The GPU stopped answering.
    pub lost: bool,
    pub temperature_c: Option<u32>,
    /// The GPU's own slowdown threshold, °C.
    pub slowdown_c: Option<u32>,
    pub memory_used: Option<u64>,
    /// Bytes; 0 when unknown.
    pub memory_total: u64,
    /// Why the GPU is in use by its own figures ([`crate::in_use::unseen`]), which
    /// counts where no process is listed; `None` where its figures say idle or are not known (the Fleet).
    pub in_use_unseen: Option<String>,
    /// Active clock events (`shared::telemetry::CLOCK_EVENT_NAMES`).
    pub clock_events: Vec<String>,
    /// XID codes reported within [`XID_RECENT_MS`], oldest first, each once.
    pub recent_xids: Vec<u64>,
    /// ECC errors since the driver loaded.
    pub ecc_volatile: EccCounts,
    pub row_remap_failed: bool,
    pub row_remap_pending: bool,
    pub page_retirement_pending: bool,
}

impl Condition {
    /// The condition of a GPU of this host from its latest sample and health reading. An XID is
    /// recent within [`XID_RECENT_MS`] of the newer of the two readings: both sides of the wire
    /// read the same server clock, so the page and the server agree.
    pub fn of(info: &DeviceInfo, latest: Option<&DeviceSample>, health: Option<&DeviceHealth>) -> Self {
        let now = latest.map_or(0, |s| s.timestamp_ms).max(health.map_or(0, |h| h.timestamp_ms));
        let mut recent_xids: Vec<u64> = Vec::new();
        for xid in health.iter().flat_map(|h| &h.xids) {
            if now.saturating_sub(xid.timestamp_ms) <= XID_RECENT_MS && !recent_xids.contains(&xid.code) {
                recent_xids.push(xid.code);
            }
        }
        Condition {
            lost: latest.is_some_and(|s| s.lost.is_some()),
            temperature_c: latest.and_then(|s| s.temperature_c),
            slowdown_c: info.slowdown_temp_c,
            memory_used: latest.and_then(|s| s.memory_used),
            memory_total: info.memory_total,
            in_use_unseen: latest.and_then(crate::in_use::unseen),
            clock_events: latest.and_then(|s| s.clock_events.clone()).unwrap_or_default(),
            recent_xids,
            ecc_volatile: health.map(|h| h.ecc_volatile).unwrap_or_default(),
            row_remap_failed: health.is_some_and(|h| h.remapped_rows.failed == Some(true)),
            row_remap_pending: health.is_some_and(|h| h.remapped_rows.pending == Some(true)),
            page_retirement_pending: health.is_some_and(|h| h.retired_pages.pending == Some(true)),
        }
    }
}

/// Everything wrong with one GPU, most severe first (ties keep the order: lost, temperature,
/// memory, clocks, XID, ECC, rows): empty when all is well.
pub fn assess(info: &DeviceInfo, latest: Option<&DeviceSample>, health: Option<&DeviceHealth>) -> Vec<Finding> {
    findings(&Condition::of(info, latest, health))
}

/// [`assess`] of a [`Condition`] however it was filled.
pub fn findings(condition: &Condition) -> Vec<Finding> {
    collect(condition, true)
}

/// The findings about the GPU itself, most severe first: [`findings`] less its memory, which
/// says how much its users hold, not whether it works.
pub fn hardware_findings(condition: &Condition) -> Vec<Finding> {
    collect(condition, false)
}

fn collect(condition: &Condition, with_memory: bool) -> Vec<Finding> {
    if condition.lost {
        // A lost GPU reads nothing else; what it read before is no longer true.
        return vec![Finding::new(Level::Critical, "lost")];
    }
    let memory = with_memory.then(|| memory_finding(condition.memory_used, condition.memory_total));
    let mut findings: Vec<Finding> = temperature_finding(condition.temperature_c, condition.slowdown_c)
        .into_iter()
        .chain(memory.flatten())
        .chain(clock_findings(&condition.clock_events))
        .chain(health_findings(condition))
        .collect();
    crate::order::sort_by_key(&mut findings, |f| std::cmp::Reverse(f.level));
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

/// Recent XID errors, ECC errors since the driver loaded, and rows or pages waiting for a reset.
fn health_findings(condition: &Condition) -> Vec<Finding> {
    let mut findings = Vec::new();
    for level in [Level::Critical, Level::Warning] {
        let codes: Vec<String> =
            condition.recent_xids.iter().filter(|c| xid_level(**c) == level).map(u64::to_string).collect();
        if !codes.is_empty() {
            findings.push(Finding::new(level, format!("XID {}", codes.join(", "))));
        }
    }
    // Volatile counts: since the driver loaded. The aggregate ones keep a GPU's whole past.
    match condition.ecc_volatile {
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
    if condition.row_remap_failed {
        findings.push(Finding::new(Level::Critical, "row remapping failed"));
    } else if condition.row_remap_pending {
        findings.push(Finding::new(Level::Critical, "row remap pending: reset the GPU"));
    }
    if condition.page_retirement_pending {
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

    /// The condition [`health_findings`] reads from `health` alone.
    fn from_health(health: &DeviceHealth) -> Condition {
        Condition::of(&info(None), None, Some(health))
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
            texts(&health_findings(&from_health(&health))),
            [
                (Level::Critical, "XID 79"),
                (Level::Warning, "XID 13"),
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
            texts(&health_findings(&from_health(&corrected))),
            [(Level::Warning, "ECC: 3 corrected"), (Level::Critical, "row remapping failed")]
        );
        assert!(health_findings(&from_health(&DeviceHealth::default())).is_empty());
    }

    #[test]
    fn application_xids_warn_and_every_other_code_is_critical() {
        for code in APPLICATION_XIDS {
            assert_eq!(xid_level(code), Level::Warning, "XID {code}");
        }
        for code in [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 999] {
            assert_eq!(xid_level(code), Level::Critical, "XID {code}");
        }
    }

    #[test]
    fn an_xid_counts_for_ten_minutes_after_the_newest_reading_then_is_history() {
        let at = |ms| XidEvent { timestamp_ms: ms, ..xid(79) };
        let health =
            DeviceHealth { timestamp_ms: 1_000_000, xids: vec![at(1_000_000 - XID_RECENT_MS)], ..Default::default() };
        assert_eq!(from_health(&health).recent_xids, [79], "just within the window");
        let sample = DeviceSample { timestamp_ms: 1_000_001, ..Default::default() };
        let later = Condition::of(&info(None), Some(&sample), Some(&health));
        assert!(later.recent_xids.is_empty(), "the newer sample moves the window on");
        assert!(assess(&info(None), Some(&sample), Some(&health)).is_empty(), "an old XID is no finding");
    }

    #[test]
    fn hardware_findings_leave_out_only_the_memory() {
        let sample = DeviceSample {
            memory_used: Some(99),
            clock_events: Some(vec!["hw_thermal_slowdown".into()]),
            ..Default::default()
        };
        let condition = Condition::of(&info(Some(87)), Some(&sample), None);
        assert_eq!(texts(&findings(&condition)).len(), 2);
        assert_eq!(texts(&hardware_findings(&condition)), [(Level::Critical, "throttled: thermal")]);
        let lost = Condition { lost: true, ..condition };
        assert_eq!(texts(&hardware_findings(&lost)), [(Level::Critical, "lost")]);
    }
}
