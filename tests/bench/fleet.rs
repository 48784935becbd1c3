//! `gpudash-bench fleet`: a generated fleet behind a real Prometheus, and the
//! fleet view's queries timed through gpudash's own client.
//!
//! Serves `nodes` static dcgm-exporter-style `/metrics` pages (half of them also
//! carrying gpudash's `gpudash_*` series) on loopback ports from one runtime,
//! starts `/usr/bin/prometheus` scraping them every 2 s, waits until every
//! target is up, then times full refreshes (cold: every query; cached: the
//! cache's answer) and each query alone.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpudash::fleet::model::Query;
use gpudash::fleet::{Fleet, FleetConfig, PrometheusAuth, PrometheusClient, parse_prometheus_url};

const ROUNDS: usize = 10;

/// Runs the benchmark and prints the figures.
#[allow(clippy::print_stdout)]
pub fn main(nodes: u32, gpus: u32, prometheus: &str, settle_s: u64) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(run(nodes, gpus, prometheus, settle_s))
}

#[allow(clippy::print_stdout)]
async fn run(nodes: u32, gpus: u32, prometheus: &str, settle_s: u64) -> Result<(), String> {
    let mut targets = Vec::new();
    let mut page_bytes = 0;
    for node in 0..nodes {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let page = page(node, gpus);
        page_bytes += page.len();
        let app = axum::Router::new().route("/metrics", axum::routing::get(move || std::future::ready(page.clone())));
        tokio::spawn(async move { axum::serve(listener, app).await });
        targets.push(addr.to_string());
    }
    println!(
        "fleet: {nodes} nodes × {gpus} GPUs on loopback, {:.0} KiB of /metrics per scrape round",
        page_bytes as f64 / 1024.0
    );

    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: [{list}]\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).map_err(|e| e.to_string())?;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).map_err(|e| e.to_string())?;
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start '{prometheus}': {e}"))?;
    let _prometheus = KillOnDrop(child);
    let url = parse_prometheus_url(&format!("http://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    let client =
        PrometheusClient::new(&url, PrometheusAuth::None, None, Duration::from_secs(10)).map_err(|e| e.to_string())?;

    // Every target up, and every GPU's series in.
    let started = Instant::now();
    let want = f64::from(nodes * gpus);
    loop {
        let now = gpudash::telemetry::now_ms() as f64 / 1000.0;
        let up = client.query("count(up == 1)", now).await.ok().and_then(|v| v.first().map(|s| s.value));
        let series =
            client.query("count(DCGM_FI_DEV_FB_USED)", now).await.ok().and_then(|v| v.first().map(|s| s.value));
        if up == Some(f64::from(nodes)) && series == Some(want) {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("not every target up within 120 s (up: {up:?}, GPU series: {series:?})"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("prometheus: all {nodes} targets up after {:.1} s (scrape interval 2 s)", started.elapsed().as_secs_f64());
    // More scrapes, so the range queries have samples to look back over.
    tokio::time::sleep(Duration::from_secs(settle_s)).await;
    println!("scraped for {settle_s} s more before timing");

    let config = FleetConfig { timeout: Duration::from_secs(10), ..FleetConfig::new(url) };
    let window = config.window;
    let fleet = Fleet::new(config).map_err(|e| e.to_string())?;
    let mut cold = Vec::new();
    let mut cached = Vec::new();
    let mut json = Vec::new();
    let mut answer = fleet.query().await; // warm-up
    for _ in 0..ROUNDS {
        let t = Instant::now();
        answer = fleet.query().await;
        cold.push(t.elapsed());
        let _ = fleet.snapshot().await;
        let t = Instant::now();
        let _ = fleet.snapshot().await;
        cached.push(t.elapsed());
        let t = Instant::now();
        let body = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
        json.push((t.elapsed(), body.len()));
    }
    if let Some(error) = &answer.error {
        return Err(format!("the fleet query failed: {error}"));
    }
    println!(
        "fleet answer: {} nodes, {} GPUs ({} free), {:.0} KiB of JSON",
        answer.summary.nodes,
        answer.summary.gpus,
        answer.summary.free_gpus,
        json[0].1 as f64 / 1024.0
    );
    println!(
        "refresh, {} queries concurrently ({ROUNDS} rounds): {} (target ≤ 500 ms)",
        Query::ALL.len(),
        stats(&mut cold)
    );
    println!("served from cache: {}", stats(&mut cached));
    let mut encode: Vec<Duration> = json.iter().map(|(t, _)| *t).collect();
    println!("JSON encoding of the answer: {}", stats(&mut encode));
    println!("each query alone ({ROUNDS} rounds, sequential):");
    for query in Query::ALL {
        let promql = query.promql(window);
        let mut times = Vec::new();
        let mut series = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            series = client
                .query(&promql, gpudash::telemetry::now_ms() as f64 / 1000.0)
                .await
                .map_err(|e| e.to_string())?
                .len();
            times.push(t.elapsed());
        }
        println!("  {promql:<58} {series:>5} series  {}", stats(&mut times));
    }
    Ok(())
}

fn stats(times: &mut [Duration]) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!("p50 {:.1} ms, max {:.1} ms", ms(times[times.len() / 2]), ms(times[times.len() - 1]))
}

/// One node's `/metrics`: dcgm-exporter's names and labels; even nodes are gpudash
/// (with `gpudash_info` and a process per busy GPU), odd ones plain dcgm-exporter.
fn page(node: u32, gpus: u32) -> String {
    let host = format!("node-{node:03}");
    let gpudash = node.is_multiple_of(2);
    let mut out = String::new();
    let labels = |gpu: u32| {
        format!(
            "gpu=\"{gpu}\",UUID=\"GPU-{node:08x}-{gpu:04x}\",pci_bus_id=\"00000000:{:02x}:00.0\",device=\"nvidia{gpu}\",modelName=\"NVIDIA H200\",Hostname=\"{host}\"",
            0x18 + gpu
        )
    };
    let busy = |gpu: u32| !(node + gpu).is_multiple_of(3);
    let families: [(&str, &dyn Fn(u32) -> f64); 8] = [
        ("DCGM_FI_DEV_GPU_UTIL", &|g| if busy(g) { 90.0 } else { 0.0 }),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", &|g| if busy(g) { 40.0 } else { 0.0 }),
        ("DCGM_FI_DEV_FB_USED", &|g| if busy(g) { 100_000.0 } else { 0.0 }),
        ("DCGM_FI_DEV_FB_FREE", &|g| if busy(g) { 43_000.0 } else { 143_000.0 }),
        ("DCGM_FI_DEV_FB_RESERVED", &|_| 771.0),
        ("DCGM_FI_DEV_GPU_TEMP", &|g| if busy(g) { 61.0 } else { 33.0 }),
        ("DCGM_FI_DEV_POWER_USAGE", &|g| if busy(g) { 540.5 } else { 75.2 }),
        ("DCGM_FI_DEV_SM_CLOCK", &|g| if busy(g) { 1980.0 } else { 345.0 }),
    ];
    for (name, value) in families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for gpu in 0..gpus {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(gpu), value(gpu));
        }
    }
    if gpudash {
        let _ = writeln!(out, "# TYPE gpudash_info gauge\ngpudash_info{{Hostname=\"{host}\",version=\"0.1.0\"}} 1");
        let _ = writeln!(out, "# TYPE gpudash_simulated gauge\ngpudash_simulated{{Hostname=\"{host}\"}} 0");
        let _ = writeln!(out, "# TYPE gpudash_device_lost gauge");
        for gpu in 0..gpus {
            let _ = writeln!(out, "gpudash_device_lost{{{}}} 0", labels(gpu));
        }
        let _ = writeln!(out, "# TYPE gpudash_process_memory_bytes gauge");
        for gpu in (0..gpus).filter(|g| busy(*g)) {
            let user = ["ana", "bo", "chen", "dana", "eli"][((node + gpu) % 5) as usize];
            let _ = writeln!(
                out,
                "gpudash_process_memory_bytes{{{},pid=\"{}\",user=\"{user}\",command=\"python3\"}} {}",
                labels(gpu),
                40_000 + gpu,
                100_000u64 << 20
            );
        }
    }
    out
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
