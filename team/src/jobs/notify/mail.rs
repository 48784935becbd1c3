//! E-mail through the `[smtp]` server (lettre): a bounded queue and one task that sends what
//! is in it, with a timeout per attempt and a few tries, so nothing waits on the mail server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use tokio::sync::mpsc;

use super::compose::Message;
use super::config::Smtp;

/// E-mails waiting; more are dropped (and counted).
const QUEUE: usize = 1_000;
/// Attempts per e-mail, the first included.
const TRIES: u32 = 3;

/// What the mailer did, for `/metrics` and the notices' status.
#[derive(Debug, Default)]
pub struct MailCounters {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// One `[smtp]` server's queue. Dropping it closes the queue: the task still sends what was
/// queued, then ends (a reload that changed the server loses nothing accepted).
pub struct Mailer {
    smtp: Smtp,
    sender: mpsc::Sender<lettre::Message>,
    counters: Arc<MailCounters>,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer").field("server", &self.smtp.server()).finish()
    }
}

/// The transport `smtp` describes (no connection yet).
fn transport(smtp: &Smtp) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp.url.as_str())
        .map_err(|e| format!("cannot use the mail server {}: {e}", smtp.server()))?
        .timeout(Some(smtp.timeout));
    if let (Some(user), Some(password)) = (&smtp.username, &smtp.password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    Ok(builder.build())
}

/// Connects to `smtp`'s server, greets it (with TLS and sign-in as configured) and leaves:
/// what `gpudash doctor --check-webhooks` asks. `Err` says why it could not.
pub async fn check(smtp: &Smtp) -> Result<(), String> {
    match transport(smtp)?.test_connection().await {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{} did not answer the greeting", smtp.server())),
        Err(e) => Err(format!("{}: {}", smtp.server(), base::error::chain(&e))),
    }
}

impl Mailer {
    /// Starts sending through `smtp` (on the current tokio runtime), counting into `counters`;
    /// `backoff` is the wait after a first failed attempt (it doubles).
    pub fn start(smtp: &Smtp, counters: Arc<MailCounters>, backoff: Duration) -> Result<Self, String> {
        let transport = transport(smtp)?;
        let (sender, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(work(receiver, transport, smtp.server(), counters.clone(), backoff));
        tracing::info!("job notices and digests are e-mailed through {} as {}", smtp.server(), smtp.from);
        Ok(Self { smtp: smtp.clone(), sender, counters })
    }

    pub fn smtp(&self) -> &Smtp {
        &self.smtp
    }

    /// Queues `message` for `to`; false when it could not be built or the queue is full (counted).
    pub fn offer(&self, to: &Mailbox, message: &Message) -> bool {
        let email = lettre::Message::builder()
            .from(self.smtp.from.clone())
            .to(to.clone())
            .subject(&message.subject)
            .header(ContentType::TEXT_PLAIN)
            .body(message.text.clone());
        let email = match email {
            Ok(email) => email,
            Err(e) => {
                tracing::warn!("cannot write the e-mail to {to}: {e}");
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        if self.sender.try_send(email).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("the e-mail queue is full: a {} for {} was dropped", message.kind.name(), message.owner);
            return false;
        }
        true
    }
}

async fn work(
    mut receiver: mpsc::Receiver<lettre::Message>,
    transport: AsyncSmtpTransport<Tokio1Executor>,
    server: String,
    counters: Arc<MailCounters>,
    backoff: Duration,
) {
    while let Some(email) = receiver.recv().await {
        let mut wait = backoff;
        for attempt in 1..=TRIES {
            match transport.send(email.clone()).await {
                Ok(_) => {
                    counters.sent.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                // A permanent refusal (no such mailbox, relaying denied) will not change by asking again.
                Err(e) if e.is_permanent() || attempt == TRIES => {
                    tracing::warn!("e-mail through {server} failed after {attempt} tr{}: {e}", plural(attempt));
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    tracing::debug!("e-mail through {server}: attempt {attempt} failed ({e}); trying again");
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
            }
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "y" } else { "ies" }
}
