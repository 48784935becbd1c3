//! The alerts file's `[jobs]` and `[smtp]` tables: what owners are told about their jobs, and
//! how e-mail leaves. Every value is checked here; a refusal names the key and what is allowed
//! (the alerts file adds the line).
//!
//! ```toml
//! [jobs]
//! notices = true            # an end-of-job notice for a poor verdict (default true)
//! notices_per_day = 5       # per owner in 24 hours, 1 to 100; more are counted in the digest
//! digest = "daily"          # daily, weekly or off (default off)
//! digest_at = "08:00"       # UTC, HH:MM
//! digest_day = "monday"     # weekly digests only
//! mail_domain = "lab.example.org"   # owner ana gets ana@lab.example.org ...
//!
//! [jobs.mail]               # ... unless named here
//! bo = "Bo Larsen <bo@example.org>"
//!
//! [smtp]
//! url = "smtp://mail.example.org:587?tls=required"   # smtps://host (TLS), or smtp:// (plain, a local relay)
//! from = "gpudash <gpudash@gpu1.example.org>"
//! username = "gpudash"                         # optional, with password_file
//! password_file = "/etc/gpudash/smtp-password"
//! timeout = "10s"                              # per attempt, 1s to 60s
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use lettre::message::Mailbox;
use serde::Deserialize;
use shared::jobs::notices::DigestEvery;

use super::schedule::{Schedule, WEEKDAYS};

/// The `[jobs]` table as written.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct FileJobs {
    notices: Option<bool>,
    notices_per_day: Option<i64>,
    digest: Option<String>,
    digest_at: Option<String>,
    digest_day: Option<String>,
    mail_domain: Option<String>,
    #[serde(default)]
    mail: BTreeMap<String, String>,
}

/// The `[smtp]` table as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct FileSmtp {
    url: String,
    from: String,
    username: Option<String>,
    password_file: Option<PathBuf>,
    timeout: Option<String>,
}

/// What owners are told, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NoticeConfig {
    pub notices: bool,
    pub notices_per_day: u32,
    pub schedule: Schedule,
    pub mail_domain: Option<String>,
    /// Owner → mailbox, for owners whose address is not `owner@mail_domain`.
    pub addresses: BTreeMap<String, Mailbox>,
    pub smtp: Option<Smtp>,
}

impl Default for NoticeConfig {
    fn default() -> Self {
        Self {
            notices: true,
            notices_per_day: DEFAULT_PER_DAY,
            schedule: Schedule::default(),
            mail_domain: None,
            addresses: BTreeMap::new(),
            smtp: None,
        }
    }
}

const DEFAULT_PER_DAY: u32 = 5;

/// How e-mail leaves: lettre's connection URL, the sender, the credentials.
#[derive(Clone, PartialEq)]
pub struct Smtp {
    /// `smtp://` or `smtps://`, without credentials.
    pub url: url::Url,
    pub from: Mailbox,
    pub username: Option<String>,
    /// Read from `password_file` when the file was loaded; never shown.
    pub password: Option<String>,
    pub timeout: Duration,
}

impl std::fmt::Debug for Smtp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Smtp")
            .field("server", &self.server())
            .field("from", &self.from.to_string())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Smtp {
    /// The server as logs show it: scheme, host and port.
    pub fn server(&self) -> String {
        let port = self.url.port().map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{}{port}", self.url.scheme(), self.url.host_str().unwrap_or_default())
    }
}

impl NoticeConfig {
    /// Validates the tables as written; `Err` says which key is wrong and what is allowed.
    pub fn load(jobs: Option<FileJobs>, smtp: Option<FileSmtp>) -> Result<Self, String> {
        let jobs = jobs.unwrap_or_default();
        let notices_per_day = match jobs.notices_per_day {
            None => DEFAULT_PER_DAY,
            Some(n) if (1..=100).contains(&n) => n as u32,
            Some(n) => return Err(format!("[jobs] notices_per_day = {n} is out of range; use 1 to 100")),
        };
        let every = match &jobs.digest {
            None => DigestEvery::Off,
            Some(text) => DigestEvery::parse(text)
                .ok_or_else(|| format!("[jobs] digest = '{text}' is not a period; use daily, weekly or off"))?,
        };
        let at_minute = match &jobs.digest_at {
            None => Schedule::default().at_minute,
            Some(text) => parse_minute(text).ok_or_else(|| {
                format!("[jobs] digest_at = '{text}' is not a time of day; use HH:MM in UTC, e.g. \"08:00\"")
            })?,
        };
        let weekday = match &jobs.digest_day {
            None => 0,
            Some(_) if every != DigestEvery::Weekly => {
                return Err("[jobs] digest_day is for weekly digests; set digest = \"weekly\" or leave it out".into());
            }
            Some(text) => WEEKDAYS.iter().position(|d| d.eq_ignore_ascii_case(text.trim())).ok_or_else(|| {
                format!("[jobs] digest_day = '{text}' is not a day of the week; use {}", WEEKDAYS.join(", "))
            })? as u8,
        };
        let mail_domain = match &jobs.mail_domain {
            None => None,
            Some(text) => Some(domain(text).ok_or_else(|| {
                format!("[jobs] mail_domain = '{text}' is not a domain name; use e.g. \"lab.example.org\"")
            })?),
        };
        let mut addresses = BTreeMap::new();
        for (owner, text) in &jobs.mail {
            let mailbox: Mailbox = text.trim().parse().map_err(|e| {
                format!("[jobs.mail] {owner} is not an e-mail address ({e}); use e.g. \"Ana <ana@example.org>\"")
            })?;
            addresses.insert(owner.clone(), mailbox);
        }
        let smtp = smtp.map(load_smtp).transpose()?;
        if smtp.is_none() && (mail_domain.is_some() || !addresses.is_empty()) {
            return Err("[jobs] mail_domain and [jobs.mail] need an [smtp] table to send through".into());
        }
        Ok(Self {
            notices: jobs.notices.unwrap_or(true),
            notices_per_day,
            schedule: Schedule { every, at_minute, weekday },
            mail_domain,
            addresses,
            smtp,
        })
    }

    /// Where `owner`'s e-mail goes: their `[jobs.mail]` entry, else `owner@mail_domain` when
    /// the owner name can be a mailbox's local part; none without `[smtp]`.
    pub fn address(&self, owner: &str) -> Option<Mailbox> {
        self.smtp.as_ref()?;
        if let Some(mailbox) = self.addresses.get(owner) {
            return Some(mailbox.clone());
        }
        let domain = self.mail_domain.as_ref()?;
        let local_part = !owner.is_empty()
            && owner.len() <= 64
            && owner.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && !owner.starts_with('.')
            && !owner.ends_with('.');
        if !local_part {
            return None;
        }
        format!("{owner}@{domain}").parse().ok()
    }
}

fn load_smtp(file: FileSmtp) -> Result<Smtp, String> {
    let shown = crate::alerts::deliver::format::target_text(&file.url);
    let url = url::Url::parse(file.url.trim())
        .map_err(|e| format!("[smtp] url = '{shown}' is not a URL ({e}); use e.g. \"smtps://mail.example.org\""))?;
    if !matches!(url.scheme(), "smtp" | "smtps") || url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "[smtp] url = '{shown}' is not an smtp:// or smtps:// URL with a host; use e.g. \"smtps://mail.example.org\""
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("[smtp] url holds a user name or password; use username and password_file instead".into());
    }
    // lettre reads the first `tls`; a second could hide what the credentials check below sees.
    // No value is repeated (it may be a secret; reload errors are shown to viewers).
    let settings: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let tls_ok = |v: &str| matches!(v, "required" | "opportunistic");
    if settings.iter().any(|(k, v)| k != "tls" || !tls_ok(v)) || settings.len() > 1 {
        return Err("[smtp] url may carry one setting only, tls=required or tls=opportunistic".to_owned());
    }
    // lettre reads the same URL when the mailer starts: refuse here what it would refuse there.
    lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url.as_str())
        .map_err(|e| format!("[smtp] url = '{shown}' cannot be used: {e}"))?;
    let from: Mailbox = file.from.trim().parse().map_err(|e| {
        format!("[smtp] from is not an e-mail address ({e}); use e.g. \"gpudash <gpudash@gpu1.example.org>\"")
    })?;
    let encrypted = url.scheme() == "smtps" || url.query_pairs().any(|(k, v)| k == "tls" && v == "required");
    // An smtp:// URL's host is opaque to the url crate: read an address out of it here.
    let loopback = url.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']')).is_some_and(|host| {
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    });
    if file.username.is_some() && !encrypted && !loopback {
        return Err(format!(
            "[smtp] username is set but url = '{shown}' may send it unencrypted; use smtps:// or add ?tls=required \
             (a relay on this machine, 127.0.0.1 or localhost, may take it in the clear)"
        ));
    }
    let password = match (&file.username, &file.password_file) {
        (Some(_), Some(path)) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("[smtp] password_file = '{}' cannot be read: {e}", path.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
        ),
        (None, None) => None,
        _ => return Err("[smtp] username and password_file go together; give both or neither".into()),
    };
    let timeout = match &file.timeout {
        None => Duration::from_secs(10),
        Some(text) => {
            let parsed = humantime::parse_duration(text.trim())
                .map_err(|e| format!("[smtp] timeout = '{text}' is not a duration ({e}); use e.g. \"10s\""))?;
            if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&parsed) {
                return Err(format!("[smtp] timeout = '{text}' is out of range; use 1s to 60s"));
            }
            parsed
        }
    };
    Ok(Smtp { url, from, username: file.username, password, timeout })
}

/// `HH:MM` as minutes after midnight.
fn parse_minute(text: &str) -> Option<u32> {
    let (h, m) = text.trim().split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && text.trim().len() == 5).then_some(h * 60 + m)
}

/// A domain name, lower case: labels of letters, digits and hyphens, at least two.
fn domain(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let labels: Vec<&str> = text.split('.').collect();
    let fine = labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    fine.then_some(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn jobs(text: &str) -> Option<FileJobs> {
        Some(toml::from_str(text).unwrap())
    }

    fn smtp(text: &str) -> Option<FileSmtp> {
        Some(toml::from_str(text).unwrap())
    }

    const SMTP: &str = "url = \"smtp://127.0.0.1:2525\"\nfrom = \"gpudash <g@gpu1.example.org>\"";

    #[test]
    fn defaults_send_notices_and_no_digest() {
        let c = NoticeConfig::load(None, None).unwrap();
        assert!(c.notices && c.schedule.every == DigestEvery::Off && c.smtp.is_none());
        assert_eq!(c.notices_per_day, 5);
        assert_eq!(c.address("ana"), None, "no smtp, no address");
    }

    #[test]
    fn every_value_is_checked_with_what_is_allowed() {
        let refused = |j: &str, s: Option<&str>| NoticeConfig::load(jobs(j), s.and_then(smtp)).unwrap_err();
        assert!(refused("notices_per_day = 0", None).contains("use 1 to 100"));
        assert!(refused("digest = \"monthly\"", None).contains("use daily, weekly or off"));
        assert!(refused("digest = \"daily\"\ndigest_at = \"8:00\"", None).contains("HH:MM"));
        assert!(refused("digest = \"daily\"\ndigest_at = \"24:00\"", None).contains("HH:MM"));
        assert!(refused("digest = \"daily\"\ndigest_day = \"monday\"", None).contains("is for weekly digests"));
        assert!(refused("digest = \"weekly\"\ndigest_day = \"mon\"", None).contains("monday, tuesday"));
        assert!(refused("mail_domain = \"nodot\"", Some(SMTP)).contains("not a domain name"));
        assert!(refused("mail_domain = \"lab.example.org\"", None).contains("need an [smtp] table"));
        assert!(refused("[mail]\nana = \"not an address\"", Some(SMTP)).contains("[jobs.mail] ana"));
        let bad_smtp = |s: &str| NoticeConfig::load(None, smtp(s)).unwrap_err();
        assert!(bad_smtp("url = \"http://mail.example.org\"\nfrom = \"a@b.org\"").contains("smtp:// or smtps://"));
        assert!(bad_smtp("url = \"smtps://u:p@mail.example.org\"\nfrom = \"a@b.org\"").contains("password_file"));
        let query = bad_smtp("url = \"smtp://m.example.org?tls=maybe&key=s3cret\"\nfrom = \"a@b.org\"");
        assert!(query.contains("tls=required") && !query.contains("maybe") && !query.contains("s3cret"), "{query}");
        let twice = "url = \"smtp://m.example.org?tls=opportunistic&tls=required\"\nfrom = \"a@b.org\"";
        assert!(bad_smtp(twice).contains("one setting only"), "lettre would read the first");
        let plain = "url = \"smtp://mail.example.org\"\nfrom = \"a@b.org\"\nusername = \"u\"\npassword_file = \"/p\"";
        assert!(bad_smtp(plain).contains("may send it unencrypted"));
        let opportunistic = plain.replace("example.org\"", "example.org?tls=opportunistic\"");
        assert!(bad_smtp(&opportunistic).contains("may send it unencrypted"));
        let spoofed = plain.replace("mail.example.org", "127.0.0.1.example.org");
        assert!(bad_smtp(&spoofed).contains("may send it unencrypted"), "a name that starts like a loopback address");
        assert!(bad_smtp("url = \"smtp://m.example.org\"\nfrom = \"nobody\"").contains("[smtp] from"));
        assert!(bad_smtp(&format!("{SMTP}\nusername = \"u\"")).contains("go together"));
        assert!(bad_smtp(&format!("{SMTP}\ntimeout = \"2m\"")).contains("1s to 60s"));
        assert!(
            bad_smtp(&format!("{SMTP}\nusername = \"u\"\npassword_file = \"/nonexistent/p\""))
                .contains("cannot be read")
        );
    }

    #[test]
    fn addresses_come_from_the_table_then_the_domain() {
        let c = NoticeConfig::load(
            jobs("mail_domain = \"Lab.Example.org\"\n[mail]\nbo = \"Bo L <bo@elsewhere.org>\""),
            smtp(SMTP),
        )
        .unwrap();
        assert_eq!(c.address("ana").unwrap().to_string(), "ana@lab.example.org");
        assert_eq!(c.address("bo").unwrap().email.to_string(), "bo@elsewhere.org");
        assert_eq!(c.address("(hidden)"), None, "not a local part");
        assert_eq!(c.address(""), None);
        let weekly =
            NoticeConfig::load(jobs("digest = \"weekly\"\ndigest_day = \"Friday\"\ndigest_at = \"17:30\""), None);
        let schedule = weekly.unwrap().schedule;
        assert_eq!((schedule.weekday, schedule.at_minute), (4, 17 * 60 + 30));
    }

    #[test]
    fn the_password_is_read_from_its_file_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, "s3cret\n").unwrap();
        let text = format!("{SMTP}\nusername = \"u\"\npassword_file = \"{}\"", path.display());
        let c = NoticeConfig::load(None, smtp(&text)).unwrap();
        let smtp = c.smtp.unwrap();
        assert_eq!(smtp.password.as_deref(), Some("s3cret"));
        assert!(!format!("{smtp:?}").contains("s3cret"));
        assert_eq!(smtp.server(), "smtp://127.0.0.1:2525");
    }
}
