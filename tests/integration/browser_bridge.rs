//! The PyTorch bridge panel in a real browser: a process attached by report
//! shows allocated vs reserved vs NVML per GPU, its spans, the container caveat,
//! and the empty_cache button (disabled when the process did not allow it);
//! and the Lab's GPU topology matrix.

use fantoccini::Locator;
use serde_json::json;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::TestServer;

/// A report as `gpudash.attach()` sends it.
fn report(pid: u32, allow: bool, name: &str) -> serde_json::Value {
    json!({
        "version": 1,
        "pid": pid,
        "host": "node1",
        "process_name": name,
        "torch_version": "2.5.1",
        "cuda_version": "12.4",
        "allow_remote_empty_cache": allow,
        "interval_s": 1.0,
        "devices": [{
            "device": 0, "allocated": 2_147_483_648u64, "allocated_peak": 3_221_225_472u64,
            "reserved": 4_294_967_296u64, "reserved_peak": 4_294_967_296u64, "active": 2_147_483_648u64,
            "inactive_split": 0, "alloc_retries": 0, "ooms": 0
        }],
        "spans": [{ "name": "forward", "device": 0, "start_ms": 1, "elapsed_ms": 12.5,
                    "memory_delta": -1_048_576, "memory_peak": 3_221_225_472u64 }],
    })
}

#[tokio::test]
async fn attached_processes_show_allocator_figures_spans_and_empty_cache() {
    let server = TestServer::simulated(2, 500).await;
    let http = reqwest::Client::new();
    for (pid, allow) in [(4242, false), (4343, true)] {
        let answer = http
            .post(server.url("/api/bridge/report"))
            .json(&report(pid, allow, "python train.py --epochs 3 --batch-size 64 --data /datasets/imagenet/train"))
            .send()
            .await
            .expect("server answers");
        assert!(answer.status().is_success(), "report refused: {}", answer.status());
    }
    let url = server.url("/");
    let report_url = server.url("/api/bridge/report");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        c.wait().for_element(Locator::Css("section#pytorch-processes tr.bridge-row[data-pid='4242']")).await.unwrap();
        let allocated = texts(&c, "tr.bridge-row[data-pid='4242'] .bridge-allocated").await;
        assert_eq!(allocated, ["2.00 GiB"]);
        assert_eq!(texts(&c, "tr.bridge-row[data-pid='4242'] .bridge-reserved").await, ["4.00 GiB"]);
        // The simulator lists no such PID: NVML figures are n/a and the caveat says why.
        assert_eq!(texts(&c, "tr.bridge-row[data-pid='4242'] .bridge-nvml").await, ["n/a"]);
        let caveat = texts(&c, ".bridge-process[data-pid='4242'] .bridge-caveat").await;
        assert!(caveat.iter().any(|t| t.contains("another PID namespace")), "caveat: {caveat:?}");
        let spans = texts(&c, ".bridge-process[data-pid='4242'] table.span-table tr.span-row").await;
        assert!(spans.iter().any(|t| t.contains("forward") && t.contains("12.5 ms")), "spans: {spans:?}");

        let disabled = js(&c, "const b = document.querySelector(\".bridge-process[data-pid='4242'] button.bridge-empty-cache\"); return [b.disabled, b.title]").await;
        assert_eq!(disabled, json!([true, "the process attached without allow_remote_empty_cache=True"]));
        let button = ".bridge-process[data-pid='4343'] button.bridge-empty-cache";
        assert_eq!(js(&c, &format!("return document.querySelector(\"{button}\").disabled")).await, json!(false));
        // Clicked through the page's current button each time: the rows re-render with every report, and
        // under load a click can land on the element a re-render just replaced (a pending request
        // disables the button, so a repeated click asks nothing twice).
        let click = format!("const b = document.querySelector(\"{button}\"); if (b && !b.disabled) b.click(); return null");
        eventually(15, "requested…", || async {
            let t = texts(&c, ".bridge-process[data-pid='4343'] .bridge-cache-result").await;
            if t.iter().any(|t| t == "requested…") {
                return Some(());
            }
            // The process keeps reporting, as an attached one does: on a loaded machine the browser may take
            // longer than the 5 s after which a silent process turns stale and refuses requests.
            let name = "python train.py --epochs 3 --batch-size 64 --data /datasets/imagenet/train";
            let _ = reqwest::Client::new().post(&report_url).json(&report(4343, true, name)).send().await;
            js(&c, &click).await;
            None
        })
        .await;
    })
    .await;
    server.stop().await;
}

/// The Lab's topology matrix (issue 7): `topo -m` codes, P2P status on hover; one GPU says P2P needs two.
#[tokio::test]
async fn the_lab_shows_the_topology_matrix_or_why_p2p_is_missing() {
    for gpus in [3, 1] {
        let server = TestServer::simulated(gpus, 500).await;
        let url = server.url("/#lab");
        with_browser(1400, 1000, |c| async move {
            c.goto(&url).await.expect("webdriver answers");
            if gpus == 1 {
                let note = c.wait().for_element(Locator::Css("#p2p-needs-two")).await.unwrap();
                assert_eq!(note.text().await.unwrap(), "P2P needs two GPUs; this server has one");
                return;
            }
            c.wait().for_element(Locator::Css("table#topology td[data-a='0'][data-b='1']")).await.unwrap();
            let cells = js(&c, "return [...document.querySelectorAll('table#topology tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent))").await;
            let cells: Vec<Vec<String>> = serde_json::from_value(cells).unwrap();
            assert_eq!(cells.len(), 3);
            assert!((0..3).all(|i| cells[i][i] == "X"), "{cells:?}");
            assert!(cells.iter().flatten().filter(|c| *c != "X").all(|c| !c.is_empty()), "{cells:?}");
            let title = js(&c, "return document.querySelector(\"table#topology td[data-a='0'][data-b='1']\").title").await;
            assert!(title.as_str().is_some_and(|t| t.contains("P2P read")), "{title}");
        })
        .await;
        server.stop().await;
    }
}

/// Issue 21: the allocator map's numbers, its segments drawn once opened (from the process's detail:
/// the list carries totals only), the OOM line, "Refresh map", a "≤" peak.
#[tokio::test]
async fn the_allocator_map_and_the_oom_line_render() {
    use crate::bridge_allocator::{map, report};
    let server = TestServer::simulated(1, 500).await;
    let http = reqwest::Client::new();
    let mut attach = report(4545);
    attach["spans"] = json!([{ "name": "step", "device": 0, "start_ms": 1, "elapsed_ms": 3.0,
                                "memory_delta": 0, "memory_peak": 3_221_225_472u64, "peak_bound": true }]);
    let mut oom = map(4545, 4, "oom");
    oom["oom"] = json!({ "device": 0, "requested_bytes": 16u64 << 20 });
    for (path, body) in [("/api/bridge/report", attach), ("/api/bridge/allocator", oom)] {
        let answer = http.post(server.url(path)).json(&body).send().await.expect("server answers");
        assert!(answer.status().is_success(), "{path} refused: {}", answer.status());
    }
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        let process = ".bridge-process[data-pid='4545']";
        c.wait().for_element(Locator::Css(&format!("{process} .alloc-largest"))).await.unwrap();
        assert!(texts(&c, &format!("{process} .alloc-seg")).await.is_empty(), "segments load when opened");
        // Opened through the page's current button each time: the rows re-render with every reload.
        let open = format!(
            "const b = document.querySelector(\"{process} button.bridge-show-segments\"); \
             if (b && b.getAttribute('aria-expanded') === 'false') b.click(); return null"
        );
        eventually(15, "the segments drawn from the process's detail", || async {
            js(&c, &open).await;
            (js(&c, &format!("return document.querySelectorAll(\"{process} .alloc-seg\").length")).await == json!(4))
                .then_some(())
        })
        .await;
        let widths = js(&c, &format!("return [...document.querySelectorAll(\"{process} .alloc-seg\")].map(s => [s.style.width, s.querySelector('.alloc-fill').style.width])")).await;
        assert_eq!(widths, json!([["25%", "60%"], ["25%", "60%"], ["25%", "60%"], ["25%", "60%"]]));
        assert_eq!(texts(&c, &format!("{process} .alloc-largest")).await, ["largest free block 8.00 MiB"]);
        assert_eq!(
            texts(&c, &format!("{process} .alloc-new-segment")).await,
            ["an allocation larger than 8.00 MiB would need a new segment"]
        );
        let frag = texts(&c, &format!("{process} .alloc-frag")).await;
        assert_eq!(frag, ["internal fragmentation 40.0%: 32.0 MiB free inside segments"]);
        let explain = texts(&c, &format!("{process} .alloc-explain")).await.join(" ");
        assert!(["expandable_segments:True", "empty_cache()", "max_split_size_mb"].iter().all(|w| explain.contains(w)));
        let oom = texts(&c, &format!("{process} .bridge-oom")).await;
        assert_eq!(oom.len(), 1, "{oom:?}");
        assert!(oom[0].starts_with("OOM at "), "{oom:?}");
        assert!(
            oom[0].ends_with(": asked for 16.0 MiB, largest free block 8.00 MiB, 32.0 MiB free in total (fragmented)"),
            "{oom:?}"
        );
        let peak = texts(&c, &format!("{process} td.span-peak")).await;
        assert_eq!(peak, ["≤ 3.00 GiB"]);
        let button = js(&c, &format!("const b = document.querySelector(\"{process} button.bridge-refresh-map\"); return b && b.textContent")).await;
        assert_eq!(button, json!("Refresh map"));
    })
    .await;
    server.stop().await;
}
