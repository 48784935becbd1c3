//! The Usage tab in a real browser: a scripted job's owner appears in the per-owner table and in
//! the stacked chart, GPU 0 in the per-GPU table, its container in the per-workload table, and
//! each table's "CSV" fetches the same range as CSV, grouped as the table is; the range and the
//! workload grouping are in the URL, and a link to them opens the tab so.

use shared::usage::UsageResponse;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::{TestServer, get_json};

#[tokio::test]
async fn the_usage_tab_shows_the_table_the_chart_and_the_csv_link() {
    let simulator = gpudash::telemetry::simulator::Simulator::new(2, 250)
        .with_fault("job:0:ana@container:trainer:2:50@0s+10m".parse().expect("a job fault"));
    let server = TestServer::with_source(Box::new(simulator), 250).await;
    // The tab asks once when shown: wait until there is something to show.
    eventually(20, "ana's job charged", || async {
        let now = gpudash::telemetry::now_ms();
        let answer: UsageResponse =
            get_json(&server, &format!("/api/usage?from={}&to={}", now - 60_000, now + 1)).await;
        answer.rows.iter().any(|r| r.user.as_deref() == Some("ana") && r.gpu_hours > 0.0).then_some(())
    })
    .await;
    let url = server.url("/#usage");
    let base = server.url("");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(15, "ana in the per-user table", || async {
            texts(&c, "#usage-users .usage-key").await.contains(&"ana".to_owned()).then_some(())
        })
        .await;
        assert_eq!(texts(&c, "#usage-gpus .usage-key").await, ["GPU 0"], "only GPU 0 ran a job");
        let bars = js(&c, "return document.querySelectorAll('#usage-chart rect.usage-bar').length").await;
        assert_eq!(bars.as_u64(), Some(1), "one day, one user: one bar");
        assert_eq!(texts(&c, "#usage-chart .usage-legend-item").await, ["ana"]);
        assert!(texts(&c, "#usage-empty").await.is_empty(), "not empty");
        let href = js(&c, "return document.querySelector('#usage-csv').getAttribute('href')").await;
        let href = href.as_str().unwrap_or_default().to_owned();
        // Days in the browser's own zone: the page sends its offset, and says so under the tables.
        let zone = js(&c, "return -new Date().getTimezoneOffset()").await.as_i64().unwrap();
        let tail = format!("&group=user&utc_offset={zone}");
        assert!(href.starts_with("/api/usage.csv?from=") && href.ends_with(&tail), "{href}");
        let hint = texts(&c, ".usage-page .hint").await.join(" ");
        assert!(hint.contains("midnight to midnight in your time zone (UTC"), "{hint}");
        let csv = reqwest::get(format!("{base}{href}")).await.unwrap().text().await.unwrap();
        assert!(csv.starts_with("user,gpu_hours,") && csv.contains("\nana,"), "{csv}");
        // Per workload: the container ana's job ran in, then by Slurm job (it ran in none).
        eventually(15, "the container in the per-workload table", || async {
            (texts(&c, "#usage-workloads .usage-key").await == ["trainer"]).then_some(())
        })
        .await;
        // Every table has its CSV, over the same range, grouped as the table is.
        let csv_of = |id: &'static str| {
            let (c, base) = (c.clone(), base.clone());
            async move {
                let script = format!("return document.querySelector('#{id}').getAttribute('href')");
                let href = js(&c, &script).await.as_str().unwrap_or_default().to_owned();
                reqwest::get(format!("{base}{href}")).await.unwrap().text().await.unwrap()
            }
        };
        let gpus = csv_of("usage-csv-gpus").await;
        assert!(gpus.starts_with("gpu,") && gpus.lines().count() == 2, "one row, GPU 0: {gpus}");
        let days = csv_of("usage-csv-days").await;
        assert!(days.starts_with("day,user,") && days.contains(",ana,"), "{days}");
        let containers = csv_of("usage-csv-workloads").await;
        assert!(containers.starts_with("container,") && containers.contains("\ntrainer,"), "{containers}");

        c.find(fantoccini::Locator::Css("#usage-workload-group")).await.unwrap().select_by_value("job").await.unwrap();
        eventually(15, "no Slurm job: one row outside one", || async {
            (texts(&c, "#usage-workloads .usage-key").await == ["(outside one)"]).then_some(())
        })
        .await;
        let jobs = csv_of("usage-csv-workloads").await;
        assert!(jobs.starts_with("job,"), "the workload CSV follows the table's grouping: {jobs}");

        // The range and grouping are in the URL; a link to them opens the tab so.
        c.find(fantoccini::Locator::Css("#usage-range")).await.unwrap().select_by_value("30d").await.unwrap();
        let link = eventually(10, "the range in the URL", || async {
            let hash = js(&c, "return location.hash").await.as_str().unwrap_or_default().to_owned();
            (hash == "#usage?range=30d&by=job").then_some(hash)
        })
        .await;
        let month = csv_of("usage-csv").await;
        assert!(month.starts_with("user,"), "{month}");
        c.goto(&format!("{base}/{link}")).await.unwrap();
        c.refresh().await.unwrap();
        eventually(15, "the linked range and grouping, restored", || async {
            let range = js(&c, "return document.querySelector('#usage-range')?.value ?? null").await;
            let by = js(&c, "return document.querySelector('#usage-workload-group')?.value ?? null").await;
            let rows = texts(&c, "#usage-workloads .usage-key").await;
            (range == "30d" && by == "job" && rows == ["(outside one)"]).then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}
