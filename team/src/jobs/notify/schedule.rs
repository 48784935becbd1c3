//! When digests go out: a daily one at a minute of the day (UTC), a weekly one at that minute of
//! a day of the week. A period ends at each such moment and covers the day or week before it.

use shared::jobs::notices::DigestEvery;

const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 24 * 60 * MINUTE_MS;
const WEEK_MS: u64 = 7 * DAY_MS;

/// The days a weekly digest can go out on, Monday first.
pub const WEEKDAYS: [&str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// The digest's period and the moment each one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub every: DigestEvery,
    /// Minutes after 00:00 UTC.
    pub at_minute: u32,
    /// 0 = Monday (weekly digests).
    pub weekday: u8,
}

impl Default for Schedule {
    fn default() -> Self {
        Self { every: DigestEvery::Off, at_minute: 8 * 60, weekday: 0 }
    }
}

impl Schedule {
    /// How long one period is; `None` when digests are off.
    pub fn length_ms(&self) -> Option<u64> {
        match self.every {
            DigestEvery::Off => None,
            DigestEvery::Daily => Some(DAY_MS),
            DigestEvery::Weekly => Some(WEEK_MS),
        }
    }

    /// The first moment a period ends, counted from the epoch (1970-01-01 was a Thursday).
    fn first_end(&self) -> u64 {
        let minute = u64::from(self.at_minute) * MINUTE_MS;
        match self.every {
            DigestEvery::Weekly => (u64::from(self.weekday) + 4) % 7 * DAY_MS + minute,
            _ => minute,
        }
    }

    /// The end of the newest period that has ended by `now_ms`.
    pub fn last_end(&self, now_ms: u64) -> Option<u64> {
        let length = self.length_ms()?;
        let first = self.first_end();
        (now_ms >= first).then(|| first + (now_ms - first) / length * length)
    }

    /// The end of the period under way at `now_ms` (the next digest).
    pub fn next_end(&self, now_ms: u64) -> Option<u64> {
        let length = self.length_ms()?;
        Some(self.last_end(now_ms).map_or(self.first_end(), |last| last + length))
    }

    /// When digests go out, e.g. "daily at 08:00 UTC" or "Mondays at 08:00 UTC"; empty when off.
    pub fn describe(&self) -> String {
        let at = format!("{:02}:{:02} UTC", self.at_minute / 60, self.at_minute % 60);
        match self.every {
            DigestEvery::Off => String::new(),
            DigestEvery::Daily => format!("daily at {at}"),
            DigestEvery::Weekly => {
                let day = WEEKDAYS.get(usize::from(self.weekday)).copied().unwrap_or("monday");
                let mut day = day.to_owned();
                day[..1].make_ascii_uppercase();
                format!("{day}s at {at}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-07 (a Monday) at `hh:mm` UTC.
    fn monday(hh: u64, mm: u64) -> u64 {
        let days = shared::time::days_from_civil(2026, 12, 7).unwrap_or_default() as u64;
        days * DAY_MS + (hh * 60 + mm) * MINUTE_MS
    }

    #[test]
    fn a_daily_period_ends_at_its_minute_each_day() {
        let s = Schedule { every: DigestEvery::Daily, at_minute: 8 * 60, weekday: 0 };
        assert_eq!(s.last_end(monday(9, 0)), Some(monday(8, 0)));
        assert_eq!(s.last_end(monday(8, 0)), Some(monday(8, 0)), "the end itself has ended");
        assert_eq!(s.last_end(monday(7, 59)), Some(monday(8, 0) - DAY_MS));
        assert_eq!(s.next_end(monday(7, 59)), Some(monday(8, 0)));
        assert_eq!(s.next_end(monday(8, 0)), Some(monday(8, 0) + DAY_MS));
        assert_eq!(s.describe(), "daily at 08:00 UTC");
    }

    #[test]
    fn a_weekly_period_ends_on_its_day() {
        let s = Schedule { every: DigestEvery::Weekly, at_minute: 8 * 60, weekday: 0 };
        assert_eq!(s.last_end(monday(8, 0)), Some(monday(8, 0)));
        assert_eq!(s.last_end(monday(8, 0) + 6 * DAY_MS), Some(monday(8, 0)));
        assert_eq!(s.next_end(monday(8, 1)), Some(monday(8, 0) + WEEK_MS));
        let friday = Schedule { weekday: 4, at_minute: 17 * 60, ..s };
        assert_eq!(friday.next_end(monday(9, 0)), Some(monday(17, 0) + 4 * DAY_MS));
        assert_eq!(friday.describe(), "Fridays at 17:00 UTC");
    }

    #[test]
    fn no_period_when_off() {
        let s = Schedule::default();
        assert_eq!((s.last_end(monday(9, 0)), s.next_end(monday(9, 0)), s.describe()), (None, None, String::new()));
    }
}
