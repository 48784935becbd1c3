//! Issue 56, item 1: nothing is clipped at 1280×800 or 390×844. Eight simulated GPUs with the
//! longest words the page says (a GPU past its slowdown temperature, power brake and cap, an ECC
//! error, an XID, an idle holder, a reservation), every card open: the overview's table and every
//! card fit their boxes (scrollWidth ≤ clientWidth), and the page does not scroll sideways. At
//! 1280 px the header keeps one row with a three-part alerts badge, and every box of the booking
//! form keeps apart from the next GPU's label.

use std::time::Duration;

use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::{TestServer, eventually_every};

/// Every box that must not scroll sideways, with how far it would: `[name, scrollWidth, clientWidth]`.
const WIDTHS: &str = "const boxes = [['page', document.scrollingElement], \
      ['overview', document.querySelector('#gpu-overview .table-scroll')], \
      ...[...document.querySelectorAll('article.gpu-card')].map(c => ['card ' + c.dataset.index, c])]; \
    return boxes.filter(([, e]) => e).map(([name, e]) => [name, e.scrollWidth, e.clientWidth]);";

/// The header's parts as `[class, top, bottom, width]` (one row: they overlap vertically).
const HEADER_PARTS: &str = "return [...document.querySelector('header.topbar').children]\
    .filter(e => e.offsetParent).map(e => { const r = e.getBoundingClientRect(); \
    return [e.className || e.id, r.top, r.bottom, r.width]; });";

/// The booking form's GPU labels on one row, as the gap in px from each to the next (negative: they overlap).
const BOOKING_GAPS: &str = "const ls = [...document.querySelectorAll('#reservation-form .reservation-gpu')]\
    .map(l => l.getBoundingClientRect()); \
    return ls.slice(1).map((r, i) => [ls[i], r]).filter(([a, b]) => Math.abs(a.top - b.top) < 2) \
    .map(([a, b]) => b.left - a.right);";

#[tokio::test]
async fn the_overview_and_every_card_fit_at_1280_and_390_px() {
    let mut simulator = Simulator::new(8, 500);
    for fault in [
        "hot:0@0s",
        "power-brake:1@0s",
        "power-cap:2@0s",
        "ecc:3@0s",
        "xid:4:79@0s",
        "idle-holder:5@0s",
        "job-ends:7@1s",
    ] {
        simulator = simulator.with_fault(fault.parse().unwrap());
    }
    // GPU 7's job ends: its info alert ("GPU free") within a second, beside the critical and warning ones.
    let quick_free = gpudash::alerts::AlertsConfig::parse("[rules.gpu_free]\nfor = \"1s\"\n", "test.toml").unwrap();
    let options = gpudash::Options { alerts: quick_free, ..gpudash::Options::new(Duration::from_millis(500)) };
    let server = TestServer::with_options(Box::new(simulator), options).await;
    let now = gpudash::telemetry::now_ms();
    let booking = shared::reservations::ReservationRequest {
        devices: vec![6],
        start_ms: now,
        end_ms: now + 3_600_000,
        note: "a long evaluation of the new tokenizer".into(),
    };
    let made = reqwest::Client::new().post(server.url("/api/reservations")).json(&booking).send().await.unwrap();
    assert_eq!(made.status(), 201);
    let url = server.url("/");
    for (width, height) in [(1280, 800), (390, 844)] {
        let url = url.clone();
        with_browser(width, height, |c| async move {
            c.goto(&url).await.unwrap();
            // The hot GPU past its slowdown, the XID, and owners on the rows: the widest the cells get.
            eventually(60, "the GPU rows with their faults and owners", || async {
                let rows = texts(&c, "tr.gpu-row").await.join("\n");
                let chips = texts(&c, "tr.gpu-row .owner-chip").await.len();
                (rows.contains("slowdown at") && rows.contains("XID 79") && chips >= 4).then_some(())
            })
            .await;
            c.find(fantoccini::Locator::Css("#expand-all")).await.unwrap().click().await.unwrap();
            eventually(20, "every card open", || async {
                (js(&c, "return document.querySelectorAll('article.gpu-card').length").await == 8).then_some(())
            })
            .await;
            // Critical, warning and info alerts (ECC, the idle holder, GPU 7 free): the widest badge.
            eventually_every(60, Duration::from_millis(250), "a three-part alerts badge", || async {
                let parts = texts(&c, "#alerts-badge .alerts-badge-part").await;
                if parts.len() == 3 { Ok(()) } else { Err(parts) }
            })
            .await;
            save_screenshot(&c, &format!("overflow-{width}x{height}.png")).await;
            if width == 1280 {
                let parts = js(&c, HEADER_PARTS).await;
                let rows = parts.as_array().unwrap();
                let at = |i: usize| rows.iter().map(move |p| p[i].as_f64().unwrap());
                let (top, bottom) = (at(1).fold(f64::MIN, f64::max), at(2).fold(f64::MAX, f64::min));
                assert!(top < bottom, "at 1280 px the header wraps (every part's [name, top, bottom, width]: {parts})");
            }
            let gaps = js(&c, BOOKING_GAPS).await;
            let gaps: Vec<f64> = gaps.as_array().unwrap().iter().filter_map(serde_json::Value::as_f64).collect();
            assert!(
                !gaps.is_empty() && gaps.iter().all(|&g| g >= 8.0),
                "at {width}×{height} a booking box runs into the next GPU's label (gaps in px: {gaps:?})"
            );
            let widths = js(&c, WIDTHS).await;
            let clipped: Vec<&serde_json::Value> = widths
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b[1].as_f64().unwrap() > b[2].as_f64().unwrap() + 1.0)
                .collect();
            assert!(clipped.is_empty(), "at {width}×{height}, these scroll sideways: {clipped:?} (all: {widths})");
        })
        .await;
    }
    server.stop().await;
}
