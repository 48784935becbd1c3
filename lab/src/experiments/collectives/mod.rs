//! The collectives experiment: NCCL's all_reduce, all_gather, reduce_scatter and broadcast over the host's
//! GPUs (one communicator per GPU in this process), and the DDP step view. Its rules (parameters,
//! nccl-tests' formulas, the DDP plan) live in `params.rs`, its CUDA run in
//! `lab/cuda/collectives.rs`, NCCL's loading in `lab/cuda/nccl.rs`.

pub mod params;
pub mod path;
pub mod pytorch;
pub mod report;

use crate::experiments::collectives::params::{Collective, CollectivesParams, DTYPES, element_bytes};
use shared::lab::{FieldSpec, Input, RunResult};
use crate::experiments::precision::params::Dtype;
use shared::topology::Topology;

use self::report::{CollectiveSample, CollectivesMeasurements, DdpMeasurement};
use super::{Experiment, MIB};
use crate::LabError;
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::guards::DeviceProbe;
use crate::plan::{Footprint, ParamError};
use crate::simulation::{Simulation, jitter};

/// NCCL's own buffers and cuBLAS's workspace on each GPU, besides the run's.
const NCCL_OVERHEAD: u64 = 512 * MIB;
/// Elements a rank holds in the simulated executor's model buffers, really reduced and checked.
const MODEL_ELEMENTS: u64 = 64;
/// The path the model below was fitted on: H200s on NV18, 450 GB/s one way.
const MODEL_PATH_GBS: f64 = 450.0;

pub struct Collectives;

/// A model of two or more H200s on NV18, fitted to torch.distributed's busbw measured on a lent pair
/// (a reference table given to the project, not kept in this repo; the fit is the figures below):
/// peak busbw GB/s and fixed cost µs per collective, the bandwidth scaled by
/// `path` (the path's peak over NV18's: 1 on NVLink 4 × 18, 0.14 on PCIe Gen5); one rank is a local copy.
fn model_ms(c: Collective, n: usize, bytes: u64, path: f64) -> f64 {
    if n < 2 {
        return 0.012 + bytes as f64 / 2.0e12 * 1e3;
    }
    let (peak, latency_us) = match c {
        Collective::AllReduce => (340.0, 35.0),
        Collective::AllGather => (295.0, 90.0),
        Collective::ReduceScatter => (295.0, 30.0),
        Collective::Broadcast => (380.0, 25.0),
    };
    latency_us / 1e3 + bytes as f64 * c.bus_factor(n) / (peak * path.max(0.01) * 1e9) * 1e3
}

/// The PCIe peak of the slowest of `gpus`, as the probe reads it: its label and GB/s one way.
fn pcie_of(gpus: &[u32], probe: &dyn DeviceProbe) -> Option<(String, f64)> {
    gpus.iter()
        .filter_map(|&g| {
            let peaks = probe.peaks(g);
            peaks.pcie_label.zip(peaks.pcie)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(label, bytes)| (label, bytes / 1e9))
}

/// The busbw chart's reference line for a run over `gpus` (see [`path::path_peak`]).
pub(crate) fn link_peak(gpus: &[u32], ctx: &RunContext<'_>, simulated: bool) -> Option<path::PathPeak> {
    path::path_peak(gpus, ctx.topology, pcie_of(gpus, ctx.probe), simulated)
}

/// Each rank's model result of `c` over `n` ranks that filled `MODEL_ELEMENTS` (all_gather: a piece each)
/// with rank+1, really computed; `wrong` reduces with max instead of sum, as a wrong op would.
fn model_results(c: Collective, n: usize, wrong: bool) -> Vec<Vec<f64>> {
    let reduce = |values: Vec<f64>| {
        if wrong { values.into_iter().fold(f64::MIN, f64::max) } else { values.into_iter().sum() }
    };
    let inputs: Vec<f64> = (1..=n).map(|r| r as f64).collect();
    let piece = MODEL_ELEMENTS;
    (0..n)
        .map(|_| match c {
            Collective::AllReduce | Collective::ReduceScatter => {
                vec![reduce(inputs.clone()); MODEL_ELEMENTS as usize]
            }
            Collective::AllGather => inputs.iter().flat_map(|&v| vec![v; piece as usize]).collect(),
            Collective::Broadcast => vec![inputs[0]; MODEL_ELEMENTS as usize],
        })
        .collect()
}

impl Experiment for Collectives {
    const NAME: &'static str = "collectives";
    type Params = CollectivesParams;

    fn fields(&self) -> Vec<FieldSpec> {
        let dtypes = || DTYPES.map(Dtype::name);
        let mut fields = vec![
            FieldSpec::choices("collectives", Collective::ALL.map(|c| (c.name(), ""))),
            FieldSpec::one_of("dtype", dtypes()),
            FieldSpec::new("gpus", Input::CountList { empty_means_all: true })
                .hint("comma-separated, e.g. 0, 1; empty: every GPU"),
            FieldSpec::bytes_list("sizes"),
        ];
        fields.extend(FieldSpec::rounds());
        fields.extend([
            FieldSpec::new("ddp", Input::Switch)
                .label("DDP step")
                .hint("DistributedDataParallel: backward GEMMs and the gradient all-reduce"),
            FieldSpec::new("ddp.parameters", Input::Parameters).label("DDP parameters").hint("e.g. 1.3 B or 350 M"),
            FieldSpec::one_of("ddp.dtype", dtypes()).label("DDP dtype"),
            FieldSpec::count("ddp.bucket_cap_mb").label("DDP bucket_cap_mb").hint("MiB; DDP's default is 25"),
            FieldSpec::count("ddp.hidden").label("DDP hidden").hint("layer width, a multiple of 64"),
            FieldSpec::count("ddp.tokens").label("DDP tokens").hint("per GPU per step: batch × sequence length"),
        ]);
        fields
    }

    fn multi_gpu(&self) -> bool {
        true
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Collectives: NCCL all-reduce, all-gather, reduce-scatter, broadcast; the DDP step",
            "What DistributedDataParallel and FSDP pay every step: NCCL's collectives over the server's GPUs (one \
             communicator per GPU in one process), time, algbw and busbw as nccl-tests computes them, every GPU's \
             whole result checked. Then a DDP step: the backward pass's GEMMs, the gradient all-reduce in \
             bucket_cap_mb buckets, and both overlapped on two streams. Occupies every GPU it joins; on one GPU it \
             checks that NCCL works here (collectives need two GPUs to move data). Needs NCCL (libnccl.so.2).",
        )
    }

    fn validate(&self, p: &CollectivesParams) -> Result<(), ParamError> {
        p.validate().map_err(|e| ParamError(e.0))
    }

    /// Send and receive buffers of the largest size, the DDP step's gradients and layer buffers, and NCCL's own.
    fn footprint(&self, p: &CollectivesParams) -> Footprint {
        let max = p.sizes.iter().copied().max().unwrap_or(0);
        let (ddp, host) = p.ddp.as_ref().map_or((0, 0), |d| {
            let eb = element_bytes(d.dtype);
            let (h, t) = (u64::from(d.hidden), u64::from(d.tokens));
            let plan = d.plan();
            (plan.gradient_bytes + (h * h + 3 * h * t) * eb, h * h.max(t) * 8)
        });
        Footprint { device: 2 * (max + 64) + ddp + NCCL_OVERHEAD, pinned_host: 0, host }
    }

    /// Each call at ~50 GB/s plus 50 µs, the DDP steps at ~100 TFLOP/s, and NCCL's start-up.
    fn estimate_ms(&self, p: &CollectivesParams) -> u64 {
        let calls = f64::from(p.warmup + p.repetitions) * p.collectives.len() as f64;
        let sweep: f64 = p.sizes.iter().map(|&s| calls * (0.05 + s as f64 / 50e9 * 1e3)).sum();
        let ddp = p.ddp.as_ref().map_or(0.0, |d| 3.0 * 12.0 * d.plan().backward_flops / 100e12 * 1e3);
        (sweep + ddp + 5000.0) as u64
    }

    /// Every GPU it joins (all of the lab's when the request names none); `device` must be one of them.
    fn involved(&self, p: &mut CollectivesParams, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError> {
        p.resolve_gpus(gpus).map_err(|e| LabError::Invalid(e.0))?;
        if !p.gpus.contains(&device) {
            return Err(LabError::Invalid(format!(
                "'device' must be one of the GPUs in 'gpus' ({:?}), got '{device}'",
                p.gpus
            )));
        }
        Ok(p.gpus.clone())
    }

    fn named_devices(&self, p: &CollectivesParams) -> Vec<u32> {
        p.gpus.clone()
    }

    /// Without NCCL: where the loader looked and how to point at it (`--nccl-lib` / `GPUDASH_NCCL_LIB`).
    /// Simulated labs model NCCL, unless their probe plays a host without it.
    fn unavailable(&self, simulated: bool, probe: &dyn DeviceProbe) -> Option<String> {
        if probe.without_nccl() {
            let tried = vec!["libnccl.so.2 (a simulated host without NCCL)".to_owned()];
            return Some(cuda::nccl::NcclMissing { tried }.to_string());
        }
        if simulated {
            return None;
        }
        cuda::nccl::availability().err().map(|e| e.to_string())
    }

    /// Each pair's link and, over NVLink, its peak (links × each link's rate, see [`path::nvlink_of`]), one direction.
    fn topology_notes(&self, p: &CollectivesParams, topology: &Topology) -> Vec<String> {
        let mut notes = Vec::new();
        for (i, &a) in p.gpus.iter().enumerate() {
            for &b in &p.gpus[i + 1..] {
                let Some(t) = topology.pair(a, b) else { continue };
                let peak = if t.nvlinks > 0 {
                    // ~25 GB/s a link one way on NVLink 2–4 (26.6 GB/s signalled on the lent H200s), 50 on NVLink 5.
                    let name = topology.devices.iter().find(|d| d.index == a).map_or("", |d| d.name.as_str());
                    let (generation, per_link) = path::nvlink_of(name);
                    format!(
                        ", {generation} peak ≈ {} × {per_link} GB/s = {} GB/s one way",
                        t.nvlinks,
                        f64::from(t.nvlinks) * per_link
                    )
                } else {
                    String::new()
                };
                let simulated = if topology.simulated { ", simulated" } else { "" };
                notes.push(format!(
                    "GPU {a} ↔ {b}: {} ({}){peak}{simulated}",
                    t.link,
                    shared::topology::link_meaning(&t.link)
                ));
            }
        }
        notes
    }

    fn caches_in_pool(&self) -> bool {
        false
    }

    /// busbw from [`model_ms`]; each collective really reduced on model buffers and checked by the GPU
    /// path's own comparison, wrong (max for sum) where a GPU has the simulator's wrong-result fault.
    fn simulate(
        &self,
        p: &CollectivesParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let n = p.gpus.len().max(1);
        let elem = element_bytes(p.dtype);
        let wrong = p.gpus.iter().any(|&g| ctx.probe.wrong_results(g));
        // The simulated topology's path, or without one (gpudash bench --simulate) the model's own NV18.
        let link_peak = if ctx.topology.is_some() {
            link_peak(&p.gpus, ctx, true)
        } else {
            (n > 1).then(|| path::nvlink("NVIDIA H200", 18, "the simulated model's path"))
        };
        let scale = link_peak.as_ref().map_or(1.0, |peak| peak.gbs / MODEL_PATH_GBS);
        let mut samples = Vec::new();
        let mut checks = Vec::new();
        for (i, &c) in p.collectives.iter().enumerate() {
            sim.pace(ctx, i as f64 / p.collectives.len() as f64, c.name())?;
            for &size in &p.sizes {
                let bytes = c.bytes(size, elem, n);
                samples.push(CollectiveSample {
                    collective: c,
                    bytes,
                    times_ms: jitter(model_ms(c, n, bytes, scale), p.repetitions),
                });
                for (rank, got) in model_results(c, n, wrong).iter().enumerate() {
                    let compare = report::compare(c, n, MODEL_ELEMENTS, got);
                    checks.push(report::check(c, p.gpus.get(rank).copied().unwrap_or(0), n, bytes, &compare));
                }
            }
        }
        let ddp = p.ddp.as_ref().map(|d| {
            let plan = d.plan();
            // ~600 TFLOP/s of bf16 GEMMs (~45 of fp32); all-reduce at the model's busbw, 80% hidden by overlap.
            let rate = if d.dtype == Dtype::Bf16 { 600e12 } else { 45e12 };
            let compute = plan.backward_flops / rate * 1e3;
            let comm: f64 = plan.buckets.iter().map(|b| model_ms(Collective::AllReduce, n, b.bytes, scale)).sum();
            let steps = p.repetitions.min(10);
            DdpMeasurement {
                compute_ms: jitter(compute, steps),
                comm_ms: (n > 1).then(|| jitter(comm, steps)),
                overlapped_ms: (n > 1).then(|| jitter(compute.max(comm) + 0.2 * compute.min(comm), steps)),
                dtype: d.dtype,
                tokens: d.tokens,
                bucket_cap_mb: d.bucket_cap_mb,
                plan,
            }
        });
        sim.pace(ctx, 0.95, "DDP step")?;
        let library = "simulated NCCL (no library loaded; figures from a model of H200s on NV18)".to_owned();
        let m =
            CollectivesMeasurements { gpus: p.gpus.clone(), dtype: p.dtype, samples, checks, ddp, library, link_peak };
        Ok(report::report(m))
    }

    /// Its own contexts, streams, buffers and communicators on every GPU it joins, released at its end.
    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &CollectivesParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::collectives::run(gpu.all()?, p, ctx, gpu.fault())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::collectives::params::busbw_gbs;

    #[test]
    fn the_model_lands_near_the_measured_pair() {
        // torch.distributed on 2×H200 NV18: all_reduce busbw 329 GB/s at 1 GiB, 218 at 16 MiB.
        let busbw =
            |bytes: u64| busbw_gbs(Collective::AllReduce, 2, bytes, model_ms(Collective::AllReduce, 2, bytes, 1.0));
        assert!((busbw(1 << 30) - 329.0).abs() < 20.0, "{}", busbw(1 << 30));
        assert!((busbw(16 << 20) - 218.0).abs() < 40.0, "{}", busbw(16 << 20));
    }

    #[test]
    fn model_results_pass_the_check_and_a_wrong_op_fails_it() {
        for n in [2, 4, 8] {
            for c in Collective::ALL {
                for got in model_results(c, n, false) {
                    assert_eq!(report::compare(c, n, MODEL_ELEMENTS, &got).differ, 0, "{c:?} n={n}");
                }
            }
            let wrong = model_results(Collective::AllReduce, n, true);
            assert_eq!(report::compare(Collective::AllReduce, n, MODEL_ELEMENTS, &wrong[0]).differ, MODEL_ELEMENTS);
        }
    }
}
