//! Deliveries: alerts sent to webhooks as they fire and resolve, and the Prometheus rules
//! export. A task reads the engine's alert events and hands each webhook its payload
//! through a bounded queue: nothing here waits on a receiver where sampling could feel it.

pub mod format;
pub mod prometheus;
mod sink;

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use shared::alerts::{AlertEvent, AlertState, WebhookStatus};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use self::format::Payload;
pub use self::sink::DeliveryOptions;
use self::sink::Sink;
use crate::alerts::config::{AlertsConfig, Webhook, WebhookFormat};

/// How many firing alerts the dispatcher remembers having announced (to send their resolution).
const ANNOUNCED_KEPT: usize = 10_000;

/// The webhooks and their queues; cheap to clone, one per server.
#[derive(Clone)]
pub struct Deliveries {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliveries").field("webhooks", &self.status()).finish()
    }
}

struct Shared {
    host: String,
    client: Result<reqwest::Client, String>,
    options: DeliveryOptions,
    /// What the sinks space their warnings on.
    clock: base::clock::Clock,
    sinks: RwLock<Vec<Arc<Sink>>>,
}

impl Deliveries {
    /// Starts delivering `events` to `webhooks` as `host` (on the current tokio runtime).
    pub fn start(webhooks: Vec<Webhook>, host: String, events: broadcast::Receiver<AlertEvent>) -> Self {
        Self::start_with(webhooks, host, events, DeliveryOptions::default())
    }

    /// [`Self::start`] with other queue lengths, tries and waits (tests shorten the backoff).
    pub fn start_with(
        webhooks: Vec<Webhook>,
        host: String,
        events: broadcast::Receiver<AlertEvent>,
        options: DeliveryOptions,
    ) -> Self {
        let client = reqwest::Client::builder()
            .user_agent(concat!("gpudash/", env!("CARGO_PKG_VERSION")))
            // A webhook that moved says so instead of being followed with the alert.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string());
        if let Err(e) = &client {
            tracing::error!("webhooks cannot be delivered: cannot start the HTTP client: {e}");
        }
        let clock = base::clock::Clock::system();
        let shared = Arc::new(Shared { host, client, options, clock, sinks: RwLock::new(Vec::new()) });
        let deliveries = Self { shared };
        deliveries.replace(webhooks);
        tokio::spawn(dispatch(deliveries.shared.clone(), events));
        deliveries
    }

    /// Each webhook's counters, in the order they were given.
    pub fn status(&self) -> Vec<WebhookStatus> {
        self.sinks().iter().map(|s| s.status()).collect()
    }

    /// Delivers to `webhooks` from now on (a reloaded alerts file). A webhook given before with
    /// the same settings keeps its queue and counters; one left out (or changed) takes no new alerts
    /// but still sends what it had queued, then stops.
    /// Call it on the tokio runtime (it starts the new webhooks' tasks).
    pub fn replace(&self, webhooks: Vec<Webhook>) {
        let mut sinks = base::sync::write(&self.shared.sinks);
        let mut old = std::mem::take(&mut *sinks);
        for webhook in webhooks {
            let kept = old.iter().position(|s| s.webhook == webhook).map(|i| old.remove(i));
            if kept.is_none() {
                let what = match (webhook.alerts, webhook.jobs) {
                    (true, false) => format!("alerts ({} and above)", webhook.min_severity.as_str()),
                    (true, true) => format!("alerts ({} and above) and job messages", webhook.min_severity.as_str()),
                    _ => "job messages".to_owned(),
                };
                tracing::info!("{what} go to {} ({})", format::target(&webhook.url), webhook.format.as_str());
            }
            sinks.push(kept.unwrap_or_else(|| {
                Arc::new(Sink::start(
                    webhook,
                    self.shared.client.clone(),
                    &self.shared.options,
                    self.shared.clock.clone(),
                ))
            }));
        }
    }

    /// Queues the payload `build` makes for each webhook that takes job messages (`jobs = true`);
    /// how many were queued.
    pub fn offer_jobs(&self, build: impl Fn(WebhookFormat) -> Payload) -> usize {
        let mut queued = 0;
        for sink in self.sinks().iter().filter(|s| s.webhook.jobs) {
            if sink.offer(build(sink.webhook.format)) {
                queued += 1;
            }
        }
        queued
    }

    /// How many webhooks take job messages.
    pub fn job_webhooks(&self) -> usize {
        base::sync::read(&self.shared.sinks).iter().filter(|s| s.webhook.jobs).count()
    }

    fn sinks(&self) -> Vec<Arc<Sink>> {
        base::sync::read(&self.shared.sinks).clone()
    }
}

/// The webhooks of the alerts file, then one generic webhook per `--alert-webhook` URL.
pub fn webhooks_for(config: &AlertsConfig, flags: &[url::Url]) -> Vec<Webhook> {
    let mut webhooks = config.webhooks.clone();
    webhooks.extend(flags.iter().cloned().map(Webhook::generic));
    webhooks
}

/// Starts delivering the engine's `events` to the alerts file's webhooks and the
/// `--alert-webhook` ones, as `host`. A SIGHUP reload calls
/// `deliveries.replace(webhooks_for(&reloaded, flags))`.
pub fn start_for(
    config: &AlertsConfig,
    flags: &[url::Url],
    host: &str,
    events: broadcast::Receiver<AlertEvent>,
) -> Deliveries {
    Deliveries::start(webhooks_for(config, flags), host.to_owned(), events)
}

/// Reads alert events until the engine goes away, and queues each deliverable one for
/// every webhook whose minimum severity it meets.
async fn dispatch(shared: Arc<Shared>, mut events: broadcast::Receiver<AlertEvent>) {
    let started_ms = telemetry::now_ms();
    let mut announced = BTreeSet::new();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(missed)) => {
                let sinks = base::sync::read(&shared.sinks).clone();
                tracing::warn!("alert deliveries fell behind: {missed} alert event(s) skipped");
                for sink in sinks.iter().filter(|s| s.webhook.alerts) {
                    sink.count_dropped(missed);
                }
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if !deliverable(&mut announced, &event, started_ms) {
            continue;
        }
        let alert = &event.alert;
        let sinks = base::sync::read(&shared.sinks).clone();
        for sink in sinks.iter().filter(|s| s.webhook.alerts && alert.severity >= s.webhook.min_severity) {
            sink.offer(format::payload(sink.webhook.format, &shared.host, alert));
        }
    }
}

/// Whether `event` is sent: an alert firing unsilenced that was not announced yet (also when a
/// silence is lifted from one that fired under it: receivers learn of it then), or the resolution of
/// one that was announced, or that fired before these deliveries started (a restart) and is not
/// silenced. A silence, a repeat of an announced alert (a further XID), or the resolution of an
/// alert never announced (it fired silenced, or its firing was dropped) is not.
fn deliverable(announced: &mut BTreeSet<u64>, event: &AlertEvent, started_ms: u64) -> bool {
    let alert = &event.alert;
    match alert.state() {
        AlertState::Firing => {
            if alert.silenced.is_some() || !announced.insert(alert.id) {
                return false;
            }
            // Ids increase: forget the oldest.
            while announced.len() > ANNOUNCED_KEPT {
                announced.pop_first();
            }
            true
        }
        AlertState::Resolved => {
            announced.remove(&alert.id) || (alert.silenced.is_none() && alert.fired_ms < started_ms)
        }
    }
}

/// The webhooks' counters as Prometheus text: deliveries by outcome and alerts dropped.
pub fn metrics_text(statuses: &[WebhookStatus]) -> String {
    use base::prom_text::{Exposition, Kind, escape};
    let mut out = Exposition::default();
    out.family(
        "gpudash_alert_webhook_deliveries_total",
        "Alerts and job messages sent to a webhook, by outcome (failed: after every retry).",
        Kind::Counter,
        statuses.iter().flat_map(|s| {
            let target = escape(&s.target);
            [
                (format!("target=\"{target}\",outcome=\"delivered\""), s.delivered as f64),
                (format!("target=\"{target}\",outcome=\"failed\""), s.failed as f64),
            ]
        }),
    );
    out.family(
        "gpudash_alert_webhook_dropped_total",
        "Alerts and job messages a webhook never got because its queue was full.",
        Kind::Counter,
        statuses.iter().map(|s| (format!("target=\"{}\"", escape(&s.target)), s.dropped as f64)),
    );
    out.into_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::alerts::{Alert, Rule, Severity, Silence};

    fn event(id: u64, resolved: bool, silenced: bool) -> AlertEvent {
        let alert = Alert {
            id,
            rule: Rule::Temperature,
            severity: Severity::Warning,
            gpu_index: 0,
            gpu_uuid: "GPU-0".into(),
            pid: None,
            user: None,
            message: "hot".into(),
            action: "cool it".into(),
            fired_ms: 1,
            resolved_ms: resolved.then_some(2),
            silenced: silenced.then(|| Silence {
                id: 1,
                rule: Rule::Temperature,
                gpu_uuid: "GPU-0".into(),
                by: "root".into(),
                reason: "known".into(),
                from_ms: 0,
                until_ms: 10,
            }),
            simulated: true,
            redacted: false,
        };
        AlertEvent { alert, firing: 1 }
    }

    #[test]
    fn fires_and_resolutions_are_sent_once_and_silences_never() {
        let mut announced = BTreeSet::new();
        let (before, after) = (0, u64::MAX);
        let send = |announced: &mut BTreeSet<u64>, e: &AlertEvent, started| deliverable(announced, e, started);
        assert!(send(&mut announced, &event(1, false, false), before));
        assert!(!send(&mut announced, &event(1, false, false), before), "a repeat of a firing alert");
        assert!(!send(&mut announced, &event(1, false, true), before), "the silence itself");
        assert!(send(&mut announced, &event(1, true, true), before), "announced, so its end is sent though silenced");
        assert!(!send(&mut announced, &event(2, false, true), before), "fired under a silence");
        assert!(!send(&mut announced, &event(2, true, true), before), "resolved under a silence, never announced");
        assert!(send(&mut announced, &event(3, true, false), after), "fired before a restart");
        assert!(!send(&mut announced, &event(4, true, false), before), "its firing was never sent (dropped)");
        assert!(send(&mut announced, &event(5, false, false), before) && announced.contains(&5));
        assert!(send(&mut announced, &event(5, true, false), before));
        assert!(announced.is_empty());
    }

    #[test]
    fn the_announced_set_stays_bounded() {
        let mut announced = BTreeSet::new();
        for id in 0..(ANNOUNCED_KEPT as u64 + 50) {
            deliverable(&mut announced, &event(id, false, false), 0);
        }
        assert_eq!(announced.len(), ANNOUNCED_KEPT);
        assert_eq!(announced.first(), Some(&50));
    }

    #[test]
    fn flags_add_generic_webhooks_after_the_files() {
        let text = "[[webhook]]\nurl = \"http://127.0.0.1:9/a\"\nformat = \"ntfy\"\n";
        let config = AlertsConfig::parse(text, "a.toml").unwrap();
        let flag = url::Url::parse("https://hooks.example.org/b").unwrap();
        let hooks = webhooks_for(&config, std::slice::from_ref(&flag));
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[1], Webhook::generic(flag));
    }

    #[test]
    fn metrics_carry_each_target_and_outcome() {
        let status =
            WebhookStatus {
                target: "http://h:1/…".into(), delivered: 3, failed: 1, dropped: 2, ..Default::default()
            };
        let text = metrics_text(&[status]);
        assert!(
            text.contains("gpudash_alert_webhook_deliveries_total{target=\"http://h:1/…\",outcome=\"delivered\"} 3\n")
        );
        assert!(text.contains("outcome=\"failed\"} 1\n"));
        assert!(text.contains("gpudash_alert_webhook_dropped_total{target=\"http://h:1/…\"} 2\n"));
        assert_eq!(metrics_text(&[]), "");
    }
}
