//! Issue 32, items 8 and 9 in a real browser: a GPU booked an hour from now is still free, and
//! "Free" says "reserved from 14:00"; each GPU shows its bookings of the next 24 hours as a bar
//! (on its card and in the Reservations panel) in the viewer's zone, named once; tables write
//! "2 Dec 14:00" and the form takes a 24-hour time. One owner's "Held but idle" alerts read as one
//! card that lists them, and "Silence all" silences every one.

use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::Simulator;
use shared::alerts::{AlertsResponse, Rule};
use shared::reservations::{Reservation, ReservationRequest};

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::{TestServer, get_json};

const HOUR: u64 = 3_600_000;

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css)).await.unwrap().click().await.unwrap();
}

/// "2 Dec 14:05": a day, a month's three letters, a 24-hour time.
fn table_moment(text: &str) -> bool {
    let parts: Vec<&str> = text.split(' ').collect();
    parts.len() == 3
        && parts[0].parse::<u32>().is_ok_and(|d| (1..=31).contains(&d))
        && parts[1].len() == 3
        && hh_mm(parts[2])
}

fn hh_mm(text: &str) -> bool {
    text.len() == 5 && text.as_bytes()[2] == b':' && shared::time::parse_time_of_day(text).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booked_gpu_says_so_when_free_and_every_gpu_shows_its_next_24_hours() {
    let sim = Simulator::new(2, 250)
        .with_fault("job-ends:0@0s".parse().unwrap())
        .with_fault("job-ends:1@0s".parse().unwrap());
    // With history, so that its charts name their zone.
    let dir = tempfile::tempdir().unwrap();
    let store = gpudash::store::Store::open(dir.path(), true, gpudash::store::Retention::default()).unwrap();
    let options = gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(250)) };
    let server = TestServer::with_options(Box::new(sim), options).await;
    let start = gpudash::telemetry::now_ms() + HOUR;
    let request =
        ReservationRequest { devices: vec![1], start_ms: start, end_ms: start + 2 * HOUR, note: "eval".into() };
    let made = reqwest::Client::new().post(server.url("/api/reservations")).json(&request).send().await.unwrap();
    assert_eq!(made.status(), 201, "{:?}", made.text().await);
    let booked: Reservation = made.json().await.unwrap();
    let url = server.url("/");
    with_browser(1280, 800, |c| async move {
        c.goto(&url).await.unwrap();
        let offset = js(&c, "return -new Date().getTimezoneOffset()").await.as_i64().unwrap() as i32;
        // The start as the page writes it, by the page's own rule: "00:40" today, "4 Dec 00:40" when an
        // hour from now is past midnight.
        let note =
            shared::reservations::free_note(std::slice::from_ref(&booked), 1, gpudash::telemetry::now_ms(), offset)
                .expect("a booking an hour away is near");
        let from = note.trim_start_matches("reserved from ").to_owned();
        let zone = shared::time::zone_name(offset);
        // Not in force yet: GPU 1 is free, and says when it stops being.
        let free = eventually(20, "Free to name GPU 1's booking", || async {
            let free = texts(&c, "#free-gpus").await.into_iter().next()?;
            free.contains("reserved from").then_some(free)
        })
        .await;
        assert!(
            free.starts_with("Free: GPU 0, GPU 1 (reserved from ") && free.ends_with(&format!("{from})")),
            "{free}"
        );
        assert!(texts(&c, ".free-soon[data-index='0']").await.is_empty(), "GPU 0 has no booking");

        // The panel: one bar per GPU, GPU 1's booking an hour in, the hours under it, the zone named.
        let bar = "#reservations-timeline .booking-timeline[data-index='1']";
        let placed = eventually(10, "GPU 1's booking on its bar", || async {
            let left = js(&c, &format!("return document.querySelector(\"{bar} .booking\")?.style.left ?? null")).await;
            left.as_str().and_then(|l| l.trim_end_matches('%').parse::<f64>().ok())
        })
        .await;
        assert!((3.5..5.0).contains(&placed), "an hour of 24 is ~4.2%: {placed}");
        let label = js(&c, &format!("return document.querySelector(\"{bar}\").getAttribute('aria-label')")).await;
        let label = label.as_str().unwrap().to_owned();
        assert!(label.starts_with(&format!("GPU 1, next 24 h: {} {from}–", booked.user)), "{label}");
        let empty = "#reservations-timeline .booking-timeline[data-index='0'] .booking";
        assert_eq!(js(&c, &format!("return document.querySelectorAll(\"{empty}\").length")).await, 0);
        let caption = texts(&c, "#reservations-timeline .booking-caption").await.concat();
        assert_eq!(caption, "Next 24 hours", "the zone is named once, above the form, the bars and the table");
        let ticks = texts(&c, "#reservations-timeline .booking-tick").await;
        assert_eq!(ticks.len(), 5, "{ticks:?}");
        assert!(ticks[0] == "now" && ticks[1..].iter().all(|t| hh_mm(t)), "{ticks:?}");

        // One time format: the table writes "2 Dec 15:00", and so does the form (24-hour), the zone
        // is named once above both.
        let row = texts(&c, "tr.reservation-row .reservation-from").await.concat();
        assert!(table_moment(&row) && row.ends_with(&from), "{row}");
        let typed = js(&c, "const i = document.querySelector('.reservation-start'); return [i.type, i.value]").await;
        assert_eq!(typed[0], "text", "no 12-hour picker");
        assert!(table_moment(typed[1].as_str().unwrap()), "{typed}");
        assert_eq!(texts(&c, ".reservations-zone").await.concat(), format!("Times in {zone}"));
        let named = js(&c, "return document.querySelector('#reservations').textContent").await;
        assert_eq!(named.as_str().unwrap().matches(zone.as_str()).count(), 1, "the panel names its zone once: {named}");
        // The History charts' time axes say their zone once, beside the range.
        assert_eq!(texts(&c, "#history .history-zone").await.concat(), format!("Times in {zone}"));

        // The card: the booking in words and on its bar.
        crate::browser_overview::open_all_cards(&c, 2).await;
        let soon = eventually(10, "GPU 1's card to say when it is booked", || async {
            texts(&c, ".gpu-card[data-index='1'] .reserved-soon").await.into_iter().next()
        })
        .await;
        assert_eq!(soon, format!("Booked: reserved from {from} by {}", booked.user));
        let on_card = js(&c, "return document.querySelectorAll(\".gpu-card[data-index='1'] .booking\").length").await;
        assert_eq!(on_card, 1);
        assert!(texts(&c, ".gpu-card[data-index='0'] .reserved-soon").await.is_empty());
        js(&c, "document.querySelector('#reservations').scrollIntoView()").await;
        save_screenshot(&c, "reservations-timeline.png").await;
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owners_idle_processes_are_one_card_silenced_at_once() {
    // Three spin loops of ana's (util 98%, no SM activity): three idle_held alerts on GPUs 0–2.
    let source = (0..3).fold(Simulator::new(4, 200), |s, gpu| {
        s.with_fault(format!("job:{gpu}:ana:8:98:spin@0s+10m").parse().unwrap())
    });
    let options = gpudash::Options {
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(source), options).await;
    eventually(30, "three idle_held alerts", || async {
        let firing: AlertsResponse = get_json(&server, "/api/alerts?state=firing&rule=idle_held").await;
        (firing.alerts.len() == 3).then_some(())
    })
    .await;
    let url = server.url("/#alerts");
    let shared = &server;
    with_browser(1280, 800, |c| async move {
        let server = shared;
        c.goto(&url).await.unwrap();
        let group = "#alerts-list > li.alert-group[data-rule='idle_held'][data-owner='ana']";
        eventually(15, "ana's idle alerts as one card", || async {
            (texts(&c, &format!("{group} .alert-group-item")).await.len() == 3).then_some(())
        })
        .await;
        assert_eq!(texts(&c, &format!("{group} .alert-group-summary")).await, ["3 processes on GPUs 0, 1 and 2"]);
        save_screenshot(&c, "alerts-grouped.png").await;
        let alone = "#alerts-list > li.alert-row[data-rule='idle_held']";
        assert!(texts(&c, alone).await.is_empty(), "no idle card stands alone");

        click(&c, &format!("{group} .alert-silence-all")).await;
        let reason = c.find(Locator::Css(&format!("{group} .alert-silence-all-form .alert-silence-reason"))).await;
        reason.unwrap().send_keys("notebooks kept for a demo").await.unwrap();
        click(&c, &format!("{group} .alert-silence-all-submit")).await;
        eventually(15, "every idle alert silenced, on the server and on the page", || async {
            let all: AlertsResponse = get_json(server, "/api/alerts?state=firing&rule=idle_held").await;
            let mut gpus: Vec<&str> =
                all.silences.iter().filter(|s| s.rule == Rule::IdleHeld).map(|s| s.gpu_uuid.as_str()).collect();
            gpus.sort_unstable();
            let silenced = all.alerts.iter().all(|a| a.silenced.is_some());
            let page = texts(&c, "#alerts-list > li.alert-row.alert-silenced[data-rule='idle_held']").await.len();
            (gpus.len() == 3 && silenced && page == 3 && texts(&c, group).await.is_empty()).then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}
