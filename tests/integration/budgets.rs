//! Frontend budgets, printed for docs/BENCHMARKS.md: the app's first download, gzip
//! (printed against its 450 KiB target and **asserted** under a 500 KiB ceiling (APP_CEILING), so that
//! growth is a decision, not an accident; the rarer tabs' modules, fetched when first shown, printed beside it) and brotli (what Chromium takes), and in Chromium the first render and
//! the time each tick's handling takes with 8 GPUs and an hour of 1 Hz history.
//!
//! **Timing is printed, never asserted** (timing targets live in benchmarks, not in pass/fail
//! tests): each window's figures are printed beside their targets with a verdict line that says
//! MET or NOT MET. What is asserted is correctness: every timed tick was handled, the charts on
//! screen kept redrawing from live ticks, the charts off screen did not, and the history charts got
//! their hour. Tick handling is timed from the page's side and includes what the browser does before
//! its next task (style, layout, paint): on a loaded machine that part grows, so the page's own
//! script time per tick and the load average are printed beside it.
//!
//! `cargo test -p gpudash-tests --test integration budgets -- --nocapture --test-threads 1`

use std::fmt::Write as _;
use std::time::Duration;

use fantoccini::Locator;
use gpudash::store::{Retention, Store};
use gpudash::telemetry::GpuSource as _;
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::{TestServer, eventually_every};

/// The app's first load (page, scripts, wasm, styles: everything but the split modules the rarer
/// tabs fetch when first shown), gzip as served: the target, printed…
const APP_BUDGET: usize = 450 * 1024;
/// …and the ceiling, asserted (issue 39): growing past it is a decision, made by raising this
/// figure in the same change, with the reason in docs/BENCHMARKS.md ("Browser app budgets").
const APP_CEILING: usize = 500 * 1024;
/// Ticks whose handling is timed, in batches: the issue's p99 is over 100 ticks, i.e. the
/// second-worst one, so three batches show how much of a batch's p99 is the VM's noise.
pub(crate) const TICKS: usize = 100;
pub(crate) const BATCHES: usize = 3;

#[expect(clippy::print_stdout, reason = "these tests exist to print figures")]
pub(crate) fn print_figures(text: &str) {
    println!("{text}");
}

#[tokio::test]
async fn the_app_download_size_is_reported_and_under_its_ceiling() {
    let server = TestServer::simulated(1, 1000).await;
    let http = reqwest::Client::new();
    // reqwest is built without its decompression features: these are the bytes on the wire.
    let download = |path: &'static str, coding: &'static str| {
        let request = http.get(server.url(path)).header("accept-encoding", coding);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            assert_eq!(response.headers()["content-encoding"], coding, "{path} is served as {coding}");
            response.bytes().await.unwrap().len()
        }
    };
    let mut figures = String::from("\n| file | loaded | gzip bytes | brotli bytes |\n| --- | --- | --- | --- |\n");
    let (mut first, mut later) = ((0, 0), (0, 0));
    for asset in gpudash::web::ASSETS {
        let (g, b) = (download(asset.path, "gzip").await, download(asset.path, "br").await);
        let (sum, when) = if asset.lazy { (&mut later, "when a tab needs it") } else { (&mut first, "first") };
        *sum = (sum.0 + g, sum.1 + b);
        let _ = writeln!(figures, "| {} | {when} | {g} | {b} |", asset.path);
    }
    let ((gzip, brotli), kib) = (first, |bytes: usize| bytes as f64 / 1024.0);
    let verdict = if gzip <= APP_BUDGET { "within" } else { "OVER" };
    let _ = writeln!(
        figures,
        "| **first load** | | {gzip} ({:.1} KiB; {verdict} the {} KiB target; the {} KiB ceiling asserted) | {brotli} \
         ({:.1} KiB; what Chromium downloads) |",
        kib(gzip),
        APP_BUDGET / 1024,
        APP_CEILING / 1024,
        kib(brotli),
    );
    let _ = writeln!(
        figures,
        "| the rarer views' modules, fetched when first shown | | {} ({:.1} KiB) | {} ({:.1} KiB) |\n| whole app | | {} ({:.1} KiB) | {} ({:.1} KiB) |",
        later.0,
        kib(later.0),
        later.1,
        kib(later.1),
        gzip + later.0,
        kib(gzip + later.0),
        brotli + later.1,
        kib(brotli + later.1),
    );
    print_figures(&figures);
    assert!(
        gzip <= APP_CEILING,
        "the app's first load weighs {gzip} bytes ({:.1} KiB) gzip, past its {} KiB ceiling: make it smaller, or raise \
         APP_CEILING in tests/integration/budgets.rs with the reason in docs/BENCHMARKS.md",
        kib(gzip),
        APP_CEILING / 1024
    );
    server.stop().await;
}

/// Installed before the page's own scripts: times every WebSocket message's
/// handling (its task and the microtasks it queues, where Leptos runs effects
/// and the charts draw), counts canvas draws, and notes the first one.
pub(crate) const PROBE: &str = r"(() => {
  const probe = { recording: false, tasks: [], scripts: [], draws: [], firstDrawEnd: null };
  window.__gpudashProbe = probe;
  let drawsInTask = 0;
  const afterTask = (done) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => done(performance.now());
    channel.port2.postMessage(0);
  };
  const getContext = HTMLCanvasElement.prototype.getContext;
  HTMLCanvasElement.prototype.getContext = function (kind, ...rest) {
    if (kind === '2d') {
      drawsInTask += 1;
      if (probe.firstDrawEnd === null) { probe.firstDrawEnd = 0; afterTask((t) => { probe.firstDrawEnd = t; }); }
    }
    return getContext.call(this, kind, ...rest);
  };
  const Native = window.WebSocket;
  class Probed extends Native {
    set onmessage(handler) {
      super.onmessage = handler && ((event) => {
        const start = performance.now();
        drawsInTask = 0;
        handler.call(this, event);
        // Queued after the effects the message scheduled: roughly when the page's own code is done.
        let scriptEnd = null;
        queueMicrotask(() => { scriptEnd = performance.now(); });
        afterTask((end) => {
          if (probe.recording && typeof event.data === 'string' && event.data.startsWith('{\x22type\x22:\x22tick\x22')) {
            probe.tasks.push(end - start);
            probe.scripts.push((scriptEnd === null ? end : scriptEnd) - start);
            probe.draws.push(drawsInTask);
          }
        });
      });
    }
    get onmessage() { return super.onmessage; }
  }
  window.WebSocket = Probed;
})();";

/// A Chrome DevTools command through chromedriver (`goog/cdp/execute`).
#[derive(Debug)]
pub(crate) struct Cdp {
    pub(crate) method: &'static str,
    pub(crate) params: serde_json::Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(serde_json::json!({ "cmd": self.method, "params": self.params }).to_string()))
    }
}

/// An hour of 1 Hz samples of `gpus` simulated GPUs, ending now.
pub(crate) fn an_hour_of_history(dir: &std::path::Path, gpus: u32) {
    let store = Store::open(dir, true, Retention::default()).expect("open store");
    let recorder = store.recorder().expect("recorder");
    let sim = Simulator::new(gpus, 1000);
    let now = gpudash::telemetry::now_ms();
    for second in (1..=3600u64).rev() {
        recorder.record_waiting(&sim.sample(now - second * 1000));
    }
    recorder.stop();
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((q * (sorted.len().max(1) - 1) as f64).round()) as usize).copied().unwrap_or(f64::NAN)
}

/// The browser windows the redraw is timed in, and whether every GPU's card is opened from its
/// overview row: the default view (eight rows, no card, no memory chart); a laptop's with every
/// card open, where the cards below the fold wait to be scrolled to; and one tall enough that all
/// eight cards (every memory chart) are on screen at once: the worst case.
const WINDOWS: [(u32, u32, bool, &str); 3] = [
    (1280, 800, false, "1280×800, the default overview (cards closed)"),
    (1280, 900, true, "1280×900, every card open"),
    (1280, 6000, true, "1280×6000, every card open and on screen"),
];
/// The target for a batch's p99 tick handling: printed with a verdict, not asserted.
const TICK_P99_TARGET_MS: f64 = 8.0;
/// The main thread's budget at 8 GPUs, ms of tasks per second of wall time while the test's 10 ticks
/// a second arrive (a tenth of the thread): printed with a verdict, not asserted.
const MAIN_THREAD_BUDGET_MS_PER_S: f64 = 100.0;

/// Chromium's cumulative main-thread counters by name (DevTools `Performance.getMetrics`, after
/// `Performance.enable`; durations in seconds).
pub(crate) async fn browser_metrics(c: &fantoccini::Client) -> std::collections::HashMap<String, f64> {
    let answer = c.issue_cmd(Cdp { method: "Performance.getMetrics", params: serde_json::json!({}) }).await;
    let answer = answer.expect("Chromium's metrics");
    answer["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["name"].as_str()?.to_owned(), m["value"].as_f64()?)))
        .collect()
}

/// The main thread's busy time (Chromium's `TaskDuration`: every task, script, style, layout and
/// paint) from a moment on, to be read as ms per second of wall time and split per tick.
pub(crate) struct MainThread {
    before: std::collections::HashMap<String, f64>,
    at: std::time::Instant,
}

impl MainThread {
    /// Starts counting (turns Chromium's counters on if they were off).
    pub(crate) async fn start(c: &fantoccini::Client) -> Self {
        c.issue_cmd(Cdp { method: "Performance.enable", params: serde_json::json!({}) }).await.expect("metrics on");
        Self { before: browser_metrics(c).await, at: std::time::Instant::now() }
    }

    /// Ms of main-thread tasks per second of wall time since `start`, and where a tick's share
    /// went: the table cell "all tasks / script / style / layout ms (style recalcs, layouts)".
    pub(crate) async fn stop(&self, c: &fantoccini::Client, ticks: usize) -> (f64, String) {
        let after = browser_metrics(c).await;
        let seconds = self.at.elapsed().as_secs_f64();
        let delta = |name: &str| {
            after.get(name).copied().unwrap_or(f64::NAN) - self.before.get(name).copied().unwrap_or(f64::NAN)
        };
        let per_tick = |name: &str, scale: f64| delta(name) * scale / ticks as f64;
        let split = format!(
            "{:.2} / {:.2} / {:.2} / {:.2} ms ({:.2} style recalcs, {:.2} layouts)",
            per_tick("TaskDuration", 1000.0),
            per_tick("ScriptDuration", 1000.0),
            per_tick("RecalcStyleDuration", 1000.0),
            per_tick("LayoutDuration", 1000.0),
            per_tick("RecalcStyleCount", 1.0),
            per_tick("LayoutCount", 1.0),
        );
        (delta("TaskDuration") * 1000.0 / seconds, split)
    }
}

/// GPUDASH_BUDGETS_CSS="rules": added to the page before the timed ticks, to compare a style change
/// with the page as built in one build (alternate runs with and without it).
pub(crate) async fn add_budgets_css(c: &fantoccini::Client) {
    if let Ok(css) = std::env::var("GPUDASH_BUDGETS_CSS") {
        let script = "const s = document.createElement('style'); s.textContent = arguments[0]; \
                      document.head.append(s); return null";
        c.execute(script, vec![serde_json::Value::String(css)]).await.expect("the style is added");
    }
}

#[tokio::test]
async fn chart_redraw_and_first_render_figures() {
    let dir = tempfile::tempdir().unwrap();
    an_hour_of_history(dir.path(), 8);
    let server = TestServer::with_history(8, 100, dir.path()).await;
    let mut figures = String::from("\n| figure | value | target |\n| --- | --- | --- |\n");
    let mut verdicts = String::new();
    for (width, height, open, window) in WINDOWS {
        let (rows, verdict) = redraw_figures(&server.url("/"), width, height, open, window).await;
        figures.push_str(&rows);
        verdicts.push_str(&verdict);
    }
    print_figures(&figures);
    print_figures(&verdicts);
    server.stop().await;
}

/// The `data-draws` count of every memory chart, in card order, and whether each is on screen.
async fn memory_charts(c: &fantoccini::Client) -> Vec<(u64, bool)> {
    let charts = js(
        c,
        "return [...document.querySelectorAll('canvas.mem-chart')].map(k => { \
         const r = k.getBoundingClientRect(); \
         return [+(k.getAttribute('data-draws') || 0), r.bottom > 0 && r.top < innerHeight]; })",
    )
    .await;
    charts
        .as_array()
        .expect("an array")
        .iter()
        .map(|pair| (pair[0].as_u64().unwrap_or(0), pair[1].as_bool().unwrap_or(false)))
        .collect()
}

/// Waits for the rows (with `open`, for every card and the first chart draw) and every chart's
/// hour-long answer; returns the first render's and the first paint's time from navigation start:
/// the first chart drawn when the cards are opened, the eight rows with figures when not.
async fn load_an_hour(c: &fantoccini::Client, url: &str, open: bool) -> (f64, Option<f64>) {
    c.issue_cmd(Cdp {
        method: "Page.addScriptToEvaluateOnNewDocument",
        params: serde_json::json!({ "source": PROBE }),
    })
    .await
    .expect("chromedriver passes DevTools commands");
    c.goto(url).await.unwrap();
    let rows = eventually_every(15, Duration::from_millis(50), "eight GPU rows with figures", || async {
        let shown = js(
            c,
            "const t = [...document.querySelectorAll('tr.gpu-row .ov-temp')].map(e => e.textContent); \
             return t.length === 8 && t.every(x => x.endsWith('°C')) ? performance.now() : null",
        )
        .await;
        shown.as_f64().ok_or(shown)
    })
    .await;
    if !open {
        return (rows, first_paint(c).await);
    }
    c.find(Locator::Css("#expand-all")).await.unwrap().click().await.unwrap();
    eventually(15, "eight GPU cards", || async { (texts(c, ".gpu-card").await.len() == 8).then_some(()) }).await;
    let first_render = eventually_every(10, Duration::from_millis(50), "the first chart draw", || async {
        let end = js(c, "return window.__gpudashProbe.firstDrawEnd || null").await.as_f64();
        match end {
            Some(end) => Ok(end),
            // Where the first memory chart is, for the failure: one off screen does not draw.
            None => Err(js(
                c,
                "const k = document.querySelector('canvas.mem-chart'); \
                 return k ? {top: k.getBoundingClientRect().top, bottom: k.getBoundingClientRect().bottom, \
                 height: k.height, viewport: innerHeight} : 'no memory chart';",
            )
            .await),
        }
    })
    .await;
    (first_render, first_paint(c).await)
}

async fn first_paint(c: &fantoccini::Client) -> Option<f64> {
    js(c, "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null")
        .await
        .as_f64()
}

/// Picks the 1 h range and waits until every history chart has its hour.
pub(crate) async fn pick_an_hour(c: &fantoccini::Client) {
    let hour = eventually(10, "the 1h range button", || async {
        c.find(Locator::Css("#range-picker button[data-range='1h']")).await.ok()
    })
    .await;
    hour.click().await.unwrap();
    // Let the hour's answers arrive and draw before timing live ticks.
    // 30 s: on a loaded machine the hour of 8 GPUs took longer than 15 s to arrive and draw.
    eventually(30, "the hour-long answer, and the charts on screen drawn", || async {
        let done = js(
            c,
            "const charts = [...document.querySelectorAll('canvas.history-chart')]; \
             const hours = performance.getEntriesByType('resource').map(e => new URL(e.name)) \
             .filter(u => u.pathname === '/api/history/all' && u.searchParams.get('range') === '1h').length; \
             return charts.length > 0 && hours === 1 && charts \
                 .filter(k => k.getBoundingClientRect().top < innerHeight) \
                 .every(k => +k.getAttribute('data-points') > 0)",
        )
        .await;
        (done == serde_json::Value::Bool(true)).then_some(())
    })
    .await;
}

/// p50 / p99 / max of each batch, and each batch's p99.
pub(crate) fn batch_figures(values: &[f64]) -> (String, Vec<f64>) {
    let mut p99s = Vec::new();
    let text: Vec<String> = values
        .chunks(TICKS)
        .take(BATCHES)
        .map(|batch| {
            let mut batch = batch.to_vec();
            batch.sort_by(f64::total_cmp);
            let p99 = quantile(&batch, 0.99);
            p99s.push(p99);
            format!("{:.2} / {p99:.2} / {:.2}", quantile(&batch, 0.5), batch.last().copied().unwrap_or(f64::NAN))
        })
        .collect();
    (text.join(" · "), p99s)
}

pub(crate) fn numbers(value: &serde_json::Value) -> Vec<f64> {
    value.as_array().map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect()).unwrap_or_default()
}

/// The machine's 1-minute load average: other work on it lengthens every tick.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Table rows for one window (tick handling, the page's script per tick, draws per tick,
/// first draw and paint) and its verdict line. Asserts what is correctness, not timing.
async fn redraw_figures(url: &str, width: u32, height: u32, open: bool, window: &str) -> (String, String) {
    let mut figures = String::new();
    let mut verdict = String::new();
    let (out, said) = (&mut figures, &mut verdict);
    with_browser(width, height, |c| async move {
        let (first_render, paint) = load_an_hour(&c, url, open).await;
        pick_an_hour(&c).await;
        let history_charts = texts(&c, "canvas.history-chart").await.len();
        assert_eq!(
            history_charts, 7,
            "seven history charts of every GPU: memory, util, SM and tensor activity, power, temperature, SM clock"
        );
        let before = memory_charts(&c).await;
        assert_eq!(before.len(), if open { 8 } else { 0 }, "a memory chart per open card, none for a closed one");
        let load_before = load_average();
        add_budgets_css(&c).await;
        let main_thread = MainThread::start(&c).await;
        js(&c, "window.__gpudashProbe.recording = true; return null").await;
        let timing = eventually(90, "300 timed ticks", || async {
            let probe = js(
                &c,
                "const p = window.__gpudashProbe; return { tasks: p.tasks, scripts: p.scripts, draws: p.draws }",
            )
            .await;
            (probe["tasks"].as_array().map_or(0, Vec::len) >= TICKS * BATCHES).then_some(probe)
        })
        .await;
        let (busy, split) = main_thread.stop(&c, TICKS * BATCHES).await;
        let after = memory_charts(&c).await;
        let load_after = load_average();

        // Correctness: charts on screen follow the live ticks, charts off screen wait.
        let on_screen = after.iter().filter(|(_, shown)| *shown).count();
        for (index, ((drawn_before, _), (drawn_after, shown))) in before.iter().zip(&after).enumerate() {
            if *shown {
                assert!(
                    drawn_after > drawn_before,
                    "{window}: GPU {index}'s memory chart is on screen and never redrew"
                );
            } else {
                assert_eq!(drawn_after, drawn_before, "{window}: GPU {index}'s memory chart is off screen yet drew");
            }
        }
        let tasks = numbers(&timing["tasks"]);
        let scripts = numbers(&timing["scripts"]);
        assert!(tasks.len() >= TICKS * BATCHES && scripts.len() >= TICKS * BATCHES, "every timed tick was counted");
        let draws = numbers(&timing["draws"]);
        let mean_draws = draws.iter().take(TICKS * BATCHES).sum::<f64>() / (TICKS * BATCHES) as f64;
        if on_screen > 0 {
            assert!(mean_draws > 0.0, "{window}: {on_screen} charts on screen, yet no tick drew one");
        }

        let (handling, p99s) = batch_figures(&tasks);
        let (script, _) = batch_figures(&scripts);
        let _ = writeln!(
            out,
            "| {window}: tick handling incl. redraw, 8 GPUs, {history_charts} history charts on 1 h: p50 / p99 / max \
             of each of {BATCHES} batches of {TICKS} ticks | {handling} ms | p99 ≤ {TICK_P99_TARGET_MS} ms |"
        );
        let _ = writeln!(
            out,
            "| {window}: of which the page's own script (handler and effects, draws included) | {script} ms | |"
        );
        let _ = writeln!(
            out,
            "| {window}: the main thread while ticking, 10 ticks/s (Chromium's TaskDuration: script, style, \
             layout, paint) | {busy:.0} ms per second | ≤ {MAIN_THREAD_BUDGET_MS_PER_S} ms per second |"
        );
        let _ = writeln!(
            out,
            "| {window}: the main thread per timed tick (Chromium's `Performance.getMetrics`): all tasks / script / \
             style recalculation / layout | {split} | |"
        );
        let _ = writeln!(
            out,
            "| {window}: canvas draws per tick (mean; memory charts on screen: {on_screen}) | {mean_draws:.1} | |"
        );
        let _ = writeln!(
            out,
            "| {window}: machine load average, before / after the timed ticks | {load_before} / {load_after} | |"
        );
        let first = if open {
            "first chart drawn (cards opened by a click once the rows show), from navigation start"
        } else {
            "eight rows with figures (polled every 50 ms), from navigation start"
        };
        let _ = writeln!(out, "| {window}: {first} | {first_render:.0} ms | ≤ 1 s |");
        let _ = writeln!(out, "| {window}: first contentful paint | {:.0} ms | |", paint.unwrap_or(f64::NAN));

        let met = p99s.iter().filter(|p99| **p99 <= TICK_P99_TARGET_MS).count();
        let worst = p99s.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            said,
            "{window}: tick p99 ≤ {TICK_P99_TARGET_MS} ms {} — {met} of {} batches within, worst p99 {worst:.1} ms; \
             main thread {busy:.0} ms/s, ≤ {MAIN_THREAD_BUDGET_MS_PER_S} ms/s {} (load {load_before} → {load_after}; \
             printed, not asserted)",
            if met == p99s.len() { "MET" } else { "NOT MET" },
            p99s.len(),
            if busy <= MAIN_THREAD_BUDGET_MS_PER_S { "MET" } else { "NOT MET" },
        );
    })
    .await;
    (figures, verdict)
}
