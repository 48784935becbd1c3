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
    /// ([`cuda::Gpu::session`]) or every GPU of the lab ([`cuda::Gpu::all`]).
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::latency::params::LatencyParams;
    use crate::experiments::memory::params::MemoryParams;
    use crate::experiments::precision::params::PrecisionParams;
    use crate::experiments::streams::params::StreamsParams;
    use crate::experiments::transfer::params::{CopyKind, TransferParams};
    use serde_json::{Value, json};
    use shared::lab::{ExperimentKind, Input};

    #[test]
    fn defaults_are_valid() {
        for experiment in ALL {
            validate(&experiment.defaults()).unwrap_or_else(|e| panic!("{}: {e}", experiment.kind()));
        }
    }

    /// Registered names are distinct and well formed, read back from JSON and the command line, and
    /// a name that is no experiment is refused with the list.
    #[test]
    fn the_registry_names_each_experiment_once() {
        let names: Vec<String> = kinds().iter().map(|k| k.name().to_owned()).collect();
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        for kind in kinds() {
            let read: ExperimentKind = serde_json::from_value(Value::from(kind.name())).unwrap();
            assert_eq!(read, kind);
            assert_eq!(parse(&format!(" {} ", kind.name().to_uppercase())), Ok(kind.clone()));
            assert_eq!(find(&kind).unwrap().defaults().kind, kind);
        }
        assert!(super::names().starts_with("memory, transfer, "), "{}", super::names());
        let err = parse("fft").unwrap_err().to_string();
        assert!(err.starts_with("'fft' is not an experiment; use memory, transfer"), "{err}");
        let unknown = ExperimentParams::defaults(ExperimentKind::named("fft"));
        assert!(validate(&unknown).unwrap_err().0.contains("'fft' is not an experiment"));
        assert!(footprint(&unknown).unwrap_err().0.contains("'fft' is not an experiment"));
    }

    /// Parameters that do not read as the kind's are refused in serde's words, and a request is stored
    /// with every default filled in.
    #[test]
    fn parameters_read_as_the_kinds_own_and_are_stored_in_full() {
        let mut bad: ExperimentParams = serde_json::from_str(r#"{"kind":"memory","blokcs":3}"#).unwrap();
        let err = find(&bad.kind).unwrap().normalize(&mut bad).unwrap_err().0;
        assert!(err.starts_with("memory parameters: unknown field `blokcs`"), "{err}");
        let long = format!(r#"{{"kind":"memory","{}":1}}"#, "x".repeat(70_000));
        let mut long: ExperimentParams = serde_json::from_str(&long).unwrap();
        let said = find(&long.kind).unwrap().normalize(&mut long).unwrap_err().0;
        assert!(said.chars().count() <= MAX_SAID + 20 && said.ends_with('…'), "{}", said.len());
        let mut wrong_type: ExperimentParams = serde_json::from_str(r#"{"kind":"latency","repetitions":-5}"#).unwrap();
        assert!(validate(&wrong_type).unwrap_err().0.contains("invalid value: integer `-5`"));
        assert!(find(&wrong_type.kind).unwrap().normalize(&mut wrong_type).is_err());
        let mut few: ExperimentParams = serde_json::from_str(r#"{"kind":"latency","repetitions":50}"#).unwrap();
        find(&few.kind).unwrap().normalize(&mut few).unwrap();
        assert_eq!(serde_json::to_string(&few).unwrap(), r#"{"kind":"latency","repetitions":50,"warmup":100}"#);
    }

    /// The default of the parameter a field names ("ddp.tokens" inside the group).
    fn default_of<'a>(defaults: &'a Value, name: &str) -> &'a Value {
        name.split('.').fold(defaults, |v, key| &v[key])
    }

    /// Every parameter has its field and every field its parameter, with an input that reads its default
    /// and choices the server accepts: a parameter added without a field fails here.
    #[test]
    fn every_parameter_has_a_field_that_reads_its_default() {
        for experiment in ALL {
            let kind = experiment.kind();
            let defaults = serde_json::to_value(experiment.defaults()).unwrap();
            let mut names: Vec<String> = Vec::new();
            for (name, value) in defaults.as_object().unwrap().iter().filter(|(name, _)| *name != "kind") {
                names.push(name.clone());
                if let Value::Object(inner) = value {
                    names.extend(inner.keys().map(|key| format!("{name}.{key}")));
                }
            }
            let fields = experiment.fields();
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
                params_of::<memory::Memory>(&MemoryParams { blocks: 0, ..Default::default() }),
                "'blocks' must be from 1 to 64",
            ),
            (
                params_of::<transfer::Transfer>(&TransferParams { sizes: vec![2 << 30], ..Default::default() }),
                "'sizes' must be from 4096 to 1073741824 bytes (4.00 KiB to 1.00 GiB), got '2147483648'",
            ),
            (
                params_of::<transfer::Transfer>(&TransferParams { copies: vec![], ..Default::default() }),
                "'copies' must name at least one of h2d_pageable, h2d_pinned, d2h_pageable, d2h_pinned, d2d or d2d_kernel",
            ),
            (params_of::<streams::Streams>(&StreamsParams { kernels: 1, ..Default::default() }), "'kernels'"),
            (
                params_of::<precision::Precision>(&PrecisionParams { sizes: vec![], ..Default::default() }),
                "'sizes' must list",
            ),
            (params_of::<latency::Latency>(&LatencyParams { repetitions: 5, ..Default::default() }), "'repetitions'"),
        ];
        for (params, expected) in bad {
            let err = validate(&params).unwrap_err().0;
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn footprints_follow_the_parameters() {
        let memory = params_of::<memory::Memory>(&MemoryParams { block_bytes: GIB, blocks: 4, ..Default::default() });
        assert_eq!(footprint(&memory).unwrap().device, 5 * GIB);
        let h2d = params_of::<transfer::Transfer>(&TransferParams {
            sizes: vec![MIB, 64 * MIB],
            copies: vec![CopyKind::H2dPinned],
            ..Default::default()
        });
        assert_eq!(footprint(&h2d).unwrap(), Footprint { device: 64 * MIB, pinned_host: 64 * MIB, host: 0 });
        let kernel = params_of::<transfer::Transfer>(&TransferParams {
            sizes: vec![MIB, 64 * MIB],
            copies: vec![CopyKind::D2dKernel],
            ..Default::default()
        });
        assert_eq!(footprint(&kernel).unwrap(), Footprint { device: 128 * MIB, pinned_host: 0, host: 0 });
        let all = params_of::<transfer::Transfer>(&TransferParams::default());
        assert_eq!(footprint(&all).unwrap(), Footprint { device: 2 * GIB, pinned_host: GIB, host: GIB });
    }
}
