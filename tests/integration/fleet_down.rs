//! A host whose scrape target is down from the start (nothing listens there): Prometheus has no
//! GPU series of it, yet the Fleet lists it, with Prometheus's last scrape error, in the API and
//! on the page, instead of dropping it.

use std::time::Duration;

use shared::fleet::FleetResponse;

use crate::browser::{eventually, texts, with_browser};
use crate::fleet::{free_port, instance, quick_fleet_config, start_prometheus};
use crate::support::eventually_every;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_target_is_down_is_listed_with_the_scrape_error() {
    let dir = tempfile::tempdir().unwrap();
    let live = instance("fleet-live", 1, None).await;
    // A port nothing listens on: every scrape of it is refused.
    let dead = format!("127.0.0.1:{}", free_port());
    let targets = [live.running.addr().to_string(), dead.clone()];
    let (mut prometheus, prometheus_url) = start_prometheus(dir.path(), &targets, 1).await;
    let viewer = instance("viewer", 1, Some(quick_fleet_config(&prometheus_url))).await;
    let api = viewer.url("/api/fleet");

    let fleet = eventually_every(30, Duration::from_millis(250), "the live node and the dead target", || async {
        let fleet: FleetResponse = reqwest::get(&api).await.unwrap().json().await.unwrap();
        let both = fleet.nodes.len() == 2 && fleet.nodes.iter().any(|n| n.instance == dead && n.last_error.is_some());
        if both && fleet.error.is_none() { Ok(fleet) } else { Err(fleet) }
    })
    .await;
    let down = fleet.nodes.iter().find(|n| n.instance == dead).unwrap();
    assert!(down.stale && down.up == Some(false) && down.gpus == 0, "{down:?}");
    assert_eq!(down.hostname, "127.0.0.1");
    let error = down.last_error.as_deref().unwrap();
    assert!(error.contains("connection refused"), "Prometheus's words: {error}");
    assert_eq!((fleet.summary.nodes, fleet.summary.stale_nodes), (2, 1));
    assert!(fleet.gpus.iter().all(|g| g.instance != dead), "no GPU figures are made up for it");
    let live_node = fleet.nodes.iter().find(|n| n.hostname == "fleet-live").unwrap();
    assert!(live_node.up == Some(true) && live_node.last_error.is_none() && live_node.gpus == 1);

    // A host filter keeps it; a user filter (which a down host cannot pass) leaves it out.
    let by_host: FleetResponse = reqwest::get(format!("{api}?host=127.0.0.1")).await.unwrap().json().await.unwrap();
    assert!(by_host.nodes.iter().any(|n| n.instance == dead), "{by_host:?}");
    let by_user: FleetResponse = reqwest::get(format!("{api}?user=nobody")).await.unwrap().json().await.unwrap();
    assert!(by_user.nodes.iter().all(|n| n.instance != dead), "{by_user:?}");

    // The page: a row of its own that says it is down and why.
    let url = viewer.url("/#fleet");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let state = eventually(20, "the down host's row", || async {
            texts(&c, "#fleet-table tr.fleet-down .fleet-state").await.pop()
        })
        .await;
        assert!(state.starts_with("down") && state.contains("connection refused"), "{state}");
    })
    .await;

    prometheus.stop();
    viewer.stop().await;
    live.stop().await;
}
