//! `gpudash-bench loops`: where the sampler's time goes, as the server runs it. Starts the real
//! sampler threads (fast loop, slow loop, GPM loop, XID watcher) over NVML at the server's cadence
//! for a while, then prints each loop's CPU time per GPU per second (from its thread's
//! `/proc/self/task/*/schedstat`) and, inside it, each NVML call's count and cost (the source's
//! call meter), so what is left over is the loop's own work around the calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpudash::telemetry::nvml::NvmlSource;
use gpudash::telemetry::simulator::Simulator;
use gpudash::telemetry::{GpuSource, Sampler, Telemetry};

/// The sampler's threads, in the order printed, and what each does.
const LOOPS: [(&str, &str); 4] = [
    ("gpudash-sampler", "fast loop: gauges every interval"),
    ("gpudash-details", "slow loop: processes, PCIe, energy every 2 s; facts every 30 s"),
    ("gpudash-gpm", "GPM loop: SM/tensor activity, 1 s windows"),
    ("gpudash-xid", "XID watcher (not in the sum)"),
];

/// Runs the loops for `seconds` (after `warmup` seconds not counted) and prints the breakdown.
#[allow(clippy::print_stdout)]
pub fn main(simulate: Option<u32>, seconds: u64, interval_ms: u64, watched: bool) -> Result<(), String> {
    let (source, meter): (Box<dyn GpuSource>, _) = match simulate {
        Some(n) => (Box::new(Simulator::new(n, interval_ms)), None),
        None => {
            let source = NvmlSource::open(interval_ms).map_err(|e| e.to_string())?;
            let meter = source.meter();
            (Box::new(source), Some(meter))
        }
    };
    let gpus = source.devices().len().max(1) as f64;
    let hub = Arc::new(Telemetry::new(source.host(), source.devices()));
    let watching = watched.then(|| hub.watchers().watch());
    let interval = Duration::from_millis(interval_ms);
    let sampler = Sampler::spawn(source, hub, None, None, interval).map_err(|e| e.to_string())?;
    // NVML loads state lazily and GPM's first metrics computation is slow: leave the first seconds out.
    std::thread::sleep(Duration::from_secs(3));
    if let Some(meter) = &meter {
        meter.set_on(true);
    }
    let (before, started) = (thread_cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let (after, window) = (thread_cpu(), started.elapsed().as_secs_f64());
    if let Some(meter) = &meter {
        meter.set_on(false);
    }
    sampler.stop();
    drop(watching);

    let kind = if simulate.is_some() { "simulated GPUs (no NVML calls to meter)" } else { "NVML" };
    println!(
        "sampler loops over {window:.1} s, {gpus} GPU(s) ({kind}), interval {interval_ms} ms, a page watching: {}",
        if watched { "yes" } else { "no" }
    );
    let per_gpu_s = |ns: u64| ns as f64 / 1e3 / window / gpus;
    let calls = meter.map(|m| m.report()).unwrap_or_default();
    let mut sum = 0.0;
    for (thread, what) in LOOPS {
        let cpu =
            per_gpu_s(after.get(thread).copied().unwrap_or(0).saturating_sub(before.get(thread).copied().unwrap_or(0)));
        let in_calls: f64 =
            calls.iter().filter(|(t, ..)| t == thread).map(|(_, _, c)| per_gpu_s(c.cpu_ns)).sum::<f64>() + 0.0;
        if thread != "gpudash-xid" {
            sum += cpu;
        }
        println!(
            "  {thread:<16} {cpu:9.1} µs CPU per GPU per second ({what}); NVML calls {in_calls:.1}, the rest {:.1}",
            cpu - in_calls
        );
        for (_, name, c) in calls.iter().filter(|(t, ..)| t == thread) {
            println!(
                "      {name:<40} {:6} calls  {:8.1} µs CPU/call  {:8.1} µs wall/call  {:8.1} µs CPU per GPU per s",
                c.calls,
                c.cpu_ns as f64 / 1e3 / c.calls.max(1) as f64,
                c.wall_ns as f64 / 1e3 / c.calls.max(1) as f64,
                per_gpu_s(c.cpu_ns)
            );
        }
    }
    println!("  sum of the three loops: {sum:.1} µs CPU per GPU per second ({:.3}% of one core per GPU)", sum / 1e4);
    println!("  goal (issue 39): ≤ 2000 µs per GPU per second at the default 1 s interval");
    Ok(())
}

/// CPU time (ns, from schedstat) of this process's threads by name; threads of one name summed.
fn thread_cpu() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_owned();
        let ns = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
            .unwrap_or(0);
        *out.entry(name).or_insert(0) += ns;
    }
    out
}
