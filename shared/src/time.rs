//! One way to write time, for the server's texts and the page: the one calendar conversion
//! (days since the epoch to a date and back), the one duration format ("42s", "13m 5s",
//! "2h 13m", "3d 4h"), dates and minutes in a zone given as minutes east of UTC, and the
//! zone's name ("UTC+01:00"). Pure: the caller passes the zone.

/// Milliseconds in a day.
pub const DAY_MS: u64 = 86_400_000;

/// The date of `days` since 1970-01-01 (negative before it): (year, month 1–12, day 1–31).
/// Howard Hinnant's `civil_from_days`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a date; `None` for a month or day that does not exist
/// (31 February is refused rather than rolled over). Howard Hinnant's `days_from_civil`.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (civil_from_days(days) == (year, month, day)).then_some(days)
}

/// A length of time as every text of gpudash writes it: the two largest units, a zero second
/// part left out: "42s", "13m 5s", "13m", "2h 13m", "3d 4h".
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let (big, small) = match (d, h, m) {
        (0, 0, 0) => return format!("{sec}s"),
        (0, 0, _) => ((m, "m"), (sec, "s")),
        (0, _, _) => ((h, "h"), (m, "m")),
        _ => ((d, "d"), (h, "h")),
    };
    if small.0 == 0 { format!("{}{}", big.0, big.1) } else { format!("{}{} {}{}", big.0, big.1, small.0, small.1) }
}

/// `ms` in the zone `utc_offset` minutes east of UTC, as ms since the local epoch.
fn local(ms: u64, utc_offset: i32) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX).saturating_add(i64::from(utc_offset) * 60_000)
}

/// `YYYY-MM-DD` of the day that holds `ms` in the zone `utc_offset` minutes east of UTC.
pub fn date(ms: u64, utc_offset: i32) -> String {
    let (y, m, d) = civil_from_days(local(ms, utc_offset).div_euclid(DAY_MS as i64));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `HH:MM` (24-hour) of `ms` in the zone `utc_offset` minutes east of UTC.
pub fn time_of_day(ms: u64, utc_offset: i32) -> String {
    let minute = local(ms, utc_offset).rem_euclid(DAY_MS as i64) / 60_000;
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// "2026-12-01 14:00 UTC": a moment in a text whose reader's zone is unknown (errors, alerts).
pub fn utc_minute(ms: u64) -> String {
    format!("{} {} UTC", date(ms, 0), time_of_day(ms, 0))
}

/// The moment a `utc_minute` text names ("2026-12-01 14:00 UTC"), as ms since the epoch.
pub fn parse_utc_minute(text: &str) -> Option<u64> {
    let (date_text, rest) = text.split_once(' ')?;
    let time_text = rest.strip_suffix(" UTC")?;
    (date_text.len() == 10 && time_text.len() == 5).then_some(())?;
    parse_local_minute(date_text, time_text, 0)
}

/// `text` with every moment the server wrote by `utc_minute` ("… reserved by ana from
/// 2026-12-01 14:00 UTC …") rewritten by `show` (the page writes it in the viewer's zone): the
/// server's texts name moments in one fixed, parseable form, and the page reads them back.
pub fn localize(text: &str, show: impl Fn(u64) -> String) -> String {
    const LEN: usize = "2026-12-01 14:00 UTC".len();
    let bytes = text.as_bytes();
    let (mut out, mut copied, mut at) = (String::with_capacity(text.len()), 0, 0);
    while at + LEN <= bytes.len() {
        let starts_clean = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        // What follows ends the stamp: not a longer zone ("UTC+01:00", "UTC:30"), though ": " may.
        let ends_clean = match bytes.get(at + LEN) {
            None => true,
            Some(b':') => bytes.get(at + LEN + 1).is_none_or(|b| !b.is_ascii_alphanumeric()),
            Some(b) => !b.is_ascii_alphanumeric() && !b"+-".contains(b),
        };
        let found = (starts_clean && ends_clean && bytes[at].is_ascii_digit())
            .then(|| text.get(at..at + LEN).and_then(parse_utc_minute))
            .flatten();
        match found {
            Some(ms) => {
                out.push_str(&text[copied..at]);
                out.push_str(&show(ms));
                at += LEN;
                copied = at;
            }
            None => at += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The zone `utc_offset` minutes east of UTC as the page names it: "UTC", "UTC+01:00", "UTC-05:30".
pub fn zone_name(utc_offset: i32) -> String {
    if utc_offset == 0 {
        return "UTC".to_owned();
    }
    let sign = if utc_offset < 0 { '-' } else { '+' };
    let minutes = utc_offset.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

/// The local midnight (ms since the epoch) of a `YYYY-MM-DD` date (years 1970 to 9999) in the
/// zone `utc_offset` minutes east of UTC.
pub fn parse_date(text: &str, utc_offset: i32) -> Option<u64> {
    let mut parts = text.trim().splitn(3, '-');
    let mut next = || parts.next().filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let (year, month, day): (i64, u32, u32) = (next()?.parse().ok()?, next()?.parse().ok()?, next()?.parse().ok()?);
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let midnight = days_from_civil(year, month, day)? * DAY_MS as i64 - i64::from(utc_offset) * 60_000;
    u64::try_from(midnight).ok()
}

/// A 24-hour `HH:MM` (or `H:MM`) time of day, in ms since midnight.
pub fn parse_time_of_day(text: &str) -> Option<u64> {
    let (h, m) = text.trim().split_once(':')?;
    let digits = |t: &str, lengths: std::ops::RangeInclusive<usize>, max: u64| {
        Some(t)
            .filter(|t| lengths.contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit()))?
            .parse::<u64>()
            .ok()
            .filter(|&v| v <= max)
    };
    let (h, m) = (digits(h, 1..=2, 23)?, digits(m, 2..=2, 59)?);
    Some((h * 60 + m) * 60_000)
}

/// A date (`YYYY-MM-DD`) and a 24-hour time (`HH:MM`) in the zone `utc_offset` minutes east of
/// UTC, as ms since the epoch: what the reservation form reads.
pub fn parse_local_minute(date_text: &str, time_text: &str, utc_offset: i32) -> Option<u64> {
    parse_date(date_text, utc_offset)?.checked_add(parse_time_of_day(time_text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-12-01 14:00 UTC.
    const NOW: u64 = 1_764_597_600_000;

    #[test]
    fn the_calendar_converts_both_ways() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for days in [-800_000, -1, 0, 59, 60, 11_016, 20_423, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), Some(days), "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(2026, 2, 31), None, "31 February is refused");
        assert_eq!(days_from_civil(2026, 13, 1), None);
        assert_eq!(days_from_civil(2100, 2, 29), None, "2100 is no leap year");
    }

    #[test]
    fn durations_read_one_way() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(65_000), "1m 5s");
        assert_eq!(duration(13 * 60_000), "13m");
        assert_eq!(duration(13 * 60_000 + 5_000), "13m 5s");
        assert_eq!(duration((2 * 60 + 13) * 60_000 + 59_000), "2h 13m");
        assert_eq!(duration(2 * 3_600_000), "2h");
        assert_eq!(duration((3 * 24 + 4) * 3_600_000), "3d 4h");
    }

    #[test]
    fn dates_and_times_in_a_zone() {
        assert_eq!(utc_minute(NOW), "2025-12-01 14:00 UTC");
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!((date(NOW, 60), time_of_day(NOW, 60)), ("2025-12-01".to_owned(), "15:00".to_owned()));
        assert_eq!((date(NOW, 600), time_of_day(NOW, 600)), ("2025-12-02".to_owned(), "00:00".to_owned()));
        assert_eq!((date(NOW, -900), time_of_day(NOW, -900)), ("2025-11-30".to_owned(), "23:00".to_owned()));
        assert_eq!(parse_utc_minute(&utc_minute(NOW)), Some(NOW));
        for bad in ["2025-12-01 14:00", "2025-12-01 14:00 UTC+1", "2025-12-1 14:00 UTC", "2025-02-30 14:00 UTC"] {
            assert_eq!(parse_utc_minute(bad), None, "{bad}");
        }
        assert_eq!(zone_name(0), "UTC");
        assert_eq!(zone_name(60), "UTC+01:00");
        assert_eq!(zone_name(-330), "UTC-05:30");
    }

    #[test]
    fn a_date_and_24_hour_time_parse_in_the_zone() {
        assert_eq!(parse_date("2025-12-01", 0), Some(NOW - 14 * 3_600_000));
        assert_eq!(parse_date("2025-12-01", 60), Some(NOW - 15 * 3_600_000));
        assert_eq!(parse_local_minute("2025-12-01", "15:00", 60), Some(NOW));
        assert_eq!(parse_local_minute("2025-12-01", "9:05", 0), Some(NOW - 14 * 3_600_000 + 9 * 3_600_000 + 300_000));
        for bad in ["24:00", "12:60", "2pm", "12", "12:5x", ":30", "123:00", "9:5"] {
            assert_eq!(parse_time_of_day(bad), None, "{bad}");
        }
        for bad in ["2025-02-30", "1969-12-31", "2025-1-x", "", "2025--01"] {
            assert_eq!(parse_date(bad, 0), None, "{bad}");
        }
        for ms in [NOW - 14 * 3_600_000, NOW, NOW + 59 * 60_000] {
            assert_eq!(parse_local_minute(&date(ms, -300), &time_of_day(ms, -300), -300), Some(ms));
        }
    }

    #[test]
    fn the_page_rewrites_every_moment_the_server_wrote() {
        let later = NOW + 4 * 3_600_000;
        let text =
            format!("GPU 1 is reserved by ana from {} to {} (reservation 7)", utc_minute(NOW), utc_minute(later));
        let shown = localize(&text, |ms| format!("<{}>", time_of_day(ms, 60)));
        assert_eq!(shown, "GPU 1 is reserved by ana from <15:00> to <19:00> (reservation 7)");
        let idle = format!("looks idle since {}: a spin loop?", utc_minute(NOW));
        assert_eq!(localize(&idle, |_| "!".into()), "looks idle since !: a spin loop?", "a colon after it");
        // Only whole stamps in the server's form: nothing else that looks like one.
        for kept in [
            "no moment here",
            "x2025-12-01 14:00 UTC",
            "2025-12-01 14:00 UTC+01:00",
            "2025-12-01 14:00 UTC:30",
            "2025-13-01 14:00 UTC",
            "é",
        ] {
            assert_eq!(localize(kept, |_| "!".into()), kept);
        }
        assert_eq!(localize(&utc_minute(NOW), |_| "!".into()), "!", "a text that is only a moment");
    }
}
