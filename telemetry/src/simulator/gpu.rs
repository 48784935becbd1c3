//! One simulated GPU: its jobs, how its gauges follow them and the faults on it, and what NVML
//! would read from it.

use shared::DeviceSample;
use shared::PcieLink;
use shared::health::{DeviceHealth, EccCounts, NvLinkState, RemappedRows, RetiredPages};
use shared::processes::{GpuProcess, ProcessKind};

use super::faults::effects::{COOLED, Effects, HOT_PEAK, HOT_RAMP, Jobs, MEMORY_FULL, THERMAL_SLOWDOWN, WARM_PEAK};
use super::models::{self, COMMANDS, MODELS, USERS};
use super::{HOLDER_MEMORY, IDLE_MEMORY, Phase, SimGpu, SimJob};

/// The entry of [`COMMANDS`] (and profile) that is a notebook's loop of tiny kernels.
const NOTEBOOK_PROFILE: usize = 4;
/// What share of its util a spin loop turns into heat and power: its SMs are nearly idle.
const SPIN_HEAT: f64 = 0.05;

impl SimGpu {
    /// Moves the GPU on to `now_ms` and reads it.
    pub(super) fn step(
        &mut self,
        index: u32,
        now_ms: u64,
        rng: &mut fastrand::Rng,
        next_pid: &mut u32,
        effects: Effects,
    ) -> DeviceSample {
        let dt = self.tick(now_ms);
        self.schedule(index, now_ms, rng, next_pid);
        self.obey(effects.jobs, index, now_ms, rng, next_pid);
        self.follow(dt, rng, effects);
        self.reading(index, now_ms, rng, effects)
    }

    /// Seconds since the last reading (1 on the first, when the idle spell and a holder's
    /// start become relative to now).
    fn tick(&mut self, now_ms: u64) -> f64 {
        let dt = match self.last_ms {
            Some(last) => (now_ms.saturating_sub(last) as f64 / 1000.0).clamp(0.0, 10.0),
            None => {
                if let Phase::Idle { until_ms } = &mut self.phase {
                    *until_ms = until_ms.saturating_add(now_ms);
                }
                if let Some(holder) = &mut self.holder {
                    // Opened two hours ago and forgotten.
                    holder.started_ms = now_ms.saturating_sub(2 * 3_600_000);
                }
                1.0
            }
        };
        self.last_ms = Some(now_ms);
        dt
    }

    /// Jobs start after an idle spell and end after a while.
    fn schedule(&mut self, index: u32, now_ms: u64, rng: &mut fastrand::Rng, next_pid: &mut u32) {
        self.phase = match self.phase {
            Phase::Idle { until_ms } if now_ms >= until_ms => self.start_job(index, now_ms, rng, next_pid),
            Phase::Job { until_ms, .. } if now_ms >= until_ms => {
                self.job = None;
                Phase::Idle { until_ms: now_ms + rng.u64(8_000..60_000) }
            }
            phase => phase,
        };
    }

    fn start_job(&mut self, index: u32, now_ms: u64, rng: &mut fastrand::Rng, next_pid: &mut u32) -> Phase {
        let total = MODELS[self.model].memory_total as f64;
        *next_pid += rng.u32(7..400);
        let pick = rng.usize(..USERS.len());
        self.job = Some(SimJob {
            pid: *next_pid,
            user: USERS[(pick + index as usize) % USERS.len()],
            command: COMMANDS[pick % COMMANDS.len()].to_owned(),
            // Jobs look like they started a while ago, as on a real shared server.
            started_ms: now_ms.saturating_sub(rng.u64(0..3_600_000)),
            workload: models::workload(USERS[(pick + index as usize) % USERS.len()], pick, *next_pid, rng),
            profile: pick % COMMANDS.len(),
        });
        Phase::Job {
            target: (total * (0.25 + 0.7 * rng.f64())) as u64,
            load: 0.55 + 0.45 * rng.f64(),
            until_ms: now_ms + rng.u64(45_000..240_000),
        }
    }

    /// Makes the jobs do what a job-ends or idle-holder fault says.
    fn obey(&mut self, jobs: Jobs, index: u32, now_ms: u64, rng: &mut fastrand::Rng, next_pid: &mut u32) {
        match jobs {
            Jobs::Free => {}
            Jobs::Busy { until_ms } => {
                let phase = match self.phase {
                    Phase::Job { .. } if self.job.is_some() => self.phase,
                    _ => self.start_job(index, now_ms, rng, next_pid),
                };
                let Phase::Job { target, load, .. } = phase else { return };
                self.phase = Phase::Job { target, load, until_ms };
                if let Some(job) = self.job.as_mut().filter(|job| job.profile == NOTEBOOK_PROFILE) {
                    // Busy means computing: not a notebook's loop of tiny kernels.
                    job.profile = 0;
                    COMMANDS[0].clone_into(&mut job.command);
                }
            }
            Jobs::Gone { until_ms } => {
                (self.job, self.holder) = (None, None);
                self.phase = Phase::Idle { until_ms };
            }
            Jobs::Holder { since_ms, until_ms } => {
                self.job = None;
                self.phase = Phase::Idle { until_ms };
                if self.holder.is_none() {
                    *next_pid += rng.u32(7..400);
                    let user = USERS[index as usize % USERS.len()];
                    self.holder = Some(SimJob {
                        pid: *next_pid,
                        user,
                        command: models::notebook(user, *next_pid),
                        started_ms: since_ms,
                        workload: None,
                        profile: NOTEBOOK_PROFILE,
                    });
                }
            }
            Jobs::HolderExited => {
                if self.holder.take().is_some() {
                    self.phase = Phase::Idle { until_ms: now_ms + rng.u64(8_000..60_000) };
                }
            }
        }
    }

    /// Memory, utilization, temperature and power follow the job (and the faults) over `dt` seconds.
    fn follow(&mut self, dt: f64, rng: &mut fastrand::Rng, effects: Effects) {
        let model = &MODELS[self.model];
        let total = model.memory_total as f64;
        let held = self.holder.as_ref().map_or(0.0, |_| HOLDER_MEMORY as f64);
        let (memory_goal, util_goal) = match self.phase {
            Phase::Idle { .. } => (IDLE_MEMORY + held, 0.0),
            // Activations come and go with each step: a few percent of breathing room.
            Phase::Job { target, load, .. } => {
                (target as f64 * (0.97 + 0.03 * rng.f64()) + held, (load * 100.0 - 8.0 * rng.f64()).clamp(0.0, 100.0))
            }
        };
        let memory_goal = if effects.memory_full { total * MEMORY_FULL } else { memory_goal };
        if let Some(scripted) = self.scripted {
            // Scripted jobs read exactly what they say (accounting tests count on it).
            self.util = scripted.util;
        }
        // Allocators grow quickly and release at once; utilisation follows the job within a second.
        // A process that exits frees its memory at once, and NVML's utilization window (about a
        // sample period) forgets it by the next reading.
        let exited = matches!(self.phase, Phase::Idle { .. }) && self.job.is_none() && self.scripted.is_none();
        let rate = if memory_goal > self.memory_used { 0.35 } else { 0.9 };
        if exited && memory_goal < self.memory_used && !effects.memory_full {
            (self.memory_used, self.util) = (memory_goal, 0.0);
        }
        self.memory_used += (memory_goal - self.memory_used) * (1.0 - (-dt / rate).exp()).min(1.0);
        self.memory_used = self.memory_used.clamp(0.0, total);
        if self.scripted.is_none() {
            self.util += (util_goal - self.util) * (1.0 - (-dt / 0.5).exp());
        }
        // What heats the board and draws power is SM work: a spin loop of tiny kernels keeps
        // "util" up but the SMs, and so power and temperature, near idle (as a notebook's loop).
        let spinning = self.scripted.is_some_and(|s| s.spin)
            || matches!((self.phase, &self.job), (Phase::Job { .. }, Some(job)) if job.profile == NOTEBOOK_PROFILE);
        let load = self.util / 100.0 * if spinning { SPIN_HEAT } else { 1.0 };
        let peak = if effects.hot { Some(HOT_PEAK) } else { effects.warm.then_some(WARM_PEAK) };
        if let Some(peak) = peak {
            // A failing fan or a blocked airflow: it heats within seconds (a warm GPU past its
            // peak, after a hot spell, cools to it as fast).
            self.temperature = if self.temperature < peak {
                (self.temperature + HOT_RAMP * dt).min(peak)
            } else {
                (self.temperature - HOT_RAMP * dt).max(peak)
            };
        } else {
            if self.temperature > COOLED {
                self.temperature = (self.temperature - HOT_RAMP * dt).max(COOLED);
            }
            // Temperature lags behind load by about half a minute.
            let temperature_goal = 30.0 + 48.0 * load;
            self.temperature += (temperature_goal - self.temperature) * (1.0 - (-dt / 30.0).exp());
        }
        self.power_mw = model.idle_power_mw
            + ((f64::from(model.power_limit_mw - model.idle_power_mw)) * load * (0.85 + 0.1 * rng.f64())) as u32;
        if effects.power_cap {
            // The board sits at its limit, whatever the load: the driver holds it there.
            self.power_mw = model.power_limit_mw - rng.u32(0..model.power_limit_mw / 100);
        }
        if effects.brake {
            // The brake forces the clock down: the board draws a third of what the load would.
            self.power_mw = model.idle_power_mw + (self.power_mw - model.idle_power_mw) / 3;
        }
        self.energy_mj += f64::from(self.power_mw) * dt;
    }

    /// What NVML reads from the GPU now.
    fn reading(&self, index: u32, now_ms: u64, rng: &mut fastrand::Rng, effects: Effects) -> DeviceSample {
        let model = &MODELS[self.model];
        let used = self.memory_used as u64;
        let busy = self.util > 1.0;
        let load = self.util / 100.0;
        // Near the cap the driver trims clocks: show it the way NVML would.
        let capped = effects.power_cap || f64::from(self.power_mw) > 0.92 * f64::from(model.power_limit_mw);
        let thermal = self.temperature >= THERMAL_SLOWDOWN;
        let mut sm_clock =
            if busy { model.max_sm_clock_mhz - rng.u32(0..60) - if capped { 150 } else { 0 } } else { 345 };
        let mut clock_events = match (busy, capped) {
            // A power-capped board draws its limit: it is not idle, whatever its kernels do.
            (false, _) if effects.power_cap => vec!["sw_power_cap".to_owned()],
            (false, _) => vec!["idle".to_owned()],
            (true, true) => vec!["sw_power_cap".to_owned()],
            (true, false) => Vec::new(),
        };
        if thermal {
            sm_clock = sm_clock.min(model.max_sm_clock_mhz * 3 / 4);
            clock_events.push("sw_thermal_slowdown".to_owned());
        }
        if effects.brake {
            sm_clock = sm_clock.min(model.max_sm_clock_mhz / 3);
            clock_events.push("hw_power_brake_slowdown".to_owned());
        }
        DeviceSample {
            index,
            timestamp_ms: now_ms,
            memory_used: Some(used),
            memory_free: Some(model.memory_total.saturating_sub(used)),
            gpu_util: Some(self.util.round() as u32),
            mem_util: Some((self.util * (0.35 + 0.1 * rng.f64())).round() as u32),
            temperature_c: Some(self.temperature.round() as u32),
            power_draw_mw: Some(self.power_mw),
            power_limit_mw: Some(model.power_limit_mw),
            sm_clock_mhz: Some(sm_clock),
            mem_clock_mhz: Some(model.mem_clock_mhz),
            graphics_clock_mhz: Some(sm_clock),
            pstate: Some(if busy { 0 } else { 8 }),
            clock_events: Some(clock_events),
            enforced_power_limit_mw: Some(model.power_limit_mw),
            // Data-centre boards are passively cooled: NVML reports no fans, like on the H200.
            fan_speeds: (model.nvlinks == 0).then(|| vec![(30.0 + 60.0 * load) as u32]),
            encoder_util: Some(0),
            decoder_util: Some(0),
            pcie_link: Some(PcieLink { generation: if busy { model.pcie_gen } else { 1 }, width: 16 }),
            lost: None,
            // The GPM loop's window is attached by the hub.
            activity: None,
        }
    }

    /// The GPU fell off the bus: what ran there died; when it answers again it has been reset.
    pub(super) fn fall_off(&mut self, rng: &mut fastrand::Rng) {
        self.last_ms = None;
        (self.job, self.holder) = (None, None);
        // Relative to the first reading after it comes back (see `tick`).
        self.phase = Phase::Idle { until_ms: rng.u64(8_000..60_000) };
        (self.memory_used, self.util) = (IDLE_MEMORY, 0.0);
    }

    pub(super) fn health(
        &self,
        index: u32,
        timestamp_ms: u64,
        rng: &mut fastrand::Rng,
        effects: Effects,
    ) -> DeviceHealth {
        let model = &MODELS[self.model];
        let load = self.util / 100.0;
        let zero = Some(0);
        // An uncorrectable error: volatile counts clear at the reset, aggregate ones and the remap stay.
        let count = |set: bool| Some(if set { 2 } else { 0 });
        DeviceHealth {
            index,
            timestamp_ms,
            persistence_mode: Some(true),
            compute_mode: Some("default".to_owned()),
            mig_enabled: Some(false),
            mig_pending: Some(false),
            mig_instances: Vec::new(),
            ecc_enabled: Some(true),
            ecc_volatile: EccCounts { corrected: zero, uncorrected: count(effects.ecc) },
            ecc_aggregate: EccCounts { corrected: Some(u64::from(index % 3)), uncorrected: count(effects.ecc_struck) },
            retired_pages: RetiredPages::default(),
            remapped_rows: RemappedRows {
                correctable: zero,
                uncorrectable: Some(u64::from(effects.ecc_struck && !effects.ecc)),
                pending: Some(effects.ecc),
                failed: Some(false),
            },
            bar1_total: Some(256 << 30),
            bar1_used: Some((2 + (load * 30.0) as u64) << 20),
            nvlinks: (0..model.nvlinks).map(|link| NvLinkState { link, active: true }).collect(),
            pcie_tx_bytes_per_s: Some((load * 2e9 * rng.f64()) as u64 + 1_000_000),
            pcie_rx_bytes_per_s: Some((load * 6e9 * rng.f64()) as u64 + 600_000),
            pcie_replays: zero,
            energy_mj: Some(self.energy_mj as u64),
            xids: Vec::new(),
            facts_ms: None,
        }
    }

    /// The idle notebook (first, with what it holds) and the job.
    pub(super) fn processes(&self, index: u32) -> Vec<GpuProcess> {
        let mut rest = (self.memory_used - IDLE_MEMORY).max(0.0);
        let mut processes = Vec::new();
        if let Some(holder) = &self.holder {
            // NVML has no per-process sample for a process that ran no kernel.
            let held = rest.min(HOLDER_MEMORY as f64);
            rest -= held;
            processes.push(self.process(index, holder, held as u64, None));
        }
        if let Some(job) = &self.job {
            processes.push(self.process(index, job, rest as u64, Some(self.util.round() as u32)));
        }
        processes
    }

    fn process(&self, index: u32, job: &SimJob, used: u64, sm_util: Option<u32>) -> GpuProcess {
        let name = job.command.split_whitespace().next().unwrap_or("python").rsplit('/').next().unwrap_or("python");
        GpuProcess {
            device: index,
            pid: job.pid,
            kind: ProcessKind::Compute,
            used_memory: Some(used),
            sm_util,
            sm_util_seen_ms: sm_util.and(self.last_ms),
            // In a container or pod a job runs as root; its owner is what the workload says.
            user: Some(
                if job.workload.as_ref().is_some_and(|w| w.job.is_none()) { "root" } else { job.user }.to_owned(),
            ),
            name: Some(name.to_owned()),
            command: Some(job.command.clone()),
            started_ms: Some(job.started_ms),
            group: Some(job.pid),
            // A made-up process has no /proc entry to read: "none" is known, not to be looked up.
            workload: Some(job.workload.clone().unwrap_or_default()),
            owner: None,
            redacted: false,
            idle: None,
        }
    }
}
