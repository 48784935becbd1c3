//! A bar that screen readers read too: `role="meter"` with its value, bounds and the figure as
//! words (`aria-valuetext`, "12.0 GiB of 80.0 GiB, 15%"), for memory and utilization bars.

use leptos::prelude::*;

/// A 0–100 % bar; `class` names the track (its fill is `class-fill`), `label` is what it
/// measures and `text` the figure read out in place of the bare percent.
#[component]
pub fn Meter(
    class: &'static str,
    label: &'static str,
    /// The filled share in percent; clamped to 0–100.
    percent: impl Fn() -> Option<f64> + Send + Sync + Copy + 'static,
    text: impl Fn() -> String + Send + Sync + 'static,
) -> impl IntoView {
    let shown = move || percent().map_or(0.0, |p| p.clamp(0.0, 100.0));
    view! {
        <div
            class=class
            role="meter"
            aria-label=label
            aria-valuemin="0"
            aria-valuemax="100"
            aria-valuenow=move || format!("{:.0}", shown())
            aria-valuetext=text
        >
            <div class=format!("{class}-fill") style:transform=move || format!("scaleX({:.3})", shown() / 100.0)></div>
        </div>
    }
}

/// "12.0 GiB of 80.0 GiB, 15%", or "n/a" when the used figure is unknown: a memory bar's words.
pub fn memory_words(used: Option<u64>, total: u64) -> String {
    use shared::units::format_bytes;
    match used {
        Some(used) if total > 0 => {
            let percent = used as f64 * 100.0 / total as f64;
            format!("{} of {}, {percent:.0}%", format_bytes(used), format_bytes(total))
        }
        _ => "n/a".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_reads_used_of_total_and_percent() {
        let gib = 1 << 30;
        assert_eq!(memory_words(Some(12 * gib), 80 * gib), "12.0 GiB of 80.0 GiB, 15%");
        assert_eq!(memory_words(None, 80 * gib), "n/a");
        assert_eq!(memory_words(Some(1), 0), "n/a");
    }
}
