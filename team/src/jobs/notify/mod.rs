//! Telling owners about their jobs: an end-of-job notice when a job ends with a poor verdict,
//! and a daily or weekly digest of each owner's jobs, by e-mail (`[smtp]`) and through the
//! webhooks marked `jobs = true`. Owners may switch either off (stored with the jobs); notices
//! are limited per owner and day, and the ones held back are counted in the next digest.
//!
//! `config.rs` reads the alerts file's `[jobs]` and `[smtp]`; `schedule.rs` says when periods end;
//! `compose.rs` writes the words; `mail.rs` sends e-mail; this file decides who is told what.

pub mod compose;
pub mod config;
mod limit;
pub mod mail;
pub mod schedule;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::jobs::notices::{DigestSent, NoticeChange, NoticeChannels, NoticeCounters, NoticeSettings};
use shared::jobs::{Grade, Job, JobReport};
use store::jobs::{JobStore, JobStoreError};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use self::compose::{DigestSummary, Message, Origin};
use self::config::NoticeConfig;
use self::limit::Limiter;
use self::mail::{MailCounters, Mailer};
use self::schedule::Schedule;
use super::Jobs;
use crate::alerts::AlertsConfig;
use crate::alerts::deliver::Deliveries;

/// Longest sleep between two looks at the clock (a changed wall clock is noticed within it).
const LOOK_EVERY: Duration = Duration::from_secs(60);
/// How long after a period's end its digest goes out: a job that ended just before is noticed
/// (two readings) and stored by then.
const GRACE_MS: u64 = 120_000;
const DAY_MS: u64 = 86_400_000;
const WEEK_MS: u64 = 7 * DAY_MS;

/// The notices and digests: cheap to clone, one per server.
#[derive(Clone, Debug)]
pub struct Notifier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    jobs: Jobs,
    deliveries: Deliveries,
    origin: Origin,
    state: Mutex<State>,
    counters: Counters,
    mail: Arc<MailCounters>,
    /// The mailer's wait after a failed attempt.
    backoff: Duration,
}

#[derive(Debug)]
struct State {
    config: NoticeConfig,
    mailer: Option<Mailer>,
    limiter: Limiter,
}

#[derive(Debug, Default)]
struct Counters {
    notices: AtomicU64,
    digests: AtomicU64,
    held_back: AtomicU64,
    opted_out: AtomicU64,
}

impl Notifier {
    /// Starts telling owners about `jobs` as the alerts file's `[jobs]` and `[smtp]` say (read again
    /// on every reload), through `deliveries`' webhooks and e-mail, until `shutdown`.
    /// Call it on the tokio runtime.
    pub fn start(
        jobs: Jobs,
        deliveries: Deliveries,
        origin: Origin,
        mut config: watch::Receiver<Arc<AlertsConfig>>,
        shutdown: watch::Receiver<bool>,
        backoff: Duration,
    ) -> Self {
        let first = config.borrow_and_update().jobs.clone();
        let mail = Arc::new(MailCounters::default());
        let state = State {
            mailer: None,
            limiter: Limiter::new(first.notices_per_day),
            config: NoticeConfig { smtp: None, ..first.clone() },
        };
        let notifier = Self {
            inner: Arc::new(Inner {
                jobs,
                deliveries,
                origin,
                state: Mutex::new(state),
                counters: Counters::default(),
                mail,
                backoff,
            }),
        };
        notifier.configure(first);
        // Subscribed before the task starts, so no job that ends meanwhile is missed.
        let ended = notifier.inner.jobs.subscribe_ended();
        tokio::spawn(notifier.clone().run(ended, config, shutdown));
        notifier
    }

    /// Takes a reloaded `[jobs]`/`[smtp]`: a changed mail server gets a new mailer (the old one
    /// sends what it had queued).
    fn configure(&self, config: NoticeConfig) {
        let mut state = base::sync::lock(&self.inner.state);
        if state.mailer.as_ref().map(Mailer::smtp) != config.smtp.as_ref() {
            state.mailer = config.smtp.as_ref().and_then(|smtp| {
                Mailer::start(smtp, self.inner.mail.clone(), self.inner.backoff)
                    .inspect_err(|e| tracing::error!("job e-mail is off: {e}"))
                    .ok()
            });
        }
        state.limiter.set_per_day(config.notices_per_day);
        state.config = config;
    }

    /// What the server sends, as the page shows it.
    pub fn channels(&self) -> NoticeChannels {
        let state = base::sync::lock(&self.inner.state);
        NoticeChannels {
            notices: state.config.notices,
            digest: state.config.schedule.every,
            digest_when: state.config.schedule.describe(),
            notices_per_day: state.config.notices_per_day,
            mail: state.mailer.is_some(),
            webhooks: self.inner.deliveries.job_webhooks(),
        }
    }

    /// `owner`'s settings (blocking: reads their choice).
    pub fn settings(&self, owner: &str) -> Result<NoticeSettings, JobStoreError> {
        let choice = self.inner.jobs.store().notice_choice(owner)?;
        let address = base::sync::lock(&self.inner.state).config.address(owner).map(|m| m.to_string());
        Ok(NoticeSettings { owner: owner.to_owned(), choice, address, channels: self.channels() })
    }

    /// Applies `owner`'s `change` at `now_ms` and answers their settings (blocking).
    pub fn choose(&self, owner: &str, change: NoticeChange, now_ms: u64) -> Result<NoticeSettings, JobStoreError> {
        self.inner.jobs.store().change_notice_choice(owner, change, now_ms)?;
        self.settings(owner)
    }

    pub fn counters(&self) -> NoticeCounters {
        let (c, m) = (&self.inner.counters, &self.inner.mail);
        NoticeCounters {
            notices: c.notices.load(Ordering::Relaxed),
            digests: c.digests.load(Ordering::Relaxed),
            held_back: c.held_back.load(Ordering::Relaxed),
            opted_out: c.opted_out.load(Ordering::Relaxed),
            mail_sent: m.sent.load(Ordering::Relaxed),
            mail_failed: m.failed.load(Ordering::Relaxed),
            mail_dropped: m.dropped.load(Ordering::Relaxed),
        }
    }

    /// Sends every owner the digest of the period that ends now (as long as the configured one,
    /// a day when digests are off): what `POST /api/jobs/digest` does. The schedule is unchanged.
    pub async fn digest_now(&self, now_ms: u64) -> Result<DigestSent, JobStoreError> {
        let length = base::sync::lock(&self.inner.state).config.schedule.length_ms().unwrap_or(DAY_MS);
        self.digest(now_ms.saturating_sub(length), now_ms, false).await
    }

    async fn run(
        self,
        mut ended: broadcast::Receiver<Job>,
        mut config: watch::Receiver<Arc<AlertsConfig>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut last_sent = self.with_store(JobStore::last_digest).await.unwrap_or_else(|e| {
            tracing::error!("cannot read when the last job digest went out ({e}); the next goes out at its time");
            None
        });
        let mut known = base::sync::lock(&self.inner.state).config.schedule;
        // Where the next digest starts after a reloaded schedule (the old one's last sent).
        let mut carry_from: Option<u64> = None;
        loop {
            let now = telemetry::now_ms();
            let schedule = base::sync::lock(&self.inner.state).config.schedule;
            if schedule != known {
                // A reloaded schedule starts at its next end (nothing is sent at once), and that
                // digest reaches back to the last one sent, so no job falls between the two.
                known = schedule;
                if let Some(end) = schedule.last_end(now.saturating_sub(GRACE_MS))
                    && let Some(sent) = last_sent.filter(|&sent| sent < end)
                {
                    carry_from = Some(carry_from.unwrap_or(sent));
                    last_sent = Some(end);
                }
            }
            let (send, after) = due(&schedule, last_sent, now);
            if let Some(end) = send {
                let length = schedule.length_ms().unwrap_or(DAY_MS);
                // Since the last digest sent: one period, or two after a restart that missed one,
                // or back to the old schedule's last (at most a week and a period).
                let since = carry_from.or(last_sent).unwrap_or(end.saturating_sub(length));
                let from = since.max(end.saturating_sub(WEEK_MS + length)).min(end);
                match self.digest(from, end, true).await {
                    Ok(_) => {
                        last_sent = after;
                        carry_from = None;
                        self.stamp(end).await;
                    }
                    // Tried again at the next look (the period is not stamped).
                    Err(e) => tracing::error!(
                        "the job digests for the period ending {} could not be sent: {e}; trying again",
                        shared::time::utc_minute(end)
                    ),
                }
            } else {
                last_sent = after;
            }
            let wait = schedule.next_end(now.saturating_sub(GRACE_MS)).map_or(LOOK_EVERY, |next| {
                Duration::from_millis((next + GRACE_MS).saturating_sub(now)).min(LOOK_EVERY)
            });
            tokio::select! {
                job = ended.recv() => match job {
                    Ok(job) => self.on_ended(job).await,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!("job notices fell behind: {missed} ended job(s) not judged for a notice");
                    }
                    Err(RecvError::Closed) => return,
                },
                () = tokio::time::sleep(wait) => {}
                changed = config.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let reloaded = config.borrow_and_update().jobs.clone();
                    self.configure(reloaded);
                }
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Runs `call` on the jobs' store off the async runtime (a panic there reads as a stopped store).
    async fn with_store<T: Send + 'static>(
        &self,
        call: impl FnOnce(&JobStore) -> Result<T, JobStoreError> + Send + 'static,
    ) -> Result<T, JobStoreError> {
        let store = self.inner.jobs.store().clone();
        base::sync::off_runtime(move || call(&store)).await.unwrap_or_else(|e| {
            tracing::error!("a call on the jobs store failed: {e}");
            Err(JobStoreError::Stopped)
        })
    }

    /// Notes the period ending at `end` as sent, in the database (a restart goes on from it).
    async fn stamp(&self, end: u64) {
        if let Err(e) = self.with_store(move |store| store.digest_sent(end, telemetry::now_ms())).await {
            tracing::warn!(
                "could not note the job digests for the period ending {} as sent: {e}",
                shared::time::utc_minute(end)
            );
        }
    }

    /// A job ended: a notice to its owner when its verdict is poor, unless they switched notices
    /// off or had their day's share.
    async fn on_ended(&self, job: Job) {
        let report = self.inner.jobs.report(job);
        if report.grade != Grade::Poor || !base::sync::lock(&self.inner.state).config.notices {
            return;
        }
        let owner = report.job.owner.clone();
        let wanted = match self.with_store(move |store| store.notice_choice(&owner)).await {
            Ok(choice) => choice.notices,
            Err(e) => {
                tracing::warn!("cannot read {}'s notice choice ({e}); their notice is sent", report.job.owner);
                true
            }
        };
        if !wanted {
            self.inner.counters.opted_out.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !self.reachable(&report.job.owner) {
            // No address and no job webhook: nothing to send, and no slot of the day used.
            return;
        }
        let now = telemetry::now_ms();
        if !base::sync::lock(&self.inner.state).limiter.allow(&report.job.owner, now) {
            self.inner.counters.held_back.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                "the notice for job {} of {} is held back (notices_per_day)",
                report.job.id,
                report.job.owner
            );
            return;
        }
        let message = compose::notice(&self.inner.origin, &report);
        if self.send(&message) > 0 {
            self.inner.counters.notices.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The digests of the period `[from_ms, to_ms)`, one per owner with a job that ended in it.
    /// A scheduled one (`scheduled`) reports each owner's held-back notices and starts their count
    /// again; an admin's digest now reports them and leaves the count for the scheduled one.
    async fn digest(&self, from_ms: u64, to_ms: u64, scheduled: bool) -> Result<DigestSent, JobStoreError> {
        let read = self.with_store(move |store| {
            let jobs = store.ended_between(from_ms, to_ms)?;
            let mut owners: BTreeMap<String, (bool, Vec<Job>)> = BTreeMap::new();
            for job in jobs {
                if !owners.contains_key(&job.owner) {
                    let wanted = store.notice_choice(&job.owner)?.digest;
                    owners.insert(job.owner.clone(), (wanted, Vec::new()));
                }
                if let Some((_, jobs)) = owners.get_mut(&job.owner) {
                    jobs.push(job);
                }
            }
            Ok(owners)
        });
        let owners: BTreeMap<String, (bool, Vec<Job>)> = read.await?;
        let mut sent = DigestSent { from_ms, to_ms, ..DigestSent::default() };
        for (owner, (wanted, jobs)) in owners {
            if !wanted {
                self.inner.counters.opted_out.fetch_add(1, Ordering::Relaxed);
                sent.opted_out.push(owner);
                continue;
            }
            let reports: Vec<JobReport> = jobs.into_iter().map(|j| self.inner.jobs.report(j)).collect();
            let held_back = {
                let mut state = base::sync::lock(&self.inner.state);
                if scheduled { state.limiter.take_held_back(&owner) } else { state.limiter.held_back(&owner) }
            };
            let summary = summarize(from_ms, to_ms, &reports, held_back);
            let message = compose::digest(&self.inner.origin, &owner, &summary, &reports);
            let messages = self.send(&message);
            if messages > 0 {
                self.inner.counters.digests.fetch_add(1, Ordering::Relaxed);
            }
            sent.messages += messages;
            sent.owners.push(owner);
        }
        Ok(sent)
    }

    /// Whether a message for `owner` goes anywhere: an e-mail address, or a job webhook.
    fn reachable(&self, owner: &str) -> bool {
        let mailable = {
            let state = base::sync::lock(&self.inner.state);
            state.mailer.is_some() && state.config.address(owner).is_some()
        };
        mailable || self.inner.deliveries.job_webhooks() > 0
    }

    /// Queues `message` for its owner's e-mail and every job webhook; how many were queued.
    fn send(&self, message: &Message) -> u32 {
        let origin = &self.inner.origin;
        let mut queued = self.inner.deliveries.offer_jobs(|format| compose::payload(format, origin, message)) as u32;
        let state = base::sync::lock(&self.inner.state);
        if let (Some(mailer), Some(to)) = (&state.mailer, state.config.address(&message.owner))
            && mailer.offer(&to, message)
        {
            queued += 1;
        }
        queued
    }

    /// The notices' counters as Prometheus text.
    pub fn metrics_text(&self) -> String {
        use base::prom_text::{Exposition, Kind};
        let c = self.counters();
        let mut out = Exposition::default();
        out.family(
            "gpudash_job_messages_total",
            "Job notices and digests sent to owners (e-mail and webhooks counted once per message).",
            Kind::Counter,
            [("kind=\"notice\"".to_owned(), c.notices as f64), ("kind=\"digest\"".to_owned(), c.digests as f64)]
                .into_iter(),
        );
        out.family(
            "gpudash_job_messages_skipped_total",
            "Job notices and digests not sent: the owner switched them off, or had the day's notices.",
            Kind::Counter,
            [
                ("reason=\"opted_out\"".to_owned(), c.opted_out as f64),
                ("reason=\"held_back\"".to_owned(), c.held_back as f64),
            ]
            .into_iter(),
        );
        out.family(
            "gpudash_job_mail_total",
            "E-mails to owners by outcome (failed: after every try; dropped: the queue was full).",
            Kind::Counter,
            [
                ("outcome=\"sent\"".to_owned(), c.mail_sent as f64),
                ("outcome=\"failed\"".to_owned(), c.mail_failed as f64),
                ("outcome=\"dropped\"".to_owned(), c.mail_dropped as f64),
            ]
            .into_iter(),
        );
        out.into_text()
    }
}

/// What the digest loop does at `now_ms`, given the end of the newest period sent (kept in the
/// database across restarts): the period end to send now, if any, and the end counted as sent
/// after. A period is sent [`GRACE`] after it ends, so a job that ended just before is stored by
/// then. A period that ended unsent while gpudash was down goes out at once, but only the newest,
/// and only when the last one sent ended at most two periods before it (after a longer pause,
/// or with none sent yet, the first goes out at the next end).
fn due(schedule: &Schedule, last_sent: Option<u64>, now_ms: u64) -> (Option<u64>, Option<u64>) {
    let (Some(end), Some(length)) = (schedule.last_end(now_ms.saturating_sub(GRACE_MS)), schedule.length_ms()) else {
        return (None, last_sent);
    };
    match last_sent {
        Some(sent) if sent >= end => (None, last_sent),
        Some(sent) if end - sent <= 2 * length => (Some(end), Some(end)),
        _ => (None, Some(end)),
    }
}

/// One owner's sums over a period.
fn summarize(from_ms: u64, to_ms: u64, reports: &[JobReport], held_back: u64) -> DigestSummary {
    let count = |grade: Grade| reports.iter().filter(|r| r.grade == grade).count();
    DigestSummary {
        from_ms,
        to_ms,
        jobs: reports.len(),
        held_gpu_hours: reports.iter().map(|r| r.job.figures.held_s).sum::<f64>() / 3600.0,
        idle_gpu_hours: reports.iter().map(|r| r.job.figures.idle_s).sum::<f64>() / 3600.0,
        energy_kwh: reports.iter().map(|r| r.energy_kwh).sum(),
        poor: count(Grade::Poor),
        hint: count(Grade::Hint),
        good: count(Grade::Good),
        unjudged: count(Grade::Unjudged),
        held_back,
    }
}

#[cfg(test)]
mod tests;
