//! One webhook: a bounded queue and the task that sends what is in it, with a timeout per
//! attempt, retries with exponential backoff, and counters for the Alerts tab.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base::clock::Clock;

use reqwest::StatusCode;
use shared::alerts::WebhookStatus;
use tokio::sync::mpsc;

use super::format::{Payload, target};
use crate::alerts::config::Webhook;
use telemetry::now_ms;

/// Queue length, tries and waits of every webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOptions {
    /// Alerts waiting per webhook; more are dropped (and counted).
    pub queue: usize,
    /// Attempts per alert, the first included.
    pub tries: u32,
    /// Wait after the first failed attempt; it doubles after each further one.
    pub backoff: Duration,
    /// Longest wait between two attempts.
    pub backoff_cap: Duration,
    /// Longest `Retry-After` honoured; a receiver asking for more waits this long.
    pub retry_after_cap: Duration,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        Self {
            queue: 1_000,
            tries: 5,
            backoff: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(30),
            retry_after_cap: Duration::from_secs(60),
        }
    }
}

impl DeliveryOptions {
    /// The wait after failed attempt number `attempt` (1-based): backoff, 2×, 4×… up to the cap.
    fn backoff_after(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1).min(16)).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor).min(self.backoff_cap)
    }
}

/// How often a full queue is logged at most.
const DROP_LOG_EVERY: Duration = Duration::from_secs(60);

/// What a webhook's status shows; written by its task and the dispatcher, read by `status()`.
#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    /// Waiting in the queue or being sent.
    queued: AtomicU64,
    /// 0 until the first success.
    last_success_ms: AtomicU64,
    last_error: Mutex<Option<(String, u64)>>,
    /// When a full queue was last logged, and how many were dropped since.
    drop_log: Mutex<(Option<Instant>, u64)>,
}

/// A webhook with its queue and sending task. Dropping it (a reload that changed or removed the
/// webhook) closes the queue: the task still sends what was queued, then ends, so a reload loses
/// no alert already accepted.
pub(super) struct Sink {
    pub(super) webhook: Webhook,
    target: String,
    counters: Arc<Counters>,
    sender: mpsc::Sender<Payload>,
    clock: Clock,
}

impl Sink {
    /// Starts the sending task for `webhook` (on the current tokio runtime).
    /// `clock` spaces its full-queue warnings.
    pub(super) fn start(
        webhook: Webhook,
        client: Result<reqwest::Client, String>,
        options: &DeliveryOptions,
        clock: Clock,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(options.queue.max(1));
        let counters = Arc::new(Counters::default());
        let target = target(&webhook.url);
        tokio::spawn(work(
            receiver,
            Attempts { client, webhook: webhook.clone(), target: target.clone(), options: options.clone() },
            counters.clone(),
        ));
        Self { webhook, target, counters, sender, clock }
    }

    /// Queues `payload`, or counts it dropped when the queue is full (false). Never waits.
    pub(super) fn offer(&self, payload: Payload) -> bool {
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if self.sender.try_send(payload).is_err() {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            self.count_dropped(1);
            return false;
        }
        true
    }

    /// Counts `n` alerts this webhook never got (a full queue, or the dispatcher falling behind).
    pub(super) fn count_dropped(&self, n: u64) {
        self.counters.dropped.fetch_add(n, Ordering::Relaxed);
        let mut log = base::sync::lock(&self.counters.drop_log);
        log.1 += n;
        if log.0.is_none_or(|at| self.clock.now().saturating_duration_since(at) >= DROP_LOG_EVERY) {
            tracing::warn!(
                "webhook {}: {} message(s) dropped because its queue was full ({} dropped in all)",
                self.target,
                log.1,
                self.counters.dropped.load(Ordering::Relaxed)
            );
            *log = (Some(self.clock.now()), 0);
        }
    }

    pub(super) fn status(&self) -> WebhookStatus {
        let c = &self.counters;
        let last_error = base::sync::lock(&c.last_error).clone();
        let last_success = c.last_success_ms.load(Ordering::Relaxed);
        WebhookStatus {
            target: self.target.clone(),
            format: self.webhook.format.as_str().to_owned(),
            delivered: c.delivered.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            queued: c.queued.load(Ordering::Relaxed),
            last_error_ms: last_error.as_ref().map(|(_, at)| *at),
            last_error: last_error.map(|(e, _)| e),
            last_success_ms: (last_success > 0).then_some(last_success),
        }
    }
}

/// Sends the queue's payloads one after the other, for as long as the sink lives.
async fn work(mut receiver: mpsc::Receiver<Payload>, attempts: Attempts, counters: Arc<Counters>) {
    while let Some(payload) = receiver.recv().await {
        match attempts.deliver(&payload).await {
            Ok(()) => {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
                counters.last_success_ms.store(now_ms(), Ordering::Relaxed);
            }
            Err(reason) => {
                tracing::warn!("webhook {}: {reason}", attempts.target);
                counters.failed.fetch_add(1, Ordering::Relaxed);
                *base::sync::lock(&counters.last_error) = Some((reason, now_ms()));
            }
        }
        counters.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why one attempt did not deliver.
#[derive(Debug)]
enum Failure {
    Status(StatusCode),
    Timeout(Duration),
    Other(String),
}

impl Failure {
    /// What status shows, e.g. "HTTP 500 after 5 tries" or "timed out after 5s (5 tries)".
    fn describe(&self, tries: u32, retried: bool) -> String {
        let tries_text = if tries == 1 { "1 try".to_owned() } else { format!("{tries} tries") };
        match (self, retried) {
            (Failure::Status(code), false) => format!("HTTP {} (not retried)", code.as_u16()),
            (Failure::Status(code), true) => format!("HTTP {} after {tries_text}", code.as_u16()),
            (Failure::Timeout(limit), _) => {
                format!("timed out after {} ({tries_text})", humantime::format_duration(*limit))
            }
            (Failure::Other(reason), _) => format!("{reason} ({tries_text})"),
        }
    }
}

/// What one webhook needs to send a payload.
struct Attempts {
    client: Result<reqwest::Client, String>,
    webhook: Webhook,
    target: String,
    options: DeliveryOptions,
}

impl Attempts {
    /// Tries up to `options.tries` times; 3xx and 4xx other than 408 and 429 are final.
    async fn deliver(&self, payload: &Payload) -> Result<(), String> {
        let client = self.client.as_ref().map_err(|e| format!("cannot start the HTTP client: {e}"))?;
        let tries = self.options.tries.max(1);
        for attempt in 1..=tries {
            let (failure, wait) = match self.attempt(client, payload).await {
                Ok(()) => return Ok(()),
                Err(outcome) => outcome,
            };
            // A redirect or a refusal (a wrong URL, a revoked token) will not change by asking again.
            if let Failure::Status(code) = failure
                && (code.is_redirection() || code.is_client_error())
                && !matches!(code, StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS)
            {
                return Err(failure.describe(attempt, false));
            }
            if attempt == tries {
                return Err(failure.describe(tries, true));
            }
            tracing::debug!("webhook {}: attempt {attempt} failed ({failure:?}); trying again", self.target);
            tokio::time::sleep(wait.unwrap_or_else(|| self.options.backoff_after(attempt))).await;
        }
        Err("no attempt was made".to_owned())
    }

    /// One POST; on failure, why and how long the receiver asked to wait (Retry-After).
    async fn attempt(&self, client: &reqwest::Client, payload: &Payload) -> Result<(), (Failure, Option<Duration>)> {
        let mut request = client
            .post(self.webhook.url.clone())
            .timeout(self.webhook.timeout)
            .header(reqwest::header::CONTENT_TYPE, payload.content_type)
            .body(payload.body.clone());
        for (name, value) in &payload.headers {
            request = request.header(*name, value.as_str());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) if e.is_timeout() => return Err((Failure::Timeout(self.webhook.timeout), None)),
            // Without the URL: its path and query often hold a token.
            Err(e) => return Err((Failure::Other(base::error::chain(&e.without_url())), None)),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let wait = matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
            .then(|| retry_after(response.headers()))
            .flatten()
            .map(|asked| asked.min(self.options.retry_after_cap));
        Err((Failure::Status(status), wait))
    }
}

/// A `Retry-After` in seconds (the HTTP-date form falls back to the backoff).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let options = DeliveryOptions::default();
        let waits: Vec<u64> = (1..=7).map(|a| options.backoff_after(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(options.backoff_after(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn failures_say_what_happened_and_how_often() {
        let code = StatusCode::INTERNAL_SERVER_ERROR;
        assert_eq!(Failure::Status(code).describe(5, true), "HTTP 500 after 5 tries");
        assert_eq!(Failure::Status(StatusCode::NOT_FOUND).describe(1, false), "HTTP 404 (not retried)");
        assert_eq!(Failure::Timeout(Duration::from_secs(5)).describe(5, true), "timed out after 5s (5 tries)");
        assert_eq!(Failure::Other("connection refused".into()).describe(1, true), "connection refused (1 try)");
    }

    #[test]
    fn retry_after_reads_seconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(reqwest::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
