//! Layouts that broke (issue 32, item 9), in a real browser: the phone header leaves the screen to
//! the page (at most 100 of 844 px), the Lab's GPU picker stays inside its card at 1280×800, the
//! Rules table's severity badges are never split mid-word, and the Usage tab's chart has labelled
//! axes, its columns sort, and its figures follow one precision rule.

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use shared::usage::UsageResponse;

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::{TestServer, get_json};

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css)).await.unwrap().click().await.unwrap();
}

#[tokio::test]
async fn the_phone_header_is_short() {
    let server = TestServer::simulated(8, 500).await;
    let url = server.url("/");
    with_browser(390, 844, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(15, "the dashboard", || async { (!texts(&c, ".topbar").await.is_empty()).then_some(()) }).await;
        // The header holds the title, the status, the badge and the tabs: all of it in 100 px.
        let height = js(&c, "return document.querySelector('.topbar').getBoundingClientRect().bottom").await;
        let height = height.as_f64().unwrap();
        assert!(height <= 100.0, "the phone header takes {height} of 844 px");
        let tabs =
            js(&c, "return [...document.querySelectorAll('.tabs .tab')].map(t => t.getBoundingClientRect().bottom)");
        let tabs = tabs.await;
        assert!(tabs.as_array().unwrap().iter().all(|b| b.as_f64().unwrap() <= 100.0), "every tab in it: {tabs}");
        eventually(15, "the GPU rows", || async { (texts(&c, "tr.gpu-row").await.len() == 8).then_some(()) }).await;
        save_screenshot(&c, "screenshot-phone.png").await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_lab_picker_stays_in_its_column() {
    // A reservation makes GPU 0's option long: "GPU 0 — … reserved by <user>".
    let server = TestServer::simulated(8, 500).await;
    let now = gpudash::telemetry::now_ms();
    let request = shared::reservations::ReservationRequest {
        devices: vec![0],
        start_ms: now,
        end_ms: now + 3_600_000,
        note: "a long evaluation of the new tokenizer".into(),
    };
    let made = reqwest::Client::new().post(server.url("/api/reservations")).json(&request).send().await.unwrap();
    assert_eq!(made.status(), 201);
    let lab = server.url("/#lab");
    with_browser(1280, 800, |c| async move {
        c.goto(&lab).await.unwrap();
        eventually(15, "the Lab's picker", || async { (!texts(&c, "#lab-device").await.is_empty()).then_some(()) })
            .await;
        save_screenshot(&c, "lab-1280x800.png").await;
        // Nothing of the picker reaches past its own card (into the Queue beside it).
        let spill = js(
            &c,
            "const s = document.querySelector('#lab-device'); const card = s.closest('.lab-column'); \
             const a = s.getBoundingClientRect(), b = card.getBoundingClientRect(); \
             const q = document.querySelector('#lab-queue')?.getBoundingClientRect(); \
             const overlap = q ? !(a.right <= q.left || a.left >= q.right || a.bottom <= q.top || a.top >= q.bottom) : false; \
             return { right: a.right, card: b.right, overlap }",
        )
        .await;
        assert!(spill["right"].as_f64().unwrap() <= spill["card"].as_f64().unwrap() + 0.5, "{spill}");
        assert_eq!(spill["overlap"], false, "the picker overlaps the Queue: {spill}");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn rules_badges_stay_whole() {
    let server = TestServer::simulated(2, 500).await;
    let url = server.url("/#alerts");
    for width in [1280, 390] {
        let url = url.clone();
        with_browser(width, 800, |c| async move {
            c.goto(&url).await.unwrap();
            eventually(15, "the rules", || async {
                (texts(&c, "#alerts-rules .alert-severity").await.len() > 3).then_some(())
            })
            .await;
            // A badge laid out as it is measures the height of one that may not wrap.
            let split = js(
                &c,
                "return [...document.querySelectorAll('#alerts-rules .alert-severity')].filter(b => { \
                   const h = b.getBoundingClientRect().height; const w = b.style.whiteSpace; \
                   b.style.whiteSpace = 'nowrap'; const one = b.getBoundingClientRect().height; \
                   b.style.whiteSpace = w; return h > one + 0.5; }).map(b => b.textContent)",
            )
            .await;
            assert_eq!(split, serde_json::json!([]), "badges split at {width} px");
        })
        .await;
    }
    server.stop().await;
}

#[tokio::test]
async fn the_usage_chart_has_axes_and_its_columns_sort() {
    let simulator = Simulator::new(2, 250)
        .with_fault("job:0:ana:8:50@0s+10m".parse().unwrap())
        .with_fault("job:1:bo:2:50@0s+10m".parse().unwrap());
    let server = TestServer::with_source(Box::new(simulator), 250).await;
    eventually(20, "both jobs charged", || async {
        let now = gpudash::telemetry::now_ms();
        let answer: UsageResponse =
            get_json(&server, &format!("/api/usage?from={}&to={}", now - 60_000, now + 1)).await;
        (answer.rows.iter().filter(|r| r.memory_gib_hours > 0.0).count() == 2).then_some(())
    })
    .await;
    let url = server.url("/#usage");
    with_browser(1280, 800, |c| async move {
        c.goto(&url).await.unwrap();
        let keys = || async { texts(&c, "#usage-users .usage-key").await };
        eventually(15, "both owners", || async { (keys().await.len() == 2).then_some(()) }).await;
        // Axes: the value axis names its unit and counts up from 0; the days are under the bars.
        assert_eq!(texts(&c, "#usage-chart .usage-axis-title").await, ["GPU-hours"]);
        let values = texts(&c, "#usage-chart .usage-value").await;
        assert!(values.len() >= 2 && values[0] == "0", "{values:?}");
        save_screenshot(&c, "usage-axes.png").await;
        let days = texts(&c, "#usage-chart .usage-day").await;
        assert_eq!(days.len(), 1, "one day: {days:?}");
        let (day, month) = days[0].split_once(' ').unwrap();
        assert!(day.parse::<u32>().is_ok() && month.len() == 3, "{days:?}");
        // One precision rule: one decimal, "<0.1" for a little above nothing.
        let figures = texts(&c, "#usage-users td:not(.usage-key)").await;
        assert_eq!(figures.len(), 8);
        for figure in &figures {
            let one_decimal = figure.split_once('.').is_some_and(|(w, d)| w.parse::<u64>().is_ok() && d.len() == 1);
            assert!(figure == "<0.1" || one_decimal, "{figure} in {figures:?}");
        }
        // Sorting: memory (ana holds 8 GiB, bo 2) most first, then least first; names A to Z.
        let memory = "#usage-users th.col-memory";
        click(&c, &format!("{memory} button")).await;
        assert_eq!(keys().await, ["ana", "bo"]);
        let sort = |css: String| {
            let c = c.clone();
            async move { c.find(Locator::Css(&css)).await.unwrap().attr("aria-sort").await.unwrap() }
        };
        assert_eq!(sort(memory.to_owned()).await.as_deref(), Some("descending"));
        click(&c, &format!("{memory} button")).await;
        assert_eq!(keys().await, ["bo", "ana"]);
        assert_eq!(sort(memory.to_owned()).await.as_deref(), Some("ascending"));
        click(&c, "#usage-users th.col-name button").await;
        assert_eq!(keys().await, ["ana", "bo"]);
        assert_eq!(sort(memory.to_owned()).await.as_deref(), Some("none"));
    })
    .await;
    server.stop().await;
}

/// Where the Lab's picker and its column's panels lie against the Queue and the window.
const LAB_BOXES: &str = "const r = e => e.getBoundingClientRect(); \
    const picker = document.querySelector('#lab-device'), column = picker.closest('.lab-column'); \
    const queue = r(document.querySelector('#lab-queue')); \
    const parts = [picker, picker.closest('.lab-target'), ...column.children]; \
    const overlaps = parts.filter(p => { const a = r(p); \
      return !(a.right <= queue.left || a.left >= queue.right || a.bottom <= queue.top || a.top >= queue.bottom); }) \
      .map(p => p.id || p.className); \
    return { picker: [r(picker).left, r(picker).right], column: [r(column).left, r(column).right], \
      queue: [queue.left, queue.top, queue.right, queue.bottom], overlaps, \
      page: [document.scrollingElement.scrollWidth, document.documentElement.clientWidth] }";

/// Issue 32, item 9 at 64 GPUs, where the picker was seen running into the Queue: at 1280×800 (two
/// columns) and 390×844 (one), the picker and every panel of its column keep clear of the Queue, the
/// picker stays inside its column, and the page does not scroll sideways.
#[tokio::test]
async fn the_lab_picker_stays_in_its_column_at_64_gpus() {
    let server = TestServer::simulated(64, 1000).await;
    let lab = server.url("/#lab");
    for (width, height) in [(1280, 800), (390, 844)] {
        let lab = lab.clone();
        with_browser(width, height, |c| async move {
            c.goto(&lab).await.unwrap();
            eventually(20, "the Lab's picker with 64 GPUs", || async {
                let options = js(&c, "return document.querySelectorAll('#lab-device option').length").await;
                (options == 64 && js(&c, "return !!document.querySelector('#lab-queue')").await == true).then_some(())
            })
            .await;
            save_screenshot(&c, &format!("lab-64-{width}x{height}.png")).await;
            let boxes = js(&c, LAB_BOXES).await;
            std::fs::write(
                crate::browser::screenshot_dir().join(format!("lab-64-{width}x{height}.json")),
                boxes.to_string(),
            )
            .expect("write the measurements");
            let at = |key: &str, i: usize| boxes[key][i].as_f64().unwrap();
            assert!(at("picker", 1) <= at("column", 1) + 0.5, "the picker leaves its column at {width} px: {boxes}");
            assert_eq!(boxes["overlaps"], serde_json::json!([]), "over the Queue at {width} px: {boxes}");
            assert!(at("page", 0) <= at("page", 1) + 1.0, "the page scrolls sideways at {width} px: {boxes}");
            // Issue 56, item 4: 64 GPUs' 4,096-cell topology is counted by link, drawn only when opened.
            let summary = eventually(10, "the topology's summary", || async {
                js(&c, "return document.querySelector('.topology-summary')?.textContent")
                    .await
                    .as_str()
                    .map(str::to_owned)
            })
            .await;
            assert!(summary.starts_with("64 GPUs, 2016 pairs by link: "), "{summary}");
            let cells = "return document.querySelectorAll('table#topology td').length";
            assert_eq!(js(&c, cells).await, 0, "the matrix waits for its fold at {width} px");
            js(&c, "document.querySelector('.topology-fold summary').click(); return true").await;
            eventually(10, "the matrix drawn once opened", || async { (js(&c, cells).await == 64 * 64).then_some(()) })
                .await;
        })
        .await;
    }
    server.stop().await;
}
