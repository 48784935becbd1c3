//! The latency experiment: launch, record and synchronize costs, queued kernels and a CUDA graph.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, RunResult};
use crate::experiments::latency::params::LatencyParams;

use self::report::{GRAPH_COUNT_LAUNCHES, GRAPH_KERNELS, LatencyMeasurements, QUEUED_KERNELS};
use super::{Experiment, MIB, range};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::simulation::{Simulation, jitter};

pub struct Latency;

impl Experiment for Latency {
    const NAME: &'static str = "latency";
    type Params = LatencyParams;

    fn fields(&self) -> Vec<FieldSpec> {
        FieldSpec::rounds().to_vec()
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Latency: launch, record, synchronize",
            "The cost of launching an empty NVRTC-compiled kernel, recording an event and synchronizing a stream \
             (host clock); empty kernels queued back to back (the launch rate) and in a CUDA graph (the GPU's \
             own time per kernel), both from CUDA events.",
        )
    }

    fn validate(&self, p: &LatencyParams) -> Result<(), ParamError> {
        range("warmup", p.warmup, 0, 10_000, "")?;
        range("repetitions", p.repetitions, 10, 100_000, "")
    }

    fn footprint(&self, _: &LatencyParams) -> Footprint {
        Footprint { device: MIB, ..Footprint::default() }
    }

    fn estimate_ms(&self, p: &LatencyParams) -> u64 {
        (f64::from(p.warmup + p.repetitions) * 5.0 * 0.02 + 1000.0) as u64
    }

    fn simulate(
        &self,
        p: &LatencyParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let n = p.repetitions;
        let steps = ["kernel launch", "event record", "synchronize", "queued kernels", "a CUDA graph"];
        for (i, step) in steps.iter().enumerate() {
            sim.pace(ctx, i as f64 / steps.len() as f64, step)?;
        }
        // Simulated: no kernel ran; the counters say what a GPU where every launch ran would read.
        Ok(report::report(&LatencyMeasurements {
            host_us: [jitter(4.0, n), jitter(1.4, n), jitter(1.5, n), jitter(8.9, n)],
            queued_us: jitter(1.9, (n / QUEUED_KERNELS).max(10)),
            graph_us: jitter(0.9, (n / 100).max(10)),
            graph_nodes: u64::from(GRAPH_KERNELS),
            queued_counted: u64::from(QUEUED_KERNELS),
            graph_counted: u64::from(GRAPH_KERNELS) * u64::from(GRAPH_COUNT_LAUNCHES),
        }))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &LatencyParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::latency::run(gpu.session(ctx)?, p, ctx)
    }
}
