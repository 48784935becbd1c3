//! How the page writes figures that `shared::units` does not cover: clocks,
//! links, durations, energy, rates, lists of GPUs, and timestamps.

use shared::{
    PcieLink,
    units::{format_bytes, or_na, three_digits},
};

/// The "n/a" of `shared::units`, for a value with nothing to show.
pub fn na() -> String {
    or_na(None::<()>, |()| String::new())
}

pub fn percent(value: u32) -> String {
    format!("{value}%")
}

pub fn mhz(value: u32) -> String {
    format!("{value} MHz")
}

/// "on", "off" or "n/a".
pub fn on_off(value: Option<bool>) -> String {
    or_na(value, |on| if on { "on" } else { "off" }.to_owned())
}

/// "Gen5 x16".
pub fn pcie(link: PcieLink) -> String {
    format!("Gen{} x{}", link.generation, link.width)
}

/// The link as it runs now over the best it can do: "Gen1 x16 / Gen5 x16".
pub fn pcie_now_and_max(now: Option<PcieLink>, max: Option<PcieLink>) -> String {
    match (now, max) {
        (None, None) => na(),
        (now, max) => format!("{} / {}", or_na(now, pcie), or_na(max, pcie)),
    }
}

/// Clock event reasons as NVML names them, comma-separated; "none" when clocks run free.
pub fn clock_events(events: Option<&[String]>) -> String {
    match events {
        None => na(),
        Some([]) => "none".to_owned(),
        Some(events) => events.join(", "),
    }
}

/// Fan speeds, "45%" or "40%, 42%"; "n/a" for boards without fans NVML can read.
pub fn fans(speeds: Option<&[u32]>) -> String {
    match speeds {
        None | Some([]) => na(),
        Some(speeds) => speeds.iter().map(|&s| percent(s)).collect::<Vec<_>>().join(", "),
    }
}

/// Bytes per second in binary units: "1.50 GiB/s".
pub fn rate(bytes_per_s: u64) -> String {
    format!("{}/s", format_bytes(bytes_per_s))
}

/// Energy from millijoules: kWh, the unit on an electricity bill, with three significant digits.
pub fn energy(millijoules: u64) -> String {
    format!("{} kWh", three_digits(millijoules as f64 / 3.6e9))
}

/// A running time in the one duration format (`shared::time::duration`): "42s", "13m 5s", "2h 13m", "3d 4h".
pub fn duration(ms: u64) -> String {
    shared::time::duration(ms)
}

/// GPU indexes as a list: "0, 3".
pub fn indexes(devices: &[u32]) -> String {
    devices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// The browser's zone at `ms`, ms east of UTC.
fn offset_at(ms: f64) -> i64 {
    -(js_sys::Date::new(&ms.into()).get_timezone_offset() as i64) * 60_000
}

/// A moment in the one format of every time on the page, in the browser's zone, always with
/// its date: "30 Nov 14:05", "30 Nov 2025 14:05" in another year (`shared::time_axis::moment`,
/// tested there). The page names its zone once (`zone_caption`).
pub fn stamp(ms: f64) -> String {
    shared::time_axis::moment(ms.max(0.0) as u64, js_sys::Date::now() as u64, offset_at(ms), false)
}

/// `stamp` with seconds, for what changes within a minute: "30 Nov 14:05:09".
pub fn stamp_seconds(ms: f64) -> String {
    shared::time_axis::moment(ms.max(0.0) as u64, js_sys::Date::now() as u64, offset_at(ms), true)
}

/// A server-written text with each of its moments ("2026-12-01 14:00 UTC", the server's one
/// form) rewritten as `stamp` writes it in the browser's zone (`shared::time::localize`).
pub fn server_text(text: &str) -> String {
    shared::time::localize(text, |ms| stamp(ms as f64))
}

/// The viewer's zone now, minutes east of UTC.
pub fn utc_offset() -> i32 {
    -(js_sys::Date::new_0().get_timezone_offset() as i32)
}

/// "Times in UTC+01:00": the zone a page's times are in, named once.
pub fn zone_caption() -> String {
    format!("Times in {}", shared::time::zone_name(utc_offset()))
}

/// Month names as the tables write them ("2 Dec 14:05").
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A moment in the tables' format, "2 Dec 14:05", in the zone `utc_offset` minutes east of UTC:
/// what the reservation form shows and takes.
pub fn moment_text(ms: u64, utc_offset: i32) -> String {
    let civil = shared::time_axis::Civil::at(ms, i64::from(utc_offset) * 60_000);
    format!("{} {}", civil.date(), civil.time(false))
}

/// A moment typed as the tables write it, in the zone `utc_offset` minutes east of UTC, as ms since
/// the epoch: "2 Dec 14:00" (the next such day: typed in December, "3 Jan" is next January),
/// "2 Dec 2027 14:00", "2026-12-02 14:00" (as errors write it) or "14:00" (today). 24-hour only.
pub fn parse_moment(text: &str, now_ms: u64, utc_offset: i32) -> Option<u64> {
    const DAY: i64 = shared::time::DAY_MS as i64;
    let offset = i64::from(utc_offset) * 60_000;
    let words: Vec<&str> = text.split_whitespace().collect();
    let (time, date) = words.split_last()?;
    let time = i64::try_from(shared::time::parse_time_of_day(time)?).ok()?;
    let now = i64::try_from(now_ms).ok()?;
    let at = |days: i64| u64::try_from(days * DAY - offset + time).ok();
    let today = shared::time_axis::Civil::at(now_ms, offset);
    let day_of = |d: &str| d.parse::<u32>().ok().filter(|d| (1..=31).contains(d));
    let month_of = |m: &str| {
        let known = |names: &[&str; 12]| names.iter().position(|n| n.eq_ignore_ascii_case(m));
        known(&MONTHS).or_else(|| known(&MONTH_NAMES)).map(|i| i as u32 + 1)
    };
    match date {
        [] => at(shared::time::days_from_civil(today.year, today.month, today.day)?),
        [iso] => at(i64::try_from(shared::time::parse_date(iso, 0)? / shared::time::DAY_MS).ok()?),
        [day, month] => {
            let (day, month) = (day_of(day)?, month_of(month)?);
            // This year's, unless that was more than a day ago: then next year's.
            [today.year, today.year + 1].into_iter().find_map(|year| {
                let ms = at(shared::time::days_from_civil(year, month, day)?)?;
                (ms as i64 >= now - DAY).then_some(ms)
            })
        }
        [day, month, year] => {
            let year = year.parse::<i64>().ok().filter(|y| (1970..=9999).contains(y))?;
            at(shared::time::days_from_civil(year, month_of(month)?, day_of(day)?)?)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wednesday 2 December 2026, 12:00 UTC.
    const NOON: u64 = 1_796_212_800_000;
    const HOUR: u64 = 3_600_000;

    #[test]
    fn the_form_reads_the_tables_format_in_the_viewers_zone() {
        assert_eq!(moment_text(NOON, 0), "2 Dec 12:00");
        assert_eq!(moment_text(NOON, 330), "2 Dec 17:30");
        assert_eq!(moment_text(NOON, -780), "1 Dec 23:00");
        for offset in [0, 330, -780, 60] {
            for ms in [NOON, NOON + 5 * HOUR, NOON + 30 * 24 * HOUR] {
                assert_eq!(parse_moment(&moment_text(ms, offset), NOON, offset), Some(ms), "{ms} at {offset}");
            }
        }
        assert_eq!(parse_moment("2 Dec 14:00", NOON, 0), Some(NOON + 2 * HOUR));
        assert_eq!(parse_moment(" 2  dec  14:00 ", NOON, 60), Some(NOON + HOUR));
        assert_eq!(parse_moment("2 December 14:00", NOON, 0), Some(NOON + 2 * HOUR));
        assert_eq!(parse_moment("14:00", NOON, 0), Some(NOON + 2 * HOUR), "today");
        assert_eq!(parse_moment("2026-12-02 14:00", NOON, 0), Some(NOON + 2 * HOUR));
        assert_eq!(parse_moment("2 Dec 2027 14:00", NOON, 0), Some(NOON + 2 * HOUR + 365 * 24 * HOUR));
        assert_eq!(parse_moment("3 Jan 09:00", NOON, 0), parse_moment("3 Jan 2027 09:00", NOON, 0), "next January");
        assert_eq!(parse_moment("1 Dec 12:00", NOON, 0), Some(NOON - 24 * HOUR), "yesterday stays this year");
        for bad in
            ["2pm", "2 Dec 2pm", "2 Dec 2:00 PM", "14", "31 Feb 10:00", "2 Dex 14:00", "Dec 2 14:00", "", "0 Dec 1:00"]
        {
            assert_eq!(parse_moment(bad, NOON, 0), None, "{bad}");
        }
    }

    #[test]
    fn links_events_and_fans() {
        let gen5 = PcieLink { generation: 5, width: 16 };
        assert_eq!(pcie_now_and_max(Some(gen5), Some(gen5)), "Gen5 x16 / Gen5 x16");
        assert_eq!(pcie_now_and_max(None, Some(gen5)), "n/a / Gen5 x16");
        assert_eq!(pcie_now_and_max(None, None), "n/a");
        assert_eq!(clock_events(Some(&[])), "none");
        assert_eq!(clock_events(Some(&["idle".to_owned(), "sw_power_cap".to_owned()])), "idle, sw_power_cap");
        assert_eq!(clock_events(None), "n/a");
        assert_eq!(fans(None), "n/a");
        assert_eq!(fans(Some(&[40, 42])), "40%, 42%");
        assert_eq!(on_off(Some(true)), "on");
    }

    #[test]
    fn durations_energy_and_rates_read_naturally() {
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(13 * 60_000 + 5_000), "13m 5s");
        assert_eq!(duration((2 * 60 + 13) * 60_000), "2h 13m");
        assert_eq!(duration((3 * 24 + 4) * 3_600_000), "3d 4h");
        assert_eq!(energy(1_000_000_000), "0.278 kWh");
        assert_eq!(energy(36_000_000_000), "10.0 kWh");
        assert_eq!(rate(3 << 29), "1.50 GiB/s");
        assert_eq!(indexes(&[0, 3]), "0, 3");
        assert_eq!(mhz(1980), "1980 MHz");
    }
}
