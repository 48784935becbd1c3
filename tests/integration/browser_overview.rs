//! The overview in a real browser: one row per GPU, all eight on one 1280×800 screen with
//! "Free" and "Who uses what", a row that opens into its card, every severity state in
//! colour and words, from the simulator's faults, and a GPU with a hardware XID unhealthy, not free.

use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::{TestServer, eventually_every, get_json};

/// Opens every GPU's card (the overview shows rows only) and waits until all `count` are drawn.
pub(crate) async fn open_all_cards(c: &Client, count: usize) {
    eventually(15, "the overview's rows", || async { (texts(c, "tr.gpu-row").await.len() == count).then_some(()) })
        .await;
    c.find(Locator::Css("#expand-all")).await.unwrap().click().await.unwrap();
    eventually(10, "every GPU's card open", || async { (texts(c, ".gpu-card").await.len() == count).then_some(()) })
        .await;
}

/// The text of GPU `index`'s row cell `css`.
async fn cell(c: &Client, index: u32, css: &str) -> String {
    texts(c, &format!("tr.gpu-row[data-index='{index}'] {css}")).await.concat()
}

/// GPU `index`'s row class, its health badges and their level classes.
async fn row(c: &Client, index: u32) -> (String, Vec<(String, String)>) {
    let script = format!(
        "const r = document.querySelector(\"tr.gpu-row[data-index='{index}']\"); \
         return [r.className, [...r.querySelectorAll('.sev-badge')].map(b => [b.textContent, b.className])]"
    );
    let value = js(c, &script).await;
    let class = value[0].as_str().unwrap_or_default().to_owned();
    let badges = value[1]
        .as_array()
        .map(|a| {
            a.iter().map(|b| (b[0].as_str().unwrap_or("").to_owned(), b[1].as_str().unwrap_or("").to_owned())).collect()
        })
        .unwrap_or_default();
    (class, badges)
}

/// Waits until GPU `index`'s row shows a badge containing `words` at `level` ("sev-warning",
/// "sev-critical"), the row itself marked at least as severe; returns the badge's text.
async fn badge(c: &Client, index: u32, words: &str, level: &str, secs: u64) -> String {
    let what = format!("GPU {index}: '{words}' ({level})");
    eventually(secs, &what, || async {
        let (class, badges) = row(c, index).await;
        let found = badges.into_iter().find(|(text, class)| text.contains(words) && class.contains(level))?;
        let row_level_ok = class.contains(level) || class.contains("sev-critical");
        row_level_ok.then_some(found.0)
    })
    .await
}

#[tokio::test]
async fn eight_gpus_fit_one_screen_open_into_cards_and_show_every_severity_in_words() {
    with_browser(1280, 800, |c| async move {
        // Started with the browser already up, so the faults' clock starts as the page loads.
        let simulator = [
            "power-cap:1@0s",
            "power-brake:2@0s",
            "warm:3@0s",
            "hot:3@16s",
            "xid:4:13@1s",
            "ecc:5@1s",
            "memory-full:6@1s",
            "lost:7@2s",
        ]
        .iter()
        .fold(Simulator::new(8, 500), |s, f| s.with_fault(f.parse().unwrap()));
        let server = TestServer::with_source(Box::new(simulator), 500).await;
        c.goto(&server.url("/")).await.unwrap();
        eventually_every(15, Duration::from_millis(200), "eight GPU rows with figures", || async {
            let temps = texts(&c, "tr.gpu-row .ov-temp").await;
            let page = js(&c, "return document.body.innerText.slice(0, 400)").await;
            (temps.len() == 8 && temps.iter().take(7).all(|t| t.ends_with("°C"))).then_some(()).ok_or((temps, page))
        })
        .await;

        // The overview is all there is by default: no card, no chart.
        assert_eq!(texts(&c, ".gpu-card").await.len(), 0, "cards open only on demand");
        let headings = js(
            &c,
            "return [...document.querySelectorAll('tr.gpu-row > th[scope=row]')].map(t => t.textContent.trim())",
        )
        .await;
        let expected: Vec<String> = (0..8).map(|i| format!("▸GPU {i}")).collect();
        assert_eq!(headings, serde_json::json!(expected), "each row's heading names its GPU");

        // Bars carry their value for screen readers and as visible text (read in one script: a tick
        // between two reads would change the value).
        let meter = js(
            &c,
            "const m = document.querySelector(\"tr.gpu-row[data-index='6'] .ov-mem [role=meter]\"); \
             const shown = document.querySelector(\"tr.gpu-row[data-index='6'] .ov-mem .ov-bar-text\"); \
             return [m.getAttribute('aria-label'), +m.getAttribute('aria-valuenow'), m.getAttribute('aria-valuetext'), \
                     shown.textContent.trim()]",
        )
        .await;
        assert_eq!(meter[0], "GPU 6 memory used");
        assert_eq!(meter[2], meter[3], "the meter's text is the bar's visible text");

        // Every state, in words as well as colour.
        let warm = badge(&c, 3, "near slowdown 87 °C", "sev-warning", 15).await;
        assert!(warm.starts_with("⚠ 8"), "{warm}");
        assert!(cell_class(&c, 3, ".ov-temp").await.contains("sev-warning"));
        badge(&c, 1, "power cap", "sev-warning", 10).await;
        badge(&c, 2, "throttled: power brake", "sev-critical", 10).await;
        // An application's XID: its job's owner needs telling, the GPU is fine (and still free).
        badge(&c, 4, "XID 13", "sev-warning", 15).await;
        badge(&c, 5, "ECC: 2 uncorrected", "sev-critical", 15).await;
        badge(&c, 6, "memory 98% full", "sev-critical", 15).await;
        assert!(cell_class(&c, 6, ".ov-mem").await.contains("sev-critical"));
        badge(&c, 7, "lost", "sev-critical", 15).await;
        assert_eq!(cell(&c, 7, ".ov-state").await, "lost");
        // Once every fault has struck ("Lost: GPU 7" included),
        // everything a team checks first is on the first screen, rows included.
        let fits = js(
            &c,
            "const bottom = s => document.querySelector(s).getBoundingClientRect().bottom; \
             const rows = [...document.querySelectorAll('tr.gpu-row')].map(r => r.getBoundingClientRect()); \
             return { inner: innerHeight, free: bottom('#free-gpus'), usage: bottom('#who-uses-what'), \
                      rows: rows.map(r => r.bottom), tallest: Math.max(...rows.map(r => r.height)) }",
        )
        .await;
        let inner = fits["inner"].as_f64().unwrap();
        let rows: Vec<f64> = fits["rows"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
        assert_eq!(rows.len(), 8, "{fits}");
        assert!(fits["free"].as_f64().unwrap() <= inner, "'Free' below the fold: {fits}");
        assert!(fits["usage"].as_f64().unwrap() <= inner, "'Who uses what' below the fold: {fits}");
        assert!(rows.iter().all(|&b| b <= inner), "a GPU row below the fold: {fits}");
        assert!(fits["tallest"].as_f64().unwrap() <= 42.0, "rows stay compact: {fits}");

        let (_, fine) = row(&c, 0).await;
        assert!(fine.iter().all(|(text, _)| !text.contains("°C")), "GPU 0 has nothing wrong with its heat: {fine:?}");
        // The warm GPU then turns hot: past its slowdown threshold, throttled.
        let hot = badge(&c, 3, "slowdown at 87 °C", "sev-critical", 20).await;
        assert!(hot.starts_with("✖ "), "{hot}");
        // A row shows its worst finding as a badge; the others are counted ("+1") and named in its tooltip.
        let more = eventually(5, "GPU 3's other finding in the row's '+1'", || async {
            let more = texts(&c, "tr.gpu-row[data-index='3'] .sev-more").await.concat();
            let title =
                js(&c, "return document.querySelector(\"tr.gpu-row[data-index='3'] .sev-more\")?.title ?? ''").await;
            let title = title.as_str().unwrap_or_default().to_owned();
            (more == "+1" && title.contains("throttled: thermal")).then_some(title)
        })
        .await;
        assert!(!more.contains("slowdown at"), "the badge's finding is not repeated: {more}");

        save_screenshot(&c, "overview-1280x800.png").await;

        // A row opens into its card: the UUID is there (folded), the severity in its header.
        let toggle = "tr.gpu-row[data-index='5'] button.gpu-row-toggle";
        assert_eq!(attribute(&c, toggle, "aria-expanded").await, "false");
        c.find(Locator::Css(toggle)).await.unwrap().click().await.unwrap();
        let card = ".gpu-card[data-index='5']";
        eventually(5, "GPU 5's card", || async { (texts(&c, card).await.len() == 1).then_some(()) }).await;
        assert_eq!(attribute(&c, toggle, "aria-expanded").await, "true");
        let uuid = js(&c, &format!("return document.querySelector(\"{card} .gpu-uuid\").textContent")).await;
        assert_eq!(uuid, "GPU-5140da5b-0000-4000-8000-000000000005");
        let header = texts(&c, &format!("{card} .gpu-severity .sev-badge")).await.join(" | ");
        assert!(header.contains("ECC: 2 uncorrected") && header.contains("row remap pending"), "{header}");
        assert!(
            js(&c, &format!("return document.querySelector(\"{card} .gpu-card-head .gpu-uuid\") === null")).await
                == Value::Bool(true),
            "the UUID left the header"
        );
        assert_eq!(texts(&c, &format!("{card} button.empty-cache")).await.len(), 0, "empty_cache lives in the Lab");
        // Keyboard: the same button closes it.
        c.find(Locator::Css(toggle)).await.unwrap().send_keys("\u{e007}").await.unwrap();
        eventually(5, "GPU 5's card closed", || async { texts(&c, card).await.is_empty().then_some(()) }).await;

        c.set_window_size(1440, 900).await.unwrap();
        save_screenshot(&c, "overview-1440x900.png").await;
        server.stop().await;
    })
    .await;
}

/// A GPU whose XID 79 (fallen off the bus) fires is not free, by the one rule of
/// `shared::usability`: not in `/api/processes`' `free_devices` nor on the page's "Free:" line,
/// but listed unhealthy with its reason there, beside "Free:", and in its row's state.
#[tokio::test]
async fn a_gpu_with_a_hardware_xid_is_unhealthy_not_free() {
    with_browser(1280, 800, |c| async move {
        // Both GPUs' jobs end at once: only the XID tells them apart.
        let simulator = ["job-ends:0@0s", "job-ends:1@0s", "xid:1:79@0s"]
            .iter()
            .fold(Simulator::new(2, 250), |s, f| s.with_fault(f.parse().unwrap()));
        let server = TestServer::with_source(Box::new(simulator), 250).await;
        let every = Duration::from_millis(200);
        let api = eventually_every(20, every, "GPU 0 free and GPU 1 unhealthy in /api/processes", || async {
            let body: Value = get_json(&server, "/api/processes").await;
            let unhealthy = serde_json::json!([{ "index": 1, "reason": "XID 79" }]);
            let told = body["free_devices"] == serde_json::json!([0]) && body["unhealthy_devices"] == unhealthy;
            if told { Ok(body) } else { Err(body) }
        })
        .await;
        assert_eq!(api["processes"].as_array().map(Vec::len), Some(0), "no process holds either: {api}");
        c.goto(&server.url("/")).await.unwrap();
        eventually_every(15, every, "'Free: GPU 0' and GPU 1 unhealthy beside it", || async {
            let free = texts(&c, "#free-gpus").await.concat();
            let unhealthy = texts(&c, "#unhealthy-gpus").await.concat();
            if free == "Free: GPU 0" && unhealthy == "Unhealthy: GPU 1 (XID 79)" {
                Ok(())
            } else {
                Err((free, unhealthy))
            }
        })
        .await;
        assert_eq!(cell(&c, 1, ".ov-state").await, "unhealthy: XID 79");
        assert!(cell_class(&c, 1, ".ov-state").await.contains("state-unhealthy"));
        assert_eq!(cell(&c, 0, ".ov-state").await, "free");
        badge(&c, 1, "XID 79", "sev-critical", 5).await;
        server.stop().await;
    })
    .await;
}

async fn cell_class(c: &Client, index: u32, css: &str) -> String {
    let script = format!("return document.querySelector(\"tr.gpu-row[data-index='{index}'] {css}\").className");
    js(c, &script).await.as_str().unwrap_or_default().to_owned()
}

async fn attribute(c: &Client, css: &str, name: &str) -> String {
    c.find(Locator::Css(css)).await.unwrap().attr(name).await.unwrap().unwrap_or_default()
}
