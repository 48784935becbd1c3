//! Alerts in a real browser, with the notification permission granted through
//! Chromium's DevTools protocol: a simulated GPU falls off the bus, its critical
//! "GPU lost" alert shows on the Alerts tab and in the header badge, and a Web
//! Notification is raised because the user subscribed to every critical alert
//! through the page's own control; once unsubscribed, the next lost GPU is shown
//! but raises none. The header badge and the tab's title count the firing alerts by severity,
//! as the overview rates their readings, and leave silenced ones out. Cards being filled in: browser_alert_forms.rs.

use clap::Parser as _;
use fantoccini::{Client, Locator, wd::WebDriverCompatibleCommand};
use serde_json::{Value, json};
use shared::alerts::{AlertsResponse, SubscriptionKind, SubscriptionsResponse};

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::{POLL, TestServer, eventually_every, get_json};

/// GPU 1 falls off the bus this long after the first sample: time for the browser to
/// start and the test to subscribe first (the test fails, saying so, if it did not).
const FIRST_LOST: &str = "lost:1@45s";
/// GPU 0 follows, after the test has unsubscribed.
const SECOND_LOST: &str = "lost:0@70s";

/// Records every `new Notification(title, {body})` the page makes, then lets the browser's own run.
const RECORD_NOTIFICATIONS: &str = "window.__notes = []; const Real = window.Notification; \
    window.Notification = class extends Real { constructor(title, options) { \
    window.__notes.push({ title: title, body: (options && options.body) || '' }); super(title, options); } }; \
    return Notification.permission;";

/// A DevTools command sent through chromedriver (`goog/cdp/execute`).
#[derive(Debug)]
struct DevTools {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for DevTools {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "cmd": self.cmd, "params": self.params }).to_string()))
    }
}

/// Two simulated GPUs that fall off the bus one after the other, as the command line says.
async fn losing_server() -> TestServer {
    let args = ["gpudash", "--simulate", "2", "--interval", "250ms"];
    let faults = ["--simulate-fault", FIRST_LOST, "--simulate-fault", SECOND_LOST];
    let cli = gpudash::cli::Cli::try_parse_from(args.into_iter().chain(faults)).expect("flags parse");
    let config = gpudash::config::Config::from(cli);
    let source = gpudash::open_source(&config);
    TestServer::with_options(source, gpudash::Options::new(config.interval)).await
}

/// The notifications the page raised, as (title, body).
async fn notes(c: &Client) -> Vec<(String, String)> {
    let list = js(c, "return window.__notes || []").await;
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
    list.as_array().map(|a| a.iter().map(|n| (text(n, "title"), text(n, "body"))).collect()).unwrap_or_default()
}

/// The firing "GPU lost" alerts the server has, by GPU index.
async fn lost_gpus(server: &TestServer) -> Vec<u32> {
    let answer: AlertsResponse = get_json(server, "/api/alerts?state=firing&rule=device_lost").await;
    answer.alerts.iter().map(|a| a.gpu_index).collect()
}

async fn subscriptions(server: &TestServer) -> Vec<SubscriptionKind> {
    let answer: SubscriptionsResponse = get_json(server, "/api/alerts/subscriptions").await;
    answer.subscriptions.into_iter().map(|s| s.kind).collect()
}

/// The badge as (count, class, accessible label).
async fn badge(c: &Client) -> Option<(u64, String, String)> {
    let b = js(
        c,
        "const b = document.querySelector('#alerts-badge'); \
         return b && [+b.dataset.count, b.className, b.getAttribute('aria-label'), b.getAttribute('href')]",
    )
    .await;
    let b = b.as_array()?;
    assert_eq!(b[3], "#alerts", "the badge links to the Alerts tab");
    Some((b[0].as_u64()?, b[1].as_str()?.to_owned(), b[2].as_str()?.to_owned()))
}

/// The row of GPU `gpu`'s firing "GPU lost" alert, as its text.
async fn lost_row(c: &Client, gpu: u32) -> Option<String> {
    let css = format!("li.alert-row[data-rule=device_lost][data-gpu='{gpu}'][data-state=firing]");
    texts(c, &css).await.into_iter().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_gpu_shows_in_the_tab_and_badge_and_notifies_only_while_subscribed() {
    with_browser(1400, 1000, |c| async move {
        // Started once this test holds the browser (one at a time), so the faults' seconds are this
        // test's own, not spent waiting for another test's browser.
        let running = losing_server().await;
        let server = &running;
        let url = server.url("/");
        let origin = server.base.clone();
        c.issue_cmd(DevTools {
            cmd: "Browser.grantPermissions",
            params: json!({ "origin": origin, "permissions": ["notifications"] }),
        })
        .await
        .expect("chromedriver passes DevTools commands on");
        c.goto(&url).await.expect("webdriver answers");
        assert_eq!(js(&c, RECORD_NOTIFICATIONS).await, "granted", "the permission was granted");

        c.wait().for_element(Locator::Css("#tab-alerts")).await.expect("the Alerts tab").click().await.unwrap();
        eventually(15, "the subscriptions loaded", || async {
            js(&c, "const b = document.querySelector('#notify-critical'); return b && !b.disabled")
                .await
                .as_bool()
                .filter(|on| *on)
        })
        .await;
        assert!(lost_gpus(server).await.is_empty(), "GPU 1 was lost before the page subscribed: raise {FIRST_LOST}");
        c.find(Locator::Css("#notify-critical")).await.unwrap().click().await.unwrap();
        eventually(10, "the server to hold the subscription", || async {
            (subscriptions(server).await == [SubscriptionKind::Critical {}]).then_some(())
        })
        .await;
        let permission = js(&c, "return document.querySelector('#alerts-notify-permission').dataset.permission").await;
        assert_eq!(permission, "granted");

        // GPU 1 falls off the bus: a critical alert in the tab and the badge, and one notification.
        // Lower-cased: WebDriver reads the text as shown, and the severity is shown in capitals.
        let row = eventually(120, "GPU 1's 'GPU lost' row", || lost_row(&c, 1)).await.to_lowercase();
        assert!(row.contains("critical") && row.contains("gpu lost") && row.contains("gpu 1"), "{row}");
        assert!(row.contains("simulated"), "simulated alerts say so: {row}");
        eventually(10, "the badge to count what the server counts", || async {
            let firing: AlertsResponse = get_json(server, "/api/alerts?state=firing").await;
            let (count, class, label) = badge(&c).await?;
            let expected = if count == 1 { "1 alert firing: ".to_owned() } else { format!("{count} alerts firing: ") };
            let counted = count == u64::from(firing.counts.unsilenced()) && count == u64::from(firing.firing);
            (counted && class.contains("sev-critical") && label.starts_with(&expected)).then_some(())
        })
        .await;
        let alert = get_json::<AlertsResponse>(server, "/api/alerts?state=firing&rule=device_lost&gpu=1").await;
        let message = alert.alerts.first().expect("GPU 1's alert").message.clone();
        let raised = eventually(10, "a notification for GPU 1", || async {
            let notes = notes(&c).await;
            (!notes.is_empty()).then_some(notes)
        })
        .await;
        // A lost GPU also reports XID 79, itself critical: it may notify too, a moment later.
        assert!(raised.contains(&("critical: GPU lost on GPU 1".to_owned(), message)), "{raised:?}");

        // Unsubscribed, the next lost GPU shows but raises nothing.
        c.find(Locator::Css("#notify-critical")).await.unwrap().click().await.unwrap();
        eventually(10, "the subscription gone", || async { subscriptions(server).await.is_empty().then_some(()) })
            .await;
        assert_eq!(lost_gpus(server).await, [1], "GPU 0 was lost before the page unsubscribed: raise {SECOND_LOST}");
        eventually(60, "GPU 0's 'GPU lost' row", || lost_row(&c, 0)).await;
        eventually(10, "the badge to count both", || async {
            badge(&c).await.filter(|(count, _, _)| *count >= 2).map(drop)
        })
        .await;
        let notes = notes(&c).await;
        assert!(notes.iter().all(|(title, _)| !title.ends_with("on GPU 0")), "none once unsubscribed: {notes:?}");
        running.stop().await;
    })
    .await;
}

/// Every rule's alert, fired and resolved through the simulator's faults, has its row on the
/// Alerts tab (state "all"), and the badge counts what still fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_has_its_row_on_the_alerts_tab() {
    use crate::alerts_rules::{FAULTS, SHORT_HOLDS, server as faulty_server};
    let dir = tempfile::tempdir().unwrap();
    let config = gpudash::alerts::AlertsConfig::parse(SHORT_HOLDS, "test.toml").unwrap();
    let server = faulty_server(dir.path(), config, true).await;
    let url = server.url("/#alerts");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        c.wait().for_element(Locator::Css("#alerts-filter-state")).await.expect("the Alerts tab");
        js(
            &c,
            "const s = document.querySelector('#alerts-filter-state'); s.value = 'all'; \
             s.dispatchEvent(new Event('change', { bubbles: true })); return s.value",
        )
        .await;
        let missing = || async {
            let mut missing = Vec::new();
            for (rule, gpu, _) in FAULTS {
                let css = format!("li.alert-row[data-rule={}][data-gpu='{gpu}']", rule.as_str());
                if texts(&c, &css).await.is_empty() {
                    missing.push(format!("{} on GPU {gpu}", rule.as_str()));
                }
            }
            missing
        };
        eventually(60, "a row for every rule on its GPU", || async { missing().await.is_empty().then_some(()) }).await;
        // Rows re-render as alerts fire and resolve: a row read mid-render reads empty, so read again.
        let row = eventually(20, "the XID row's text", || async {
            texts(&c, "li.alert-row[data-rule=xid][data-gpu='2']").await.into_iter().find(|t| !t.is_empty())
        })
        .await;
        assert!(row.contains("XID") && row.contains("13"), "the XID row names its code: {row}");
        // Issue 56, item 5: "fired" says its date in the page's one format, whose zone is named once.
        let offset = offset_ms(&c).await;
        let now = gpudash::telemetry::now_ms();
        let days = [now, now - shared::time::DAY_MS]
            .map(|ms| format!("fired {} ", shared::time_axis::Civil::at(ms, offset).date()));
        eventually_every(
            20,
            std::time::Duration::from_millis(100),
            "every row's fired time dated today or yesterday",
            || async {
                // textContent: a group card's own rows sit in its closed "Each of the N alerts" fold,
                // where WebDriver's visible text is empty.
                let all = "return [...document.querySelectorAll('li.alert-row .alert-time')].map(e => e.textContent)";
                let fired: Vec<String> = serde_json::from_value(js(&c, all).await).unwrap_or_default();
                let read = !fired.is_empty() && fired.iter().all(|t| !t.is_empty());
                let dated = fired.iter().all(|t| days.iter().any(|d| t.starts_with(d.as_str())));
                match (read, dated) {
                    (true, true) => Ok(()),
                    (true, false) => panic!("a fired time is not dated {days:?}: {fired:?}"),
                    (false, _) => Err(fired),
                }
            },
        )
        .await;
        assert!(texts(&c, ".alerts-zone").await.concat().starts_with("Times in UTC"), "the zone is named");
    })
    .await;
    server.stop().await;
}

/// The browser's zone, ms east of UTC.
async fn offset_ms(c: &Client) -> i64 {
    js(c, "return -new Date().getTimezoneOffset()").await.as_i64().expect("a number") * 60_000
}

/// Only the temperature rule, firing from 80 °C within a second: nothing else to count.
pub(crate) const TEMPERATURE_ONLY: &str = r#"
        [rules.temperature]
        celsius = 80
        for = "1s"
        [rules.clock_events]
        enabled = false
        [rules.memory_full]
        enabled = false
        [rules.gpu_free]
        enabled = false
        [rules.idle_held]
        enabled = false
"#;

/// The badge as (critical, warning, unsilenced count, its visible text, its label) and the tab's title.
async fn badge_and_title(c: &Client) -> (Value, String) {
    let b = js(
        c,
        "const b = document.querySelector('#alerts-badge'); \
         return b && [+b.dataset.critical, +b.dataset.warning, +b.dataset.count, \
                      [...b.children].map(e => e.textContent.trim()).join(' '), b.getAttribute('aria-label')]",
    )
    .await;
    (b, js(c, "return document.title").await.as_str().unwrap_or_default().to_owned())
}

/// GPU 0 runs hot (92 °C past its 87 °C slowdown: a red ✖ on the overview), GPU 1 warm (84 °C: ⚠):
/// the badge reads one critical and one warning, as the alerts are rated; silenced, the critical
/// one leaves the badge's count and the tab's title.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_badge_and_title_count_by_severity_and_leave_silenced_alerts_out() {
    use gpudash::telemetry::simulator::Simulator;
    use shared::alerts::Severity;
    use shared::firing::FiringCounts;
    let simulator =
        Simulator::new(3, 250).with_fault("hot:0@0s".parse().unwrap()).with_fault("warm:1@0s".parse().unwrap());
    let options = gpudash::Options {
        hostname: Some("node-7".to_owned()),
        alerts: gpudash::alerts::AlertsConfig::parse(TEMPERATURE_ONLY, "test.toml").unwrap(),
        ..gpudash::Options::new(std::time::Duration::from_millis(250))
    };
    let server = TestServer::with_options(Box::new(simulator), options).await;
    let shared = &server;
    with_browser(1400, 1000, |c| async move {
        let server = shared;
        c.goto(&server.url("/")).await.expect("webdriver answers");
        // GPU 0 heats through the warning band into the critical one: its alert follows.
        let firing = eventually(40, "one critical and one warning alert", || async {
            let r: AlertsResponse = get_json(server, "/api/alerts?state=firing").await;
            (r.counts == FiringCounts { critical: 1, warning: 1, ..FiringCounts::default() }).then_some(r)
        })
        .await;
        let severity = |gpu: u32| firing.alerts.iter().find(|a| a.gpu_index == gpu).map(|a| a.severity);
        assert_eq!((severity(0), severity(1)), (Some(Severity::Critical), Some(Severity::Warning)));
        // The page may still be loading on a busy machine: the badge and the overview follow the
        // socket, so both are waited for, and a timeout shows what the page last said.
        let (badge, title) = eventually_every(30, POLL, "the badge to read 1 critical · 1 warning", || async {
            let (badge, title) = badge_and_title(&c).await;
            if badge[0] == 1 && badge[1] == 1 && badge[2] == 2 { Ok((badge, title)) } else { Err((badge, title)) }
        })
        .await;
        assert_eq!(badge[3], "1 critical · 1 warning", "{badge}");
        assert_eq!(badge[4], "2 alerts firing: 1 critical, 1 warning");
        assert_eq!(title, "(2) gpudash — node-7");
        // The overview rates the same readings the same way.
        let classes =
            "return [0, 1].map(i => document.querySelector(`tr.gpu-row[data-index='${i}'] .ov-temp`)?.className)";
        eventually_every(20, POLL, "the overview's temperatures rated critical and warning", || async {
            let classes = js(&c, classes).await;
            let has = |i: usize, class: &str| classes[i].as_str().is_some_and(|c| c.split(' ').any(|c| c == class));
            if has(0, "sev-critical") && has(1, "sev-warning") { Ok(()) } else { Err(classes) }
        })
        .await;

        // Silenced, the critical alert still fires but no longer counts.
        let body = json!({"rule": "temperature", "gpu": 0, "duration": "1h", "reason": "fan being swapped"});
        let response = reqwest::Client::new().post(server.url("/api/alerts/silences")).json(&body).send().await;
        assert_eq!(response.unwrap().status(), 201);
        let (badge, title) =
            eventually_every(20, POLL, "the silenced alert out of the badge and the title", || async {
                let (badge, title) = badge_and_title(&c).await;
                if badge[0] == 0 && badge[1] == 1 && title == "(1) gpudash — node-7" {
                    Ok((badge, title))
                } else {
                    Err((badge, title))
                }
            })
            .await;
        assert_eq!((badge[2].as_u64(), badge[3].as_str()), (Some(1), Some("1 warning")), "{badge} {title}");
        assert_eq!(badge[4], "1 alert firing: 1 warning (1 silenced)");
        let r: AlertsResponse = get_json(server, "/api/alerts?state=firing").await;
        assert_eq!((r.firing, r.counts.silenced, r.counts.unsilenced()), (2, 1, 1), "still firing, silenced");
    })
    .await;
    server.stop().await;
}

/// Issue 32, item 5: served over plain http from a name that is not loopback, the page is no secure
/// context and browser notifications cannot work. The Notify panel says so ("notifications need HTTPS
/// or localhost"), shows every box unticked and disabled although the server holds a subscription,
/// and points to the webhooks; the same page on 127.0.0.1 (a secure context) shows the box ticked
/// and no such notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_plain_http_notifications_say_they_cannot_work_and_point_to_webhooks() {
    const NAME: &str = "gpudash.test";
    let mut options = gpudash::Options::new(std::time::Duration::from_millis(250));
    options.site.names.push(NAME.to_owned());
    // Without tokens, only loopback names are served unless anonymous use is allowed.
    options.allow_anonymous = true;
    let server =
        TestServer::with_options(Box::new(gpudash::telemetry::simulator::Simulator::new(2, 250)), options).await;
    // Held by the server: a page that ignored the insecure context would show it ticked.
    let made = reqwest::Client::new()
        .post(server.url("/api/alerts/subscriptions"))
        .json(&SubscriptionKind::Critical {})
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201, "{:?}", made.text().await);
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let (insecure_url, local_url) = (format!("http://{NAME}:{port}/#alerts"), server.url("/#alerts"));
    let rule = format!("--host-resolver-rules=MAP {NAME} 127.0.0.1");
    crate::browser::with_browser_flags(1280, 900, &[&rule], |c| async move {
        const BOXES: &str = "return [...document.querySelectorAll('.alerts-subscriptions input[type=checkbox]')] \
            .map(b => [b.id, b.checked, b.disabled])";
        c.goto(&insecure_url).await.expect("webdriver answers");
        assert_eq!(js(&c, "return window.isSecureContext").await, false, "the test's premise: not a secure context");
        let notice = eventually(20, "the notice that notifications cannot work", || async {
            texts(&c, "#alerts-notify #alerts-notify-insecure").await.into_iter().next().filter(|t| !t.is_empty())
        })
        .await;
        assert!(notice.contains("notifications need HTTPS or localhost"), "{notice}");
        assert!(notice.contains("webhook"), "it points to the webhooks: {notice}");
        let link = js(&c, "const a = document.querySelector('#alerts-notify-insecure a'); return a && a.hash").await;
        assert_eq!(link, "#alerts-webhooks", "a link to the Webhooks panel");
        assert_eq!(js(&c, "return !!document.querySelector('#alerts-webhooks')").await, true);
        // Give the page the time to load the subscriptions it would otherwise tick.
        eventually(10, "the subscription boxes", || async {
            let boxes = js(&c, BOXES).await;
            (boxes.as_array().is_some_and(|b| b.len() >= 5)).then_some(())
        })
        .await;
        let boxes = js(&c, BOXES).await;
        let critical =
            js(&c, "return fetch('/api/alerts/subscriptions').then(r => r.json()).then(j => j.subscriptions.length)");
        assert_eq!(critical.await, 1, "the page's own origin reaches the server, which holds the subscription");
        for b in boxes.as_array().unwrap() {
            assert_eq!((&b[1], &b[2]), (&json!(false), &json!(true)), "unticked and disabled: {b}");
        }

        // On 127.0.0.1 (a secure context) the same subscription shows ticked, with no notice.
        c.goto(&local_url).await.expect("webdriver answers");
        eventually(20, "the critical box ticked on loopback", || async {
            let on =
                js(&c, "const b = document.querySelector('#notify-critical'); return !!b && b.checked && !b.disabled");
            on.await.as_bool().filter(|on| *on)
        })
        .await;
        assert!(texts(&c, "#alerts-notify-insecure").await.is_empty(), "no notice in a secure context");
    })
    .await;
    server.stop().await;
}
