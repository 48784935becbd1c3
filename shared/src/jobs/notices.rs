//! Telling owners about their jobs: what the server sends (an end-of-job notice for a poor
//! verdict, a daily or weekly digest) and what each owner chose. `GET`/`PUT /api/jobs/notices`
//! carry these; the page's switches and the server's checks read the same types.

use serde::{Deserialize, Serialize};

/// How often the per-owner digest goes out.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum DigestEvery {
    #[default]
    Off,
    Daily,
    Weekly,
}

impl DigestEvery {
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Daily => "daily",
            Self::Weekly => "weekly",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Off, Self::Daily, Self::Weekly].into_iter().find(|d| d.name() == text.trim())
    }
}

/// One owner's choice: both on unless they switched them off (notices are opt-out).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoticeChoice {
    /// An end-of-job notice when one of their jobs ends with a poor verdict.
    pub notices: bool,
    /// The digest of their jobs.
    pub digest: bool,
}

impl Default for NoticeChoice {
    fn default() -> Self {
        Self { notices: true, digest: true }
    }
}

/// `PUT /api/jobs/notices`' body: what to change; a field left out stays as it is.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct NoticeChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notices: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<bool>,
}

impl NoticeChange {
    pub fn apply(self, choice: NoticeChoice) -> NoticeChoice {
        NoticeChoice { notices: self.notices.unwrap_or(choice.notices), digest: self.digest.unwrap_or(choice.digest) }
    }
}

/// What this server sends, as the alerts file's `[jobs]` and `[smtp]` set it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct NoticeChannels {
    /// End-of-job notices for poor verdicts are sent.
    pub notices: bool,
    pub digest: DigestEvery,
    /// When the digest goes out, e.g. "daily at 08:00 UTC" or "Mondays at 08:00 UTC"; empty when off.
    pub digest_when: String,
    /// Notices one owner gets in 24 hours at most; more are held back and counted in the digest.
    pub notices_per_day: u32,
    /// E-mail can be sent (an `[smtp]` server is set).
    pub mail: bool,
    /// Webhooks that take job messages (`jobs = true`).
    pub webhooks: usize,
}

impl NoticeChannels {
    /// Whether anything reaches anyone: a kind of message on, and a way to send it.
    pub fn any(&self) -> bool {
        (self.notices || self.digest != DigestEvery::Off) && (self.mail || self.webhooks > 0)
    }
}

/// `GET /api/jobs/notices`: the caller's choice, where their e-mail goes, and what the server sends.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct NoticeSettings {
    /// The owner name the caller's jobs carry (their user name).
    pub owner: String,
    pub choice: NoticeChoice,
    /// Where their e-mail goes; `None` when the server knows no address for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub channels: NoticeChannels,
}

/// `POST /api/jobs/digest`' answer: the digests sent now, for the period that ended now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct DigestSent {
    pub from_ms: u64,
    pub to_ms: u64,
    /// Owners with a job that ended in the period, whose digest went out.
    pub owners: Vec<String>,
    /// Owners skipped because they switched digests off.
    pub opted_out: Vec<String>,
    /// Messages queued: e-mails plus webhook posts.
    pub messages: u32,
}

/// Counters of what was told, for `/metrics`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoticeCounters {
    pub notices: u64,
    pub digests: u64,
    /// Notices not sent because their owner had reached `notices_per_day`.
    pub held_back: u64,
    /// Notices and digests not sent because their owner switched them off.
    pub opted_out: u64,
    pub mail_sent: u64,
    pub mail_failed: u64,
    /// E-mails dropped because the queue was full.
    pub mail_dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_keeps_what_it_leaves_out() {
        let off = NoticeChange { notices: Some(false), digest: None };
        assert_eq!(off.apply(NoticeChoice::default()), NoticeChoice { notices: false, digest: true });
        assert_eq!(NoticeChange::default().apply(NoticeChoice::default()), NoticeChoice::default());
        let unknown: Result<NoticeChange, _> = serde_json::from_str(r#"{"notice": false}"#);
        assert!(unknown.is_err(), "an unknown field is refused");
    }

    #[test]
    fn channels_reach_someone_only_with_a_message_and_a_way() {
        let mut c = NoticeChannels { notices: true, ..NoticeChannels::default() };
        assert!(!c.any(), "no mail, no webhook");
        c.webhooks = 1;
        assert!(c.any());
        c.notices = false;
        assert!(!c.any(), "nothing to send");
        c.digest = DigestEvery::Weekly;
        assert!(c.any());
        assert_eq!(DigestEvery::parse(" weekly"), Some(DigestEvery::Weekly));
        assert_eq!(DigestEvery::parse("monthly"), None);
    }
}
