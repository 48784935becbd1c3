//! The transfer experiment: host ↔ device and device ↔ device bandwidth over a sweep of sizes.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, RunResult};
use crate::experiments::transfer::params::{CopyKind, TransferParams};

use self::report::TransferSample;
use super::{Experiment, GIB, KIB, range};
use crate::checks::{self, CopyVerification};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::simulation::{SIMULATED_L2_BYTES, Simulation, jitter, model_copy};

pub struct Transfer;

impl Experiment for Transfer {
    const NAME: &'static str = "transfer";
    type Params = TransferParams;

    fn fields(&self) -> Vec<FieldSpec> {
        let copies = CopyKind::ALL.map(|c| (c.name(), c.label()));
        let mut fields = vec![FieldSpec::bytes_list("sizes"), FieldSpec::choices("copies", copies)];
        fields.extend(FieldSpec::rounds());
        fields
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Transfer: host and device bandwidth",
            "H2D and D2H copies from pageable and pinned host memory, and D2D by the driver's memcpy and by an SM copy \
             kernel, from 4 KiB to 1 GiB, against the PCIe link's and HBM's peaks; sizes that fit in L2 are \
             marked. Host buffers are written before they are timed.",
        )
    }

    fn validate(&self, p: &TransferParams) -> Result<(), ParamError> {
        if p.sizes.is_empty() || p.sizes.len() > 32 {
            return Err(ParamError(format!("'sizes' must list 1 to 32 sizes, got {}", p.sizes.len())));
        }
        for &size in &p.sizes {
            super::bytes("sizes", size, 4 * KIB, GIB)?;
        }
        if p.copies.is_empty() {
            return Err(ParamError(format!("'copies' must name at least one of {}", CopyKind::names())));
        }
        range("warmup", p.warmup, 0, 100, "")?;
        range("repetitions", p.repetitions, 1, 1000, "")
    }

    fn footprint(&self, p: &TransferParams) -> Footprint {
        let max = p.sizes.iter().copied().max().unwrap_or(0);
        let uses = |kinds: &[CopyKind]| p.copies.iter().any(|c| kinds.contains(c));
        use CopyKind::{D2d, D2dKernel, D2hPageable, D2hPinned, H2dPageable, H2dPinned};
        Footprint {
            device: if uses(&[D2d, D2dKernel]) { 2 * max } else { max },
            pinned_host: if uses(&[H2dPinned, D2hPinned]) { max } else { 0 },
            host: if uses(&[H2dPageable, D2hPageable]) { max } else { 0 },
        }
    }

    /// Pageable copies at ~5 GB/s bound the sweep.
    fn estimate_ms(&self, p: &TransferParams) -> u64 {
        let bytes: u64 = p.sizes.iter().sum();
        let copies = p.copies.len() as f64 * f64::from(p.warmup + p.repetitions);
        (bytes as f64 / 5e6 * copies + 1000.0) as u64
    }

    fn simulate(
        &self,
        p: &TransferParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let peaks = ctx.probe.peaks(ctx.device);
        let mut samples = Vec::new();
        let mut verified = Vec::new();
        let wrong = ctx.probe.wrong_results(ctx.device);
        let total = (p.copies.len() * p.sizes.len()) as f64;
        for (i, &copy) in p.copies.iter().enumerate() {
            let (gbps, latency_us) = match copy {
                CopyKind::H2dPinned => (55.3, 8.0),
                CopyKind::D2hPinned => (55.1, 8.0),
                CopyKind::H2dPageable => (7.0, 15.0),
                CopyKind::D2hPageable => (11.5, 15.0),
                CopyKind::D2d => (4230.0, 4.0),
                CopyKind::D2dKernel => (4230.0, 3.0),
            };
            for (j, &bytes) in p.sizes.iter().enumerate() {
                let moved = if copy.on_device() { 2 * bytes } else { bytes } as f64;
                // A device copy whose two buffers fit in L2 runs faster than HBM allows: both paths read
                // 4.9 TB/s at 16 MiB on the H200 (tests/gpu/lab.sh), 4.2 TB/s at 256 MiB and above.
                let gbps = if copy.on_device() && 2 * bytes <= SIMULATED_L2_BYTES { 4900.0 } else { gbps };
                let ms = latency_us / 1e3 + moved / (gbps * 1e9) * 1e3;
                samples.push(TransferSample { copy, bytes, times_ms: jitter(ms, p.repetitions) });
                // A faulty GPU spoils one size of each kind.
                let spoilt = wrong && j == p.sizes.len() / 2;
                let compare = model_copy(checks::copy_seed(copy, bytes), bytes, spoilt);
                verified.push(CopyVerification { copy, bytes, compare });
                let done = (i * p.sizes.len() + j) as f64 / total;
                if j % 3 == 2 {
                    sim.pace(ctx, done, &format!("{} {}", copy.name(), shared::units::format_bytes(bytes)))?;
                }
            }
        }
        let mut result = report::transfer(&samples, &peaks);
        let timed: Vec<(CopyKind, u64)> = samples.iter().map(|s| (s.copy, s.bytes)).collect();
        result.checks.extend(checks::copies(&timed, &verified));
        report::mark_l2(&mut result, SIMULATED_L2_BYTES, "simulated: an H200's");
        Ok(result)
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &TransferParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::transfer::run(gpu.session(ctx)?, p, ctx)
    }
}
