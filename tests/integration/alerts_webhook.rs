//! Webhook deliveries to a real HTTP receiver started by the test: the three formats, retries
//! after 500 and 429, a receiver that hangs past the timeout, and a queue that overflows.
//! `Deliveries` is driven directly with alert events on a broadcast channel, as the engine sends them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use gpudash::alerts::deliver::{Deliveries, DeliveryOptions};
use gpudash::alerts::{Webhook, WebhookFormat};
use shared::alerts::{Alert, AlertEvent, Rule, Severity, Silence, WebhookStatus};
use tokio::sync::broadcast;

use crate::support::{TestServer, eventually};

/// What the receiver answers to one request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer {
    Status(u16),
    /// 429 asking to wait an hour (the delivery's cap shortens it).
    TooMany,
    /// Never answers.
    Hang,
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub(crate) path: String,
    query: Option<String>,
    headers: HeaderMap,
    pub(crate) body: String,
}

#[derive(Default)]
struct Script {
    got: Vec<Got>,
    /// Answers to the next requests, in order; then `then`.
    next: VecDeque<Answer>,
    then: Option<Answer>,
}

/// An HTTP receiver on a free loopback port that records every request.
#[derive(Clone)]
pub(crate) struct Receiver {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    /// Answers `next` in order, then `then` to everything.
    pub(crate) async fn start(next: &[Answer], then: Answer) -> Self {
        let script = Arc::new(Mutex::new(Script {
            next: next.iter().copied().collect(),
            then: Some(then),
            ..Script::default()
        }));
        let app = axum::Router::new().fallback(record).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, script }
    }

    pub(crate) fn url(&self, path: &str) -> url::Url {
        url::Url::parse(&format!("http://{}{path}", self.addr)).unwrap()
    }

    pub(crate) fn got(&self) -> Vec<Got> {
        self.script.lock().unwrap().got.clone()
    }

    /// The requests to `path`, once there are `count` of them.
    async fn wait_for(&self, path: &str, count: usize) -> Vec<Got> {
        eventually(10, &format!("{count} request(s) to {path}"), || async {
            let got: Vec<Got> = self.got().into_iter().filter(|g| g.path == path).collect();
            (got.len() >= count).then_some(got)
        })
        .await
    }
}

async fn record(State(script): State<Arc<Mutex<Script>>>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let answer = {
        let mut script = script.lock().unwrap();
        script.got.push(Got { path: uri.path().to_owned(), query: uri.query().map(str::to_owned), headers, body });
        script.next.pop_front().or(script.then).unwrap()
    };
    match answer {
        Answer::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Answer::TooMany => (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "3600")]).into_response(),
        Answer::Hang => std::future::pending().await,
    }
}

fn webhook(url: url::Url, format: WebhookFormat) -> Webhook {
    Webhook { format, ..Webhook::generic(url) }
}

/// Short waits so retries take milliseconds.
fn quick() -> DeliveryOptions {
    DeliveryOptions {
        backoff: Duration::from_millis(10),
        backoff_cap: Duration::from_millis(40),
        retry_after_cap: Duration::from_millis(50),
        ..DeliveryOptions::default()
    }
}

fn alert(id: u64, rule: Rule, severity: Severity) -> Alert {
    Alert {
        id,
        rule,
        severity,
        gpu_index: 3,
        gpu_uuid: "GPU-3".into(),
        pid: None,
        user: Some("ana".into()),
        message: format!("GPU 3 reported XID 79 <{id}>"),
        action: "drain the node & reboot it".into(),
        fired_ms: 1_000 + id,
        resolved_ms: None,
        silenced: None,
        simulated: true,
        redacted: false,
    }
}

fn fire(events: &broadcast::Sender<AlertEvent>, alert: &Alert) {
    events.send(AlertEvent { alert: alert.clone(), firing: 1 }).unwrap();
}

fn resolve(events: &broadcast::Sender<AlertEvent>, alert: &Alert) {
    let alert = Alert { resolved_ms: Some(alert.fired_ms + 60_000), ..alert.clone() };
    events.send(AlertEvent { alert, firing: 0 }).unwrap();
}

/// The status of webhook number `index`, once `done` holds for it.
async fn status_when(
    deliveries: &Deliveries,
    index: usize,
    what: &str,
    done: impl Fn(&WebhookStatus) -> bool,
) -> WebhookStatus {
    eventually(10, what, || async {
        let status = deliveries.status().remove(index);
        done(&status).then_some(status)
    })
    .await
}

#[tokio::test]
async fn generic_slack_and_ntfy_bodies_reach_the_receiver() {
    let receiver = Receiver::start(&[], Answer::Status(200)).await;
    let (events, rx) = broadcast::channel(64);
    let ntfy = Webhook { min_severity: Severity::Warning, ..webhook(receiver.url("/n"), WebhookFormat::Ntfy) };
    let hooks = vec![
        webhook(receiver.url("/g?token=s3cret"), WebhookFormat::Generic),
        webhook(receiver.url("/s"), WebhookFormat::Slack),
        ntfy,
    ];
    let deliveries = Deliveries::start_with(hooks, "node-7".into(), rx, quick());
    let xid = alert(1, Rule::Xid, Severity::Critical);
    fire(&events, &xid);
    // Neither a silenced alert, nor the silence of a firing one, nor (for ntfy) an info alert is sent.
    let silence = Silence {
        id: 1,
        rule: Rule::Xid,
        gpu_uuid: "GPU-3".into(),
        by: "root".into(),
        reason: "known".into(),
        from_ms: 0,
        until_ms: u64::MAX,
    };
    fire(&events, &Alert { silenced: Some(silence.clone()), ..alert(2, Rule::Ecc, Severity::Critical) });
    fire(&events, &Alert { silenced: Some(silence), ..xid.clone() });
    fire(&events, &alert(3, Rule::GpuFree, Severity::Info));
    resolve(&events, &xid);

    let generic = receiver.wait_for("/g", 3).await;
    let bodies: Vec<serde_json::Value> = generic.iter().map(|g| serde_json::from_str(&g.body).unwrap()).collect();
    let summary: Vec<(u64, &str)> =
        bodies.iter().map(|b| (b["alert"]["id"].as_u64().unwrap(), b["state"].as_str().unwrap())).collect();
    assert_eq!(summary, [(1, "firing"), (3, "firing"), (1, "resolved")]);
    assert_eq!((bodies[0]["version"].as_u64(), bodies[0]["host"].as_str()), (Some(1), Some("node-7")));
    assert_eq!(serde_json::from_value::<Alert>(bodies[0]["alert"].clone()).unwrap(), xid);
    assert_eq!(generic[0].query.as_deref(), Some("token=s3cret"), "the token in the URL reaches the receiver");
    assert_eq!(generic[0].headers["content-type"], "application/json");

    let slack = receiver.wait_for("/s", 3).await;
    let text =
        |g: &Got| serde_json::from_str::<serde_json::Value>(&g.body).unwrap()["text"].as_str().unwrap().to_owned();
    let first = text(&slack[0]);
    assert!(first.starts_with(":rotating_light: *CRITICAL: XID error* on GPU 3 (node-7)\n"), "{first}");
    assert!(
        first.contains("GPU 3 reported XID 79 &lt;1&gt;") && first.contains("drain the node &amp; reboot"),
        "{first}"
    );
    assert!(first.contains("user ana"), "{first}");
    assert!(text(&slack[2]).starts_with(":white_check_mark: *Resolved: XID error* on GPU 3"), "{}", text(&slack[2]));

    let ntfy = receiver.wait_for("/n", 2).await;
    assert_eq!(ntfy.len(), 2, "the info alert stays below ntfy's minimum severity");
    let header = |g: &Got, name: &str| g.headers[name].to_str().unwrap().to_owned();
    assert_eq!(header(&ntfy[0], "title"), "XID error on GPU 3 (node-7) [simulated]");
    assert_eq!(
        (header(&ntfy[0], "priority"), header(&ntfy[0], "tags")),
        ("5".into(), "rotating_light,critical,xid".into())
    );
    assert_eq!(ntfy[0].body, "GPU 3 reported XID 79 <1>\nWhat to do: drain the node & reboot it\nUser: ana");
    assert_eq!(header(&ntfy[1], "title"), "Resolved: XID error on GPU 3 (node-7) [simulated]");
    assert_eq!(header(&ntfy[1], "priority"), "3");

    let status = status_when(&deliveries, 0, "the generic webhook's three deliveries", |s| s.delivered == 3).await;
    let target = format!("http://{}/…", receiver.addr);
    assert_eq!((status.target.as_str(), status.format.as_str()), (target.as_str(), "generic"));
    assert_eq!((status.failed, status.dropped, status.queued, status.last_error), (0, 0, 0, None));
    assert!(status.last_success_ms.is_some());
}

#[tokio::test]
async fn failures_are_retried_with_backoff_and_client_errors_are_not() {
    let flaky =
        Receiver::start(&[Answer::Status(500), Answer::TooMany, Answer::Status(500)], Answer::Status(200)).await;
    let gone = Receiver::start(&[], Answer::Status(404)).await;
    let down = Receiver::start(&[], Answer::Status(503)).await;
    let moved = Receiver::start(&[], Answer::Status(301)).await;
    let (events, rx) = broadcast::channel(64);
    let hooks = vec![
        webhook(flaky.url("/hook"), WebhookFormat::Generic),
        webhook(gone.url("/hook"), WebhookFormat::Generic),
        webhook(down.url("/hook"), WebhookFormat::Generic),
        webhook(moved.url("/hook"), WebhookFormat::Generic),
    ];
    let deliveries = Deliveries::start_with(hooks, "node-7".into(), rx, quick());
    fire(&events, &alert(1, Rule::Temperature, Severity::Warning));

    let status = status_when(&deliveries, 0, "delivery after two 500s and a 429", |s| s.delivered == 1).await;
    assert_eq!((status.failed, status.last_error.clone()), (0, None), "{status:?}");
    assert_eq!(flaky.got().len(), 4, "three failed attempts, then the one that was delivered");

    let status = status_when(&deliveries, 1, "the 404 given up at once", |s| s.failed == 1).await;
    assert_eq!(status.last_error.as_deref(), Some("HTTP 404 (not retried)"));
    assert!(status.last_error_ms.is_some() && status.last_success_ms.is_none());
    assert_eq!(gone.got().len(), 1);

    let status = status_when(&deliveries, 2, "the 503s given up after five tries", |s| s.failed == 1).await;
    assert_eq!(status.last_error.as_deref(), Some("HTTP 503 after 5 tries"));
    assert_eq!((down.got().len(), status.queued), (5, 0));

    let status = status_when(&deliveries, 3, "the redirect given up at once", |s| s.failed == 1).await;
    assert_eq!((status.last_error.as_deref(), moved.got().len()), (Some("HTTP 301 (not retried)"), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_hangs_times_out_and_holds_up_nothing_else() {
    let server = TestServer::simulated(2, 100).await;
    let hung = Receiver::start(&[], Answer::Hang).await;
    let fine = Receiver::start(&[], Answer::Status(204)).await;
    let (events, rx) = broadcast::channel(64);
    let slow = Webhook { timeout: Duration::from_millis(300), ..webhook(hung.url("/hook"), WebhookFormat::Slack) };
    let hooks = vec![slow, webhook(fine.url("/hook"), WebhookFormat::Ntfy)];
    let options = DeliveryOptions { tries: 2, ..quick() };
    let deliveries = Deliveries::start_with(hooks, "node-7".into(), rx, options);
    let mut ticks = server.running.telemetry().subscribe();
    for id in 1..=3 {
        fire(&events, &alert(id, Rule::DeviceLost, Severity::Critical));
    }

    // While the first receiver holds its first request, the other gets all three and sampling goes on.
    hung.wait_for("/hook", 1).await;
    fine.wait_for("/hook", 3).await;
    let before = deliveries.status().remove(0);
    assert!(before.delivered == 0 && before.failed < 3, "the hung receiver is still being tried: {before:?}");
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(5), ticks.recv()).await.expect("a tick in time").expect("ticks");
    }

    let status = status_when(&deliveries, 0, "three deliveries timed out", |s| s.failed == 3).await;
    assert_eq!(status.last_error.as_deref(), Some("timed out after 300ms (2 tries)"));
    assert_eq!((status.delivered, status.queued), (0, 0));
    assert_eq!(hung.got().len(), 6, "two tries for each of three alerts");
    assert_eq!(deliveries.status()[1].delivered, 3);
    server.stop().await;
}

#[tokio::test]
async fn a_full_queue_and_a_lagging_reader_count_what_they_drop() {
    let hung = Receiver::start(&[], Answer::Hang).await;
    // Capacity 4: the events sent below before the dispatcher runs overrun it.
    let (events, rx) = broadcast::channel(4);
    let stuck = Webhook { timeout: Duration::from_secs(30), ..webhook(hung.url("/hook"), WebhookFormat::Generic) };
    let options = DeliveryOptions { queue: 2, tries: 1, ..quick() };
    let deliveries = Deliveries::start_with(vec![stuck], "node-7".into(), rx, options);
    fire(&events, &alert(1, Rule::Xid, Severity::Critical));
    hung.wait_for("/hook", 1).await;

    // One in flight; two fit the queue, the other eight are dropped.
    for id in 2..=4 {
        fire(&events, &alert(id, Rule::Xid, Severity::Critical));
        status_when(&deliveries, 0, "the dispatcher to take the alert", |s| s.queued + s.dropped == id).await;
    }
    for id in 5..=11 {
        fire(&events, &alert(id, Rule::Xid, Severity::Critical));
    }
    let status = status_when(&deliveries, 0, "eight alerts dropped", |s| s.dropped >= 8).await;
    assert_eq!((status.queued, status.dropped, status.delivered, status.failed), (3, 8, 0, 0), "{status:?}");

    // Twelve more at once on a channel of four: the dispatcher misses eight, and counts them.
    for id in 12..=23 {
        fire(&events, &alert(id, Rule::Xid, Severity::Critical));
    }
    let status = status_when(&deliveries, 0, "the lag and the overflow counted", |s| s.dropped >= 8 + 12).await;
    assert_eq!((status.queued, status.dropped), (3, 20), "{status:?}");
    assert_eq!(hung.got().len(), 1, "nothing else was sent while the first hung");
}
