//! The memory experiment: the caching allocator, block by block.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, MemoryStep, RunResult};
use crate::experiments::memory::params::MemoryParams;

use self::report::MemoryMeasurements;
use super::{Experiment, GIB, MIB, range};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{CONTEXT_OVERHEAD, Footprint, ParamError};
use crate::simulation::{Simulation, jitter};

pub struct Memory;

impl Experiment for Memory {
    const NAME: &'static str = "memory";
    type Params = MemoryParams;

    fn fields(&self) -> Vec<FieldSpec> {
        vec![
            FieldSpec::bytes("block_bytes"),
            FieldSpec::count("blocks"),
            FieldSpec::count("free_every").hint("1 frees every block, 2 every other"),
            FieldSpec::count("repetitions"),
        ]
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Memory: the caching allocator",
            "Allocates blocks from the driver's stream-ordered pool, frees some, and shows allocated (pool used) \
             vs reserved (pool reserved) vs the device's NVML used at every step; then trims the pool \
             (empty_cache). Also times an allocation served from the pool against a fresh one.",
        )
    }

    fn validate(&self, p: &MemoryParams) -> Result<(), ParamError> {
        super::bytes("block_bytes", p.block_bytes, MIB, 16 * GIB)?;
        range("blocks", p.blocks, 1, 64, "")?;
        range("free_every", p.free_every, 1, 64, "")?;
        range("repetitions", p.repetitions, 1, 100, "")
    }

    /// Every block, plus one more for the fresh-allocation timing.
    fn footprint(&self, p: &MemoryParams) -> Footprint {
        Footprint { device: (u64::from(p.blocks) + 1) * p.block_bytes, ..Footprint::default() }
    }

    fn estimate_ms(&self, p: &MemoryParams) -> u64 {
        (50.0 + f64::from(p.blocks) * 2.0 + f64::from(p.repetitions) * 20.0) as u64
    }

    /// The run ends with empty_cache: nothing stays cached.
    fn caches_in_pool(&self) -> bool {
        false
    }

    fn simulate(&self, p: &MemoryParams, sim: &Simulation, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        // A faulty pool caches nothing: what is freed is gone at once.
        let caches = !ctx.probe.wrong_results(ctx.device);
        let base = ctx.probe.memory(ctx.device).map_or(0, |m| m.used) + CONTEXT_OVERHEAD;
        let mut steps = Vec::new();
        let (mut allocated, mut reserved) = (0u64, 0u64);
        let step = |label: String, allocated: u64, reserved: u64| MemoryStep {
            label,
            allocated,
            reserved,
            nvml_used: Some(base + reserved),
        };
        steps.push(step("start".into(), 0, 0));
        let total = f64::from(p.blocks) + 4.0;
        for i in 0..p.blocks {
            allocated += p.block_bytes;
            reserved = reserved.max(allocated);
            steps.push(step(format!("alloc block {}", i + 1), allocated, reserved));
            sim.pace(ctx, f64::from(i) / total, &format!("allocating block {} of {}", i + 1, p.blocks))?;
        }
        let freed = (0..p.blocks).filter(|i| i % p.free_every == p.free_every - 1).count() as u64;
        allocated -= freed * p.block_bytes;
        reserved = if caches { reserved } else { allocated };
        steps.push(step(format!("free {freed} blocks"), allocated, reserved));
        sim.pace(ctx, (total - 4.0) / total, "timing pool-served vs fresh allocations")?;
        let pooled_us = jitter(3.0, p.repetitions);
        let fresh_us = jitter(40.0 + p.block_bytes as f64 / 1e9 * 120.0, p.repetitions);
        steps.push(step("free all".into(), 0, if caches { reserved } else { 0 }));
        sim.pace(ctx, (total - 2.0) / total, "empty_cache")?;
        steps.push(step("empty_cache".into(), 0, 0));
        Ok(report::memory(MemoryMeasurements { steps, pooled_us, fresh_us }))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &MemoryParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::memory::run(gpu.session(ctx)?, p, ctx)
    }
}
