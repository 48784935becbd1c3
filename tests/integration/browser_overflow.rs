//! Issue 56, item 1: nothing is clipped at 1280×800 or 390×844. Eight simulated GPUs with the
//! longest words the page says (a GPU past its slowdown temperature, power brake and cap, an ECC
//! error, an XID, an idle holder, a reservation), every card open: the overview's table and every
//! card fit their boxes (scrollWidth ≤ clientWidth), and the page does not scroll sideways.

use std::time::Duration;

use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::TestServer;

/// Every box that must not scroll sideways, with how far it would: `[name, scrollWidth, clientWidth]`.
const WIDTHS: &str = "const boxes = [['page', document.scrollingElement], \
      ['overview', document.querySelector('#gpu-overview .table-scroll')], \
      ...[...document.querySelectorAll('article.gpu-card')].map(c => ['card ' + c.dataset.index, c])]; \
    return boxes.filter(([, e]) => e).map(([name, e]) => [name, e.scrollWidth, e.clientWidth]);";

#[tokio::test]
async fn the_overview_and_every_card_fit_at_1280_and_390_px() {
    let mut simulator = Simulator::new(8, 500);
    for fault in ["hot:0@0s", "power-brake:1@0s", "power-cap:2@0s", "ecc:3@0s", "xid:4:79@0s", "idle-holder:5@0s"] {
        simulator = simulator.with_fault(fault.parse().unwrap());
    }
    let options = gpudash::Options::new(Duration::from_millis(500));
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
            save_screenshot(&c, &format!("overflow-{width}x{height}.png")).await;
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
