//! `xid`: the driver reported an XID error. An event, not a state: it fires when reported (no
//! `for`), counts the ones that follow, and resolves after `quiet` without a new one.

use std::fmt::Write as _;
use std::time::Duration;

use shared::alerts::{Rule, Severity, Silence};
use shared::health::xid_meaning;
use shared::severity::{APPLICATION_XIDS, Level, xid_level};

use super::prom::{GPU, prom_duration, rated};
use super::settings::{list, quiet};
use super::{AlertRule, Book, Change, ChangeKind, Configured, Draft, Gpu, Key, Prom, human, human_ago, ms};

pub struct Xid;

/// `[rules.xid]`'s own keys.
#[derive(Debug, Clone, PartialEq)]
pub struct XidSettings {
    /// An XID alert resolves after this long without a new XID on its GPU.
    pub quiet: Duration,
    /// Codes that never alert.
    pub ignore: Vec<u64>,
}

impl AlertRule for Xid {
    type Settings = XidSettings;
    const KEYS: &[&str] = &["quiet", "ignore"];
    const NO_HOLD: Option<&str> =
        Some("an XID fires when the driver reports it; quiet sets how long it stays firing without a new one");

    fn defaults() -> Configured<XidSettings> {
        // Critical for every code but an application's own (`shared::severity::xid_level`).
        let quiet = Duration::from_millis(shared::severity::XID_RECENT_MS);
        Configured::on(Severity::Warning, 0, XidSettings { quiet, ignore: Vec::new() })
    }

    fn set(settings: &mut XidSettings, key: &str, value: &toml::Value) -> Result<(), String> {
        match key {
            "quiet" => settings.quiet = quiet(value)?,
            _ => {
                let code = |v: &toml::Value| v.as_integer().and_then(|i| u64::try_from(i).ok());
                settings.ignore = list(value, code, "the XID codes (whole numbers, e.g. [43])")?;
            }
        }
        Ok(())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<XidSettings>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rule.config;
        let key = Key::gpu(Rule::Xid, &gpu.info.uuid);
        let seen = book.gpus.entry(gpu.info.uuid.clone()).or_default().newest_xid_ms;
        let fresh: Vec<_> =
            gpu.health.map(|h| h.xids.iter().filter(|x| x.timestamp_ms > seen).collect()).unwrap_or_default();
        if let Some(newest) = fresh.iter().map(|x| x.timestamp_ms).max() {
            book.gpus.entry(gpu.info.uuid.clone()).or_default().newest_xid_ms = newest;
        }
        let counted: Vec<_> = fresh.into_iter().filter(|x| !rule.settings.ignore.contains(&x.code)).collect();
        let label = gpu.label();
        // An application's fault warns, any other code is critical: the overview's rule.
        let level = counted.iter().map(|x| xid_level(x.code)).max().unwrap_or_default();
        let severity = config.severity.rated(level);
        if let Some(latest) = counted.iter().max_by_key(|x| x.timestamp_ms) {
            let (code, meaning) = (latest.code, xid_meaning(latest.code));
            if let Some(firing) = book.firing.get_mut(&key) {
                firing.events += u32::try_from(counted.len()).unwrap_or(u32::MAX);
                firing.last_event_ms = now;
                firing.alert.message = format!(
                    "{label} reported {} XID errors since {}; the latest is XID {code}: {meaning}",
                    firing.events,
                    human_ago(firing.alert.fired_ms, now)
                );
                // A worse code makes the alert worse (announced); a milder one leaves it as it was.
                let kind = if severity > firing.alert.severity { ChangeKind::Rated } else { ChangeKind::Updated };
                firing.alert.severity = firing.alert.severity.max(severity);
                book.changes.push(Change { kind, alert: firing.alert.clone() });
                return;
            }
            let message = format!("{label} reported XID {code}: {meaning}");
            let action = "look the code up in NVIDIA's XID catalogue and the kernel log (dmesg); application faults \
                          (13, 31, 43) need the job's owner, hardware ones (48, 79, 94, 95) a reset or a ticket";
            let draft = Draft { severity, ..book.draft(config, key, gpu, message, action) };
            book.fire(draft, silences, now);
        } else if book.firing.get(&key).is_some_and(|f| now.saturating_sub(f.last_event_ms) >= ms(rule.settings.quiet))
        {
            book.resolve(&key, now);
        }
    }

    fn condition(rule: &Configured<XidSettings>, _held: &str) -> String {
        let quiet = human(ms(rule.settings.quiet));
        let ignored = if rule.settings.ignore.is_empty() {
            String::new()
        } else {
            let codes: Vec<String> = rule.settings.ignore.iter().map(u64::to_string).collect();
            format!(" (except {})", codes.join(", "))
        };
        let application: Vec<String> = APPLICATION_XIDS.iter().map(u64::to_string).collect();
        format!(
            "any XID error{ignored}, critical but for an application's ({}); resolves after {quiet} without one",
            application.join(", ")
        )
    }

    fn prometheus(rule: &Configured<XidSettings>) -> Option<Prom> {
        let quiet = prom_duration(rule.settings.quiet);
        let ignored: String = rule.settings.ignore.iter().map(|code| format!(" != {code}")).collect();
        let mut meaning = String::new();
        for code in 1..=1000u64 {
            let text = xid_meaning(code);
            if text != xid_meaning(0) {
                let _ = write!(
                    meaning,
                    "{{{{ {}if eq $value {code}.0 }}}}{text}",
                    if meaning.is_empty() { "" } else { "else " }
                );
            }
        }
        meaning.push_str("{{ else }}see NVIDIA's XID catalogue{{ end }}");
        let own = rule.config.severity;
        // The level depends on the code: a template over `$value` where the rating changes it.
        let severity = if rated(own, Level::Warning) == rated(own, Level::Critical) {
            own.as_str().to_owned()
        } else {
            let application: Vec<String> =
                APPLICATION_XIDS.iter().map(|code| format!("(eq $value {code}.0)")).collect();
            format!(
                "{{{{ if or {} }}}}{}{{{{ else }}}}{}{{{{ end }}}}",
                application.join(" "),
                rated(own, Level::Warning),
                rated(own, Level::Critical)
            )
        };
        Some(Prom {
            notes: vec![
                "DCGM_FI_DEV_XID_ERRORS holds only the last code: a repeat of the same code is not seen as new, and \
                 the"
                .to_owned(),
                format!("alert resolves {quiet} after the value last changed (gpudash counts every XID event)."),
            ],
            expr: format!("DCGM_FI_DEV_XID_ERRORS > 0{ignored} and changes(DCGM_FI_DEV_XID_ERRORS[{quiet}]) > 0"),
            hold: rule.config.hold,
            severity,
            summary: format!("{GPU}: XID {{{{ $value }}}} ({meaning})"),
            description: "See https://docs.nvidia.com/deploy/xid-errors/ for the code; check the kernel log (dmesg) \
                          for the process involved, and drain the GPU if it repeats."
                .to_owned(),
        })
    }
}
