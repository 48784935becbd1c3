//! The history section in a real browser: one chart per metric with a line per
//! GPU, its legend and the GPU picker drilling down to one GPU, the hover
//! tooltip, day ticks at 7 d, and one `/api/history/all` request per range.

use fantoccini::{Client, Locator};
use gpudash::store::{Retention, Store};
use gpudash::telemetry::GpuSource as _;
use gpudash::telemetry::simulator::Simulator;
use serde_json::{Value, json};

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::{TestServer, eventually_every};

const GPUS: u32 = 4;

/// A week of simulated samples ending now (the recorder rolls them into minutes).
fn a_week_of_history(dir: &std::path::Path) {
    let store = Store::open(dir, true, Retention::default()).expect("open store");
    let recorder = store.recorder().expect("recorder");
    let sim = Simulator::new(GPUS, 1000);
    let now = gpudash::telemetry::now_ms();
    // Every five minutes for the week, every 5 s for its last hour (a line, not dots, on 1 h).
    let times =
        (13..=7 * 24 * 12u64).rev().map(|k| now - k * 300_000).chain((1..=720u64).rev().map(|k| now - k * 5_000));
    for t in times {
        recorder.record_waiting(&sim.sample(t));
    }
    recorder.stop();
}

/// How many requests the page sent to `path` so far.
async fn requests(c: &Client, path: &str) -> usize {
    let script = format!(
        "return performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === '{path}').length"
    );
    js(c, &script).await.as_u64().unwrap_or(0) as usize
}

/// `data-lines` of the history canvases on screen (those off screen wait to be scrolled to).
async fn lines(c: &Client) -> Vec<u64> {
    let found = js(
        c,
        "return [...document.querySelectorAll('canvas.history-chart')]\
         .filter(e => { const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; })\
         .map(e => +e.dataset.lines || 0)",
    )
    .await;
    found.as_array().into_iter().flatten().filter_map(Value::as_u64).collect()
}

/// Moves the pointer over the memory chart, `fraction` of the way across; the tooltip's rows.
async fn hover_memory(c: &Client, fraction: f64) -> Vec<String> {
    js(
        c,
        &format!(
            "const k = document.querySelector('canvas.history-chart[data-metric=memory_used]'); \
             const r = k.getBoundingClientRect(); \
             k.dispatchEvent(new MouseEvent('mousemove', {{clientX: r.left + r.width * {fraction}, \
             clientY: r.top + r.height / 2, bubbles: true}}));"
        ),
    )
    .await;
    texts(c, "figure[data-metric=memory_used] .history-tooltip li").await
}

/// Waits for every chart's crosshair tooltip to be gone (stale values must not linger).
async fn tooltip_gone(c: &Client, when: &str) {
    eventually(5, &format!("no tooltip {when}"), || async {
        texts(c, ".history-tooltip").await.is_empty().then_some(())
    })
    .await;
}

/// Picks `value` ("all" or a GPU index) in `#history-gpu`, as a reader does.
async fn pick_gpu(c: &Client, value: &str) {
    let script = format!(
        "const s = document.getElementById('history-gpu'); s.value = '{value}'; \
         s.dispatchEvent(new Event('change', {{bubbles: true}}));"
    );
    js(c, &script).await;
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css)).await.unwrap().click().await.unwrap();
}

#[tokio::test]
async fn history_reads_like_grafana_one_chart_per_metric_with_every_gpu() {
    let dir = tempfile::tempdir().unwrap();
    a_week_of_history(dir.path());
    let server = TestServer::with_history(GPUS, 500, dir.path()).await;
    let url = server.url("/");
    with_browser(1440, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(20, "the history section", || async {
            (texts(&c, "figure.history-cell").await.len() == 7).then_some(())
        })
        .await;
        js(&c, "document.getElementById('history').scrollIntoView()").await;
        eventually(20, "the charts on screen drawn with a line per GPU", || async {
            let drawn = lines(&c).await;
            (drawn.len() >= 2 && drawn.iter().all(|&n| n == u64::from(GPUS))).then_some(())
        })
        .await;
        let metrics =
            js(&c, "return [...document.querySelectorAll('figure.history-cell')].map(e => e.dataset.metric)").await;
        let charted =
            ["memory_used", "gpu_util", "sm_active", "tensor_active", "power_draw", "temperature", "sm_clock"];
        assert_eq!(metrics, json!(charted), "one chart per metric");
        assert_eq!(
            texts(&c, "figure[data-metric=power_draw] .history-legend button").await,
            ["GPU 0", "GPU 1", "GPU 2", "GPU 3"],
            "the legend names every GPU, under the plot"
        );
        assert_eq!(requests(&c, "/api/history/all").await, 1, "one request for every chart");
        assert_eq!(requests(&c, "/api/history").await, 0, "none per metric and GPU");

        // Hovering shows the time and every GPU's value, and a crosshair.
        let rows = eventually(10, "a tooltip", || async {
            let rows = hover_memory(&c, 0.6).await;
            (rows.len() == GPUS as usize).then_some(rows)
        })
        .await;
        assert!(rows[0].starts_with("GPU 0: ") && rows.iter().all(|r| r.ends_with("GiB")), "{rows:?}");
        assert_eq!(texts(&c, "figure[data-metric=memory_used] .history-tooltip-time").await.len(), 1);
        assert!(!texts(&c, "figure[data-metric=memory_used] .history-crosshair").await.is_empty());
        js(&c, "document.querySelector('canvas.history-chart').dispatchEvent(new MouseEvent('mouseleave'))").await;
        eventually(5, "the tooltip gone", || async { texts(&c, ".history-tooltip").await.is_empty().then_some(()) })
            .await;

        // A GPU in a legend drills every chart down to it; pressed again, all come back.
        click(&c, "figure[data-metric=gpu_util] .history-legend button[data-index='2']").await;
        eventually(10, "only GPU 2 drawn", || async { lines(&c).await.iter().all(|&n| n == 1).then_some(()) }).await;
        assert_eq!(js(&c, "return document.getElementById('history-gpu').value").await, "2");
        let rows = hover_memory(&c, 0.5).await;
        assert!(rows.len() == 1 && rows[0].starts_with("GPU 2: "), "{rows:?}");
        click(&c, "figure[data-metric=gpu_util] .history-legend button[data-index='2']").await;
        eventually(10, "every GPU again", || async {
            lines(&c).await.iter().all(|&n| n == u64::from(GPUS)).then_some(())
        })
        .await;
        // The pointer still rests on the plot (no mouseleave), yet GPU 2's crosshair is gone with the drill-down.
        tooltip_gone(&c, "after pressing the legend").await;
        assert_eq!(requests(&c, "/api/history/all").await, 1, "drilling down fetches nothing");

        // Likewise through the GPU selector.
        assert_eq!(hover_memory(&c, 0.5).await.len(), GPUS as usize);
        pick_gpu(&c, "1").await;
        eventually(10, "only GPU 1 drawn", || async { lines(&c).await.iter().all(|&n| n == 1).then_some(()) }).await;
        tooltip_gone(&c, "after picking GPU 1").await;
        pick_gpu(&c, "all").await;
        eventually(10, "every GPU again", || async {
            lines(&c).await.iter().all(|&n| n == u64::from(GPUS)).then_some(())
        })
        .await;

        js(&c, "document.getElementById('history').scrollIntoView()").await;
        assert_eq!(hover_memory(&c, 0.5).await.len(), GPUS as usize);
        click(&c, "#range-picker button[data-range='1h']").await;
        eventually(10, "an hour's ticks", || async {
            let ticks = js(&c, "return document.querySelector('canvas.history-chart').dataset.xTicks").await;
            let ticks = ticks.as_str()?.to_owned();
            // Times of day; a tick at local midnight says the date instead (a run within an hour after midnight).
            let clock = |t: &str| t.len() == 5 && t.contains(':');
            let readable = ticks.split('|').all(|t| clock(t) || t.split(' ').count() == 3);
            (requests(&c, "/api/history/all").await == 2 && readable && ticks.split('|').any(clock)).then_some(())
        })
        .await;
        tooltip_gone(&c, "after another range").await;
        save_screenshot(&c, "history-1h.png").await;

        // A week: one more request, day ticks that say the date, and the picker still in reach.
        click(&c, "#range-picker button[data-range='7d']").await;
        let ticks = eventually(10, "a week's day ticks", || async {
            let ticks = js(&c, "return document.querySelector('canvas.history-chart').dataset.xTicks").await;
            let ticks: Vec<String> = ticks.as_str()?.split('|').map(str::to_owned).collect();
            (ticks.len() >= 3 && ticks.iter().all(|t| t.split(' ').count() == 3)).then_some(ticks)
        })
        .await;
        assert!(ticks.iter().all(|t| t[..3].chars().all(char::is_alphabetic)), "\"Mon 30 Nov\": {ticks:?}");
        eventually(15, "the week drawn from the week's one request", || async {
            let points = js(
                &c,
                "return +document.querySelector('canvas.history-chart[data-metric=memory_used]').dataset.points",
            )
            .await;
            let requests = requests(&c, "/api/history/all").await;
            (requests == 3 && points.as_u64()? > 100 * u64::from(GPUS)).then_some(())
        })
        .await;
        js(&c, "window.scrollBy(0, 500)").await;
        let top = js(&c, "return document.getElementById('range-picker').getBoundingClientRect().top").await;
        assert!(top.as_f64().is_some_and(|t| (40.0..130.0).contains(&t)), "the range picker stays in reach: {top}");
        js(&c, "document.getElementById('history').scrollIntoView()").await;
        let rows = hover_memory(&c, 0.3).await;
        assert_eq!(rows.len(), GPUS as usize, "{rows:?}");
        save_screenshot(&c, "history-7d.png").await;
    })
    .await;
    server.stop().await;
}

/// Each chart's legend as `[GPU, swatch colour]` pairs, chart by chart.
async fn legends(c: &Client) -> Vec<Vec<(u64, String)>> {
    let found = js(
        c,
        "return [...document.querySelectorAll('figure.history-cell')].map(f => \
         [...f.querySelectorAll('.history-legend button')].map(b => \
         [+b.dataset.index, getComputedStyle(b.querySelector('.history-swatch')).backgroundColor]))",
    )
    .await;
    serde_json::from_value(found).unwrap_or_default()
}

/// Issue 56: past eight GPUs every chart draws the same eight (the top by one figure, utilization
/// unless `#history-rank` picks another, kept in the URL as `lines=`), each in the same colour in every
/// chart, so a colour means one GPU all down the section; the legend says what ranked them. (A GPU
/// keeps its colour while it stays among the lines: `LineColors`' unit test.)
#[tokio::test]
async fn many_gpus_draw_the_same_lines_in_the_same_colours_in_every_chart() {
    const MANY: u32 = 20;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_history(MANY, 250, dir.path()).await;
    let url = server.url("/");
    // Tall enough for every chart to be on screen, where charts draw (one off screen keeps what it drew).
    with_browser(1440, 2200, |c| async move {
        c.goto(&url).await.unwrap();
        // Past eight GPUs the History section is folded: opened, as a reader does.
        eventually(20, "the History fold", || async {
            js(
                &c,
                "const h = document.querySelector('#fold-history'); if (!h) return false; \
                 h.open = true; h.scrollIntoView(); return true",
            )
            .await
            .as_bool()
            .filter(|b| *b)
        })
        .await;
        let agreed = |ranked_by: &'static str| {
            let c = c.clone();
            async move {
                let what = format!("every legend naming the same eight GPUs by {ranked_by}");
                eventually_every(30, std::time::Duration::from_millis(250), &what, || async {
                    let all = legends(&c).await;
                    let others = texts(&c, "figure.history-cell .history-others").await;
                    let first = all.first().cloned().unwrap_or_default();
                    let colours: std::collections::BTreeSet<&String> = first.iter().map(|(_, k)| k).collect();
                    let agreed = all.len() == 7
                        && first.len() == 8
                        && colours.len() == 8
                        && all.iter().all(|l| *l == first)
                        && others.len() == 7
                        && others.iter().all(|o| *o == format!("+ 12 others (top 8 by {ranked_by} shown)"));
                    if agreed { Ok(()) } else { Err((all, others)) }
                })
                .await;
            }
        };
        agreed("GPU utilization").await;
        js(
            &c,
            "const s = document.getElementById('history-rank'); s.value = 'temperature'; \
             s.dispatchEvent(new Event('change', {bubbles: true}));",
        )
        .await;
        agreed("Temperature").await;
        save_screenshot(&c, "history-many.png").await;
        let hash = js(&c, "return location.hash").await;
        assert!(hash.as_str().is_some_and(|h| h.contains("lines=temperature")), "kept in the URL: {hash}");
    })
    .await;
    server.stop().await;
}
