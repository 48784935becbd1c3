//! The streams experiment: a copy overlapping a GEMM on two streams, and kernels on N streams.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, RunResult};
use crate::experiments::streams::params::StreamsParams;
use crate::experiments::transfer::params::CopyKind;

use self::report::StreamsMeasurements;
use super::{Experiment, GIB, MIB, range};
use crate::checks::{self, StreamsOutputs};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::simulation::{Simulation, jitter, model_copy, model_gemm, span};

pub struct Streams;

impl Experiment for Streams {
    const NAME: &'static str = "streams";
    type Params = StreamsParams;

    fn fields(&self) -> Vec<FieldSpec> {
        let mut fields = vec![
            FieldSpec::bytes("copy_bytes"),
            FieldSpec::count("gemm_size").hint("the fp32 GEMM's order"),
            FieldSpec::count("kernels"),
            FieldSpec::count("kernel_us").label("kernel µs"),
        ];
        fields.extend(FieldSpec::rounds());
        fields
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Streams: overlap and concurrency",
            "A pinned copy and an fp32 GEMM serial on one stream vs overlapped on two; N independent kernels on \
             one stream vs N streams; a per-stream timeline from CUDA events.",
        )
    }

    fn validate(&self, p: &StreamsParams) -> Result<(), ParamError> {
        super::bytes("copy_bytes", p.copy_bytes, MIB, 4 * GIB)?;
        range("gemm_size", p.gemm_size, 256, 16384, "")?;
        range("kernels", p.kernels, 2, 32, "")?;
        range("kernel_us", p.kernel_us, 10, 100_000, " µs")?;
        range("warmup", p.warmup, 0, 20, "")?;
        range("repetitions", p.repetitions, 1, 100, "")
    }

    fn footprint(&self, p: &StreamsParams) -> Footprint {
        let matrix = u64::from(p.gemm_size).pow(2) * 4;
        Footprint { device: p.copy_bytes + 3 * matrix, pinned_host: p.copy_bytes, host: 0 }
    }

    fn estimate_ms(&self, p: &StreamsParams) -> u64 {
        let gemm_ms = 2.0 * f64::from(p.gemm_size).powi(3) / 40e9;
        let ms = f64::from(p.warmup + p.repetitions) * (4.0 * gemm_ms + 2.0 * f64::from(p.kernels * p.kernel_us) / 1e3)
            + 2000.0;
        ms as u64
    }

    fn simulate(
        &self,
        p: &StreamsParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let copy = p.copy_bytes as f64 / 55.3e9 * 1e3;
        let compute = 2.0 * f64::from(p.gemm_size).powi(3) / 51e12 * 1e3;
        let kernel = f64::from(p.kernel_us) / 1e3;
        let k = p.kernels;
        let mut timeline = vec![
            span("copy+compute, one stream", 0, "copy", 0.0, copy),
            span("copy+compute, one stream", 0, "gemm", copy, copy + compute),
            span("copy+compute, two streams", 0, "gemm", 0.0, compute),
            span("copy+compute, two streams", 1, "copy", 0.0, copy),
        ];
        for s in 0..k {
            let start = f64::from(s) * kernel;
            timeline.push(span(&format!("{k} kernels, one stream"), 0, "spin", start, start + kernel));
            let lag = 0.002 * f64::from(s);
            timeline.push(span(&format!("{k} kernels, {k} streams"), s, "spin", lag, lag + kernel));
        }
        for (i, phase) in ["copy alone", "compute alone", "one stream", "two streams", "kernels"].iter().enumerate() {
            sim.pace(ctx, i as f64 / 5.0, phase)?;
        }
        let n = p.repetitions;
        let wrong = ctx.probe.wrong_results(ctx.device);
        let cycles = u64::from(p.kernel_us) * 1_980;
        let mut spun = vec![cycles + 40; 2 * k as usize];
        if wrong {
            spun[k as usize] = 0;
        }
        let (gemm, gemm_sums) = model_gemm(p.gemm_size, wrong);
        let outputs = StreamsOutputs {
            copied: model_copy(checks::copy_seed(CopyKind::H2dPinned, p.copy_bytes), p.copy_bytes, wrong),
            gemm,
            gemm_sums,
            poisoned: checks::TimedGemms {
                checked: 2 * p.repetitions as usize,
                expected: 2 * p.repetitions as usize,
                poisoned: if wrong { u64::from(p.gemm_size).pow(2) } else { 0 },
            },
            spun,
            cycles,
            launched: 2 * k as usize,
        };
        let copy_ms = jitter(copy, n);
        let compute_ms = jitter(compute, n);
        // Each round's overlapped time follows that round's own phases, as on a GPU: the longer phase plus
        // 5% of the shorter (the join and the copy's memory traffic; the H200 showed +0.8% at the defaults).
        // Jittered on its own it could stray past the overlap check and fail a sound simulated run.
        let overlapped_ms = copy_ms.iter().zip(&compute_ms).map(|(c, g)| c.max(*g) + 0.05 * c.min(*g)).collect();
        Ok(report::streams(StreamsMeasurements {
            serial_ms: copy_ms.iter().zip(&compute_ms).map(|(c, g)| c + g).collect(),
            copy_ms,
            compute_ms,
            overlapped_ms,
            kernels: k,
            kernels_one_stream_ms: jitter(kernel * f64::from(k), n),
            kernels_many_streams_ms: jitter(kernel * 1.05, n),
            timeline,
            outputs: Some(outputs),
        }))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &StreamsParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::streams::run(gpu.session(ctx)?, p, ctx)
    }
}
