//! Simulated GPUs for CI and demos: jobs start, fill memory, run hot and end.
//!
//! Everything it reports is flagged `simulated` in the API and on the page;
//! it never runs beside real devices.

use shared::{ComputeCapability, DeviceInfo, DeviceSample, HostInfo};

use super::GpuSource;

const MIB: u64 = 1 << 20;

/// A model the simulator imitates: what `nvidia-smi` would say about it.
struct Model {
    name: &'static str,
    memory_total: u64,
    power_limit_mw: u32,
    idle_power_mw: u32,
    max_sm_clock_mhz: u32,
    mem_clock_mhz: u32,
    capability: (u32, u32),
}

const MODELS: [Model; 4] = [
    Model {
        name: "NVIDIA H200",
        memory_total: 143_771 * MIB,
        power_limit_mw: 700_000,
        idle_power_mw: 75_000,
        max_sm_clock_mhz: 1980,
        mem_clock_mhz: 3201,
        capability: (9, 0),
    },
    Model {
        name: "NVIDIA H100 80GB HBM3",
        memory_total: 81_559 * MIB,
        power_limit_mw: 700_000,
        idle_power_mw: 70_000,
        max_sm_clock_mhz: 1980,
        mem_clock_mhz: 2619,
        capability: (9, 0),
    },
    Model {
        name: "NVIDIA A100-SXM4-80GB",
        memory_total: 81_920 * MIB,
        power_limit_mw: 400_000,
        idle_power_mw: 60_000,
        max_sm_clock_mhz: 1410,
        mem_clock_mhz: 1593,
        capability: (8, 0),
    },
    Model {
        name: "NVIDIA L40S",
        memory_total: 46_068 * MIB,
        power_limit_mw: 350_000,
        idle_power_mw: 35_000,
        max_sm_clock_mhz: 2520,
        mem_clock_mhz: 9001,
        capability: (8, 9),
    },
];

/// What a simulated GPU is doing.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle {
        until_ms: u64,
    },
    /// A training job: memory climbs to `target` then breathes around it.
    Job {
        target: u64,
        load: f64,
        until_ms: u64,
    },
}

#[derive(Debug)]
struct SimGpu {
    model: usize,
    phase: Phase,
    memory_used: f64,
    util: f64,
    temperature: f64,
    last_ms: Option<u64>,
}

/// `count` simulated GPUs of a mix of models.
#[derive(Debug)]
pub struct Simulator {
    gpus: Vec<SimGpu>,
    rng: fastrand::Rng,
    interval_ms: u64,
}

/// Memory a CUDA context holds on a GPU nobody computes on (a desktop, persistence daemon).
const IDLE_MEMORY: f64 = 512.0 * MIB as f64;

impl Simulator {
    pub fn new(count: u32, interval_ms: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(0x6770_7564_6173_6800 ^ u64::from(count));
        let gpus = (0..count)
            .map(|i| SimGpu {
                // Mostly H200s, as on the team servers this is built for, with others mixed in.
                model: if i % 4 == 3 { (i as usize / 4) % (MODELS.len() - 1) + 1 } else { 0 },
                // Half the GPUs start a job at once, so a demo shows movement from the first second.
                phase: Phase::Idle { until_ms: if i % 2 == 0 { 0 } else { rng.u64(20_000..60_000) } },
                memory_used: IDLE_MEMORY,
                util: 0.0,
                temperature: 32.0 + rng.f64() * 4.0,
                last_ms: None,
            })
            .collect();
        Self { gpus, rng, interval_ms }
    }
}

impl GpuSource for Simulator {
    fn host(&self) -> HostInfo {
        HostInfo {
            hostname: super::hostname(),
            driver_version: Some("580.159.04 (simulated)".to_owned()),
            cuda_driver_version: Some("13.0".to_owned()),
            simulated: true,
            gpu_error: None,
            interval_ms: self.interval_ms,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            history_path: None,
        }
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        (0u32..)
            .zip(&self.gpus)
            .map(|(index, gpu)| {
                let model = &MODELS[gpu.model];
                DeviceInfo {
                    index,
                    name: format!("{} (simulated)", model.name),
                    uuid: format!("GPU-5140da5b-0000-4000-8000-{index:012x}"),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
                    compute_capability: Some(ComputeCapability {
                        major: model.capability.0,
                        minor: model.capability.1,
                    }),
                    memory_total: model.memory_total,
                    simulated: true,
                }
            })
            .collect()
    }

    fn sample(&mut self, timestamp_ms: u64) -> Vec<DeviceSample> {
        let rng = &mut self.rng;
        (0u32..).zip(&mut self.gpus).map(|(index, gpu)| gpu.step(index, timestamp_ms, rng)).collect()
    }
}

impl SimGpu {
    fn step(&mut self, index: u32, now_ms: u64, rng: &mut fastrand::Rng) -> DeviceSample {
        let model = &MODELS[self.model];
        let total = model.memory_total as f64;
        let dt = match self.last_ms {
            Some(last) => (now_ms.saturating_sub(last) as f64 / 1000.0).clamp(0.0, 10.0),
            None => {
                // The first reading: make the initial idle spell relative to now.
                if let Phase::Idle { until_ms } = &mut self.phase {
                    *until_ms = until_ms.saturating_add(now_ms);
                }
                1.0
            }
        };
        self.last_ms = Some(now_ms);

        self.phase = match self.phase {
            Phase::Idle { until_ms } if now_ms >= until_ms => Phase::Job {
                target: (total * (0.25 + 0.7 * rng.f64())) as u64,
                load: 0.55 + 0.45 * rng.f64(),
                until_ms: now_ms + rng.u64(45_000..240_000),
            },
            Phase::Job { until_ms, .. } if now_ms >= until_ms => {
                Phase::Idle { until_ms: now_ms + rng.u64(8_000..60_000) }
            }
            phase => phase,
        };
        let (memory_goal, util_goal) = match self.phase {
            Phase::Idle { .. } => (IDLE_MEMORY, 0.0),
            // Activations come and go with each step: a few percent of breathing room.
            Phase::Job { target, load, .. } => {
                (target as f64 * (0.97 + 0.03 * rng.f64()), (load * 100.0 - 8.0 * rng.f64()).clamp(0.0, 100.0))
            }
        };
        // Allocators grow quickly and release at once; utilisation follows the job within a second.
        let rate = if memory_goal > self.memory_used { 0.35 } else { 0.9 };
        self.memory_used += (memory_goal - self.memory_used) * (1.0 - (-dt / rate).exp()).min(1.0);
        self.memory_used = self.memory_used.clamp(0.0, total);
        self.util += (util_goal - self.util) * (1.0 - (-dt / 0.5).exp());
        let load = self.util / 100.0;
        // Temperature lags behind load by about half a minute.
        let temperature_goal = 30.0 + 48.0 * load;
        self.temperature += (temperature_goal - self.temperature) * (1.0 - (-dt / 30.0).exp());

        let used = self.memory_used as u64;
        let busy = self.util > 1.0;
        DeviceSample {
            index,
            timestamp_ms: now_ms,
            memory_used: Some(used),
            memory_free: Some(model.memory_total.saturating_sub(used)),
            gpu_util: Some(self.util.round() as u32),
            mem_util: Some((self.util * (0.35 + 0.1 * rng.f64())).round() as u32),
            temperature_c: Some(self.temperature.round() as u32),
            power_draw_mw: Some(
                model.idle_power_mw
                    + ((f64::from(model.power_limit_mw - model.idle_power_mw)) * load * (0.85 + 0.1 * rng.f64()))
                        as u32,
            ),
            power_limit_mw: Some(model.power_limit_mw),
            sm_clock_mhz: Some(if busy { model.max_sm_clock_mhz - rng.u32(0..60) } else { 345 }),
            mem_clock_mhz: Some(model.mem_clock_mhz),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_is_labelled_simulated() {
        let sim = Simulator::new(3, 1000);
        assert!(sim.host().simulated);
        let devices = sim.devices();
        assert_eq!(devices.len(), 3);
        assert!(devices.iter().all(|d| d.simulated && d.name.contains("(simulated)")));
        let uuids: std::collections::HashSet<_> = devices.iter().map(|d| &d.uuid).collect();
        assert_eq!(uuids.len(), 3, "UUIDs must be unique");
    }

    #[test]
    fn readings_move_and_stay_within_physical_bounds() {
        let mut sim = Simulator::new(8, 1000);
        let devices = sim.devices();
        let mut first = None;
        let mut changed = false;
        for tick in 0..600u64 {
            let samples = sim.sample(1_000_000 + tick * 1000);
            assert_eq!(samples.len(), 8);
            for (s, d) in samples.iter().zip(&devices) {
                let used = s.memory_used.unwrap();
                assert!(used <= d.memory_total);
                assert_eq!(used + s.memory_free.unwrap(), d.memory_total);
                assert!(s.gpu_util.unwrap() <= 100);
                assert!(s.power_draw_mw.unwrap() <= s.power_limit_mw.unwrap());
                assert!((25..=95).contains(&s.temperature_c.unwrap()));
            }
            let used: Vec<_> = samples.iter().map(|s| s.memory_used).collect();
            changed |= first.get_or_insert_with(|| used.clone()) != &used;
        }
        assert!(changed, "memory never moved in ten simulated minutes");
    }

    #[test]
    fn a_busy_gpu_shows_load_soon_after_start() {
        let mut sim = Simulator::new(2, 1000);
        let last = (0..5u64).map(|t| sim.sample(t * 1000)).last().unwrap();
        assert!(last[0].gpu_util.unwrap() > 40, "{:?}", last[0]);
        assert!(last[0].memory_used.unwrap() > 4 << 30, "{:?}", last[0]);
        assert_eq!(last[1].gpu_util, Some(0));
    }
}
