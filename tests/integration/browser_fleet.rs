//! The Fleet tab in a real browser, against each engine the fleet reads: Debian's Prometheus, and
//! Debian's VictoriaMetrics, scraping three simulated gpudash instances, read by a fourth; every
//! host listed with its counts, a host's GPUs shown when it is opened, filters listing the GPUs
//! that pass, a stopped instance greyed as stale (down, with the scrape error), and the time the
//! page takes to render an answer.

use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::browser::{eventually, js, texts, with_browser};
use crate::engines::{Engine, start};
use crate::fleet::{instance, quick_fleet_config};
use crate::support::TestServer;

/// `data-host` of every fleet row, in page order.
async fn row_hosts(c: &Client) -> Vec<String> {
    let hosts = js(c, "return [...document.querySelectorAll('tr.fleet-row')].map(r => r.dataset.host)").await;
    serde_json::from_value(hosts).unwrap_or_default()
}

/// (`data-host`, `data-gpus`) of every host line, in page order.
async fn host_rows(c: &Client) -> Vec<(String, u32)> {
    let rows =
        js(c, "return [...document.querySelectorAll('tr.fleet-host-row')].map(r => [r.dataset.host, +r.dataset.gpus])")
            .await;
    serde_json::from_value(rows).unwrap_or_default()
}

#[expect(clippy::print_stdout, reason = "the render time is a figure to read, not to assert")]
fn print_figure(text: &str) {
    println!("{text}");
}

/// Empties a filter as a user would (WebDriver's clear sends no `input` event).
async fn clear(c: &Client, css: &str) {
    let script =
        format!("const i = document.querySelector('{css}'); i.value = ''; i.dispatchEvent(new Event('input'))");
    js(c, &script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_tab_lists_hosts_filters_and_greys_a_stopped_one() {
    fleet_tab_against(Engine::Prometheus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_tab_works_against_victoria_metrics() {
    fleet_tab_against(Engine::VictoriaMetrics).await;
}

/// The whole walk through the tab, with `engine` answering the fleet's queries.
async fn fleet_tab_against(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let names = ["fleet-a", "fleet-b", "fleet-c"];
    let mut nodes = Vec::new();
    for name in names {
        nodes.push(instance(name, 2, None).await);
    }
    let targets: Vec<String> = nodes.iter().map(|n| n.running.addr().to_string()).collect();
    let (_engine, engine_url) = start(engine, dir.path(), &targets, 1000).await;
    let config = quick_fleet_config(&engine_url);
    let viewer = instance("viewer", 1, Some(config)).await;
    let url = viewer.url("/");
    let dead = nodes.remove(1);
    let dead_addr = dead.running.addr().to_string();
    let dead = std::sync::Mutex::new(Some(dead));

    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        c.wait().for_element(Locator::Css("#tab-fleet")).await.expect("the Fleet tab shows").click().await.unwrap();
        // All three hosts, two GPUs each (Prometheus needs a few scrapes first), as one line each.
        eventually(40, "three hosts with two GPUs each", || async {
            let hosts = host_rows(&c).await;
            (hosts.len() == 3 && names.iter().all(|n| hosts.contains(&((*n).to_owned(), 2)))).then_some(())
        })
        .await;
        assert!(row_hosts(&c).await.is_empty(), "no GPU rows before a host is opened");
        let render_ms = js(&c, "return document.querySelector('#fleet-table').dataset.renderMs").await;
        print_figure(&format!("fleet ({engine:?}): table of 3 hosts rendered in {render_ms} ms"));
        let own = format!("http://{}/", targets[0]);
        let link = js(&c, "return document.querySelector('tr.fleet-host-row[data-host=fleet-a] .fleet-host a').getAttribute('href')").await;
        assert_eq!(link, json!(own), "each host links to its own dashboard");
        // Opening a host loads its GPUs.
        // Clicked in the page: a refresh can redraw the row between finding a button and clicking it.
        for host in ["fleet-a", "fleet-b"] {
            let click = format!("document.querySelector('tr.fleet-host-row[data-host={host}] .fleet-open').click(); return true");
            eventually(10, "the host's Open button", || async { js(&c, &click).await.as_bool() }).await;
        }
        eventually(10, "fleet-a's and fleet-b's GPUs", || async {
            let hosts = row_hosts(&c).await;
            ["fleet-a", "fleet-b"].iter().all(|n| hosts.iter().filter(|h| h == n).count() == 2).then_some(())
        })
        .await;
        let links = js(&c, "return [...document.querySelectorAll('tr.fleet-row[data-host=fleet-a] .fleet-host a')].map(a => a.getAttribute('href'))").await;
        assert_eq!(links, json!([own, own]), "each GPU links to its host's dashboard");

        // A host filter narrows the rows in the page.
        let filter = c.find(Locator::Css("#fleet-filter-host")).await.unwrap();
        filter.send_keys("FLEET-C").await.unwrap();
        eventually(5, "only fleet-c", || async {
            let hosts = row_hosts(&c).await;
            (hosts.len() == 2 && hosts.iter().all(|h| h == "fleet-c")).then_some(())
        })
        .await;
        clear(&c, "#fleet-filter-host").await;
        let model = c.find(Locator::Css("#fleet-filter-model")).await.unwrap();
        model.send_keys("no such model").await.unwrap();
        eventually(5, "no rows for an unknown model", || async {
            (row_hosts(&c).await.is_empty() && host_rows(&c).await.is_empty()).then_some(())
        })
        .await;
        clear(&c, "#fleet-filter-model").await;
        eventually(5, "the hosts back, two of them open", || async {
            (host_rows(&c).await.len() == 3 && row_hosts(&c).await.len() == 4).then_some(())
        })
        .await;

        // fleet-b stops: its rows turn stale within the staleness window, and stay listed, saying
        // since when it is down and Prometheus's words for why.
        let node = dead.lock().unwrap().take().expect("the node to stop");
        node.stop().await;
        eventually(20, "fleet-b's line and GPU rows down", || async {
            let stale = texts(&c, "tr.fleet-stale[data-host=fleet-b] .fleet-state").await;
            let down = |t: &String| t.starts_with("down since") && t.contains("connection refused");
            (stale.len() == 3 && stale.iter().all(down)).then_some(())
        })
        .await;
        let others = texts(&c, "tr.fleet-stale:not([data-host=fleet-b])").await;
        assert!(others.is_empty(), "only fleet-b is stale: {others:?} ({dead_addr})");
        let render_ms = js(&c, "return document.querySelector('#fleet-table').dataset.renderMs").await;
        print_figure(&format!("fleet ({engine:?}): latest answer (fleet-b stale) rendered in {render_ms} ms"));
    })
    .await;
    viewer.stop().await;
    for node in nodes {
        node.stop().await;
    }
}

/// Without `--fleet-prometheus`, the tab is not offered.
#[tokio::test]
async fn without_a_prometheus_there_is_no_fleet_tab() {
    let server = TestServer::simulated(1, 500).await;
    let url = server.url("/");
    with_browser(1200, 800, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        c.wait().for_element(Locator::Css("#tab-lab")).await.unwrap();
        // Showing that something does not appear: give it time to, then look.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(texts(&c, "#tab-fleet").await.is_empty());
    })
    .await;
    server.stop().await;
}
