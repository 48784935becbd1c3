//! Where the sampler's time goes: the CPU and wall time of every NVML call, by the loop (thread)
//! that made it. Off unless a benchmark turns it on (`gpudash-bench sampler --breakdown`); off, a
//! call pays one relaxed atomic load.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What one call (by one loop) cost in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    pub calls: u64,
    /// CPU time of the calling thread (user + system), ns.
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

/// The costs of each (thread, call) pair, while on.
#[derive(Debug, Default)]
pub struct CallMeter {
    on: AtomicBool,
    costs: Mutex<BTreeMap<(String, &'static str), Cost>>,
}

impl CallMeter {
    /// Starts (or stops) counting; counts so far stay.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Runs `call`, counting its cost under `name` and the calling thread's name while on.
    pub fn time<T>(&self, name: &'static str, call: impl FnOnce() -> T) -> T {
        if !self.on.load(Ordering::Relaxed) {
            return call();
        }
        let (cpu, wall) = (thread_cpu_ns(), base::clock::Stopwatch::start());
        let out = call();
        let cost = Cost {
            calls: 1,
            cpu_ns: thread_cpu_ns().saturating_sub(cpu),
            wall_ns: u64::try_from(wall.elapsed().as_nanos()).unwrap_or(u64::MAX),
        };
        let thread = std::thread::current().name().unwrap_or("unnamed").to_owned();
        let mut costs = base::sync::lock(&self.costs);
        let sum = costs.entry((thread, name)).or_default();
        sum.calls += 1;
        sum.cpu_ns += cost.cpu_ns;
        sum.wall_ns += cost.wall_ns;
        out
    }

    /// Every (thread, call, cost) counted, by thread then call name.
    pub fn report(&self) -> Vec<(String, &'static str, Cost)> {
        let costs = base::sync::lock(&self.costs);
        costs.iter().map(|((thread, name), cost)| (thread.clone(), *name, *cost)).collect()
    }
}

/// This thread's CPU time (user + system), ns.
pub fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_while_on_and_by_thread() {
        let meter = CallMeter::default();
        assert_eq!(meter.time("a", || 7), 7);
        assert!(meter.report().is_empty(), "off: nothing counted");
        meter.set_on(true);
        meter.time("a", || std::hint::black_box((0..10_000u64).sum::<u64>()));
        meter.time("a", || ());
        std::thread::scope(|s| {
            std::thread::Builder::new().name("other".into()).spawn_scoped(s, || meter.time("b", || ())).unwrap();
        });
        let report = meter.report();
        let a = report.iter().find(|(_, name, _)| *name == "a").unwrap();
        assert_eq!(a.2.calls, 2);
        assert!(a.2.cpu_ns > 0 && a.2.wall_ns >= a.2.cpu_ns / 2, "{a:?}");
        assert!(report.iter().any(|(thread, name, c)| thread == "other" && *name == "b" && c.calls == 1));
    }
}
