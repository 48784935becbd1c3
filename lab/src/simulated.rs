//! An executor without a GPU: figures from a model of an H200 on PCIe Gen5,
//! with jitter, paced by sleeps so progress, the queue and cancel can be seen
//! and tested. Every run it makes is labelled simulated. Each kind's model is its
//! `Experiment::simulate` (`experiments/<kind>/`), built from the parts in
//! [`simulation`](super::simulation); this file holds the executor that asks the kind.

use std::time::Duration;

use shared::lab::{ExperimentParams, RunResult};

use super::executor::{Executor, ExperimentError, PoolUsage, RunContext};
use super::experiments;
use super::experiments::footprint;
use super::simulation::Simulation;

/// The simulated GPU's pool: what a run left cached, while its "context" is open.
#[derive(Debug)]
pub struct SimulatedExecutor {
    sim: Simulation,
    pool: Option<PoolUsage>,
}

impl SimulatedExecutor {
    /// Each step of an experiment sleeps `step`.
    pub fn new(step: Duration) -> Self {
        Self { sim: Simulation::new(step), pool: None }
    }
}

impl Executor for SimulatedExecutor {
    fn simulated(&self) -> bool {
        true
    }

    fn run(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        self.pool.get_or_insert_with(PoolUsage::default);
        if let Some(error) = ctx.probe.injected_failure(ctx.device) {
            // Fail mid-run with buffers still allocated, as a real out-of-memory or kernel fault would.
            let reserved = footprint(params).map_or(0, |f| f.device).max(1 << 30);
            self.pool = Some(PoolUsage { reserved, used: 1 << 30 });
            self.sim.pace(ctx, 0.3, "running")?;
            return Err(ExperimentError::Cuda(error));
        }
        let experiment = experiments::of(params).map_err(|e| ExperimentError::Invalid(e.to_string()))?;
        let result = experiment.simulate(params, &self.sim, ctx)?;
        // Like the real pool, freed buffers stay cached until empty_cache or release.
        if experiment.caches_in_pool() {
            self.pool = Some(PoolUsage { reserved: footprint(params).map_or(0, |f| f.device), used: 0 });
        }
        ctx.progress(1.0, "done");
        Ok(result)
    }

    fn pool(&mut self) -> Option<PoolUsage> {
        self.pool
    }

    fn empty_cache(&mut self) -> Result<(), ExperimentError> {
        if let Some(pool) = &mut self.pool {
            pool.reserved = pool.used;
        }
        Ok(())
    }

    fn release(&mut self) {
        self.pool = None;
    }
}
