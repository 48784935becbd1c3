//! Telling owners, end to end, with real receivers: a real SMTP server (aiosmtpd from PyPI,
//! `tests/mail/receiver.py`, in the venv `tests/run.sh` makes) and a real HTTP receiver. Scripted
//! simulator jobs end idle (a poor verdict); their owners get a notice by e-mail and through the
//! job webhook, at most `notices_per_day` each (the rest counted in the digest); an owner who
//! switched notices off on the page gets none; an admin's "digest now" sends each owner the digest
//! of their jobs, and an owner who switched digests off gets none.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shared::jobs::JobsResponse;
use shared::jobs::notices::{DigestEvery, DigestSent, NoticeSettings};

use crate::alerts_webhook::{Answer, Receiver};
use crate::support::{TestServer, eventually};

const BO: &str = "bo-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";
const INTERVAL_MS: u64 = 100;

/// One e-mail as the SMTP server got it.
#[derive(serde::Deserialize, Debug, Clone)]
struct Mail {
    rcpt_tos: Vec<String>,
    from: String,
    to: String,
    subject: String,
    content_type: String,
    body: String,
}

/// `tests/mail/receiver.py` on a free loopback port, writing what it gets into `dir`.
struct MailServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl MailServer {
    fn start(dir: &Path) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_owned();
        let python =
            std::env::var_os("GPUDASH_TEST_PYTHON").map_or_else(|| root.join("target/py/bin/python"), PathBuf::from);
        assert!(
            python.exists(),
            "{} is missing: tests/run.sh makes it (python3 -m venv target/py && target/py/bin/pip install aiosmtpd)",
            python.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::fs::create_dir_all(dir).unwrap();
        let mut child = Command::new(&python)
            .arg(root.join("tests/mail/receiver.py"))
            .arg(port.to_string())
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the SMTP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the SMTP receiver did not start (is aiosmtpd installed in the venv?)");
        Self { child, dir: dir.to_owned(), port }
    }

    fn mails(&self) -> Vec<Mail> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths.iter().map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()).collect()
    }
}

impl Drop for MailServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alerts file: a daily digest due half a day from now (so none falls inside the test),
/// ana's notices limited to two a day, every owner mailed, one job-only webhook.
fn alerts_file(mail_port: u16, hook: &url::Url) -> String {
    let minute = (telemetry_now_minute() + 12 * 60) % (24 * 60);
    let at = format!("{:02}:{:02}", minute / 60, minute % 60);
    format!(
        "[jobs]\nnotices_per_day = 2\ndigest = \"daily\"\ndigest_at = \"{at}\"\nmail_domain = \"lab.example.org\"\n\
         [jobs.mail]\ncy = \"Cy <cy@elsewhere.example.org>\"\n\
         [smtp]\nurl = \"smtp://127.0.0.1:{mail_port}\"\nfrom = \"gpudash <gpudash@gpu1.example.org>\"\ntimeout = \"5s\"\n\
         [[webhook]]\nurl = \"{hook}\"\njobs = true\nalerts = false\n"
    )
}

/// Minutes since midnight UTC now.
fn telemetry_now_minute() -> u64 {
    gpudash::telemetry::now_ms() / 60_000 % (24 * 60)
}

async fn metric(server: &TestServer, line: &str) -> Option<f64> {
    let text = reqwest::get(server.url("/metrics")).await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(line)).and_then(|v| v.trim().parse().ok())
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// The JSON answer of `request`, which must succeed.
async fn answer<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request.send().await.unwrap().error_for_status().unwrap().json().await.unwrap()
}

#[tokio::test]
async fn owners_are_told_by_mail_and_webhook_within_their_limit_and_choice() {
    let dir = tempfile::tempdir().unwrap();
    let mail = MailServer::start(&dir.path().join("mail"));
    let hook = Receiver::start(&[], Answer::Status(200)).await;
    let hook_url = hook.url("/jobs");
    let auth_file = dir.path().join("auth.toml");
    std::fs::write(&auth_file, "viewers = \"open\"\n").unwrap();
    let tokens = format!("bo:viewer:{BO},root:admin:{ADMIN}");
    let store = gpudash::store::Store::open(dir.path(), true, gpudash::store::Retention::default()).unwrap();
    let faults = [
        // ana: three idle jobs one after the other (one more than her notices a day).
        "job:0:ana:6@1500ms+1500ms",
        "job:0:ana:6@4s+1500ms",
        "job:0:ana:6@6500ms+1500ms",
        // cy, whose address the alerts file names.
        "job:1:cy:6@1500ms+1500ms",
        // bo, who switches notices off before his job ends.
        "job:1:bo:6@5s+1500ms",
    ];
    let simulator = crate::support::scripted(2, INTERVAL_MS, &faults);
    let mut options = gpudash::Options {
        store: Some(store),
        auth: gpudash::auth::AuthConfig::load(Some(&auth_file), Some(&tokens)).unwrap(),
        alerts: gpudash::alerts::AlertsConfig::parse(&alerts_file(mail.port, &hook_url), "alerts.toml").unwrap(),
        ..gpudash::Options::new(Duration::from_millis(INTERVAL_MS))
    };
    options.jobs.limits.min_held_s = 1.0;
    options.site.public = vec![gpudash::web::site::PublicUrl::parse("https://gpu1.example.org").unwrap()];
    let server = TestServer::with_options(Box::new(simulator), options).await;

    // bo switches end-of-job notices off; his settings say where his e-mail goes.
    let request = client().put(server.url("/api/jobs/notices")).bearer_auth(BO);
    let settings: NoticeSettings = answer(request.json(&serde_json::json!({ "notices": false }))).await;
    assert_eq!(settings.owner, "bo");
    assert!(!settings.choice.notices && settings.choice.digest);
    assert_eq!(settings.address.as_deref(), Some("bo@lab.example.org"));
    let channels = &settings.channels;
    assert!(channels.mail && channels.notices && channels.webhooks == 1, "{channels:?}");
    assert_eq!(channels.digest, DigestEvery::Daily);
    assert!(channels.digest_when.starts_with("daily at ") && channels.digest_when.ends_with(" UTC"), "{channels:?}");
    // An anonymous viewer owns no settings here.
    let anonymous = client().get(server.url("/api/jobs/notices")).send().await.unwrap();
    assert_eq!(anonymous.status(), 403);
    assert!(anonymous.text().await.unwrap().contains("sign in to see or change your job notices"));

    // Every job ends; ana's third notice is held back and bo's is not sent.
    eventually(30, "five jobs ended, one notice held back and one not wanted", || async {
        let jobs: JobsResponse = reqwest::get(server.url("/api/jobs?state=ended")).await.ok()?.json().await.ok()?;
        let held = metric(&server, "gpudash_job_messages_skipped_total{reason=\"held_back\"}").await?;
        let opted = metric(&server, "gpudash_job_messages_skipped_total{reason=\"opted_out\"}").await?;
        (jobs.jobs.len() == 5 && held == 1.0 && opted == 1.0).then_some(())
    })
    .await;
    let notices = eventually(15, "3 notices by mail and 3 by webhook", || async {
        let mails = mail.mails();
        let posts: Vec<_> = hook.got().into_iter().filter(|g| g.path == "/jobs").collect();
        (mails.len() >= 3 && posts.len() >= 3).then_some((mails, posts))
    })
    .await;
    let (mails, posts) = notices;
    assert_eq!(mails.len(), 3, "{mails:#?}");
    let to = |who: &str| mails.iter().filter(|m| m.rcpt_tos == [who]).cloned().collect::<Vec<_>>();
    let (ana, cy) = (to("ana@lab.example.org"), to("cy@elsewhere.example.org"));
    assert_eq!((ana.len(), cy.len()), (2, 1), "{mails:#?}");
    assert!(mails.iter().all(|m| m.from == "gpudash <gpudash@gpu1.example.org>" && m.content_type == "text/plain"));
    assert_eq!(cy[0].to, "Cy <cy@elsewhere.example.org>");
    for m in &mails {
        assert!(m.subject.contains("ended: ") && m.subject.ends_with("[simulated GPUs]"), "{}", m.subject);
        assert!(m.body.contains("Verdict:\n- ") && m.body.contains("idle"), "{}", m.body);
        assert!(m.body.contains("See it: https://gpu1.example.org/#jobs?job="), "{}", m.body);
    }
    let bodies: Vec<serde_json::Value> = posts.iter().map(|p| serde_json::from_str(&p.body).unwrap()).collect();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|b| b["kind"] == "job_notice" && b["job"]["grade"] == "poor" && b["simulated"] == true));
    let owners: Vec<&str> = bodies.iter().filter_map(|b| b["owner"].as_str()).collect();
    assert_eq!(owners.iter().filter(|o| **o == "ana").count(), 2, "{owners:?}");
    assert!(!owners.contains(&"bo"), "bo switched notices off: {owners:?}");

    // Only an admin sends the digests now.
    let refused = client().post(server.url("/api/jobs/digest")).bearer_auth(BO).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    let digest = || answer::<DigestSent>(client().post(server.url("/api/jobs/digest")).bearer_auth(ADMIN));
    let sent = digest().await;
    assert_eq!(sent.owners, ["ana", "bo", "cy"]);
    assert!(sent.opted_out.is_empty());
    assert_eq!(sent.messages, 6, "3 e-mails and 3 webhook posts");
    let digests = eventually(15, "3 digests by mail", || async {
        let mails: Vec<Mail> = mail.mails().into_iter().filter(|m| m.subject.contains(": your ")).collect();
        (mails.len() >= 3).then_some(mails)
    })
    .await;
    let ana = digests.iter().find(|m| m.rcpt_tos == ["ana@lab.example.org"]).expect("ana's digest");
    assert!(ana.subject.contains(": your 3 jobs from "), "{}", ana.subject);
    assert!(ana.body.contains("- 3 jobs ended: 3 poor"), "{}", ana.body);
    assert!(ana.body.contains("- 1 end-of-job notice was held back"), "{}", ana.body);
    assert!(ana.body.contains("See it: https://gpu1.example.org/#jobs?owner=ana"), "{}", ana.body);
    let bo = digests.iter().find(|m| m.rcpt_tos == ["bo@lab.example.org"]).expect("bo's digest");
    assert!(bo.body.contains("- 1 job ended: 1 poor"), "{}", bo.body);

    // bo switches digests off too: the next digest skips him.
    let off = client()
        .put(server.url("/api/jobs/notices"))
        .bearer_auth(BO)
        .json(&serde_json::json!({ "digest": false }))
        .send()
        .await
        .unwrap();
    assert_eq!(off.status(), 200);
    let again = digest().await;
    assert_eq!((again.owners, again.opted_out), (vec!["ana".to_owned(), "cy".to_owned()], vec!["bo".to_owned()]));
    let sent_mail = eventually(15, "8 e-mails sent", || async {
        let sent = metric(&server, "gpudash_job_mail_total{outcome=\"sent\"}").await?;
        (sent == 8.0).then_some(sent)
    })
    .await;
    assert_eq!(sent_mail, 8.0);
    let second_ana: Vec<Mail> = mail
        .mails()
        .into_iter()
        .filter(|m| m.rcpt_tos == ["ana@lab.example.org"] && m.subject.contains(": your "))
        .collect();
    assert_eq!(second_ana.len(), 2);
    // An admin's digest leaves the held-back count for the scheduled one: told again.
    assert!(second_ana[1].body.contains("- 1 end-of-job notice was held back"), "{}", second_ana[1].body);
    assert_eq!(metric(&server, "gpudash_job_messages_total{kind=\"notice\"}").await, Some(3.0));
    assert_eq!(metric(&server, "gpudash_job_messages_total{kind=\"digest\"}").await, Some(5.0));

    // Both changes and both digests are in the audit log.
    let log: serde_json::Value =
        client().get(server.url("/api/audit?limit=50")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let triples = crate::support::audit_triples(&log);
    let count = |user: &str, action: &str| triples.iter().filter(|(u, a, _)| u == user && a == action).count();
    assert_eq!((count("bo", "jobs.notices"), count("root", "jobs.digest")), (2, 2), "{triples:?}");
    server.stop().await;
}
