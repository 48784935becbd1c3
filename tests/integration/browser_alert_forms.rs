//! Alert cards being filled in in a real browser: a half-typed silence reason, and a group card's
//! "Silence all…" form, stay as they are while another alert fires and the list re-renders.

use serde_json::json;
use shared::alerts::AlertsResponse;

use crate::browser::{eventually, js, texts, with_browser};
use crate::browser_alerts::TEMPERATURE_ONLY;
use crate::support::{TestServer, get_json};

/// GPU 1 falls off the bus this long after the first sample (GPU 0 at once): time for the browser to
/// start and the test to type into GPU 0's card first (the test fails, saying so, if it did not).
const LATER_LOST: &str = "lost:1@60s";

/// Issue 32: the Alerts list is keyed by alert. A silence reason half typed into GPU 0's card is
/// still there, in the same input, after GPU 1's alert fired and joined the list above or below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_typed_silence_reason_survives_another_alert_firing() {
    use gpudash::telemetry::simulator::Simulator;
    with_browser(1280, 1000, |c| async move {
        // Started once this test holds the browser, so LATER_LOST counts from here.
        let simulator =
            Simulator::new(2, 250).with_fault("lost:0@1s".parse().unwrap()).with_fault(LATER_LOST.parse().unwrap());
        // No rule but the GPU-lost one (and temperature, which these GPUs stay under) fires.
        let options = gpudash::Options {
            alerts: gpudash::alerts::AlertsConfig::parse(TEMPERATURE_ONLY, "test.toml").unwrap(),
            ..gpudash::Options::new(std::time::Duration::from_millis(250))
        };
        let running = TestServer::with_options(Box::new(simulator), options).await;
        let server = &running;
        let url = server.url("/#alerts");
        c.goto(&url).await.expect("webdriver answers");
        let card = |gpu: u32| format!("#alerts-list li.alert-row[data-rule='device_lost'][data-gpu='{gpu}']");
        // Open GPU 0's silence form and type half a reason (one script: no redraw between find and use).
        let typed = format!(
            "const open = document.querySelector(\"{0} .alert-silence-open\"); if (!open) return null; \
             let input = document.querySelector(\"{0} .alert-silence-reason\"); \
             if (!input) {{ open.click(); return null; }} \
             input.value = 'fan being swa'; input.dispatchEvent(new Event('input', {{ bubbles: true }})); \
             input.dataset.typedHere = 'yes'; \
             return document.querySelectorAll(\"#alerts-list li.alert-row[data-gpu='1']\").length",
            card(0)
        );
        let before =
            eventually(50, "GPU 0's silence form, typed into", || async { js(&c, &typed).await.as_u64() }).await;
        let firing: AlertsResponse = get_json(server, "/api/alerts?state=firing").await;
        assert!(
            before == 0 && !firing.alerts.iter().any(|a| a.gpu_index == 1),
            "GPU 1 was lost ({LATER_LOST}) before the reason was typed ({before} cards); lose it later. Firing: {:?}",
            firing.alerts.iter().map(|a| (a.rule, a.gpu_index, a.fired_ms)).collect::<Vec<_>>()
        );
        eventually(150, "GPU 1's alert on the list", || async {
            (!texts(&c, &card(1)).await.is_empty()).then_some(())
        })
        .await;
        let kept = js(
            &c,
            &format!(
                "const i = document.querySelector(\"{} .alert-silence-reason\"); \
                 return i && [i.value, i.dataset.typedHere || 'a new input']",
                card(0)
            ),
        )
        .await;
        assert_eq!(kept, json!(["fan being swa", "yes"]), "GPU 0's card kept its form and the half-typed reason");
        running.stop().await;
    })
    .await;
}

/// ana's third spin loop starts this long after the first sample: time to open the group's form.
const LATER_SPIN: &str = "job:2:ana:8:98:spin@40s+10m";

/// Issue 32: a group card is rebuilt when an alert joins it; its "Silence all…" form, opened with a
/// reason half typed and another duration chosen, is still open with both when ana's third idle
/// alert joins the card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_cards_half_typed_silence_survives_a_third_alert_joining() {
    use gpudash::telemetry::simulator::Simulator;
    with_browser(1280, 1000, |c| async move {
        // Started once this test holds the browser, so LATER_SPIN counts from here.
        let simulator = ["job:0:ana:8:98:spin@0s+10m", "job:1:ana:8:98:spin@0s+10m", LATER_SPIN]
            .iter()
            .fold(Simulator::new(4, 200), |s, f| s.with_fault(f.parse().unwrap()));
        let options = gpudash::Options {
            idle: gpudash::telemetry::IdleRule { memory: 1 << 30, after: std::time::Duration::from_secs(1) },
            ..gpudash::Options::new(std::time::Duration::from_millis(200))
        };
        let running = TestServer::with_options(Box::new(simulator), options).await;
        let server = &running;
        c.goto(&server.url("/#alerts")).await.expect("webdriver answers");
        let group = "#alerts-list > li.alert-group[data-rule='idle_held'][data-owner='ana']";
        // Open the form, choose 4h and type half a reason (one script: no redraw between find and use).
        let typed = format!(
            "const open = document.querySelector(\"{group} .alert-silence-all\"); if (!open) return null; \
             const form = document.querySelector(\"{group} .alert-silence-all-form\"); \
             if (!form) {{ open.click(); return null; }} \
             const d = form.querySelector('.alert-silence-duration'); d.value = '4h'; \
             d.dispatchEvent(new Event('change', {{ bubbles: true }})); \
             const r = form.querySelector('.alert-silence-reason'); r.value = 'notebooks kept for a de'; \
             r.dispatchEvent(new Event('input', {{ bubbles: true }})); \
             return document.querySelectorAll(\"{group} .alert-group-item\").length"
        );
        let before = eventually(50, "ana's group's form, filled in", || async { js(&c, &typed).await.as_u64() }).await;
        assert_eq!(before, 2, "the third spin loop ({LATER_SPIN}) was flagged before the form was filled in; start it later");
        eventually(150, "the third alert in ana's group", || async {
            (texts(&c, &format!("{group} .alert-group-item")).await.len() == 3).then_some(())
        })
        .await;
        let kept = js(
            &c,
            &format!(
                "const f = document.querySelector(\"{group} .alert-silence-all-form\"); \
                 return f && [f.querySelector('.alert-silence-duration').value, f.querySelector('.alert-silence-reason').value]"
            ),
        )
        .await;
        assert_eq!(kept, json!(["4h", "notebooks kept for a de"]), "the rebuilt group card kept its form as filled in");
        running.stop().await;
    })
    .await;
}
