//! `gpudash-bench fleet`: a generated fleet behind a real Prometheus, and the
//! fleet view's queries timed through gpudash's own client.
//!
//! Serves `nodes` static dcgm-exporter-style `/metrics` pages (half of them also
//! carrying gpudash's `gpudash_*` series) on loopback ports from one runtime,
//! starts `/usr/bin/prometheus` scraping them every 2 s (`--scrape-interval`),
//! waits until every target is up, then times full refreshes (cold: every query;
//! cached: the cache's answer), the engine's own CPU time during them
//! (`/proc/PID/stat`, and beyond its scraping alone), the machine's load, the page's
//! first answer (hosts only), a listing of the free GPUs, one host opened, and each
//! query alone.
//! `--engine victoria-metrics` runs the same against VictoriaMetrics
//! (`-promscrape.config`), whose query API is Prometheus's.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpudash::fleet::model::Query;
use gpudash::fleet::sweep::Sweep;
use gpudash::fleet::{Fleet, FleetConfig, PrometheusAuth, PrometheusClient, parse_prometheus_url};
use shared::fleet::{FleetFilter, FleetGpus, FleetListing};

const ROUNDS: usize = 10;

/// Runs the benchmark and prints the figures.
#[allow(clippy::print_stdout)]
pub fn main(nodes: u32, gpus: u32, engine: &str, settle_s: u64, scrape_s: u64) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(run(nodes, gpus, engine, settle_s, scrape_s))
}

#[allow(clippy::print_stdout)]
async fn run(nodes: u32, gpus: u32, engine: &str, settle_s: u64, scrape_s: u64) -> Result<(), String> {
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
        "global:\n  scrape_interval: {scrape_s}s\n  scrape_timeout: {scrape_s}s\nscrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: [{list}]\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).map_err(|e| e.to_string())?;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let log = std::fs::File::create(dir.path().join("engine.log")).map_err(|e| e.to_string())?;
    let config_file = dir.path().join("prometheus.yml");
    let data = dir.path().join("data");
    let mut command = Command::new(engine);
    if engine.contains("victoria") {
        command
            .arg(format!("-promscrape.config={}", config_file.display()))
            .arg(format!("-storageDataPath={}", data.display()))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            // Answer with the latest samples, not only those older than 30 s (its default).
            .arg("-search.latencyOffset=0s");
    } else {
        command
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start '{engine}': {e}"))?;
    let engine_pid = child.id();
    let _engine = KillOnDrop(child);
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
    println!(
        "{engine}: all {nodes} targets up after {:.1} s (scrape interval {scrape_s} s)",
        started.elapsed().as_secs_f64()
    );
    // More scrapes, so the range queries have samples to look back over.
    tokio::time::sleep(Duration::from_secs(settle_s)).await;
    println!("scraped for {settle_s} s more before timing");

    // A manual clock: the kept labels age only when the relabelling rounds below say so.
    let clock = gpudash::clock::Clock::manual();
    let config = FleetConfig { timeout: Duration::from_secs(10), clock: clock.clone(), ..FleetConfig::new(url) };
    let window = config.window;
    let fleet = Fleet::new(config).map_err(|e| e.to_string())?;
    let mut cold = Vec::new();
    let mut cached = Vec::new();
    let mut json = Vec::new();
    // The first refresh also reads every GPU's memory total, as one refresh a minute does.
    let t = Instant::now();
    let mut answer = fleet.query().await;
    println!(
        "first refresh (also reads the GPUs' memory totals and labels, kept {} s and {} s): {:.1} ms",
        gpudash::fleet::kept::TOTALS_KEPT_FOR.as_secs(),
        gpudash::fleet::kept::KEPT_FOR.as_secs(),
        t.elapsed().as_secs_f64() * 1e3
    );
    // The machine may be shared: its load beside the figures says how quiet it was.
    println!("load before timing (/proc/loadavg): {}", loadavg());
    // The engine's CPU while only scraping, over as long as the refreshes will take, to take out of
    // what it spends during them.
    let idle_from = (Instant::now(), cpu_seconds(engine_pid));
    let t = Instant::now();
    let _ = fleet.query().await;
    tokio::time::sleep((t.elapsed() * ROUNDS as u32).max(Duration::from_secs(5))).await;
    let idle_rate = cpu_seconds(engine_pid)
        .zip(idle_from.1)
        .map(|(after, before)| (after - before) / idle_from.0.elapsed().as_secs_f64());
    let cpu_before = cpu_seconds(engine_pid);
    let timed_from = Instant::now();
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
    let timed_s = timed_from.elapsed().as_secs_f64();
    let engine_cpu = cpu_seconds(engine_pid).zip(cpu_before).map(|(after, before)| after - before);
    println!("load after the refreshes (/proc/loadavg): {}", loadavg());
    // One refresh a minute reads the GPUs' labels again (the totals, once in ten minutes).
    let mut relabel = Vec::new();
    for _ in 0..3 {
        clock.advance(gpudash::fleet::kept::KEPT_FOR);
        let t = Instant::now();
        let _ = fleet.query().await;
        relabel.push(t.elapsed());
    }
    println!(
        "a refresh that also reads the labels again (one a minute; the totals one in {} min): {}",
        gpudash::fleet::kept::TOTALS_KEPT_FOR.as_secs() / 60,
        stats(&mut relabel)
    );
    if let Some(error) = &answer.error {
        return Err(format!("the fleet query failed: {error}"));
    }
    let hosts_only = gpudash::fleet::filtered(&answer, &FleetFilter::default(), FleetListing { gpus: FleetGpus::None });
    let first = serde_json::to_vec(&hosts_only).map_err(|e| e.to_string())?.len();
    println!(
        "fleet answer: {} nodes, {} GPUs ({} free, {} busy, {} held idle), {:.0} KiB of JSON with every GPU",
        answer.summary.nodes,
        answer.summary.gpus,
        answer.summary.free_gpus,
        answer.summary.busy_gpus,
        answer.summary.idle_gpus,
        json[0].1 as f64 / 1024.0
    );
    println!(
        "the page's first answer (/api/fleet?gpus=none, hosts and counts): {:.0} KB (target ≤ 500 KB)",
        first as f64 / 1e3
    );
    println!(
        "refresh, {} instant queries concurrently + join ({ROUNDS} rounds): {} (target ≤ 500 ms)",
        Sweep::ALL.len(),
        stats(&mut cold)
    );
    match engine_cpu.zip(idle_rate) {
        Some((cpu, idle)) => println!(
            "{engine}'s own CPU time during the {ROUNDS} refreshes: {:.0} ms per refresh; {:.0} ms of it \
             beyond its scraping alone ({:.0} ms of CPU per second while only scraping, measured just before)",
            cpu * 1e3 / ROUNDS as f64,
            (cpu - idle * timed_s).max(0.0) * 1e3 / ROUNDS as f64,
            idle * 1e3
        ),
        None => println!("{engine}'s CPU time: /proc/{engine_pid}/stat unreadable"),
    }
    println!("served from cache: {}", stats(&mut cached));
    let mut encode: Vec<Duration> = json.iter().map(|(t, _)| *t).collect();
    println!("JSON encoding of the whole answer: {}", stats(&mut encode));
    let mut listed = Vec::new();
    let mut listing_bytes = 0;
    let free = FleetFilter { free: true, ..FleetFilter::default() };
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let mut listing = gpudash::fleet::filtered(&answer, &free, FleetListing { gpus: FleetGpus::All });
        fleet.with_gauges(&mut listing).await;
        listed.push(t.elapsed());
        listing_bytes = serde_json::to_vec(&listing).map_err(|e| e.to_string())?.len();
    }
    println!(
        "a listing of the free GPUs (/api/fleet?free=true, with their temperature and power read for it): \
         {:.0} KB, {}",
        listing_bytes as f64 / 1e3,
        stats(&mut listed)
    );
    let host = answer.nodes.first().map(|n| n.instance.clone()).unwrap_or_default();
    let mut opened = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let one = fleet.host(&host).await.ok_or_else(|| format!("host {host} not found"))?;
        opened.push(t.elapsed());
        if let Some(error) = one.error {
            return Err(format!("opening host {host} failed: {error}"));
        }
    }
    println!("one host opened ({} windowed queries for its GPUs): {}", Query::ALL.len(), stats(&mut opened));
    let now = || gpudash::telemetry::now_ms() as f64 / 1000.0;
    println!("each query of the refresh alone ({ROUNDS} rounds, sequential):");
    for sweep in Sweep::ALL {
        let promql = sweep.promql(window);
        let mut times = Vec::new();
        let mut series = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            series = client.query(&promql, now()).await.map_err(|e| e.to_string())?.len();
            times.push(t.elapsed());
        }
        let shown: String = promql.chars().take(70).collect();
        println!("  {shown:<70} {series:>5} series  {}", stats(&mut times));
    }
    println!("before: each windowed query over the whole fleet alone:");
    for query in Query::ALL {
        let promql = query.promql(window);
        let mut times = Vec::new();
        let mut series = 0;
        for _ in 0..3 {
            let t = Instant::now();
            series = client.query(&promql, now()).await.map_err(|e| e.to_string())?.len();
            times.push(t.elapsed());
        }
        let shown: String = promql.chars().take(70).collect();
        println!("  {shown:<70} {series:>5} series  {}", stats(&mut times));
    }
    Ok(())
}

/// `/proc/loadavg`, as it reads (1, 5 and 15-minute load averages, runnable/all tasks, last pid).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|e| format!("unreadable: {e}"), |l| l.trim().to_owned())
}

/// The user + system CPU time of process `pid`, seconds (`/proc/PID/stat`, 100 ticks a second).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) in parentheses: utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
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
