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

/// Bytes in the largest binary unit that divides them: "4 KiB", "1 GiB", "1000" (a
/// transfer size as typed in the lab's forms, and as its chart's axis reads it).
pub fn exact_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Milliwatts as watts: "312 W", "71.5 W".
pub fn format_watts(milliwatts: u32) -> String {
    format!("{} W", three_digits(f64::from(milliwatts) / 1000.0))
}

/// An optional value through `f`, or "n/a" when the GPU did not report it.
pub fn or_na<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "n/a".to_owned(), f)
}

/// A figure with three significant digits: "0.512", "12.3", "4210" (no digit is
/// dropped left of the point); 0 is "0", and below 0.001 it turns scientific: "2.0e-5".
///
/// The decimals are chosen by the value as rounded, so 99.97 reads "100", not "100.0".
pub fn three_digits(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".to_owned()
    } else if magnitude >= 99.95 {
        format!("{value:.0}")
    } else if magnitude >= 9.995 {
        format!("{value:.1}")
    } else if magnitude >= 0.9995 {
        format!("{value:.2}")
    } else if magnitude >= 0.000_999_5 {
        format!("{value:.3}")
    } else {
        format!("{value:.1e}")
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
    fn three_significant_digits_at_every_magnitude() {
        assert_eq!(three_digits(0.0), "0");
        assert_eq!(three_digits(0.00002), "2.0e-5");
        assert_eq!(three_digits(0.5123), "0.512");
        assert_eq!(three_digits(1.5), "1.50");
        assert_eq!(three_digits(12.34), "12.3");
        assert_eq!(three_digits(99.97), "100", "the decimals follow the rounded value");
        assert_eq!(three_digits(9.999), "10.0");
        assert_eq!(three_digits(4210.4), "4210");
        assert_eq!(three_digits(-12.34), "-12.3");
    }

    #[test]
    fn exact_bytes_use_the_largest_unit_that_divides() {
        assert_eq!(exact_bytes(4096), "4 KiB");
        assert_eq!(exact_bytes(3 << 30), "3 GiB");
        assert_eq!(exact_bytes(1_572_864), "1536 KiB");
        assert_eq!(exact_bytes(1000), "1000");
    }

    #[test]
    fn watts_and_na() {
        assert_eq!(format_watts(71_500), "71.5 W");
        assert_eq!(format_watts(700_000), "700 W");
        assert_eq!(format_watts(0), "0 W");
        assert_eq!(or_na(None::<u32>, |v| v.to_string()), "n/a");
        assert_eq!(or_na(Some(5), |v| format!("{v}%")), "5%");
    }
}
