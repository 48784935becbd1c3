//! Every experiment as one unit: `experiments/<kind>/` holds a kind's description, validation,
//! footprint (what the memory guards count), time estimate, simulation, report shaping and the
//! call into its CUDA run (`lab/cuda/<kind>.rs`, the only code that names cudarc), behind one
//! trait, [`Experiment`]. The rest of the lab (api, queue, workers, executors) asks
//! [`of`] or [`experiment`] and never matches on a kind.
//!
//! Adding a kind: its parameters struct and one line in `experiments!` (`shared/src/lab/params.rs`),
//! a folder here with a unit struct implementing [`Experiment`] (its form's fields, PyTorch words,
//! validation, footprint, simulation and report) and one line in `registry!`, and its CUDA run in
//! `lab/cuda/<kind>.rs` (one `mod` line in `lab/cuda/mod.rs`). The page needs nothing: it builds the
//! form from the fields and shows the snippet and takeaway the lab sends.

pub mod pytorch;

use self::pytorch::InPyTorch;

use shared::lab::{ExperimentKind, ExperimentParams, FieldSpec, KindParams, RunResult};
use shared::topology::Topology;

use super::LabError;
use super::cuda;
use super::executor::{ExperimentError, RunContext};
use super::guards::DeviceProbe;
use super::plan::{Footprint, ParamError};
pub use super::plan::{GIB, KIB, MIB};
use super::simulation::Simulation;

/// One kind of experiment. Implement it on a unit struct with `Params` the kind's parameters
/// (`shared::lab::<Kind>Params`, which name their kind) and register it in `registry!` below; the lab
/// reaches it through [`Dispatch`], which picks the parameters out of [`ExperimentParams`].
pub trait Experiment: InPyTorch + Sync + 'static {
    type Params: KindParams;
    /// Title and one-paragraph description, for the page's forms (`GET /api/lab/experiments`).
    fn describe(&self) -> (&'static str, &'static str);
    /// The form's inputs in the order the page shows them, one for each parameter (a test holds them to
    /// the parameters' defaults).
    fn fields(&self) -> Vec<FieldSpec>;
    /// Runs on several GPUs at once: the page asks before it queues one, and `gpudash bench` leaves it
    /// out unless it is named.
    fn multi_gpu(&self) -> bool {
        false
    }
    /// The fewest GPUs a server needs for the page to offer it.
    fn min_gpus(&self) -> u32 {
        1
    }
    /// Checks every parameter, naming the first bad one and its allowed range.
    fn validate(&self, params: &Self::Params) -> Result<(), ParamError>;
    /// Peak memory of a validated run, on each GPU it involves: what the memory guards count.
    fn footprint(&self, params: &Self::Params) -> Footprint;
    /// A rough upper bound of a run's time, ms.
    fn estimate_ms(&self, params: &Self::Params) -> u64;
    /// The GPUs a run occupies; `gpus` are the lab's. One GPU (`device`) unless the kind runs on several,
    /// which may fill in its parameters here (p2p: every pair when none is named).
    fn involved(&self, params: &mut Self::Params, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError> {
        let _ = (params, gpus);
        Ok(vec![device])
    }
    /// The GPUs a request names itself (empty: only its `device`); said in the audit log.
    fn named_devices(&self, params: &Self::Params) -> Vec<u32> {
        let _ = params;
        Vec::new()
    }
    /// Why it cannot run here although the lab runs other kinds (collectives: no NCCL), in words that say
    /// where gpudash looked and how to fix it; `None` when it can. Blocking (it may load a library): call
    /// off the async runtime.
    fn unavailable(&self, simulated: bool, probe: &dyn DeviceProbe) -> Option<String> {
        let _ = (simulated, probe);
        None
    }
    /// Notes added to a finished run from how the GPUs connect (p2p: each pair's link).
    fn topology_notes(&self, params: &Self::Params, topology: &Topology) -> Vec<String> {
        let _ = (params, topology);
        Vec::new()
    }
    /// The run on the simulated executor: a model of an H200, paced by `sim`.
    fn simulate(
        &self,
        params: &Self::Params,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
    /// Whether a simulated run leaves its buffers cached in the lab's pool (false for runs that trim
    /// it or use contexts of their own).
    fn caches_in_pool(&self) -> bool {
        true
    }
    /// The run on a GPU: calls its CUDA code in `lab/cuda/<kind>.rs` with the GPU's session
    /// ([`cuda::Gpu::session`]) or every GPU of the lab ([`cuda::Gpu::all`]).
    fn run_cuda(
        &self,
        params: &Self::Params,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
}

/// An [`Experiment`] over any request's parameters: what the lab calls.
pub trait Dispatch: Sync {
    fn describe(&self) -> (&'static str, &'static str);
    fn snippet(&self) -> &'static str;
    fn takeaway(&self, result: &RunResult) -> Option<String>;
    fn fields(&self) -> Vec<FieldSpec>;
    fn multi_gpu(&self) -> bool;
    fn min_gpus(&self) -> u32;
    fn validate(&self, params: &ExperimentParams) -> Result<(), ParamError>;
    fn footprint(&self, params: &ExperimentParams) -> Footprint;
    fn estimate_ms(&self, params: &ExperimentParams) -> u64;
    fn involved(&self, params: &mut ExperimentParams, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError>;
    fn named_devices(&self, params: &ExperimentParams) -> Vec<u32>;
    fn unavailable(&self, simulated: bool, probe: &dyn DeviceProbe) -> Option<String>;
    fn topology_notes(&self, params: &ExperimentParams, topology: &Topology) -> Vec<String>;
    fn simulate(
        &self,
        params: &ExperimentParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
    fn caches_in_pool(&self) -> bool;
    fn run_cuda(
        &self,
        params: &ExperimentParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
}

/// Said when parameters reach another kind's code: a bug, never a user's mistake.
fn mismatch(params: &ExperimentParams) -> String {
    format!("internal error: {} parameters reached another experiment", params.kind().name())
}

impl<E: Experiment> Dispatch for E {
    fn describe(&self) -> (&'static str, &'static str) {
        Experiment::describe(self)
    }
    fn snippet(&self) -> &'static str {
        E::SNIPPET
    }
    fn takeaway(&self, result: &RunResult) -> Option<String> {
        E::takeaway(result)
    }
    fn fields(&self) -> Vec<FieldSpec> {
        Experiment::fields(self)
    }
    fn multi_gpu(&self) -> bool {
        Experiment::multi_gpu(self)
    }
    fn min_gpus(&self) -> u32 {
        Experiment::min_gpus(self)
    }
    fn validate(&self, params: &ExperimentParams) -> Result<(), ParamError> {
        E::Params::of(params).map_or_else(|| Err(ParamError(mismatch(params))), |p| Experiment::validate(self, p))
    }
    fn footprint(&self, params: &ExperimentParams) -> Footprint {
        E::Params::of(params).map(|p| Experiment::footprint(self, p)).unwrap_or_default()
    }
    fn estimate_ms(&self, params: &ExperimentParams) -> u64 {
        E::Params::of(params).map_or(0, |p| Experiment::estimate_ms(self, p))
    }
    fn involved(&self, params: &mut ExperimentParams, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError> {
        let text = mismatch(params);
        let p = E::Params::of_mut(params).ok_or(LabError::Internal(text))?;
        Experiment::involved(self, p, device, gpus)
    }
    fn named_devices(&self, params: &ExperimentParams) -> Vec<u32> {
        E::Params::of(params).map(|p| Experiment::named_devices(self, p)).unwrap_or_default()
    }
    fn unavailable(&self, simulated: bool, probe: &dyn DeviceProbe) -> Option<String> {
        Experiment::unavailable(self, simulated, probe)
    }
    fn topology_notes(&self, params: &ExperimentParams, topology: &Topology) -> Vec<String> {
        E::Params::of(params).map(|p| Experiment::topology_notes(self, p, topology)).unwrap_or_default()
    }
    fn simulate(
        &self,
        params: &ExperimentParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let p = E::Params::of(params).ok_or_else(|| ExperimentError::Cuda(mismatch(params)))?;
        Experiment::simulate(self, p, sim, ctx)
    }
    fn caches_in_pool(&self) -> bool {
        Experiment::caches_in_pool(self)
    }
    fn run_cuda(
        &self,
        params: &ExperimentParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let p = E::Params::of(params).ok_or_else(|| ExperimentError::Cuda(mismatch(params)))?;
        Experiment::run_cuda(self, p, gpu, ctx)
    }
}

/// The registry: each kind's folder and its [`Experiment`], one line each. Generates the folders'
/// `mod` lines and [`experiment`], an exhaustive match: a kind left out does not compile.
macro_rules! registry {
    ($( $kind:ident => $folder:ident::$experiment:ident, )+) => {
        $( pub mod $folder; )+

        /// The experiment of `kind`.
        pub fn experiment(kind: ExperimentKind) -> &'static dyn Dispatch {
            match kind {
                $( ExperimentKind::$kind => &$folder::$experiment, )+
            }
        }
    };
}

registry! {
    Memory => memory::Memory,
    Transfer => transfer::Transfer,
    Streams => streams::Streams,
    Precision => precision::Precision,
    Latency => latency::Latency,
    P2p => p2p::P2p,
    Collectives => collectives::Collectives,
}

/// The experiment a request's parameters are for.
pub fn of(params: &ExperimentParams) -> &'static dyn Dispatch {
    experiment(params.kind())
}

/// Err naming `name` and its allowed range unless `min <= value <= max`.
pub fn range<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    value: T,
    min: T,
    max: T,
    hint: &str,
) -> Result<(), ParamError> {
    if value < min || value > max {
        return Err(ParamError(format!("'{name}' must be from {min} to {max}{hint}, got '{value}'")));
    }
    Ok(())
}

/// [`range`] for a size in bytes, the bounds also in words.
pub fn bytes(name: &str, value: u64, min: u64, max: u64) -> Result<(), ParamError> {
    let hint = format!(" bytes ({} to {})", shared::units::format_bytes(min), shared::units::format_bytes(max));
    range(name, value, min, max, &hint)
}

/// Checks every parameter, naming the first bad one and its allowed range.
pub fn validate(params: &ExperimentParams) -> Result<(), ParamError> {
    of(params).validate(params)
}

/// Peak memory of a (validated) experiment; for multi-GPU kinds, on each GPU it involves.
pub fn footprint(params: &ExperimentParams) -> Footprint {
    of(params).footprint(params)
}

/// Runs that would likely pass the time limit are refused up front with this estimate, ms.
/// A rough upper bound from the work the parameters ask for, not a promise.
pub fn estimate_ms(params: &ExperimentParams) -> u64 {
    of(params).estimate_ms(params)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use shared::lab::{
        CopyKind, ExperimentKind, Input, LatencyParams, MemoryParams, PrecisionParams, StreamsParams, TransferParams,
    };

    #[test]
    fn defaults_are_valid() {
        for kind in ExperimentKind::ALL {
            validate(&kind.default_params()).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        }
    }

    /// The default of the parameter a field names ("ddp.tokens" inside the group).
    fn default_of<'a>(defaults: &'a Value, name: &str) -> &'a Value {
        name.split('.').fold(defaults, |v, key| &v[key])
    }

    /// Every parameter has its field and every field its parameter, with an input that reads its default
    /// and choices the server accepts: a parameter added without a field fails here.
    #[test]
    fn every_parameter_has_a_field_that_reads_its_default() {
        for kind in ExperimentKind::ALL {
            let defaults = serde_json::to_value(kind.default_params()).unwrap();
            let mut names: Vec<String> = Vec::new();
            for (name, value) in defaults.as_object().unwrap().iter().filter(|(name, _)| *name != "kind") {
                names.push(name.clone());
                if let Value::Object(inner) = value {
                    names.extend(inner.keys().map(|key| format!("{name}.{key}")));
                }
            }
            let fields = experiment(kind).fields();
            let mut listed: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
            names.sort();
            listed.sort();
            assert_eq!(listed, names, "{kind:?}: fields against parameters");
            for field in &fields {
                let value = default_of(&defaults, &field.name);
                let numbers = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_u64));
                let (fits, names): (bool, Vec<&str>) = match &field.input {
                    Input::Count | Input::Bytes | Input::Parameters => (value.is_u64(), vec![]),
                    Input::CountList { .. } | Input::BytesList => (numbers(value), vec![]),
                    Input::Pairs => (value.is_array(), vec![]),
                    Input::Switch => (value.is_object() || value.is_null(), vec![]),
                    Input::Choices { choices } => (value.is_array(), choices.iter().map(|c| c.name.as_str()).collect()),
                    Input::OneOf { choices } => (value.is_string(), choices.iter().map(String::as_str).collect()),
                };
                assert!(fits, "{kind:?}: {} reads {value} as {:?}", field.name, field.input);
                // Each choice alone is a request the server takes.
                for name in names {
                    let mut request = defaults.clone();
                    let one = if matches!(field.input, Input::Choices { .. }) { json!([name]) } else { json!(name) };
                    match field.name.split_once('.') {
                        Some((parent, key)) => request[parent][key] = one,
                        None => request[field.name.as_str()] = one,
                    }
                    let params: ExperimentParams = serde_json::from_value(request)
                        .unwrap_or_else(|e| panic!("{kind:?}: {} = {name}: {e}", field.name));
                    validate(&params).unwrap_or_else(|e| panic!("{kind:?}: {} = {name}: {e}", field.name));
                }
            }
        }
    }

    #[test]
    fn bad_values_name_the_field_and_the_range() {
        let bad = [
            (
                ExperimentParams::Memory(MemoryParams { blocks: 0, ..Default::default() }),
                "'blocks' must be from 1 to 64",
            ),
            (
                ExperimentParams::Transfer(TransferParams { sizes: vec![2 << 30], ..Default::default() }),
                "'sizes' must be from 4096 to 1073741824 bytes (4.00 KiB to 1.00 GiB), got '2147483648'",
            ),
            (
                ExperimentParams::Transfer(TransferParams { copies: vec![], ..Default::default() }),
                "'copies' must name at least one of h2d_pageable, h2d_pinned, d2h_pageable, d2h_pinned, d2d or d2d_kernel",
            ),
            (ExperimentParams::Streams(StreamsParams { kernels: 1, ..Default::default() }), "'kernels'"),
            (ExperimentParams::Precision(PrecisionParams { sizes: vec![], ..Default::default() }), "'sizes' must list"),
            (ExperimentParams::Latency(LatencyParams { repetitions: 5, ..Default::default() }), "'repetitions'"),
        ];
        for (params, expected) in bad {
            let err = validate(&params).unwrap_err().0;
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn footprints_follow_the_parameters() {
        let memory = ExperimentParams::Memory(MemoryParams { block_bytes: GIB, blocks: 4, ..Default::default() });
        assert_eq!(footprint(&memory).device, 5 * GIB);
        let h2d = ExperimentParams::Transfer(TransferParams {
            sizes: vec![MIB, 64 * MIB],
            copies: vec![CopyKind::H2dPinned],
            ..Default::default()
        });
        assert_eq!(footprint(&h2d), Footprint { device: 64 * MIB, pinned_host: 64 * MIB, host: 0 });
        let kernel = ExperimentParams::Transfer(TransferParams {
            sizes: vec![MIB, 64 * MIB],
            copies: vec![CopyKind::D2dKernel],
            ..Default::default()
        });
        assert_eq!(footprint(&kernel), Footprint { device: 128 * MIB, pinned_host: 0, host: 0 });
        let all = ExperimentParams::Transfer(TransferParams::default());
        assert_eq!(footprint(&all), Footprint { device: 2 * GIB, pinned_host: GIB, host: GIB });
    }
}
