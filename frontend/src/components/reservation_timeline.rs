//! A GPU's bookings from now to 24 hours ahead as a small bar, in the viewer's zone: on its card
//! and, one row per GPU, in the Reservations panel. Hovering a booking names its holder and times.

use leptos::prelude::*;
use shared::reservations::Reservation;
use shared::time_axis::Civil;

use crate::{components::format::utc_offset, hooks::reservations::Reservations};

/// How far ahead the bar reaches.
pub const WINDOW_MS: u64 = 24 * 3_600_000;
/// Marks under the bar: every six hours.
const TICK_MS: u64 = 6 * 3_600_000;

/// One booking on the bar, as percentages of the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Booking {
    pub id: u64,
    pub left: f64,
    pub width: f64,
    /// "ana 14:00–18:00", the date before a time on another day than now's: "ana 22:00–2 Dec 02:00".
    pub label: String,
    /// In force now.
    pub active: bool,
}

/// The bookings of GPU `device` that fall between `now_ms` and 24 hours later, in start order,
/// their times in the zone `utc_offset` minutes east of UTC.
pub fn bookings(reservations: &[Reservation], device: u32, now_ms: u64, utc_offset: i32) -> Vec<Booking> {
    let end = now_ms + WINDOW_MS;
    let offset_ms = i64::from(utc_offset) * 60_000;
    let today = Civil::at(now_ms, offset_ms).date();
    let moment = |ms: u64| {
        let civil = Civil::at(ms, offset_ms);
        if civil.date() == today { civil.time(false) } else { format!("{} {}", civil.date(), civil.time(false)) }
    };
    let mut out: Vec<Booking> = reservations
        .iter()
        .filter(|r| r.released_ms.is_none() && r.devices.contains(&device) && r.start_ms < end && r.end_ms > now_ms)
        .map(|r| {
            let (from, to) = (r.start_ms.max(now_ms), r.end_ms.min(end));
            let percent = |ms: u64| (ms - now_ms) as f64 / WINDOW_MS as f64 * 100.0;
            Booking {
                id: r.id,
                left: percent(from),
                width: (percent(to) - percent(from)).max(0.5),
                label: format!("{} {}–{}", r.user, moment(r.start_ms), moment(r.end_ms)),
                active: r.active_at(now_ms),
            }
        })
        .collect();
    shared::order::sort_by(&mut out, |a, b| a.left.total_cmp(&b.left));
    out
}

/// The marks under the bar: "now", then the time every six hours (percent, label).
pub fn ticks(now_ms: u64, utc_offset: i32) -> Vec<(f64, String)> {
    let offset_ms = i64::from(utc_offset) * 60_000;
    (0..=WINDOW_MS / TICK_MS)
        .map(|n| {
            let label = if n == 0 { "now".to_owned() } else { Civil::at(now_ms + n * TICK_MS, offset_ms).time(false) };
            ((n * TICK_MS) as f64 / WINDOW_MS as f64 * 100.0, label)
        })
        .collect()
}

/// What a screen reader hears for the bar: "GPU 1, next 24 h: ana 14:00–18:00" or "… no bookings".
pub fn summary(device: u32, bookings: &[Booking]) -> String {
    if bookings.is_empty() {
        return format!("GPU {device}, next 24 h: no bookings");
    }
    let list: Vec<&str> = bookings.iter().map(|b| b.label.as_str()).collect();
    format!("GPU {device}, next 24 h: {}", list.join("; "))
}

/// The reservations and the server's clock at the last reload (nothing without the context).
fn listed() -> impl Fn() -> (Vec<Reservation>, u64) + Copy + Send + Sync + 'static {
    let reservations = use_context::<Reservations>();
    move || reservations.map(|r| r.list.with(|l| (l.reservations.clone(), l.now_ms))).unwrap_or_default()
}

/// `.booking-timeline` of GPU `device`: the bar, its bookings with their holders on hover.
#[component]
pub fn BookingBar(device: u32) -> impl IntoView {
    let listed = listed();
    let shown = Memo::new(move |_| {
        let (list, now) = listed();
        bookings(&list, device, now, utc_offset())
    });
    view! {
        <div class="booking-timeline" data-index=device role="img" aria-label=move || summary(device, &shown.get())>
            {move || {
                shown
                    .get()
                    .into_iter()
                    .map(|b| {
                        view! {
                            <span
                                class="booking"
                                class:booking-now=b.active
                                data-id=b.id
                                style=format!("left:{:.2}%;width:{:.2}%", b.left, b.width)
                                title=b.label
                            ></span>
                        }
                    })
                    .collect_view()
            }}
        </div>
    }
}

/// The hours under a bar: "now", then every six hours in the viewer's zone.
#[component]
pub fn BookingAxis() -> impl IntoView {
    let listed = listed();
    let marks = move || ticks(listed().1, utc_offset());
    view! {
        <div class="booking-axis" aria-hidden="true">
            {move || {
                marks()
                    .into_iter()
                    .map(|(at, label)| view! { <span class="booking-tick" style=format!("left:{at:.2}%")>{label}</span> })
                    .collect_view()
            }}
        </div>
    }
}

/// `#reservations-timeline`: one bar per GPU (on a host of more than 16 GPUs, only the booked ones)
/// for the next 24 hours.
#[component]
pub fn BookingTimeline(gpus: Memo<Vec<u32>>) -> impl IntoView {
    let listed = listed();
    let rows = Memo::new(move |_| {
        let (list, now) = listed();
        let all = gpus.get();
        if all.len() <= 16 {
            return all;
        }
        all.into_iter().filter(|&g| !bookings(&list, g, now, 0).is_empty()).collect()
    });
    view! {
        <figure id="reservations-timeline" class="booking-figure">
            // In the zone the panel names above it (once, for the form, the bars and the table).
            <figcaption class="booking-caption">"Next 24 hours"</figcaption>
            <Show
                when=move || !rows.with(Vec::is_empty)
                fallback=|| view! { <p class="booking-none">"No GPU is booked in the next 24 hours."</p> }
            >
                <For each=move || rows.get() key=|g| *g let:gpu>
                    <div class="booking-row">
                        <span class="booking-gpu">{format!("GPU {gpu}")}</span>
                        <BookingBar device=gpu />
                    </div>
                </For>
                <div class="booking-row">
                    <span class="booking-gpu"></span>
                    <BookingAxis />
                </div>
            </Show>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_597_600_000; // 2025-12-01 14:00 UTC
    const H: u64 = 3_600_000;

    fn booked(id: u64, devices: &[u32], start: u64, end: u64) -> Reservation {
        Reservation {
            id,
            devices: devices.to_vec(),
            user: "ana".into(),
            start_ms: start,
            end_ms: end,
            note: String::new(),
            created_ms: NOW,
            released_ms: None,
            intruders: Vec::new(),
            redacted: false,
        }
    }

    #[test]
    fn bookings_fall_on_the_next_24_hours_in_the_viewers_zone() {
        let list = [
            booked(1, &[1], NOW - H, NOW + 6 * H),
            booked(2, &[1], NOW + 8 * H, NOW + 30 * H),
            booked(3, &[1], NOW + 25 * H, NOW + 26 * H),
            booked(4, &[2], NOW, NOW + H),
            Reservation { released_ms: Some(NOW), ..booked(5, &[1], NOW + 7 * H, NOW + 8 * H) },
        ];
        let bars = bookings(&list, 1, NOW, 0);
        assert_eq!(bars.iter().map(|b| b.id).collect::<Vec<_>>(), [1, 2], "after the window, released: out");
        assert_eq!((bars[0].left, bars[0].width, bars[0].active), (0.0, 25.0, true));
        assert_eq!(bars[0].label, "ana 13:00–20:00");
        assert!((bars[1].left - 100.0 / 3.0).abs() < 1e-9 && (bars[1].width - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!(bars[1].label, "ana 22:00–2 Dec 20:00", "the date on another day");
        assert_eq!(bookings(&list, 1, NOW, 60)[0].label, "ana 14:00–21:00", "UTC+01:00");
        assert!(bookings(&list, 3, NOW, 0).is_empty());
        assert_eq!(summary(3, &[]), "GPU 3, next 24 h: no bookings");
        assert_eq!(summary(1, &bars), "GPU 1, next 24 h: ana 13:00–20:00; ana 22:00–2 Dec 20:00");
    }

    #[test]
    fn ticks_say_now_then_every_six_hours() {
        let marks = ticks(NOW, 0);
        let labels: Vec<&str> = marks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["now", "20:00", "02:00", "08:00", "14:00"]);
        assert_eq!((marks[0].0, marks[4].0), (0.0, 100.0));
    }
}
