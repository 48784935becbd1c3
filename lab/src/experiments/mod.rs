//! Every experiment as one unit: `experiments/<kind>/` holds a kind's parameters, description,
//! validation, footprint (what the memory guards count), time estimate, simulation, report shaping,
//! PyTorch words and the call into its CUDA run (`lab/cuda/`, the only code that names cudarc), behind
//! one trait, [`Experiment`]. The rest of the lab (api, queue, workers, executors) asks [`of`] or
//! [`find`] and never names a kind; the wire (`shared::lab::ExperimentParams`) carries the kind's name
//! and its parameters as JSON, which [`Dispatch`] reads into the kind's own type.
//!
//! Adding a kind: a folder here with its parameters type and a unit struct implementing
//! [`Experiment`] (name, form fields, PyTorch words, validation, footprint, simulation, report, CUDA
//! run through `lab/cuda/`), and one line in `registry!`. Nothing outside this folder changes: the page
//! builds the form from the fields and shows the snippet and takeaway the lab sends.

pub mod pytorch;

use self::pytorch::InPyTorch;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use shared::lab::{ExperimentKind, ExperimentParams, FieldSpec, RunResult};
use shared::topology::Topology;

use super::LabError;
#[cfg(feature = "cuda")]
use super::cuda;
use super::executor::{ExperimentError, RunContext};
use super::guards::DeviceProbe;
use super::plan::{Footprint, ParamError};
pub use super::plan::{GIB, KIB, MIB};
use super::simulation::Simulation;

/// One kind of experiment. Implement it on a unit struct with `Params` the kind's parameters (each
/// deserializing from `{}` to its defaults, unknown names refused) and register it in `registry!` below;
/// the lab reaches it through [`Dispatch`], which reads the parameters out of [`ExperimentParams`].
pub trait Experiment: InPyTorch + Sync + 'static {
    /// The name in URLs, JSON and on the command line: 1 to 32 of `a-z`, `0-9`, `_`.
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + Default;
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
    /// The run on a GPU: calls its CUDA code in `lab/cuda/` with the GPU's session
    /// ([`cuda::Gpu::session`]) or every GPU of the lab ([`cuda::Gpu::all`]). Only in a build with
    /// CUDA (the `cuda` feature).
    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        params: &Self::Params,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
}

/// An [`Experiment`] over any request's parameters: what the lab calls. Parameters that do not read as
/// the kind's (a wrong type, an unknown name) are [`ParamError`]s from [`Dispatch::normalize`], which
/// every request passes before anything else; later calls read parameters it wrote.
pub trait Dispatch: Sync {
    fn kind(&self) -> ExperimentKind;
    fn describe(&self) -> (&'static str, &'static str);
    fn snippet(&self) -> &'static str;
    fn takeaway(&self, result: &RunResult) -> Option<String>;
    fn fields(&self) -> Vec<FieldSpec>;
    fn multi_gpu(&self) -> bool;
    fn min_gpus(&self) -> u32;
    /// Every parameter at its default.
    fn defaults(&self) -> ExperimentParams;
    /// Reads `params` as this kind's and writes them back in full (defaults filled in), as a run stores them.
    fn normalize(&self, params: &mut ExperimentParams) -> Result<(), ParamError>;
    fn validate(&self, params: &ExperimentParams) -> Result<(), ParamError>;
    /// What the guards count; parameters that do not read have none (never a footprint of zero).
    fn footprint(&self, params: &ExperimentParams) -> Result<Footprint, ParamError>;
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
    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        params: &ExperimentParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError>;
}

/// Longest serde message said back (it quotes the caller's names and values, and it lands in the
/// audit log).
const MAX_SAID: usize = 300;

/// `params` read as `E`'s, or what is wrong with them in serde's words ("unknown field `blokcs`,
/// expected one of …"), cut at [`MAX_SAID`] characters.
fn read<E: Experiment>(params: &ExperimentParams) -> Result<E::Params, ParamError> {
    if params.kind.name() != E::NAME {
        return Err(ParamError(format!("internal error: {} parameters reached {}", params.kind, E::NAME)));
    }
    serde_json::from_value(Value::Object(params.values.clone())).map_err(|e| {
        let said = e.to_string();
        let said = match said.char_indices().nth(MAX_SAID) {
            Some((cut, _)) => format!("{}…", &said[..cut]),
            None => said,
        };
        ParamError(format!("{} parameters: {said}", E::NAME))
    })
}

/// `p` as the values of a request for `E`.
fn write<E: Experiment>(p: &E::Params) -> Result<Map<String, Value>, ParamError> {
    match serde_json::to_value(p) {
        Ok(Value::Object(values)) => Ok(values),
        Ok(other) => Err(ParamError(format!("internal error: {} parameters wrote {other}", E::NAME))),
        Err(e) => Err(ParamError(format!("internal error: writing {} parameters: {e}", E::NAME))),
    }
}

impl<E: Experiment> Dispatch for E {
    fn kind(&self) -> ExperimentKind {
        ExperimentKind::named(E::NAME)
    }
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
    fn defaults(&self) -> ExperimentParams {
        let values = write::<E>(&E::Params::default()).unwrap_or_default();
        ExperimentParams { kind: Dispatch::kind(self), values }
    }
    fn normalize(&self, params: &mut ExperimentParams) -> Result<(), ParamError> {
        params.values = write::<E>(&read::<E>(params)?)?;
        Ok(())
    }
    fn validate(&self, params: &ExperimentParams) -> Result<(), ParamError> {
        Experiment::validate(self, &read::<E>(params)?)
    }
    fn footprint(&self, params: &ExperimentParams) -> Result<Footprint, ParamError> {
        read::<E>(params).map(|p| Experiment::footprint(self, &p))
    }
    fn estimate_ms(&self, params: &ExperimentParams) -> u64 {
        read::<E>(params).map_or(0, |p| Experiment::estimate_ms(self, &p))
    }
    fn involved(&self, params: &mut ExperimentParams, device: u32, gpus: &[u32]) -> Result<Vec<u32>, LabError> {
        let mut p = read::<E>(params).map_err(|e| LabError::Invalid(e.0))?;
        let devices = Experiment::involved(self, &mut p, device, gpus)?;
        params.values = write::<E>(&p).map_err(|e| LabError::Internal(e.0))?;
        Ok(devices)
    }
    fn named_devices(&self, params: &ExperimentParams) -> Vec<u32> {
        read::<E>(params).map(|p| Experiment::named_devices(self, &p)).unwrap_or_default()
    }
    fn unavailable(&self, simulated: bool, probe: &dyn DeviceProbe) -> Option<String> {
        Experiment::unavailable(self, simulated, probe)
    }
    fn topology_notes(&self, params: &ExperimentParams, topology: &Topology) -> Vec<String> {
        read::<E>(params).map(|p| Experiment::topology_notes(self, &p, topology)).unwrap_or_default()
    }
    fn simulate(
        &self,
        params: &ExperimentParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let p = read::<E>(params).map_err(|e| ExperimentError::Invalid(e.0))?;
        Experiment::simulate(self, &p, sim, ctx)
    }
    fn caches_in_pool(&self) -> bool {
        Experiment::caches_in_pool(self)
    }
    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        params: &ExperimentParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        let p = read::<E>(params).map_err(|e| ExperimentError::Invalid(e.0))?;
        Experiment::run_cuda(self, &p, gpu, ctx)
    }
}

/// The registry: each kind's folder and its [`Experiment`], one line each, in the order the page and
/// `gpudash bench` list them. Generates the folders' `mod` lines and [`ALL`].
macro_rules! registry {
    ($( $folder:ident::$experiment:ident, )+) => {
        $( pub mod $folder; )+

        /// Every experiment.
        pub static ALL: &[&dyn Dispatch] = &[$( &$folder::$experiment ),+];
    };
}

registry! {
    memory::Memory,
    transfer::Transfer,
    streams::Streams,
    precision::Precision,
    latency::Latency,
    p2p::P2p,
    collectives::Collectives,
    to_device::ToDevice,
}

/// Every experiment's name, in [`ALL`]'s order.
pub fn kinds() -> Vec<ExperimentKind> {
    ALL.iter().map(|e| e.kind()).collect()
}

/// Every experiment's name for a message: "memory, transfer, …, p2p or collectives".
pub fn names() -> String {
    let names: Vec<String> = kinds().iter().map(|k| k.name().to_owned()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// A name that is none of the lab's experiments: "'fft' is not an experiment; use memory, … or collectives".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownExperiment(pub String);

impl std::fmt::Display for UnknownExperiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "'{}' is not an experiment; use {}", self.0, names())
    }
}

impl std::error::Error for UnknownExperiment {}

/// The experiment named `kind`.
pub fn find(kind: &ExperimentKind) -> Result<&'static dyn Dispatch, UnknownExperiment> {
    ALL.iter().copied().find(|e| e.kind() == *kind).ok_or_else(|| UnknownExperiment(kind.name().to_owned()))
}

/// The experiment called `name` (a command line's or a URL's: trimmed, any case).
pub fn parse(name: &str) -> Result<ExperimentKind, UnknownExperiment> {
    let wanted = name.trim().to_ascii_lowercase();
    ALL.iter().map(|e| e.kind()).find(|k| k.name() == wanted).ok_or_else(|| UnknownExperiment(name.to_owned()))
}

/// The experiment a request's parameters are for.
pub fn of(params: &ExperimentParams) -> Result<&'static dyn Dispatch, UnknownExperiment> {
    find(&params.kind)
}

/// A request for `E` with parameters `p` (tests build requests from the typed parameters).
#[cfg(test)]
pub(crate) fn params_of<E: Experiment>(p: &E::Params) -> ExperimentParams {
    ExperimentParams { kind: ExperimentKind::named(E::NAME), values: write::<E>(p).expect("parameters write") }
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
    of(params).map_err(|e| ParamError(e.to_string()))?.validate(params)
}

/// Peak memory of a (validated) experiment; for multi-GPU kinds, on each GPU it involves.
pub fn footprint(params: &ExperimentParams) -> Result<Footprint, ParamError> {
    of(params).map_err(|e| ParamError(e.to_string()))?.footprint(params)
}

/// Runs that would likely pass the time limit are refused up front with this estimate, ms.
/// A rough upper bound from the work the parameters ask for, not a promise.
pub fn estimate_ms(params: &ExperimentParams) -> u64 {
    of(params).map_or(0, |e| e.estimate_ms(params))
}

#[cfg(test)]
mod tests;
