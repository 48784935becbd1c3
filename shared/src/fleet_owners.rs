//! Across the fleet, per owner (`GET /api/fleet/owners?range=30d`): where a GPU is free now,
//! who holds GPUs idle on any host, and who used how much over a range, summed across hosts
//! from each gpudash's usage counters (`increase()` in PromQL).

use serde::{Deserialize, Serialize};

/// The shortest and longest usage range `GET /api/fleet/owners` takes, seconds.
pub const MIN_RANGE_S: u64 = 60;
pub const MAX_RANGE_S: u64 = 400 * 86_400;
/// The default range: a day.
pub const DEFAULT_RANGE_S: u64 = 86_400;

/// Body of `GET /api/fleet/owners`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetOwners {
    /// The Prometheus server asked.
    pub prometheus: String,
    pub queried_ms: u64,
    pub query_ms: u64,
    /// Why some or all figures are missing; the parts that did answer are still listed.
    pub error: Option<String>,
    /// The usage range, seconds back from `queried_ms`.
    pub range_s: u64,
    /// Hosts with a GPU free now (healthy, no process, no reservation), most free GPUs first.
    pub free: Vec<FleetFreeHost>,
    /// Owners holding memory on GPUs that compute nothing (each host's own idle rule), most memory first.
    pub idle: Vec<FleetIdleHolder>,
    /// Usage per owner over the range, summed across hosts, most GPU time first.
    pub usage: Vec<FleetOwnerUsage>,
}

impl FleetOwners {
    /// Leaves out names (an anonymous visitor when tokens exist): idle holders and usage merge into one row each.
    pub fn hide_people(&mut self) {
        let hidden = crate::usage::HIDDEN_USER.to_owned();
        if !self.idle.is_empty() {
            let mut merged = FleetIdleHolder { owner: hidden.clone(), ..FleetIdleHolder::default() };
            for holder in self.idle.drain(..) {
                merged.hosts += holder.hosts;
                merged.gpus += holder.gpus;
                merged.memory_bytes += holder.memory_bytes;
                merged.longest_idle_s = merged.longest_idle_s.max(holder.longest_idle_s);
            }
            self.idle.push(merged);
        }
        if !self.usage.is_empty() {
            let mut merged = FleetOwnerUsage { owner: hidden, ..FleetOwnerUsage::default() };
            for row in self.usage.drain(..) {
                merged.hosts = merged.hosts.max(row.hosts);
                merged.gpu_seconds += row.gpu_seconds;
                merged.memory_gib_seconds += row.memory_gib_seconds;
                merged.idle_gib_seconds += row.idle_gib_seconds;
                merged.energy_joules += row.energy_joules;
            }
            self.usage.push(merged);
        }
    }
}

/// One host with free GPUs now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetFreeHost {
    pub instance: String,
    pub hostname: String,
    /// Its gpudash page, when it is one.
    pub url: Option<String>,
    /// The free GPUs' indices.
    pub gpus: Vec<u32>,
    /// Their models, distinct.
    pub models: Vec<String>,
}

/// One owner holding GPUs idle, across hosts.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetIdleHolder {
    pub owner: String,
    pub hosts: u32,
    pub gpus: u32,
    /// Memory held idle, all hosts together.
    pub memory_bytes: u64,
    /// The longest idle hold among them, seconds.
    pub longest_idle_s: u64,
}

/// One owner's usage over the range, all hosts together.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetOwnerUsage {
    pub owner: String,
    /// Hosts where the owner used any GPU time in the range.
    pub hosts: u32,
    pub gpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub idle_gib_seconds: f64,
    pub energy_joules: f64,
}

impl FleetIdleHolder {
    /// `owner`, with nothing counted yet.
    pub fn named(owner: &str) -> Self {
        Self { owner: owner.to_owned(), ..Self::default() }
    }
}

impl FleetOwnerUsage {
    /// `owner`, with nothing counted yet.
    pub fn named(owner: &str) -> Self {
        Self { owner: owner.to_owned(), ..Self::default() }
    }
}

/// The query string of `GET /api/fleet/owners`: `range`, a duration such as `90m`, `24h` or `30d`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetOwnersQuery {
    pub range: Option<String>,
}

/// Why a `range` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("'{0}' is not a range; use a whole number and a unit: s, m, h or d (e.g. 90m, 24h, 30d)")]
    NotARange(String),
    #[error("'{0}' is out of range; the usage range must be between 1m and 400d")]
    OutOfRange(String),
}

/// `range` in seconds: digits then one of `s`, `m`, `h`, `d`, within [`MIN_RANGE_S`]..=[`MAX_RANGE_S`].
pub fn parse_range(range: &str) -> Result<u64, RangeError> {
    let shown = || crate::text::shown(&range.chars().take(40).collect::<String>());
    let trimmed = range.trim();
    let digits = trimmed.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &trimmed[digits.len()..];
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(RangeError::NotARange(shown())),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RangeError::NotARange(shown()));
    }
    let seconds =
        digits.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)).ok_or_else(|| RangeError::OutOfRange(shown()))?;
    if !(MIN_RANGE_S..=MAX_RANGE_S).contains(&seconds) {
        return Err(RangeError::OutOfRange(shown()));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_a_number_and_a_unit_within_bounds() {
        assert_eq!(parse_range("24h"), Ok(86_400));
        assert_eq!(parse_range("30d"), Ok(30 * 86_400));
        assert_eq!(parse_range("90m"), Ok(5400));
        assert_eq!(parse_range("60s"), Ok(60));
        for bad in ["", "h", "1.5h", "-1h", "1w", "10", "1h30m", "１h"] {
            assert!(matches!(parse_range(bad), Err(RangeError::NotARange(_))), "{bad}");
        }
        for far in ["59s", "401d", "99999999999999999999d", "0m"] {
            assert!(matches!(parse_range(far), Err(RangeError::OutOfRange(_))), "{far}");
        }
        assert_eq!(
            parse_range("1w").unwrap_err().to_string(),
            "'1w' is not a range; use a whole number and a unit: s, m, h or d (e.g. 90m, 24h, 30d)"
        );
    }

    #[test]
    fn hiding_people_merges_owners() {
        let mut owners = FleetOwners {
            idle: vec![
                FleetIdleHolder { owner: "ana".into(), hosts: 1, gpus: 2, memory_bytes: 10, longest_idle_s: 60 },
                FleetIdleHolder { owner: "bo".into(), hosts: 2, gpus: 2, memory_bytes: 5, longest_idle_s: 600 },
            ],
            usage: vec![
                FleetOwnerUsage { owner: "ana".into(), hosts: 2, gpu_seconds: 1.0, ..FleetOwnerUsage::default() },
                FleetOwnerUsage { owner: "bo".into(), hosts: 1, gpu_seconds: 2.0, ..FleetOwnerUsage::default() },
            ],
            ..FleetOwners::default()
        };
        owners.hide_people();
        assert_eq!(
            owners.idle,
            [FleetIdleHolder {
                owner: crate::usage::HIDDEN_USER.into(),
                hosts: 3,
                gpus: 4,
                memory_bytes: 15,
                longest_idle_s: 600
            }]
        );
        assert_eq!((owners.usage.len(), owners.usage[0].gpu_seconds, owners.usage[0].hosts), (1, 3.0, 2));
    }
}
