//! The cost of naming workloads: the first look at a new process (its cgroup and environment
//! read from /proc) and a slow-loop pass over processes already looked at (a cache lookup each).
//! Run on this host's real /proc, over its own processes standing in for GPU processes, with
//! Slurm jobs' environments and containers' cgroups as the host has them. The fast loop never
//! calls it: its cost per tick is zero by construction.

use std::time::Instant;

use gpudash::telemetry::identity::{Identities, IdentityConfig};
use shared::Details;
use shared::processes::GpuProcess;

use crate::thread_cpu_ns;

#[allow(clippy::print_stdout)]
pub fn main(processes: usize, passes: u32) -> Result<(), String> {
    let reader = gpudash::telemetry::procfs::ProcReader::new("/proc");
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| format!("/proc: {e}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.truncate(processes);
    if pids.is_empty() {
        return Err("no process in /proc".to_owned());
    }
    let listed: Vec<GpuProcess> = pids
        .iter()
        .map(|&pid| {
            let info = reader.read(pid);
            GpuProcess {
                device: 0,
                pid,
                kind: shared::processes::ProcessKind::Compute,
                used_memory: Some(1 << 30),
                sm_util: None,
                sm_util_seen_ms: None,
                user: info.user,
                name: info.name,
                command: None,
                started_ms: info.started_ms,
                group: info.group,
                workload: None,
                owner: None,
                redacted: false,
                idle: None,
            }
        })
        .collect();
    let identities = Identities::start(IdentityConfig::default(), &[]).map_err(|e| e.to_string())?;
    let mut details = Details { processes: listed.clone(), ..Details::default() };
    let (wall, cpu) = (Instant::now(), thread_cpu_ns());
    identities.attach(&mut details);
    let first_cpu = thread_cpu_ns() - cpu;
    let first_wall = wall.elapsed();
    let in_workloads = details.processes.iter().filter(|p| p.workload.is_some()).count();

    let cpu = thread_cpu_ns();
    for _ in 0..passes {
        let mut again = Details { processes: listed.clone(), ..Details::default() };
        identities.attach(&mut again);
    }
    // The clone of the list is the slow loop's own (NVML hands it over); take it out.
    let cpu_cloning = {
        let start = thread_cpu_ns();
        for _ in 0..passes {
            std::hint::black_box(listed.clone());
        }
        thread_cpu_ns() - start
    };
    let cached_ns = (thread_cpu_ns() - cpu).saturating_sub(cpu_cloning) as f64 / f64::from(passes);
    let n = pids.len() as f64;
    println!(
        "identity: {} host processes standing in for GPU processes ({in_workloads} in a container, pod or job)",
        pids.len()
    );
    println!(
        "  first look, per new process:   {:>8.1} µs CPU ({:.1} µs wall)",
        first_cpu as f64 / n / 1e3,
        first_wall.as_secs_f64() * 1e6 / n
    );
    println!("  slow-loop pass, per process:   {:>8.3} µs CPU (cached; mean of {passes} passes)", cached_ns / n / 1e3);
    println!("  fast loop (every tick):        {:>8.3} µs (identity is not on the fast path)", 0.0);
    Ok(())
}
