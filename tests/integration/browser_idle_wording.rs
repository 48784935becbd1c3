//! One idle signal, named so that nobody is misled (issue 32, item 2): the process table names
//! NVML's per-process "SM util (NVML)" apart from the GPU's "SM activity", each explained on
//! hover; a spin loop (util 98 %, SM activity ~0) is flagged idle with the reason in its row and
//! in its GPU's overview row, and
//! its alert does not say it "has computed nothing" and names the moment it went idle (shown in the
//! viewer's zone), not a length that freezes; a busy scripted job shows SM activity that
//! fits its util, so it is not flagged.

use std::time::Duration;

use fantoccini::Locator;
use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::Simulator;
use shared::alerts::AlertsResponse;

use crate::browser::{eventually, texts, with_browser};
use crate::support::{TestServer, get_json};

/// PIDs of the simulator's scripted jobs: 60000 + the fault's position.
const SPIN_PID: u32 = 60_000;
const BUSY_PID: u32 = 60_001;

#[tokio::test]
async fn a_spin_loop_is_idle_with_the_reason_and_a_busy_job_is_not() {
    let source = Simulator::new(2, 200)
        .with_fault("job:0:ana:8:98:spin@0s+10m".parse().unwrap())
        .with_fault("job:1:bo:8:98@0s+10m".parse().unwrap());
    let options = gpudash::Options {
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(source), options).await;
    let alert = eventually(30, "the spin loop's idle_held alert", || async {
        let firing: AlertsResponse = get_json(&server, "/api/alerts?state=firing&rule=idle_held").await;
        firing.alerts.into_iter().find(|a| a.pid == Some(SPIN_PID))
    })
    .await;
    assert!(
        alert.message.contains("util 98% but SM activity") && !alert.message.contains("computed nothing"),
        "{}",
        alert.message
    );
    // Issue 56, item 2: a moment, not a length that freezes while the alert fires ("since 2026-12-06 02:40 UTC").
    let since = alert.message.split(" since ").nth(1).and_then(|rest| rest.get(..20)).unwrap_or_default();
    assert!(shared::time::parse_utc_minute(since).is_some(), "the moment it went idle: {}", alert.message);
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        let spin_row = format!("#processes tr[data-pid='{SPIN_PID}']");
        let why = eventually(20, "the spin loop's reason in its row", || async {
            texts(&c, &format!("{spin_row} .idle-why")).await.into_iter().next()
        })
        .await;
        assert!(
            why.starts_with("util 98% but SM activity 0.") && why.ends_with(": tiny kernels or a spin loop?"),
            "{why}"
        );
        // The overview's row says it too, beside its 98% util bar (issue 56, item 2): in its State cell
        // (cut there, whole in its tooltip).
        let state = c.find(Locator::Css("tr.gpu-row[data-index='0'] td.ov-state")).await.unwrap();
        let said = state.attr("title").await.unwrap().unwrap_or_default();
        assert!(
            said.starts_with("held idle: util 98% but SM activity 0.") && said.ends_with("spin loop?"),
            "the row's state: {said}"
        );
        let busy_row = format!("#processes tr[data-pid='{BUSY_PID}']");
        let busy = texts(&c, &busy_row).await.join(" ");
        assert!(!busy.is_empty() && !busy.contains("idle"), "a busy job at 98% is not idle: {busy}");
        let sm_activity: f64 =
            texts(&c, &format!("{busy_row} td.activity")).await[0].trim_end_matches('%').parse().unwrap();
        assert!(sm_activity > 50.0, "its SM activity fits its util: {sm_activity}");
        for (css, name) in [("th.col-sm", "SM util (NVML)"), ("th.col-activity", "SM activity")] {
            let header = c.find(Locator::Css(css)).await.unwrap();
            let hover = match header.find(Locator::Css("button")).await {
                Ok(button) => button.attr("title").await.unwrap(),
                Err(_) => header.attr("title").await.unwrap(),
            };
            let text = header.text().await.unwrap();
            assert!(text.to_lowercase().contains(&name.to_lowercase()), "{css}: {text}");
            assert!(hover.is_some_and(|t| t.len() > 40), "{css} explains itself on hover");
        }
        // On the Alerts tab that moment reads in the viewer's zone, in the page's one format.
        c.goto(&format!("{url}#alerts")).await.unwrap();
        let shown = eventually(20, "the idle alert's message on the Alerts tab", || async {
            let script = format!(
                "const m = document.querySelector(\"li.alert-row[data-rule=idle_held] .alert-message\"); \
                 return m && m.textContent.includes('PID {SPIN_PID}') ? m.textContent : null"
            );
            crate::browser::js(&c, &script).await.as_str().map(str::to_owned)
        })
        .await;
        assert!(shown.contains(" since ") && !shown.contains(" UTC"), "localized on the page: {shown}");
    })
    .await;
}
