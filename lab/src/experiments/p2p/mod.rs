//! The p2p experiment: bandwidth and latency between every pair of GPUs, peer access on and off.

pub mod params;
pub mod pytorch;
pub mod report;

use shared::lab::{FieldSpec, Input, RunResult};
use crate::experiments::p2p::params::P2pParams;
use crate::experiments::transfer::params::CopyKind;
use shared::topology::Topology;

use self::report::{LATENCY_REPETITIONS_PER_REPETITION, P2pMeasurements, P2pMode, P2pSample, PairsError};
use super::{Experiment, GIB, MIB, range};
use crate::LabError;
use crate::checks;
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::simulation::{Simulation, jitter, model_copy};

pub struct P2p;

impl Experiment for P2p {
    const NAME: &'static str = "p2p";
    type Params = P2pParams;

    fn fields(&self) -> Vec<FieldSpec> {
        let mut fields = vec![
            FieldSpec::bytes("size"),
            FieldSpec::new("pairs", Input::Pairs).hint("e.g. 0-1, 1-2; empty: every pair"),
        ];
        fields.extend(FieldSpec::rounds());
        fields
    }

    fn multi_gpu(&self) -> bool {
        true
    }

    fn min_gpus(&self) -> u32 {
        2
    }

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "P2P: bandwidth and latency between GPUs",
            "Copies between every pair of GPUs, one way and both ways at once, and 4-byte copies for latency, with \
             peer access enabled and disabled (staged through host memory), like cuda-samples' \
             p2pBandwidthLatencyTest; drawn as heatmaps. Occupies every GPU it involves; needs two.",
        )
    }

    fn validate(&self, p: &P2pParams) -> Result<(), ParamError> {
        super::bytes("size", p.size, MIB, 4 * GIB)?;
        range("warmup", p.warmup, 0, 20, "")?;
        range("repetitions", p.repetitions, 1, 100, "")?;
        if p.pairs.len() > 64 {
            return Err(ParamError(format!("'pairs' must list at most 64 pairs, got {}", p.pairs.len())));
        }
        Ok(())
    }

    /// A source and a destination of `size` on every GPU (bidirectional copies use both);
    /// the driver's staging buffers for peer-disabled copies are its own.
    fn footprint(&self, p: &P2pParams) -> Footprint {
        Footprint { device: 2 * p.size + MIB, ..Footprint::default() }
    }

    /// Per pair: both directions and bidirectional, peer-disabled copies at ~10 GB/s bound it.
    fn estimate_ms(&self, p: &P2pParams) -> u64 {
        let copies = f64::from(p.warmup + p.repetitions) * 4.0;
        (p.pairs.len().max(1) as f64 * (copies * p.size as f64 / 1e7 + 500.0) + 1000.0) as u64
    }

    /// Every GPU of its pairs (every pair of the lab's GPUs when the request names none). One GPU
    /// cannot run p2p: 409.
    fn involved(&self, p: &mut P2pParams, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError> {
        report::resolve_pairs(p, gpus).map_err(|e| match e {
            PairsError::TooFewGpus(_) => LabError::Conflict(e.to_string()),
            PairsError::SameGpu(_) | PairsError::UnknownGpu(_) => LabError::Invalid(e.to_string()),
        })?;
        let devices = p.devices();
        if !devices.contains(&device) {
            return Err(LabError::Invalid(format!(
                "'device' must be one of the GPUs in 'pairs' ({devices:?}), got '{device}'"
            )));
        }
        Ok(devices)
    }

    fn named_devices(&self, p: &P2pParams) -> Vec<u32> {
        p.devices()
    }

    /// Lines naming each pair's link as `nvidia-smi topo -m` would.
    fn topology_notes(&self, p: &P2pParams, topology: &Topology) -> Vec<String> {
        p.pairs
            .iter()
            .filter_map(|pair| topology.pair(pair.a, pair.b))
            .map(|t| {
                format!(
                    "GPU {} ↔ {}: {} ({}); P2P read {}, write {}, atomics {}, over NVLink {} (NVML){}",
                    t.a,
                    t.b,
                    t.link,
                    shared::topology::link_meaning(&t.link),
                    t.p2p_read,
                    t.p2p_write,
                    t.p2p_atomics,
                    t.p2p_nvlink,
                    if topology.simulated { ", simulated" } else { "" }
                )
            })
            .collect()
    }

    /// Its contexts and buffers are its own, on every GPU of its pairs.
    fn caches_in_pool(&self) -> bool {
        false
    }

    /// Two H200s on NV18: ~395 GB/s one way (PyTorch's figure on the lent pair), staged through the
    /// host with peer access off; pairs the simulated topology gives no P2P are measured staged only.
    fn simulate(&self, p: &P2pParams, sim: &Simulation, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let size = p.size as f64;
        let ms = |gbps: f64, latency_us: f64, bytes: f64| latency_us / 1e3 + bytes / (gbps * 1e9) * 1e3;
        let mut samples = Vec::new();
        let mut checks = Vec::new();
        let latency_n = p.repetitions * LATENCY_REPETITIONS_PER_REPETITION;
        let mut no_peer_access = Vec::new();
        for (i, pair) in p.pairs.iter().enumerate() {
            // As on hardware: where the topology says the GPUs cannot reach each other, no peer-enabled copies.
            let peer_ok = ctx.probe.peer_access(pair.a, pair.b) != Some(false);
            if !peer_ok {
                no_peer_access.push(*pair);
            }
            for peer in [true, false].into_iter().filter(|&peer| peer_ok || !peer) {
                let (uni, bidi, latency_us) = if peer { (395.0, 740.0, 2.4) } else { (21.0, 33.0, 11.5) };
                for (from, to) in [(pair.a, pair.b), (pair.b, pair.a)] {
                    // Copies to a faulty GPU land wrong.
                    let seed = checks::copy_seed(CopyKind::D2d, p.size) ^ u64::from(from) ^ u64::from(peer) << 8;
                    let compare = model_copy(seed, p.size, ctx.probe.wrong_results(to));
                    checks.push(checks::p2p_destination(from, to, peer, &compare));
                    let sample = |mode, times_ms| P2pSample { from, to, peer, mode, times_ms };
                    samples.push(sample(P2pMode::Unidirectional, jitter(ms(uni, 8.0, size), p.repetitions)));
                    samples.push(sample(P2pMode::Latency, jitter(latency_us / 1e3, latency_n)));
                }
                let both = P2pSample { from: pair.a, to: pair.b, peer, mode: P2pMode::Bidirectional, times_ms: vec![] };
                samples.push(P2pSample { times_ms: jitter(ms(bidi, 8.0, 2.0 * size), p.repetitions), ..both });
                let mode = if peer { "peer access enabled" } else { "peer access disabled" };
                let done = (2 * i + usize::from(!peer)) as f64 / (2 * p.pairs.len()) as f64;
                sim.pace(ctx, done, &format!("GPU {} ↔ {}, {mode}", pair.a, pair.b))?;
            }
        }
        Ok(report::report(P2pMeasurements { devices: p.devices(), size: p.size, samples, no_peer_access, checks }))
    }

    /// Its own contexts and buffers on every GPU of its pairs, released at its end.
    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &P2pParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        cuda::p2p::run(gpu.all()?, p, ctx, gpu.fault())
    }
}
