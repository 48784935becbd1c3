//! Time axes and timestamps in words: where the ticks of a time chart go (round local
//! minutes, hours, days), how each reads ("14:05", "Mon 30 Nov"), and a timestamp that
//! says its date when it is not today. Pure: the caller passes its zone's offset.

/// Steps a time axis may take, in ms: round seconds, minutes, hours and days.
const STEPS: [u64; 17] = [
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    10_800_000,
    21_600_000,
    43_200_000,
    DAY_MS,
    2 * DAY_MS,
    7 * DAY_MS,
    14 * DAY_MS,
];

const DAY_MS: u64 = 86_400_000;
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// The ticks of a time axis and how they read.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeTicks {
    /// Tick times, ms since the epoch, oldest first.
    pub ticks: Vec<u64>,
    /// Time between ticks, ms.
    pub step: u64,
    /// Offset of the zone the ticks are aligned in, ms east of UTC.
    pub offset_ms: i64,
}

impl TimeTicks {
    /// Ticks between `from` and `to` at the smallest round step that gives at most
    /// `max_ticks`, aligned on the local clock (`offset_ms` east of UTC): hours on
    /// the hour, days at local midnight.
    pub fn new(from: u64, to: u64, max_ticks: u64, offset_ms: i64) -> Self {
        let span = to.saturating_sub(from);
        let step = STEPS.into_iter().find(|step| span / step <= max_ticks.max(1)).unwrap_or(14 * DAY_MS);
        let step_i = step as i64;
        let local = from as i64 + offset_ms;
        // Days (and weeks of days) count from local midnight, so a tick is a date.
        let first = local.div_euclid(step_i) * step_i + step_i - offset_ms;
        let first = if step > DAY_MS {
            let midnight = local.div_euclid(DAY_MS as i64) * DAY_MS as i64 - offset_ms;
            (0..).map(|k| midnight + k * DAY_MS as i64).find(|t| *t >= from as i64).unwrap_or(first)
        } else {
            first
        };
        let ticks = (0..)
            .map(|k| first + k * step_i)
            .take_while(|&t| t <= to as i64)
            .filter_map(|t| u64::try_from(t).ok())
            .collect();
        Self { ticks, step, offset_ms }
    }

    /// How tick `t` reads: the date ("Mon 30 Nov") on day steps and at local midnight,
    /// so a range across days says which; else the time, with seconds on short steps.
    pub fn label(&self, t: u64) -> String {
        let local = Civil::at(t, self.offset_ms);
        if self.step >= DAY_MS || local.ms_of_day == 0 { local.weekday_date() } else { local.time(self.step < 60_000) }
    }
}

/// A time on the local calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    /// 0 (Sunday) to 6.
    pub weekday: u32,
    pub ms_of_day: u64,
}

impl Civil {
    /// `ms` since the epoch on the calendar of the zone `offset_ms` east of UTC.
    pub fn at(ms: u64, offset_ms: i64) -> Self {
        let local = ms as i64 + offset_ms;
        let days = local.div_euclid(DAY_MS as i64);
        let ms_of_day = local.rem_euclid(DAY_MS as i64) as u64;
        let (year, month, day) = crate::time::civil_from_days(days);
        // 1 January 1970 was a Thursday.
        let weekday = (days + 4).rem_euclid(7) as u32;
        Self { year, month, day, weekday, ms_of_day }
    }

    /// "14:05", or with seconds "14:05:09".
    pub fn time(&self, seconds: bool) -> String {
        let s = self.ms_of_day / 1000;
        let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
        if seconds { format!("{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}") }
    }

    /// "30 Nov".
    pub fn date(&self) -> String {
        format!("{} {}", self.day, MONTHS[(self.month as usize).saturating_sub(1) % 12])
    }

    /// "Mon 30 Nov".
    pub fn weekday_date(&self) -> String {
        format!("{} {}", WEEKDAYS[self.weekday as usize % 7], self.date())
    }
}

/// A moment as the page writes every time (alerts, errors, bookings, runs, the audit log), in
/// the zone `offset_ms` east of UTC, always with its date: "30 Nov 14:05" in the year of `now`,
/// "30 Nov 2025 14:05" in another; with `seconds`, "30 Nov 14:05:09".
pub fn moment(ms: u64, now: u64, offset_ms: i64, seconds: bool) -> String {
    let (then, today) = (Civil::at(ms, offset_ms), Civil::at(now, offset_ms));
    if then.year == today.year {
        format!("{} {}", then.date(), then.time(seconds))
    } else {
        format!("{} {} {}", then.date(), then.year, then.time(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;
    /// Monday 30 November 2026, 00:00 UTC.
    const MON_30_NOV: u64 = 1_795_996_800_000;

    fn labels(t: &TimeTicks) -> Vec<String> {
        t.ticks.iter().map(|&tick| t.label(tick)).collect()
    }

    #[test]
    fn the_calendar_is_right() {
        assert_eq!(Civil::at(0, 0), Civil { year: 1970, month: 1, day: 1, weekday: 4, ms_of_day: 0 });
        let monday = Civil::at(MON_30_NOV + 14 * HOUR + 5 * 60_000, 0);
        assert_eq!((monday.year, monday.month, monday.day, monday.weekday), (2026, 11, 30, 1));
        assert_eq!(monday.weekday_date(), "Mon 30 Nov");
        assert_eq!(monday.time(false), "14:05");
        // An hour west of UTC it is still Sunday 29 November at 23:30.
        let sunday = Civil::at(MON_30_NOV + HOUR / 2, -(HOUR as i64));
        assert_eq!((sunday.weekday_date(), sunday.time(false)), ("Sun 29 Nov".to_owned(), "23:30".to_owned()));
        assert_eq!(Civil::at(951_782_400_000, 0).date(), "29 Feb", "2000 was a leap year");
    }

    #[test]
    fn an_hour_ticks_on_the_quarter_hour() {
        let from = MON_30_NOV + 10 * HOUR + 7 * 60_000;
        let t = TimeTicks::new(from, from + HOUR, 4, 0);
        assert_eq!(t.step, 900_000);
        assert_eq!(labels(&t), ["10:15", "10:30", "10:45", "11:00"]);
        // Half an hour east of UTC, hour ticks land on local hours.
        let t = TimeTicks::new(MON_30_NOV, MON_30_NOV + 3 * HOUR, 3, 1_800_000);
        assert_eq!(t.ticks, [MON_30_NOV + HOUR / 2, MON_30_NOV + 3 * HOUR / 2, MON_30_NOV + 5 * HOUR / 2]);
        assert_eq!(labels(&t), ["01:00", "02:00", "03:00"]);
        // Five minutes on a wide chart tick every 30 s, with seconds.
        let t = TimeTicks::new(MON_30_NOV + 5000, MON_30_NOV + 305_000, 10, 0);
        assert_eq!(t.step, 30_000);
        assert_eq!(t.label(t.ticks[0]), "00:00:30");
    }

    #[test]
    fn a_day_names_the_midnight_it_crosses() {
        let from = MON_30_NOV - 10 * HOUR;
        let t = TimeTicks::new(from, from + 24 * HOUR, 8, 0);
        assert_eq!(t.step, 3 * HOUR);
        assert_eq!(labels(&t), ["15:00", "18:00", "21:00", "Mon 30 Nov", "03:00", "06:00", "09:00", "12:00"]);
    }

    #[test]
    fn a_week_ticks_at_local_midnights_with_dates() {
        let from = MON_30_NOV - 7 * 24 * HOUR + 13 * HOUR;
        let t = TimeTicks::new(from, from + 7 * 24 * HOUR, 8, 0);
        assert_eq!(t.step, 24 * HOUR);
        assert_eq!(
            labels(&t),
            ["Tue 24 Nov", "Wed 25 Nov", "Thu 26 Nov", "Fri 27 Nov", "Sat 28 Nov", "Sun 29 Nov", "Mon 30 Nov"]
        );
        // Narrow: every other day, still at midnight.
        let t = TimeTicks::new(from, from + 7 * 24 * HOUR, 4, 0);
        assert_eq!(t.step, 2 * 24 * HOUR);
        assert_eq!(labels(&t), ["Tue 24 Nov", "Thu 26 Nov", "Sat 28 Nov", "Mon 30 Nov"]);
    }

    #[test]
    fn thirty_days_tick_weekly_at_midnight() {
        let to = MON_30_NOV + 15 * HOUR;
        let t = TimeTicks::new(to - 30 * 24 * HOUR, to, 6, 0);
        assert_eq!(t.step, 7 * 24 * HOUR);
        assert!(t.ticks.iter().all(|tick| tick % (24 * HOUR) == 0), "{:?}", t.ticks);
        assert_eq!(labels(&t)[0], "Sun 1 Nov");
        assert!(t.ticks.len() <= 6);
    }

    #[test]
    fn a_moment_always_says_its_date_and_the_year_when_not_this_one() {
        let now = MON_30_NOV + 15 * HOUR;
        assert_eq!(moment(MON_30_NOV + 14 * HOUR + 5 * 60_000, now, 0, false), "30 Nov 14:05");
        assert_eq!(moment(MON_30_NOV + 14 * HOUR + 5 * 60_000 + 9_000, now, 0, true), "30 Nov 14:05:09");
        assert_eq!(moment(MON_30_NOV - 10 * HOUR, now, 0, false), "29 Nov 14:00");
        assert_eq!(moment(MON_30_NOV - 400 * 24 * HOUR, now, 0, false), "26 Oct 2025 00:00");
        // The zone decides the day: 00:30 in UTC+1 is already the 30th, 23:30 UTC on the 29th.
        assert_eq!(moment(MON_30_NOV - HOUR / 2, now, 3_600_000, false), "30 Nov 00:30");
        assert_eq!(moment(MON_30_NOV - HOUR / 2, now, 0, false), "29 Nov 23:30");
    }
}
