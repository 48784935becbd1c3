//! The wall clock every part stamps its records with (samples, lab runs, audit entries).

/// Milliseconds since the Unix epoch, the time unit of every sample.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
