//! The page's telemetry beyond the memory gauge, in a real browser: process
//! tables, who uses what, a lost GPU, the history notice and the health section.

use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::processes::GpuProcess;
use shared::units::{format_bytes, format_watts};

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::browser_overview::open_all_cards;
use crate::support::{TestServer, WithProcesses};

const HIDDEN_PID: u32 = 900_002;

/// Two more processes on GPU 0 (one that /proc hides), so a table has rows to sort.
fn crowd(now_ms: u64, processes: &mut Vec<GpuProcess>) {
    let extra = |pid: u32, user: Option<&str>, gib: u64| GpuProcess {
        used_memory: Some(gib << 30),
        sm_util: Some(3),
        sm_util_seen_ms: Some(now_ms),
        user: user.map(str::to_owned),
        name: user.map(|_| "python3".to_owned()),
        command: user.map(|_| "python3 -m notebook --port 8888 --no-browser --NotebookApp.token=x".to_owned()),
        started_ms: user.map(|_| now_ms - 2 * 3_600_000),
        group: None,
        ..shared::testing::process(0, pid)
    };
    processes.push(extra(900_001, Some("zoe"), 3));
    processes.push(extra(HIDDEN_PID, None, 1));
}

/// The simulator with [`crowd`]'s processes and an XID 48 on GPU 0 from the start, so the
/// health section has an error to show.
async fn crowded(count: u32, interval_ms: u64) -> TestServer {
    let simulator = Simulator::new(count, interval_ms).with_fault("xid:0:48@0s".parse().unwrap());
    TestServer::with_source(Box::new(WithProcesses::new(simulator, crowd)), interval_ms).await
}

async fn api_processes(server_api: &str) -> Option<Value> {
    reqwest::get(server_api).await.ok()?.json().await.ok()
}

/// `(pid, user, memory)` of the table rows of GPU `index`, as shown.
async fn table_rows(c: &Client, index: u32) -> Vec<(String, String, String)> {
    let css = |cell: &str| format!("table.process-table tr.process-row[data-gpu='{index}'] td.{cell}");
    let (pids, users, memory) =
        (texts(c, &css("pid")).await, texts(c, &css("user")).await, texts(c, &css("memory")).await);
    pids.into_iter().zip(users).zip(memory).map(|((p, u), m)| (p, u, m)).collect()
}

/// `(pid, user, memory)` of the API's processes on GPU `index`, biggest memory first.
fn api_rows(api: &Value, index: u64) -> Vec<(String, String, String)> {
    let mut processes: Vec<&Value> =
        api["processes"].as_array().into_iter().flatten().filter(|p| p["device"].as_u64() == Some(index)).collect();
    processes.sort_by_key(|p| std::cmp::Reverse(p["used_memory"].as_u64()));
    processes
        .iter()
        .map(|p| {
            let user = crate::browser::owner_cell(p);
            let memory = p["used_memory"].as_u64().map_or_else(|| "n/a".to_owned(), format_bytes);
            (p["pid"].to_string(), user, memory)
        })
        .collect()
}

#[tokio::test]
async fn process_tables_match_the_api_and_sort_by_a_clicked_column() {
    let server = crowded(2, 500).await;
    let url = server.url("/");
    let api = server.url("/api/processes");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        // GPU 0 runs the simulator's job and the two added processes; memory descending by default.
        let shown = eventually(20, "GPU 0's table equal to /api/processes", || async {
            let expected = api_rows(&api_processes(&api).await?, 0);
            let shown = table_rows(&c, 0).await;
            (expected.len() == 3 && shown == expected).then_some(shown)
        })
        .await;
        let hidden = shown.iter().find(|row| row.0 == HIDDEN_PID.to_string()).expect("the hidden process is listed");
        assert_eq!((hidden.1.as_str(), hidden.2.as_str()), ("?", "1.00 GiB"));
        let full = "python3 -m notebook --port 8888 --no-browser --NotebookApp.token=x";
        let titles = js(
            &c,
            "return [...document.querySelectorAll(\"table.process-table tr[data-gpu='0'] td.command\")]\
             .map(td => [td.textContent, td.getAttribute('title')])",
        )
        .await;
        let notebook = titles.as_array().unwrap().iter().find(|t| t[1] == full).expect("the full command as a tooltip");
        let cut = notebook[0].as_str().unwrap();
        assert!(
            cut.chars().count() <= 40 && cut.ends_with('…') && full.starts_with(cut.trim_end_matches('…')),
            "{cut}"
        );

        let pids = |rows: Vec<(String, String, String)>| rows.into_iter().map(|r| r.0).collect::<Vec<_>>();
        let descending = pids(shown);
        c.find(Locator::Css("table.process-table th button[data-sort='memory']")).await.unwrap().click().await.unwrap();
        let ascending = pids(table_rows(&c, 0).await);
        assert_eq!(ascending, descending.iter().rev().cloned().collect::<Vec<_>>());
        let sort =
            js(&c, "return document.querySelector(\"table.process-table th.col-memory\").getAttribute('aria-sort')")
                .await;
        assert_eq!(sort, "ascending");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn who_uses_what_lists_every_user_and_the_free_gpus() {
    let server = crowded(4, 500).await;
    let url = server.url("/");
    let api = server.url("/api/processes");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(20, "#who-uses-what equal to /api/processes", || async {
            let api = api_processes(&api).await?;
            let users = api["users"].as_array()?;
            let expected: Vec<(String, String, String)> = users
                .iter()
                .map(|u| {
                    let devices: Vec<String> =
                        u["devices"].as_array().into_iter().flatten().map(Value::to_string).collect();
                    (u["user"].as_str().unwrap_or_default().to_owned(), devices.join(", "), u["processes"].to_string())
                })
                .collect();
            let shown_users = texts(&c, "#who-uses-what tr.user-row td.usage-user").await;
            let shown_gpus = texts(&c, "#who-uses-what tr.user-row td.usage-gpus").await;
            let shown_counts = texts(&c, "#who-uses-what tr.user-row td.usage-processes").await;
            let shown: Vec<_> =
                shown_users.into_iter().zip(shown_gpus).zip(shown_counts).map(|((u, g), n)| (u, g, n)).collect();
            let free: Vec<String> = api["free_devices"].as_array()?.iter().map(|i| format!("GPU {i}")).collect();
            let free = if free.is_empty() { "Free: none".to_owned() } else { format!("Free: {}", free.join(", ")) };
            let shown_free = texts(&c, "#free-gpus").await.into_iter().next()?;
            // zoe and the hidden process's "unknown" are always there, plus the simulator's users.
            (expected.len() >= 3 && shown == expected && shown_free == free).then_some(())
        })
        .await;
        let users = texts(&c, "#who-uses-what td.usage-user").await;
        assert!(users.contains(&"zoe".to_owned()) && users.contains(&"unknown".to_owned()), "{users:?}");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn a_lost_gpu_is_flagged_while_the_others_keep_updating() {
    let simulator = Simulator::new(3, 200).with_fault("lost:1@1s".parse().unwrap());
    let server = TestServer::with_source(Box::new(simulator), 200).await;
    let url = server.url("/");
    // Tall enough that every card's memory chart is on screen, where charts draw.
    with_browser(1280, 3000, |c| async move {
        c.goto(&url).await.unwrap();
        // The row says it first; the card, opened from it, says why.
        eventually(15, "GPU 1's row marked lost", || async {
            let state = texts(&c, "tr.gpu-row[data-index='1'] .ov-state").await.concat();
            let badge = texts(&c, "tr.gpu-row.sev-critical[data-index='1'] .sev-badge").await.concat();
            (state == "lost" && badge == "✖ lost").then_some(())
        })
        .await;
        open_all_cards(&c, 3).await;
        let lost = ".gpu-card.gpu-lost[data-index='1']";
        eventually(15, "GPU 1 marked lost", || async { (texts(&c, lost).await.len() == 1).then_some(()) }).await;
        assert_eq!(texts(&c, &format!("{lost} .badge-lost")).await, ["LOST"]);
        let reason = texts(&c, &format!("{lost} .lost-reason")).await.concat();
        assert!(reason.contains("GPU 1 is lost"), "{reason}");
        assert_eq!(texts(&c, ".gpu-card.gpu-lost").await.len(), 1, "only GPU 1 is lost");
        assert_eq!(texts(&c, &format!("{lost} .gpu-util")).await, ["n/a"]);
        assert_eq!(texts(&c, &format!("{lost} .pstate")).await, ["n/a"]);
        assert!(texts(&c, &format!("{lost} .mem-text")).await[0].starts_with("n/a / "));
        let free = texts(&c, "#free-gpus").await.concat();
        assert!(!free.contains("GPU 1"), "a lost GPU is not free: {free}");
        assert_eq!(texts(&c, "#lost-gpus").await, ["Lost: GPU 1"]);

        let before = memory_chart_draws(&c).await;
        let memory_before = texts(&c, ".gpu-card .mem-text").await;
        // Charts redraw as their line moves a pixel (about every 0.5 s here), taking turns;
        // the other GPUs' figures move on too.
        let (after, memory_after) = eventually(5, "the other charts and figures moving on", || async {
            let after = memory_chart_draws(&c).await;
            let memory_after = texts(&c, ".gpu-card .mem-text").await;
            let figures_moved = memory_after[0] != memory_before[0] || memory_after[2] != memory_before[2];
            (after[0] > before[0] && after[2] > before[2] && figures_moved).then_some((after, memory_after))
        })
        .await;
        assert_eq!(after[1], before[1], "the lost GPU's chart stopped");
        assert_eq!(memory_after[1], memory_before[1]);
    })
    .await;
    server.stop().await;
}

/// `data-draws` of each card's memory chart, by GPU.
async fn memory_chart_draws(c: &Client) -> Vec<u64> {
    js(c, "return [...document.querySelectorAll('canvas.mem-chart')].map(e => +e.getAttribute('data-draws'))")
        .await
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn memory_charts_below_the_fold_wait_until_scrolled_to() {
    let server = TestServer::simulated(8, 100).await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        open_all_cards(&c, 8).await;
        eventually(15, "eight cards with figures", || async {
            let shown = texts(&c, ".gpu-card .gpu-util").await;
            (shown.len() == 8 && shown.iter().all(|t| t.ends_with('%'))).then_some(())
        })
        .await;
        let below = js(
            &c,
            "return document.querySelector('.gpu-card[data-index=\"7\"] canvas.mem-chart')\
             .getBoundingClientRect().top > innerHeight",
        )
        .await;
        assert_eq!(below, Value::Bool(true), "GPU 7's chart starts below the fold");
        // A second of 10 Hz ticks: the chart below the fold has not drawn.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(memory_chart_draws(&c).await[7], 0, "an off-screen chart waits");

        js(&c, "document.querySelector('.gpu-card[data-index=\"7\"] canvas.mem-chart').scrollIntoView(); return null")
            .await;
        let first = eventually(5, "GPU 7's chart drawn once on screen", || async {
            let draws = memory_chart_draws(&c).await[7];
            (draws > 0).then_some(draws)
        })
        .await;
        // On screen it follows the samples: a 5-minute axis moves a pixel every ~0.5 s.
        eventually(5, "GPU 7's chart redrawn as samples arrive", || async {
            (memory_chart_draws(&c).await[7] > first + 1).then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}

/// With history on, the charts are `browser_history.rs`'s.
#[tokio::test]
async fn without_history_the_section_says_it_is_off() {
    let server = TestServer::simulated(1, 1000).await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let notice =
            eventually(15, "#history-off", || async { texts(&c, "#history-off").await.into_iter().next() }).await;
        assert!(notice.contains("History is off on this server (--no-history)"), "{notice}");
        assert!(texts(&c, "canvas.history-chart").await.is_empty());
        assert!(texts(&c, "#range-picker").await.is_empty());
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_health_section_shows_ecc_nvlink_and_xids_of_an_h200() {
    let server = crowded(1, 500).await;
    let url = server.url("/");
    let devices = server.url("/api/devices");
    with_browser(1280, 1400, |c| async move {
        c.goto(&url).await.unwrap();
        // The XID is flagged on the GPU's row, in words.
        eventually(15, "XID 48 on GPU 0's row", || async {
            let badges = texts(&c, "tr.gpu-row.sev-critical[data-index='0'] .sev-badge").await;
            badges.contains(&"✖ XID 48".to_owned()).then_some(())
        })
        .await;
        open_all_cards(&c, 1).await;
        let card = ".gpu-card[data-index='0']";
        // The simulated H200 is busy from the start: P0 on a full Gen5 link, no fans to read.
        eventually(15, "a busy H200", || async {
            let pstate = texts(&c, &format!("{card} .pstate")).await.concat();
            let link = texts(&c, &format!("{card} .pcie-link")).await.concat();
            (pstate == "P0" && link == "Gen5 x16 / Gen5 x16").then_some(())
        })
        .await;
        assert_eq!(texts(&c, &format!("{card} .fans")).await, ["n/a"]);
        let events = texts(&c, &format!("{card} .clock-events")).await.concat();
        assert!(events == "none" || events.contains("sw_power_cap"), "{events}");
        // The cap the server reports (the simulator's, a constant), as the page's rule writes it.
        let devices: Value = reqwest::get(&devices).await.expect("GET /api/devices").json().await.expect("JSON");
        let cap = devices["devices"][0]["latest"]["enforced_power_limit_mw"].as_u64().expect("a power cap");
        let cap = format_watts(u32::try_from(cap).expect("milliwatts fit a u32"));
        assert_eq!(texts(&c, &format!("{card} .power-cap")).await, [cap]);

        let health = format!("{card} details.gpu-health");
        eventually(15, "a health reading with the XID", || async {
            let summary = texts(&c, &format!("{health} summary")).await.concat();
            (summary.contains("ECC on") && summary.contains("1 XID")).then_some(())
        })
        .await;
        c.find(Locator::Css(&format!("{health} summary"))).await.unwrap().click().await.unwrap();
        let field = |class: &'static str| {
            let (c, health) = (c.clone(), health.clone());
            async move { texts(&c, &format!("{health} .{class}")).await.concat() }
        };
        assert_eq!(field("health-ecc").await, "on");
        assert_eq!(field("health-ecc-volatile").await, "0 corrected, 0 uncorrected");
        assert_eq!(field("health-ecc-aggregate").await, "0 corrected, 0 uncorrected");
        assert_eq!(field("health-nvlink").await, "18 / 18 active");
        assert_eq!(field("health-persistence").await, "on");
        assert_eq!(field("health-mig").await, "off");
        assert!(field("health-bar1").await.ends_with("/ 256 GiB"));
        assert!(field("health-energy").await.ends_with(" kWh"));
        let xid = field("xid").await;
        assert!(xid.contains("XID 48") && xid.contains("double-bit ECC error"), "{xid}");
        let color = js(&c, &format!("return getComputedStyle(document.querySelector(\"{card} .xid\")).color")).await;
        let red = js(&c, "const e = document.createElement('i'); e.style.color = 'var(--bad)'; document.body.append(e); return getComputedStyle(e).color").await;
        assert_eq!(color, red, "XIDs are shown in the alarm color");
        save_screenshot(&c, "health.png").await;
    })
    .await;
    server.stop().await;
}
