//! The one process table in a real browser: a GPU column across GPUs, sorting, filters by user
//! and GPU (from the selects and from "Who uses what"), the full command on expand; and the
//! honest states: the stale banner counting while the server is gone, the degraded notice, the
//! "Loading…" placeholder.

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::processes::GpuProcess;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::{TestServer, WithProcesses};

/// The GPU nothing runs on, so "Free: GPU 3" is there to click.
const FREE_GPU: u32 = 3;
const ZOE_PID: u32 = 900_101;
const ZOE_COMMAND: &str =
    "python3 train.py --model llama-3-8b --dataset /data/corpus --epochs 3 --batch-size 16 --lr 3e-4";

/// The simulator's processes without those on GPU 3, plus zoe on GPUs 0 and 1 and ana on GPU 1.
fn shared_box(now_ms: u64, processes: &mut Vec<GpuProcess>) {
    processes.retain(|p| p.device != FREE_GPU);
    let extra = |device: u32, pid: u32, user: &str, gib: u64, command: &str| GpuProcess {
        used_memory: Some(gib << 30),
        sm_util: Some(20),
        sm_util_seen_ms: Some(now_ms),
        user: Some(user.to_owned()),
        name: Some("python3".to_owned()),
        command: Some(command.to_owned()),
        started_ms: Some(now_ms - 600_000),
        group: None,
        ..shared::testing::process(device, pid)
    };
    processes.push(extra(0, ZOE_PID, "zoe", 5, ZOE_COMMAND));
    processes.push(extra(1, ZOE_PID + 1, "zoe", 2, "python3 eval.py"));
    processes.push(extra(1, ZOE_PID + 2, "ana", 3, "python3 notebook.py"));
}

/// `(gpu, pid, user)` of every row shown, in order.
async fn rows(c: &Client) -> Vec<(String, String, String)> {
    let (gpus, pids, users) = (
        texts(c, "#processes tr.process-row td.gpu").await,
        texts(c, "#processes tr.process-row td.pid").await,
        texts(c, "#processes tr.process-row td.user").await,
    );
    gpus.into_iter().zip(pids).zip(users).map(|((g, p), u)| (g, p, u)).collect()
}

/// `(gpu, pid, user)` of every process `/api/processes` lists, sorted.
async fn api_rows(api: &str) -> Option<Vec<(String, String, String)>> {
    let body: Value = reqwest::get(api).await.ok()?.json().await.ok()?;
    let mut rows: Vec<_> = body["processes"]
        .as_array()?
        .iter()
        .map(|p| (p["device"].to_string(), p["pid"].to_string(), crate::browser::owner_cell(p)))
        .collect();
    rows.sort();
    Some(rows)
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).click().await.unwrap();
}

/// Waits until every row shown passes `keep` and there are `count` of them.
async fn rows_become(c: &Client, what: &str, count: usize, keep: impl Fn(&(String, String, String)) -> bool) {
    eventually(10, what, || async {
        let shown = rows(c).await;
        (shown.len() == count && shown.iter().all(&keep)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn one_table_lists_every_gpu_sorts_filters_and_expands_the_command() {
    let source = WithProcesses::new(Simulator::new(4, 300), shared_box);
    let server = TestServer::with_source(Box::new(source), 300).await;
    let url = server.url("/");
    let api = server.url("/api/processes");
    // A short window, so that the table starts below it.
    with_browser(1280, 500, |c| async move {
        c.goto(&url).await.unwrap();
        // One table, with a GPU column, holding every GPU's processes.
        let all = eventually(20, "the table equal to /api/processes", || async {
            let expected = api_rows(&api).await?;
            let mut shown = rows(&c).await;
            shown.sort();
            (shown == expected && expected.iter().any(|r| r.0 == "0") && expected.iter().any(|r| r.0 == "1"))
                .then_some(expected)
        })
        .await;
        assert_eq!(texts(&c, "table.process-table").await.len(), 1, "one table, not one per GPU");
        assert_eq!(texts(&c, "#processes th.col-gpu").await, ["GPU"]);
        let zoe = all.iter().filter(|r| r.2 == "zoe").count();

        // Sorting by the GPU column, lowest first, then highest first.
        click(&c, "#processes th button[data-sort='gpu']").await;
        let gpus: Vec<u32> = rows(&c).await.iter().map(|r| r.0.parse().unwrap()).collect();
        assert!(gpus.windows(2).all(|w| w[0] <= w[1]) && gpus.first() < gpus.last(), "{gpus:?}");
        click(&c, "#processes th button[data-sort='gpu']").await;
        let gpus: Vec<u32> = rows(&c).await.iter().map(|r| r.0.parse().unwrap()).collect();
        assert!(gpus.windows(2).all(|w| w[0] >= w[1]), "{gpus:?}");

        // Filters from the selects, together, then cleared.
        c.find(Locator::Css("#process-filter-user")).await.unwrap().select_by_value("zoe").await.unwrap();
        rows_become(&c, "only zoe's rows", zoe, |r| r.2 == "zoe").await;
        c.find(Locator::Css("#process-filter-gpu")).await.unwrap().select_by_value("1").await.unwrap();
        rows_become(&c, "zoe's row on GPU 1", 1, |r| r.2 == "zoe" && r.0 == "1").await;
        assert_eq!(texts(&c, "#processes .process-filtered").await, ["— zoe on GPU 1"]);
        click(&c, "#process-filter-clear").await;
        rows_become(&c, "every row again", all.len(), |_| true).await;

        // A user's name in "Who uses what" filters the table and brings it into view (clicked at the
        // page's top, where the table is below the short window, so the scroll is the link's doing).
        let zoe_link = "#who-uses-what button.filter-user[title=\"Show zoe's processes\"]";
        let top = "return document.querySelector('#processes').getBoundingClientRect().top";
        js(&c, "window.scrollTo(0, 0)").await;
        let before = js(&c, top).await.as_f64().unwrap();
        let height = js(&c, "return window.innerHeight").await.as_f64().unwrap();
        assert!(before > height, "the table starts out of view: top {before} of {height}");
        js(&c, &format!("document.querySelector(`{zoe_link}`).click()")).await;
        rows_become(&c, "zoe's rows from her name", zoe, |r| r.2 == "zoe").await;
        let user_select = js(&c, "return document.querySelector('#process-filter-user').value").await;
        assert_eq!(user_select, "zoe");
        let after = js(&c, top).await.as_f64().unwrap();
        assert!((-1.0..height - 100.0).contains(&after), "the table scrolled into view: top {after} of {height}");
        let bar = js(&c, "return document.querySelector('.topbar').getBoundingClientRect().bottom").await;
        assert!(after >= bar.as_f64().unwrap() - 1.0, "its heading clear of the sticky top bar ({bar}): top {after}");

        // Filtered to a free GPU, the table says why it is empty ("Free: GPU 3" opens its card instead:
        // browser_deep_link.rs).
        click(&c, "#process-filter-clear").await;
        let pick = format!(
            "const s = document.querySelector('#process-filter-gpu'); s.value = '{FREE_GPU}'; \
                            s.dispatchEvent(new Event('change'))"
        );
        js(&c, &pick).await;
        eventually(10, "GPU 3's empty table", || async {
            let empty = texts(&c, "#processes tr.empty-row").await;
            (rows(&c).await.is_empty()
                && empty == [format!("No GPU processes of GPU {FREE_GPU}. Clear the filter to see every process.")])
            .then_some(())
        })
        .await;
        assert_eq!(js(&c, "return document.querySelector('#process-filter-gpu').value").await, FREE_GPU.to_string());
        click(&c, "#process-filter-clear").await;

        // The full command opens under its row, from a button (so from the keyboard too), and closes.
        let expand = format!("#processes tr.process-row[data-pid='{ZOE_PID}'] button.expand-button");
        assert_eq!(
            js(&c, &format!("return document.querySelector(\"{expand}\").getAttribute('aria-expanded')")).await,
            "false"
        );
        click(&c, &expand).await;
        let full = eventually(10, "the full command", || async {
            texts(&c, &format!("#processes tr.command-row[data-pid='{ZOE_PID}'] code.command-full")).await.pop()
        })
        .await;
        assert_eq!(full, ZOE_COMMAND);
        assert_eq!(
            js(&c, &format!("return document.querySelector(\"{expand}\").getAttribute('aria-expanded')")).await,
            "true"
        );
        c.find(Locator::Css(&expand)).await.unwrap().send_keys("\u{E007}").await.unwrap();
        eventually(10, "the command row closed by Enter", || async {
            texts(&c, "#processes tr.command-row").await.is_empty().then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_stale_banner_counts_while_the_server_is_gone_and_figures_grey() {
    let server = TestServer::simulated(1, 200).await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(15, "status 'live'", || async {
            (texts(&c, "#conn-status").await.first()? == "live").then_some(())
        })
        .await;
        assert!(texts(&c, "#stale-banner").await.is_empty(), "no banner while live");
        server.stop().await;
        let seconds = |text: &str| -> Option<u64> {
            text.split("last update ").nth(1)?.split(" s ago").next()?.parse().ok()
        };
        let first = eventually(15, "the stale banner", || async {
            let text = texts(&c, "#stale-banner").await.pop()?;
            assert!(text.starts_with("Connection lost — last update "), "{text}");
            seconds(&text)
        })
        .await;
        // It counts on, from the last update's arrival.
        eventually(10, "the banner's count going up", || async {
            let text = texts(&c, "#stale-banner").await.pop()?;
            (seconds(&text)? >= first + 2).then_some(())
        })
        .await;
        let greyed = js(&c, "return getComputedStyle(document.querySelector('.dashboard.stale .gpu-grid, .dashboard.stale .section')).opacity").await;
        assert!(greyed.as_str().unwrap().parse::<f64>().unwrap() < 1.0, "figures greyed: {greyed}");
    })
    .await;
}

#[tokio::test]
async fn a_lost_gpu_shows_the_degraded_notice_and_the_page_replaces_loading() {
    let source = Simulator::new(2, 200).with_fault("lost:1@1s".parse().unwrap());
    let server = TestServer::with_source(Box::new(source), 200).await;
    let url = server.url("/");
    // The served page says "Loading…" until the app starts.
    let html = reqwest::get(&url).await.unwrap().text().await.unwrap();
    assert!(html.contains("id=\"app-loading\"") && html.contains("Loading gpudash…"), "{html}");
    assert!(html.contains("<noscript>"), "{html}");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let notice =
            eventually(15, "the degraded notice", || async { texts(&c, "#degraded-notice").await.pop() }).await;
        assert!(notice.starts_with("Degraded — GPU 1 is lost"), "{notice}");
        assert!(texts(&c, "#app-loading").await.is_empty(), "the app took the placeholder's place");
    })
    .await;
    server.stop().await;
}
