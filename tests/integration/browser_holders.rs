//! Issue 56, item 3: who holds a GPU, named where one looks. bo's scripted job runs on GPU 1 while
//! the local user has it reserved: the row's Users chip marks bo as the intruder, the card lists
//! every holder with owner, memory, workload, idle time and PID, the reservation's warning names bo,
//! and the grid's tile says who holds it in its tooltip.

use std::time::Duration;

use fantoccini::Locator;
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::TestServer;

/// The simulator's scripted jobs' PIDs: 60000 + the fault's position.
const BO_PID: u32 = 60_000;

#[tokio::test]
async fn the_row_card_and_tile_name_who_holds_a_gpu_and_mark_an_intruder() {
    let simulator = Simulator::new(2, 250)
        .with_fault("job:1:bo:8:50@0s+10m".parse().unwrap())
        .with_fault("job-ends:0@0s".parse().unwrap());
    let server = TestServer::with_options(Box::new(simulator), gpudash::Options::new(Duration::from_millis(250))).await;
    let now = gpudash::telemetry::now_ms();
    let booking = shared::reservations::ReservationRequest {
        devices: vec![1],
        start_ms: now,
        end_ms: now + 3_600_000,
        note: "evaluation".into(),
    };
    let made = reqwest::Client::new().post(server.url("/api/reservations")).json(&booking).send().await.unwrap();
    assert_eq!(made.status(), 201);
    let holder = made.json::<serde_json::Value>().await.unwrap()["user"].as_str().unwrap().to_owned();
    assert_ne!(holder, "bo");
    let url = server.url("/");
    with_browser(1280, 800, |c| async move {
        c.goto(&url).await.unwrap();
        let chip = "tr.gpu-row[data-index='1'] .owner-chip.owner-intruder";
        let marked =
            eventually(20, "bo's chip marked on GPU 1's row", || async { texts(&c, chip).await.into_iter().next() })
                .await;
        assert!(marked.starts_with("⚠ bo 8.00 GiB"), "{marked}");
        let title = c.find(Locator::Css(chip)).await.unwrap().attr("title").await.unwrap().unwrap_or_default();
        assert!(title.ends_with(&format!("runs here while {holder} has it reserved")), "{title}");

        c.find(Locator::Css("tr.gpu-row[data-index='1'] .gpu-row-toggle")).await.unwrap().click().await.unwrap();
        let card = ".gpu-card[data-index='1']";
        let line = eventually(20, "GPU 1's card listing its holders", || async {
            texts(&c, &format!("{card} .gpu-holders li")).await.into_iter().next()
        })
        .await;
        assert!(
            line.starts_with("bo · 8.00 GiB")
                && line.contains(&format!("PID {BO_PID}"))
                && line.ends_with(&format!("⚠ runs here while {holder} has it reserved")),
            "{line}"
        );
        let warning = texts(&c, &format!("{card} .reservation-intruders")).await.concat();
        assert!(warning.ends_with(&format!("bo (PID {BO_PID})")), "the warning names bo: {warning}");
        // GPU 0 holds nothing, and says so.
        c.find(Locator::Css("tr.gpu-row[data-index='0'] .gpu-row-toggle")).await.unwrap().click().await.unwrap();
        let none = eventually(20, "GPU 0's card", || async {
            texts(&c, ".gpu-card[data-index='0'] .gpu-holders-none").await.into_iter().next()
        })
        .await;
        assert_eq!(none, "No process holds it.");

        // The grid: the tile's tooltip (written on focus) names who holds it.
        c.find(Locator::Css("#layout-toggle")).await.unwrap().click().await.unwrap();
        let tile = "li.gpu-tile[data-index='1'] .gpu-tile-button";
        eventually(20, "the grid", || async { (!texts(&c, tile).await.is_empty()).then_some(()) }).await;
        js(&c, &format!("document.querySelector(\"{tile}\").focus(); return true")).await;
        let said = c.find(Locator::Css(tile)).await.unwrap().attr("title").await.unwrap().unwrap_or_default();
        assert!(said.contains("held by bo"), "the tile's tooltip: {said}");
    })
    .await;
    server.stop().await;
}
