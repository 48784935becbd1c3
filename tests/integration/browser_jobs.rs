//! The Jobs tab in a real browser: a running container job and an ended, idle Slurm job are
//! listed with their owners and verdicts; the state filter narrows the table and is kept in the
//! URL; a job opens with its verdicts, figures and chart, by a click and by a deep link; the CSV
//! link asks for the jobs the filters show. "Your notices" turns the owner's notices off and keeps it.

use std::time::Duration;

use fantoccini::Locator;
use shared::jobs::{JobsResponse, Outcome};

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::{TestServer, get_json};

#[tokio::test]
async fn the_jobs_tab_lists_filters_and_opens_jobs() {
    let simulator =
        crate::support::scripted(2, 100, &["job:1:ana@container:trainer:2:50@0s+10m", "job:0:dee@slurm:4242:6@0s+2s"]);
    let mut options = gpudash::Options::new(Duration::from_millis(100));
    options.jobs.limits.min_held_s = 1.0;
    let server = TestServer::with_options(Box::new(simulator), options).await;
    let dee = eventually(20, "dee's job ended and ana's running", || async {
        let answer: JobsResponse = get_json(&server, "/api/jobs").await;
        let dee = answer.jobs.iter().find(|j| j.job.owner == "dee" && j.job.outcome == Outcome::Ended)?.job.id;
        answer.jobs.iter().any(|j| j.job.owner == "ana" && j.job.ended_ms.is_none()).then_some(dee)
    })
    .await;
    let url = server.url("/#jobs");
    let deep = server.url(&format!("/#jobs?job={dee}"));
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(15, "both jobs in the table", || async {
            (texts(&c, "#jobs-table tr.job-row").await.len() == 2).then_some(())
        })
        .await;
        let rows = texts(&c, "#jobs-table tr.job-row").await;
        let dee_row = rows.iter().find(|r| r.contains("Slurm job 4242")).unwrap_or_else(|| panic!("{rows:?}"));
        assert!(dee_row.contains("dee") && dee_row.contains("poor") && dee_row.contains("idle"), "{dee_row}");
        let ana_row = rows.iter().find(|r| r.contains("container trainer")).unwrap_or_else(|| panic!("{rows:?}"));
        assert!(ana_row.contains("ana") && ana_row.contains("so far"), "a running job's length: {ana_row}");

        // Ended only: dee's; the filter is in the URL, and the CSV asks the same.
        c.find(Locator::Css("#jobs-state")).await.unwrap().select_by_value("ended").await.unwrap();
        eventually(10, "only the ended job", || async {
            let rows = texts(&c, "#jobs-table tr.job-row").await;
            (rows.len() == 1 && rows[0].contains("Slurm job 4242")).then_some(())
        })
        .await;
        let hash = js(&c, "return location.hash").await;
        assert_eq!(hash, "#jobs?state=ended");
        let href = js(&c, "return document.querySelector('#jobs-csv').getAttribute('href')").await;
        assert_eq!(href, "/api/jobs.csv?limit=1000&state=ended");

        // A click opens the job: its verdicts, figures and the job in the URL.
        c.find(Locator::Css("#jobs-table tr.job-row .col-name a")).await.unwrap().click().await.unwrap();
        eventually(10, "the job opened", || async {
            let title = texts(&c, "#job-detail-title").await;
            (title.first().is_some_and(|t| t.contains("Slurm job 4242"))).then_some(())
        })
        .await;
        let rules = js(&c, "return [...document.querySelectorAll('#job-verdicts li')].map(l => l.dataset.rule)").await;
        assert_eq!(rules[0], "idle", "{rules}");
        let figures = texts(&c, "#job-figures dd").await.join(" | ");
        assert!(figures.contains("dee") && figures.contains("slurm") && figures.contains("ended"), "{figures}");
        let hash = js(&c, "return location.hash").await;
        assert_eq!(hash.as_str(), Some(format!("#jobs?state=ended&job={dee}").as_str()));

        // A deep link opens the same job.
        c.goto("about:blank").await.unwrap();
        c.goto(&deep).await.unwrap();
        eventually(15, "the deep link's job opened", || async {
            let title = texts(&c, "#job-detail-title").await;
            (title.first().is_some_and(|t| t.contains(&format!("Job {dee}: Slurm job 4242")))).then_some(())
        })
        .await;
    })
    .await;
}

/// "Your notices" on the Jobs tab: what the server sends and where, a switch that turns the
/// end-of-job notices off (stored: the server answers so, and a reload shows it off).
#[tokio::test]
async fn the_notices_panel_switches_notices_off_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let alerts = "[jobs]\ndigest = \"weekly\"\ndigest_day = \"friday\"\n\
                  [[webhook]]\nurl = \"http://127.0.0.1:9/jobs\"\njobs = true\nalerts = false\n";
    let options = gpudash::Options {
        store: Some(gpudash::store::Store::open(dir.path(), true, gpudash::store::Retention::default()).unwrap()),
        alerts: gpudash::alerts::AlertsConfig::parse(alerts, "alerts.toml").unwrap(),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server =
        TestServer::with_options(Box::new(gpudash::telemetry::simulator::Simulator::new(1, 200)), options).await;
    let url = server.url("/#jobs");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let summary = || async { texts(&c, "#job-notices summary").await.first().cloned().unwrap_or_default() };
        eventually(15, "the notices panel", || async {
            (summary().await == "Notices: on, weekly digest").then_some(())
        })
        .await;
        c.find(Locator::Css("#job-notices summary")).await.unwrap().click().await.unwrap();
        let place = texts(&c, ".job-notices-where").await.join(" ");
        assert!(place.starts_with("1 team webhook gets them too. At most 5 notices a day"), "{place}");
        let digest = texts(&c, ".job-notices-choice").await.join(" | ");
        assert!(digest.contains("Send me the digest of my jobs (Fridays at 08:00 UTC)"), "{digest}");
        c.find(Locator::Css("#job-notices-notices")).await.unwrap().click().await.unwrap();
        eventually(10, "notices off", || async { (summary().await == "Notices: off, weekly digest").then_some(()) })
            .await;
        let stored: shared::jobs::notices::NoticeSettings = get_json(&server, "/api/jobs/notices").await;
        assert!(!stored.choice.notices && stored.choice.digest, "{stored:?}");
        c.refresh().await.unwrap();
        eventually(15, "still off after a reload", || async {
            let checked =
                js(&c, "const b = document.querySelector('#job-notices-notices'); return b && !b.checked").await;
            (checked == true && summary().await == "Notices: off, weekly digest").then_some(())
        })
        .await;
    })
    .await;
}
