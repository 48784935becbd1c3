//! Reading one `[rules.NAME]` table of the alerts file into its rule: the keys every rule takes
//! here, its own through its unit's `set`, each refusal saying what is allowed (the alerts file
//! adds the file's name and the line).

use std::time::Duration;

use shared::alerts::{Rule, Severity};

use super::{AlertRule, Configured};

/// The keys every rule's table takes.
pub const COMMON_KEYS: [&str; 3] = ["enabled", "severity", "for"];

/// Longest `for` or `quiet`: a week.
const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);

/// Reads `table` into `into`, the settings of `rule` (whose unit is `U`).
pub(super) fn load<U: AlertRule>(
    rule: Rule,
    into: &mut Configured<U::Settings>,
    table: &toml::Table,
) -> Result<(), String> {
    let name = rule.as_str();
    if let Some(key) = table.keys().find(|k| !COMMON_KEYS.contains(&k.as_str()) && !U::KEYS.contains(&k.as_str())) {
        let keys: Vec<&str> = COMMON_KEYS.iter().chain(U::KEYS).copied().collect();
        return Err(format!("[rules.{name}] has no key '{key}'; it takes {}", keys.join(", ")));
    }
    if let Some(why) = U::NO_HOLD.filter(|_| table.contains_key("for")) {
        return Err(format!("[rules.{name}] for does not apply: {why}"));
    }
    if let Some(value) = table.get("enabled") {
        into.config.enabled =
            value.as_bool().ok_or_else(|| format!("[rules.{name}] enabled = {value} is not true or false"))?;
    }
    if let Some(value) = table.get("severity") {
        into.config.severity = value.as_str().and_then(Severity::parse).ok_or_else(|| {
            format!("[rules.{name}] severity = {value} is not a severity; use info, warning or critical")
        })?;
    }
    if let Some(value) = table.get("for") {
        into.config.hold = duration(value).map_err(|what| format!("[rules.{name}] for = {value} {what}"))?;
    }
    for key in U::KEYS {
        if let Some(value) = table.get(*key) {
            U::set(&mut into.settings, key, value).map_err(|what| format!("[rules.{name}] {key} = {value} {what}"))?;
        }
    }
    Ok(())
}

/// A duration from zero to a week, e.g. "30s", "5m"; refused with what is allowed.
pub(super) fn duration(value: &toml::Value) -> Result<Duration, String> {
    const EXAMPLES: &str = "use e.g. \"30s\", \"5m\", \"0s\"";
    let text = value.as_str().ok_or_else(|| format!("is not a duration; {EXAMPLES}"))?;
    let parsed = humantime::parse_duration(text.trim()).map_err(|e| format!("is not a duration ({e}); {EXAMPLES}"))?;
    if parsed > LONGEST {
        return Err("is too long; use at most 7d".to_owned());
    }
    Ok(parsed)
}

/// A `quiet`: how long an event's alert stays firing without another, 1 s to a week.
pub(super) fn quiet(value: &toml::Value) -> Result<Duration, String> {
    let quiet = duration(value)?;
    if quiet.is_zero() {
        return Err("would resolve every alert at once; use at least 1s".to_owned());
    }
    Ok(quiet)
}

/// A number within `range` (TOML's integers and floats both).
pub(super) fn number(value: &toml::Value, range: std::ops::RangeInclusive<f64>) -> Result<f64, String> {
    let allowed = || format!("use {} to {}", range.start(), range.end());
    let number = match value {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        _ => return Err(format!("is not a number; {}", allowed())),
    };
    if range.contains(&number) { Ok(number) } else { Err(format!("is out of range; {}", allowed())) }
}

/// A list of `T`, each read by `item` (whose error says what an item may be).
pub(super) fn list<T>(
    value: &toml::Value,
    item: impl Fn(&toml::Value) -> Option<T>,
    what: &str,
) -> Result<Vec<T>, String> {
    let items = value.as_array().ok_or_else(|| format!("is not a list; use a list of {what}"))?;
    items.iter().map(|v| item(v).ok_or_else(|| format!("holds {v}, which is not one of {what}"))).collect()
}
