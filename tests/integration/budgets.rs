//! Frontend budgets, printed for docs/BENCHMARKS.md: the app's download, gzip
//! (printed against its 250 KiB target; asserted only against a 768 KiB ceiling
//! that catches a runaway dependency) and brotli (what Chromium takes), and in Chromium the first render and
//! the time each tick's redraw takes with 8 GPUs and an hour of 1 Hz history
//! (printed, never asserted: timing belongs in figures, not pass/fail tests).
//!
//! `cargo test -p gpudash-tests --test integration budgets -- --nocapture --test-threads 1`

use std::fmt::Write as _;

use fantoccini::Locator;
use gpudash::store::{Retention, Store};
use gpudash::telemetry::GpuSource as _;
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::TestServer;

/// The whole app (page, scripts, wasm, styles), gzip as served: the target, printed…
const APP_BUDGET: usize = 250 * 1024;
/// …and the ceiling past which a change has pulled in something it should not.
const APP_CEILING: usize = 768 * 1024;
const APP_FILES: [&str; 5] =
    ["/", "/assets/boot.js", "/assets/frontend.js", "/assets/frontend_bg.wasm", "/assets/style.css"];
/// Ticks whose handling is timed, in batches: the issue's p99 is over 100 ticks, i.e. the
/// second-worst one, so three batches show how much of a batch's p99 is the VM's noise.
const TICKS: usize = 100;
const BATCHES: usize = 3;

#[expect(clippy::print_stdout, reason = "these tests exist to print figures")]
fn print_figures(text: &str) {
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
    let mut figures = String::from("\n| file | gzip bytes | brotli bytes |\n| --- | --- | --- |\n");
    let (mut gzip, mut brotli) = (0, 0);
    for path in APP_FILES {
        let (g, b) = (download(path, "gzip").await, download(path, "br").await);
        (gzip, brotli) = (gzip + g, brotli + b);
        let _ = writeln!(figures, "| {path} | {g} | {b} |");
    }
    let verdict = if gzip <= APP_BUDGET { "within" } else { "OVER" };
    let _ = writeln!(
        figures,
        "| whole app | {gzip} ({:.1} KiB; {verdict} the {} KiB target) | {brotli} ({:.1} KiB; what Chromium downloads) |",
        gzip as f64 / 1024.0,
        APP_BUDGET / 1024,
        brotli as f64 / 1024.0,
    );
    print_figures(&figures);
    assert!(gzip <= APP_CEILING, "the app weighs {gzip} bytes gzip, past the {APP_CEILING}-byte ceiling");
    server.stop().await;
}

/// Installed before the page's own scripts: times every WebSocket message's
/// handling (its task and the microtasks it queues, where Leptos runs effects
/// and the charts draw), counts canvas draws, and notes the first one.
const PROBE: &str = r"(() => {
  const probe = { recording: false, tasks: [], draws: [], firstDrawEnd: null };
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
        afterTask((end) => {
          if (probe.recording && typeof event.data === 'string' && event.data.startsWith('{\x22type\x22:\x22tick\x22')) {
            probe.tasks.push(end - start);
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
struct Cdp {
    method: &'static str,
    params: serde_json::Value,
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
fn an_hour_of_history(dir: &std::path::Path, gpus: u32) {
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

/// The browser windows the redraw is timed in: a laptop's, where the cards below
/// the fold wait to be scrolled to, and one tall enough that all eight cards
/// (every memory chart) are on screen at once.
const WINDOWS: [(u32, u32, &str); 2] =
    [(1280, 900, "1280×900 window"), (1280, 6000, "1280×6000, every card on screen")];

#[tokio::test]
async fn chart_redraw_and_first_render_figures() {
    let dir = tempfile::tempdir().unwrap();
    an_hour_of_history(dir.path(), 8);
    let server = TestServer::with_history(8, 100, dir.path()).await;
    let mut figures = String::from("\n| figure | value | target |\n| --- | --- | --- |\n");
    for (width, height, window) in WINDOWS {
        figures.push_str(&redraw_figures(&server.url("/"), width, height, window).await);
    }
    print_figures(&figures);
    server.stop().await;
}

/// Table rows for one window: tick handling p50/p99/max, draws per tick, first draw and paint.
async fn redraw_figures(url: &str, width: u32, height: u32, window: &str) -> String {
    let mut figures = String::new();
    let out = &mut figures;
    with_browser(width, height, |c| async move {
        c.issue_cmd(Cdp {
            method: "Page.addScriptToEvaluateOnNewDocument",
            params: serde_json::json!({ "source": PROBE }),
        })
        .await
        .expect("chromedriver passes DevTools commands");
        c.goto(url).await.unwrap();
        eventually(15, "eight GPU cards", || async { (texts(&c, ".gpu-card").await.len() == 8).then_some(()) }).await;
        let first_render = eventually(10, "the first chart draw", || async {
            js(&c, "return window.__gpudashProbe.firstDrawEnd || null").await.as_f64()
        })
        .await;
        let paint = js(
            &c,
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null",
        )
        .await;
        let hour = eventually(10, "the 1h range button", || async {
            c.find(Locator::Css("#range-picker button[data-range='1h']")).await.ok()
        })
        .await;
        hour.click().await.unwrap();
        // Let the hour's answers arrive and draw before timing live ticks.
        eventually(15, "every chart's hour-long answer, and the charts on screen drawn", || async {
            let done = js(
                &c,
                "const charts = [...document.querySelectorAll('canvas.history-chart')]; \
                 const hours = performance.getEntriesByType('resource').map(e => new URL(e.name)) \
                 .filter(u => u.pathname === '/api/history' \
                     && +u.searchParams.get('to') - +u.searchParams.get('from') === 3600000).length; \
                 return charts.length > 0 && hours >= charts.length && charts \
                     .filter(k => k.getBoundingClientRect().top < innerHeight) \
                     .every(k => +k.getAttribute('data-points') > 0)",
            )
            .await;
            (done == serde_json::Value::Bool(true)).then_some(())
        })
        .await;
        js(&c, "window.__gpudashProbe.recording = true; return null").await;
        let timing = eventually(90, "300 timed ticks", || async {
            let probe = js(&c, "const p = window.__gpudashProbe; return { tasks: p.tasks, draws: p.draws }").await;
            (probe["tasks"].as_array().map_or(0, Vec::len) >= TICKS * BATCHES).then_some(probe)
        })
        .await;
        let history_charts = texts(&c, "canvas.history-chart").await.len();
        let on_screen = js(
            &c,
            "return [...document.querySelectorAll('canvas.mem-chart')].filter(k => { \
             const r = k.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }).length",
        )
        .await;

        let tasks: Vec<f64> = timing["tasks"].as_array().unwrap().iter().filter_map(|v| v.as_f64()).collect();
        assert!(tasks.len() >= TICKS * BATCHES, "every timed tick was counted");
        let batches: Vec<String> = tasks
            .chunks(TICKS)
            .take(BATCHES)
            .map(|batch| {
                let mut batch = batch.to_vec();
                batch.sort_by(f64::total_cmp);
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    quantile(&batch, 0.5),
                    quantile(&batch, 0.99),
                    batch.last().copied().unwrap_or(f64::NAN)
                )
            })
            .collect();
        let draws: Vec<u64> = timing["draws"].as_array().unwrap().iter().filter_map(|v| v.as_u64()).collect();
        let counted = draws.len().min(TICKS * BATCHES);
        let mean_draws = draws.iter().take(counted).sum::<u64>() as f64 / counted.max(1) as f64;
        let _ = writeln!(
            out,
            "| {window}: tick handling incl. redraw, 8 GPUs, {history_charts} history charts on 1 h: p50 / p99 / max \
             of each of {BATCHES} batches of {TICKS} ticks | {} ms | p99 ≤ 8 ms |",
            batches.join(" · ")
        );
        let _ = writeln!(
            out,
            "| {window}: canvas draws per tick (mean; memory charts on screen: {on_screen}) | {mean_draws:.1} | |"
        );
        let _ = writeln!(out, "| {window}: first chart drawn, from navigation start | {first_render:.0} ms | ≤ 1 s |");
        let _ = writeln!(out, "| {window}: first contentful paint | {:.0} ms | |", paint.as_f64().unwrap_or(f64::NAN));
    })
    .await;
    figures
}
