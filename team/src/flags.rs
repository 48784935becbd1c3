//! What a flag's value may be, shared by the parts that define flags (`config`, `cli`, `fleet`):
//! the refusal with its message ([`ConfigError`]) and the range checks for durations and counts.
//! It names nothing else in the crate, so any part's flags can use it without a loop.

use std::time::Duration;

/// Why a flag's value was refused; each message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("'{value}' is not an address and port; use IP:PORT, e.g. 127.0.0.1:7070, 0.0.0.0:7070 or [::1]:0")]
    NotAnAddress { value: String },
    /// Not something humantime reads; `examples` are what this flag usually gets.
    #[error("'{value}' is not a duration ({reason}); use e.g. {examples}")]
    NotADuration { value: String, reason: humantime::DurationError, examples: &'static str },
    /// A duration outside the flag's range; `allowed` says the range.
    #[error("'{value}' is out of range; {allowed}")]
    OutOfRange { value: String, allowed: &'static str },
    #[error("'{value}' is too short; use at least {least}")]
    TooShort { value: String, least: &'static str },
    /// Not a whole number within `min..=max` of `what` (connections, GPUs, the lab's limits).
    #[error("'{value}' is not a number of {what}; use a whole number from {min} to {max}")]
    NotACount { value: String, what: &'static str, min: usize, max: usize },
    #[error("'{value}' is not a number of days from 1 to 3650; e.g. 180 keeps half a year")]
    NotAuditDays { value: String },
    #[error("'{value}' is not a host name; use 1 to 253 characters without spaces, e.g. gpu-07")]
    NotAHostName { value: String },
    #[error(
        "'{value}' is not a user name; use 1 to 32 letters, digits, '_', '-' or '.', not starting with '-' (e.g. nobody)"
    )]
    NotAUserName { value: String },
    #[error("'{value}' is not a memory size from 1MiB to 16TiB; use a number and a unit, e.g. 1GiB, 512MiB or 2GB")]
    NotASize { value: String },
    /// A value a rule of `shared` refused, in its own words (they say what is allowed).
    #[error("{0}")]
    Refused(String),
}

/// A duration flag's value within `range`: `examples` for what to write, `allowed` says the range.
pub fn parse_duration_within(
    value: &str,
    range: std::ops::RangeInclusive<Duration>,
    examples: &'static str,
    allowed: &'static str,
) -> Result<Duration, ConfigError> {
    let duration = humantime::parse_duration(value.trim()).map_err(|reason| ConfigError::NotADuration {
        value: value.to_owned(),
        reason,
        examples,
    })?;
    if !range.contains(&duration) {
        return Err(ConfigError::OutOfRange { value: value.to_owned(), allowed });
    }
    Ok(duration)
}

/// A whole number of `what` within `range`.
pub fn parse_count(
    value: &str,
    what: &'static str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(ConfigError::NotACount { value: value.to_owned(), what, min: *range.start(), max: *range.end() }),
    }
}
