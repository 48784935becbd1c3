//! Human-readable units, shared so the page and the CLI print the same way.

const KIB: f64 = 1024.0;

/// Bytes in binary units with three significant digits: "512 MiB", "139 GiB", "1.50 GiB".
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= KIB && unit + 1 < UNITS.len() {
        value /= KIB;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{} {}", three_digits(value), UNITS[unit]) }
}

/// Milliwatts as watts: "312 W", "71.5 W".
pub fn format_watts(milliwatts: u32) -> String {
    format!("{} W", three_digits(f64::from(milliwatts) / 1000.0))
}

/// An optional value through `f`, or "n/a" when the GPU did not report it.
pub fn or_na<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "n/a".to_owned(), f)
}

fn three_digits(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(512 << 20), "512 MiB");
        assert_eq!(format_bytes(150_754_820_096), "140 GiB");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
        assert_eq!(format_bytes(u64::MAX), "16384 PiB");
    }

    #[test]
    fn watts_and_na() {
        assert_eq!(format_watts(71_500), "71.5 W");
        assert_eq!(format_watts(700_000), "700 W");
        assert_eq!(or_na(None::<u32>, |v| v.to_string()), "n/a");
        assert_eq!(or_na(Some(5), |v| format!("{v}%")), "5%");
    }
}
