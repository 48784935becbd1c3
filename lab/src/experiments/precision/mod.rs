//! The precision experiment: cuBLAS GEMM throughput per type, each result checked against the host.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, RunResult};
use crate::experiments::precision::params::{Dtype, PrecisionParams};

use self::report::GemmSample;
use super::{Experiment, range};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::simulation::{Simulation, jitter, model_gemm, model_tiles};

pub struct Precision;

impl Experiment for Precision {
    const NAME: &'static str = "precision";
    type Params = PrecisionParams;

    fn fields(&self) -> Vec<FieldSpec> {
        let dtypes = Dtype::ALL.map(|d| (d.name(), ""));
        let mut fields = vec![
            FieldSpec::count_list("sizes").hint("matrix orders, comma-separated"),
            FieldSpec::choices("dtypes", dtypes),
        ];
        fields.extend(FieldSpec::rounds());
        fields
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Precision: GEMM throughput per type",
            "cuBLAS GEMM in fp32, tf32, fp16 and bf16 on random data; TFLOP/s, and each result checked against \
             the host over whole rows and columns spread across the output.",
        )
    }

    fn validate(&self, p: &PrecisionParams) -> Result<(), ParamError> {
        if p.sizes.is_empty() || p.sizes.len() > 8 {
            return Err(ParamError(format!("'sizes' must list 1 to 8 matrix orders, got {}", p.sizes.len())));
        }
        for &size in &p.sizes {
            range("sizes", size, 64, 16384, "")?;
        }
        if p.dtypes.is_empty() {
            return Err(ParamError("'dtypes' must name at least one of fp32, tf32, fp16, bf16".to_owned()));
        }
        range("warmup", p.warmup, 0, 50, "")?;
        range("repetitions", p.repetitions, 1, 200, "")
    }

    /// A, B and C in fp32 at most; on the host, A and B in fp32 plus one converted pair.
    fn footprint(&self, p: &PrecisionParams) -> Footprint {
        let n = u64::from(p.sizes.iter().copied().max().unwrap_or(0));
        Footprint { device: 3 * n * n * 4, pinned_host: 0, host: n * n * (2 * 4 + 2 * 2) }
    }

    fn estimate_ms(&self, p: &PrecisionParams) -> u64 {
        let rounds = f64::from(p.warmup + p.repetitions) * p.dtypes.len() as f64;
        let ms: f64 = p.sizes.iter().map(|&n| 2.0 * f64::from(n).powi(3) / 40e9 * rounds + 1500.0).sum();
        ms as u64
    }

    fn simulate(
        &self,
        p: &PrecisionParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let mut samples = Vec::new();
        let total = (p.sizes.len() * p.dtypes.len()) as f64;
        for (i, &size) in p.sizes.iter().enumerate() {
            for (j, &dtype) in p.dtypes.iter().enumerate() {
                let peak = match dtype {
                    Dtype::Fp32 => 51.0,
                    Dtype::Tf32 => 414.0,
                    Dtype::Fp16 => 770.0,
                    Dtype::Bf16 => 799.0,
                };
                let n3 = f64::from(size).powi(3);
                let efficiency = n3 / (n3 + 1024f64.powi(3));
                let ms = 2.0 * n3 / (peak * 1e12 * efficiency) * 1e3;
                let wrong = ctx.probe.wrong_results(ctx.device);
                let (errors, sums) = model_gemm(size, wrong);
                let tiles = model_tiles(size, p.repetitions, wrong);
                let times_ms = jitter(ms, p.repetitions);
                samples.push(GemmSample { dtype, size, times_ms, errors, sums, tiles });
                sim.pace(ctx, (i * p.dtypes.len() + j) as f64 / total, &format!("{} {size}", dtype.name()))?;
            }
        }
        Ok(report::precision(&samples))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &PrecisionParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::precision::run(gpu.session(ctx)?, p, ctx)
    }
}
