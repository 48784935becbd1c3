//! The page in a real browser: Debian's headless Chromium driven through
//! chromedriver with fantoccini.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use futures_util::FutureExt;
use gpudash::telemetry::NoGpus;
use gpudash::telemetry::simulator::Simulator;
use hyper_util::client::legacy::connect::HttpConnector;
use shared::DevicesResponse;
use shared::units::format_bytes;

use crate::browser_overview::open_all_cards;
pub(crate) use crate::support::eventually;
use crate::support::{Said, TestServer, eventually_every};

/// One browser at a time: two Chromiums on two cores make every test slow.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// Windows narrower than this are emulated phones (headless Chromium widens a narrower window).
const PHONE_WIDTH: u32 = 500;

fn tool(var: &str, default: &str) -> String {
    let path = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    assert!(
        Path::new(&path).exists(),
        "browser tests need {path} (set {var} to override). Install Debian's packages with \
         `apt-get install chromium chromium-driver`, or run `bash tests/run.sh`, which does"
    );
    path
}

/// Runs `test` with a fresh browser profile at `width`×`height`, closing the browser whatever happens.
pub(crate) async fn with_browser<F, Fut>(width: u32, height: u32, test: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = ()>,
{
    with_browser_flags(width, height, &[], test).await;
}

/// [`with_browser`] with more Chromium flags, e.g. `--host-resolver-rules=MAP gpudash.test 127.0.0.1`
/// for a page served from a name that is not loopback (so not a secure context over http).
pub(crate) async fn with_browser_flags<F, Fut>(width: u32, height: u32, flags: &[&str], test: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = ()>,
{
    let _one = ONE_BROWSER.lock().await;
    let chromium = tool("CHROMIUM", "/usr/bin/chromium");
    let chromedriver = tool("CHROMEDRIVER", "/usr/bin/chromedriver");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut driver = tokio::process::Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| (*f).to_owned()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    args.push(format!("--window-size={width},{height}"));
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    let mut capabilities = serde_json::Map::new();
    let mut options = serde_json::json!({ "binary": chromium, "args": args });
    if width < PHONE_WIDTH {
        // A desktop window is never narrower than 500 px: below that, a phone's screen.
        options["mobileEmulation"] =
            serde_json::json!({ "deviceMetrics": { "width": width, "height": height, "pixelRatio": 1.0 } });
    }
    capabilities.insert("goog:chromeOptions".into(), options);

    let client = eventually_every(20, Duration::from_millis(100), "chromedriver to start a session", || async {
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .map_err(|e| Said(e.to_string()))
    })
    .await;
    let outcome = AssertUnwindSafe(test(client.clone())).catch_unwind().await;
    let _ = client.close().await;
    let _ = driver.kill().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

pub(crate) async fn texts(client: &Client, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for element in client.find_all(Locator::Css(css)).await.unwrap_or_default() {
        out.push(element.text().await.unwrap_or_default());
    }
    out
}

/// What the process table's owner cell shows for an `/api/processes` entry: the owner (else the
/// Unix user, else "?"), and the Unix user in parentheses where it differs.
pub(crate) fn owner_cell(p: &serde_json::Value) -> String {
    let unix = p["user"].as_str();
    let owner = p["owner"]["name"].as_str().or(unix).unwrap_or("?");
    match unix.filter(|u| *u != owner) {
        Some(unix) => format!("{owner} ({unix})"),
        None => owner.to_owned(),
    }
}

pub(crate) async fn js(client: &Client, script: &str) -> serde_json::Value {
    client.execute(script, vec![]).await.expect("script runs")
}

/// Where browser tests leave screenshots for a look by eye: `target/screenshots`, made if missing.
pub(crate) fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

/// Saves what the browser shows as `name` in [`screenshot_dir`].
pub(crate) async fn save_screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("a screenshot");
    std::fs::write(screenshot_dir().join(name), png).expect("write the screenshot");
}

async fn status(client: &Client) -> String {
    texts(client, "#conn-status").await.into_iter().next().unwrap_or_default()
}

#[tokio::test]
async fn cards_show_the_simulated_gpus_and_charts_draw_as_ticks_arrive() {
    let server = TestServer::simulated(2, 1000).await;
    let url = server.url("/");
    let api = server.url("/api/devices");
    // Tall enough for both opened cards' charts to be on screen, where charts draw.
    with_browser(1280, 1800, |c| async move {
        c.goto(&url).await.unwrap();
        // The overview shows rows; the cards, with their charts, open from them.
        open_all_cards(&c, 2).await;
        eventually(15, "two GPU cards", || async { (texts(&c, ".gpu-card .gpu-name").await.len() == 2).then_some(()) })
            .await;
        eventually(10, "status 'live'", || async { (status(&c).await == "live").then_some(()) }).await;

        let devices: DevicesResponse = reqwest::get(&api).await.unwrap().json().await.unwrap();
        let names = texts(&c, ".gpu-card .gpu-name").await;
        let expected: Vec<_> = devices.devices.iter().map(|d| d.info.name.clone()).collect();
        assert_eq!(names, expected);
        assert!(texts(&c, "#simulated-banner").await[0].contains("Simulated GPUs"));
        assert_eq!(texts(&c, ".gpu-card .badge-simulated").await.len(), 2);

        // The memory figure is the API's, formatted the shared way (retry across a tick boundary).
        eventually(5, "card memory equal to the API's", || async {
            let devices: DevicesResponse = reqwest::get(&api).await.ok()?.json().await.ok()?;
            let shown = texts(&c, ".gpu-card .mem-text").await;
            let expected: Vec<_> = devices
                .devices
                .iter()
                .map(|d| {
                    let used = d.latest.as_ref()?.memory_used?;
                    Some(format!("{} / {}", format_bytes(used), format_bytes(d.info.memory_total)))
                })
                .collect::<Option<Vec<_>>>()?;
            (shown == expected).then_some(())
        })
        .await;

        // The chart has been drawn, with real pixels, and is drawn again as ticks arrive.
        let draws = |c: Client| async move {
            js(&c, "return [...document.querySelectorAll('canvas.mem-chart')].map(e => +e.getAttribute('data-draws'))")
                .await
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let first = draws(c.clone()).await;
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|&d| d > 0), "{first:?}");
        let inked = js(
            &c,
            "const k = document.querySelector('canvas.mem-chart'); const d = k.getContext('2d')\
             .getImageData(0, 0, k.width, k.height).data; let n = 0; \
             for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;",
        )
        .await;
        assert!(inked.as_u64().unwrap() > 500, "the chart canvas is blank: {inked}");
        let before = texts(&c, ".gpu-card .mem-text").await;
        eventually(10, "redraws and changing figures", || {
            let (c, before, first) = (c.clone(), before.clone(), first.clone());
            async move {
                let now = draws(c.clone()).await;
                let changed = texts(&c, ".gpu-card .mem-text").await != before;
                (changed && now.iter().zip(&first).all(|(n, f)| n > f)).then_some(())
            }
        })
        .await;

        save_screenshot(&c, "dashboard.png").await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn without_gpus_the_page_says_why_and_how_to_simulate() {
    let reason = "NVIDIA driver not available: libnvidia-ml.so.1: cannot open shared object file";
    let server = TestServer::with_source(Box::new(NoGpus::new(reason.into(), 1000)), 1000).await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let text =
            eventually(15, "the no-GPU notice", || async { texts(&c, "#no-gpus").await.into_iter().next() }).await;
        assert!(text.contains("No GPUs to show"), "{text}");
        assert!(text.contains(reason), "{text}");
        assert!(text.contains("gpudash --simulate 4"), "{text}");
        assert!(texts(&c, "#simulated-banner").await.is_empty(), "no simulated banner for a real host");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_page_reconnects_after_a_server_restart() {
    let server = TestServer::simulated(1, 200).await;
    let addr = server.running.addr().to_string();
    let url = server.url("/");
    let (back_tx, back_rx) = tokio::sync::oneshot::channel::<TestServer>();
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let restarter = tokio::spawn(async move {
        stopped_rx.await.unwrap();
        server.stop().await;
        // Not a wait for a state: the server stays down a while, so the page must notice and retry.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let again = TestServer::on(&addr, Box::new(Simulator::new(1, 200)), 200).await;
        let _ = back_tx.send(again);
    });
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(15, "status 'live'", || async { (status(&c).await == "live").then_some(()) }).await;
        stopped_tx.send(()).unwrap();
        eventually(10, "status 'reconnecting'", || async { (status(&c).await == "reconnecting").then_some(()) }).await;
        let again = back_rx.await.unwrap();
        eventually(15, "status 'live' again", || async { (status(&c).await == "live").then_some(()) }).await;
        assert_eq!(texts(&c, "tr.gpu-row").await.len(), 1, "the GPU's row is back");
        again.stop().await;
    })
    .await;
    restarter.await.unwrap();
}

#[tokio::test]
async fn on_a_phone_cards_stack_without_sideways_scrolling() {
    let server = TestServer::simulated(2, 1000).await;
    let url = server.url("/");
    with_browser(390, 844, |c| async move {
        c.goto(&url).await.unwrap();
        open_all_cards(&c, 2).await;
        let layout = js(
            &c,
            "const cards = [...document.querySelectorAll('.gpu-card')].map(e => e.getBoundingClientRect()); \
             return { vw: document.documentElement.clientWidth, sw: document.documentElement.scrollWidth, \
                      lefts: cards.map(r => Math.round(r.left)), widths: cards.map(r => r.width) };",
        )
        .await;
        let vw = layout["vw"].as_f64().unwrap();
        assert!(layout["sw"].as_f64().unwrap() <= vw, "sideways scrolling: {layout}");
        let lefts = layout["lefts"].as_array().unwrap();
        assert_eq!(lefts[0], lefts[1], "cards should stack in one column: {layout}");
        assert!(layout["widths"][0].as_f64().unwrap() > 0.8 * vw, "{layout}");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_theme_toggle_switches_between_dark_and_light() {
    let server = TestServer::simulated(1, 1000).await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let toggle = c.wait().for_element(Locator::Css("#theme-toggle")).await.unwrap();
        let theme = || async { js(&c, "return document.documentElement.getAttribute('data-theme')").await };
        let before = theme().await;
        toggle.click().await.unwrap();
        let after = theme().await;
        assert_ne!(before, after);
        assert!(matches!(after.as_str(), Some("dark" | "light")), "{after}");
        let background = js(&c, "return getComputedStyle(document.body).backgroundColor").await;
        toggle.click().await.unwrap();
        assert_ne!(js(&c, "return getComputedStyle(document.body).backgroundColor").await, background);
    })
    .await;
    server.stop().await;
}
