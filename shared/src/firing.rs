//! How bad a firing alert is and how many fire: the severity an alert takes from the
//! overview's own levels (`shared::severity`), and the counts by severity that `GET /api/alerts`,
//! the header badge and the browser tab's title show, silenced alerts apart.

pub use crate::alerts::FiringCounts;
use crate::alerts::{Alert, Severity};
use crate::severity::Level;

impl Severity {
    /// The severity of an alert whose reading the overview rates `level` (by the same functions:
    /// [`crate::severity::temperature_level`], [`crate::severity::memory_level`],
    /// [`crate::severity::clock_event`], [`crate::severity::xid_level`]): the rule's own severity
    /// from the alerts file, raised to the overview's level, so a red ✖ on the overview is never
    /// a mere warning in Alerts.
    pub fn rated(self, level: Level) -> Severity {
        let overview = match level {
            Level::Ok => Severity::Info,
            Level::Warning => Severity::Warning,
            Level::Critical => Severity::Critical,
        };
        self.max(overview)
    }
}

impl FiringCounts {
    /// Counts the firing alerts among `alerts` (resolved ones are left out).
    pub fn of<'a>(alerts: impl IntoIterator<Item = &'a Alert>) -> Self {
        let mut counts = Self::default();
        for alert in alerts.into_iter().filter(|a| a.resolved_ms.is_none()) {
            let slot = match (alert.silenced.is_some(), alert.severity) {
                (true, _) => &mut counts.silenced,
                (false, Severity::Critical) => &mut counts.critical,
                (false, Severity::Warning) => &mut counts.warning,
                (false, Severity::Info) => &mut counts.info,
            };
            *slot += 1;
        }
        counts
    }

    /// Firing alerts nobody silenced: what the badge and the tab's title count.
    pub fn unsilenced(&self) -> u32 {
        self.critical + self.warning + self.info
    }

    /// The worst severity among the unsilenced ones.
    pub fn worst(&self) -> Option<Severity> {
        [(self.critical, Severity::Critical), (self.warning, Severity::Warning), (self.info, Severity::Info)]
            .into_iter()
            .find(|(n, _)| *n > 0)
            .map(|(_, s)| s)
    }

    /// Each severity with alerts, worst first: "1 critical, 2 warning".
    pub fn parts(&self) -> Vec<(Severity, u32)> {
        [(Severity::Critical, self.critical), (Severity::Warning, self.warning), (Severity::Info, self.info)]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::{Rule, Silence};

    fn alert(id: u64, severity: Severity, silenced: bool, resolved: bool) -> Alert {
        Alert {
            id,
            rule: Rule::Temperature,
            severity,
            gpu_index: 0,
            gpu_uuid: "GPU-0".into(),
            pid: None,
            user: None,
            message: String::new(),
            action: String::new(),
            fired_ms: 1,
            resolved_ms: resolved.then_some(2),
            silenced: silenced.then(|| Silence {
                id: 1,
                rule: Rule::Temperature,
                gpu_uuid: "GPU-0".into(),
                by: "omar".into(),
                reason: "known".into(),
                from_ms: 0,
                until_ms: 9,
            }),
            simulated: false,
            redacted: false,
        }
    }

    #[test]
    fn counts_are_by_severity_with_silenced_and_resolved_ones_apart() {
        let mut alerts = vec![alert(1, Severity::Critical, false, false), alert(2, Severity::Critical, true, false)];
        alerts.extend((3..11).map(|id| alert(id, Severity::Warning, false, false)));
        alerts.push(alert(11, Severity::Critical, false, true));
        alerts.push(alert(12, Severity::Info, false, false));
        let counts = FiringCounts::of(&alerts);
        assert_eq!(counts, FiringCounts { critical: 1, warning: 8, info: 1, silenced: 1 });
        assert_eq!(counts.unsilenced(), 10);
        assert_eq!(counts.worst(), Some(Severity::Critical));
        assert_eq!(counts.parts(), [(Severity::Critical, 1), (Severity::Warning, 8), (Severity::Info, 1)]);
        let quiet = FiringCounts::of(&alerts[1..2]);
        assert_eq!((quiet.unsilenced(), quiet.worst(), quiet.parts()), (0, None, vec![]));
    }

    #[test]
    fn an_alert_takes_the_overviews_level_when_it_is_worse() {
        assert_eq!(Severity::Warning.rated(Level::Critical), Severity::Critical);
        assert_eq!(Severity::Warning.rated(Level::Warning), Severity::Warning);
        assert_eq!(Severity::Warning.rated(Level::Ok), Severity::Warning, "the file's severity is the least");
        assert_eq!(Severity::Critical.rated(Level::Warning), Severity::Critical);
        assert_eq!(Severity::Info.rated(Level::Ok), Severity::Info);
        // 92 °C on a GPU that slows down at 87 °C: a red ✖ on the overview, critical in Alerts.
        let level = crate::severity::temperature_level(Some(92), Some(87));
        assert_eq!(Severity::Warning.rated(level), Severity::Critical);
    }
}
