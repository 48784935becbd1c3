//! What a client asks the lab for: an experiment and its parameters (each
//! deserializing from `{}` to its defaults) and the run request around them.

use std::fmt;

use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The experiments, one line each: its variant, its parameters (`Default` is what runs when a client
/// sends none) and the name used in URLs, JSON and on the command line (serde's snake_case of the
/// variant; a test holds them equal). Generates [`ExperimentKind`] with `ALL`, `name` and
/// `default_params`, [`ExperimentParams`] with `kind`, and [`KindParams`] for each parameters type.
macro_rules! experiments {
    ($( $(#[$doc:meta])* $variant:ident($params:ty) = $name:literal, )+) => {
        /// Which experiment: `"memory"`, `"transfer"`, … in JSON.
        #[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[serde(rename_all = "snake_case")]
        pub enum ExperimentKind {
            $( $(#[$doc])* $variant, )+
        }

        impl ExperimentKind {
            pub const ALL: [Self; [$($name),+].len()] = [$(Self::$variant),+];

            /// The name used in URLs, JSON and on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $name, )+
                }
            }

            /// The parameters this experiment runs with when the client sends none.
            pub fn default_params(self) -> ExperimentParams {
                match self {
                    $( Self::$variant => ExperimentParams::$variant(<$params>::default()), )+
                }
            }
        }

        /// What to run, tagged by `"kind"`: `{"kind":"transfer","sizes":[4096,1048576]}`.
        #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum ExperimentParams {
            $( $variant($params), )+
        }

        impl ExperimentParams {
            pub fn kind(&self) -> ExperimentKind {
                match self {
                    $( Self::$variant(_) => ExperimentKind::$variant, )+
                }
            }
        }

        $(
            impl KindParams for $params {
                const KIND: ExperimentKind = ExperimentKind::$variant;

                fn of(params: &ExperimentParams) -> Option<&Self> {
                    match params {
                        ExperimentParams::$variant(p) => Some(p),
                        _ => None,
                    }
                }

                fn of_mut(params: &mut ExperimentParams) -> Option<&mut Self> {
                    match params {
                        ExperimentParams::$variant(p) => Some(p),
                        _ => None,
                    }
                }
            }
        )+
    };
}

experiments! {
    Memory(MemoryParams) = "memory",
    Transfer(TransferParams) = "transfer",
    Streams(StreamsParams) = "streams",
    Precision(PrecisionParams) = "precision",
    Latency(LatencyParams) = "latency",
    /// Copies between GPUs; occupies every GPU it involves, needs two.
    P2p(P2pParams) = "p2p",
    /// NCCL collectives and the DDP step; occupies every GPU it joins (one checks that NCCL works).
    Collectives(super::collectives::CollectivesParams) = "collectives",
}

/// One experiment's parameters inside a request: what the lab's code for that kind reads.
pub trait KindParams: Sized {
    /// The experiment these parameters are for.
    const KIND: ExperimentKind;
    /// These parameters inside `params`, `None` for another kind's.
    fn of(params: &ExperimentParams) -> Option<&Self>;
    fn of_mut(params: &mut ExperimentParams) -> Option<&mut Self>;
}

impl ExperimentKind {
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name.trim().to_ascii_lowercase())
    }

    /// Every experiment's name for a message: "memory, transfer, …, p2p or collectives".
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

impl std::str::FromStr for ExperimentKind {
    type Err = UnknownExperiment;

    /// [`ExperimentKind::parse`], with an error that lists the experiments.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::parse(name).ok_or_else(|| UnknownExperiment(name.to_owned()))
    }
}

/// A name that is no experiment: "'fft' is not an experiment; use memory, … or p2p".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownExperiment(pub String);

impl fmt::Display for UnknownExperiment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' is not an experiment; use {}", self.0, ExperimentKind::names())
    }
}

impl std::error::Error for UnknownExperiment {}

/// The caching allocator made visible.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryParams {
    /// Size of each block, bytes (1 MiB to 16 GiB). Default 256 MiB.
    pub block_bytes: u64,
    /// Blocks to allocate (1 to 64). Default 8.
    pub blocks: u32,
    /// Free every k-th block before allocating again (1 frees all, 2 every other). Default 2.
    pub free_every: u32,
    /// Timed pool-served vs fresh allocations (1 to 100). Default 10.
    pub repetitions: u32,
}

impl Default for MemoryParams {
    fn default() -> Self {
        Self { block_bytes: 256 * MIB, blocks: 8, free_every: 2, repetitions: 10 }
    }
}

/// One way of copying memory.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    H2dPageable,
    H2dPinned,
    D2hPageable,
    D2hPinned,
    /// Device to device by the driver's copy (`cuMemcpyDtoDAsync`, the call PyTorch's contiguous `copy_`
    /// makes: its profiler shows "Memcpy DtoD", not a kernel); its bandwidth counts bytes read plus bytes written.
    D2d,
    /// Device to device by a copy kernel on the SMs (16-byte loads and stores over a grid that fills the
    /// GPU), the way PyTorch's elementwise copy kernel moves data; counted like [`CopyKind::D2d`].
    D2dKernel,
}

impl CopyKind {
    pub const ALL: [Self; 6] =
        [Self::H2dPageable, Self::H2dPinned, Self::D2hPageable, Self::D2hPinned, Self::D2d, Self::D2dKernel];

    /// The name in JSON, the series and figure names and the CSV: "d2d_kernel".
    pub fn name(self) -> &'static str {
        match self {
            Self::H2dPageable => "h2d_pageable",
            Self::H2dPinned => "h2d_pinned",
            Self::D2hPageable => "d2h_pageable",
            Self::D2hPinned => "d2h_pinned",
            Self::D2d => "d2d",
            Self::D2dKernel => "d2d_kernel",
        }
    }

    /// What the copy is and how it is made, for a person: "D2D (SM copy kernel)".
    pub fn label(self) -> &'static str {
        match self {
            Self::H2dPageable => "H2D from pageable host memory",
            Self::H2dPinned => "H2D from pinned host memory",
            Self::D2hPageable => "D2H to pageable host memory",
            Self::D2hPinned => "D2H to pinned host memory",
            Self::D2d => "D2D (driver memcpy, cuMemcpyDtoDAsync, what torch copy_ calls)",
            Self::D2dKernel => "D2D (SM copy kernel, one 16-byte vector per thread)",
        }
    }

    /// The copy named `name` as [`CopyKind::name`] spells it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// True for the copies that stay on the device (read and write HBM, or L2 when they fit).
    pub fn on_device(self) -> bool {
        matches!(self, Self::D2d | Self::D2dKernel)
    }

    /// Every copy's name for a message: "h2d_pageable, …, d2d or d2d_kernel".
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// Host↔device and device↔device bandwidth over a sweep of sizes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TransferParams {
    /// Copy sizes in bytes, each 4 KiB to 1 GiB, at most 32 of them.
    /// Default: powers of 4 from 4 KiB to 1 GiB.
    pub sizes: Vec<u64>,
    /// Which copies to time. Default: all six.
    pub copies: Vec<CopyKind>,
    /// Untimed copies before timing each size (0 to 100). Default 3.
    pub warmup: u32,
    /// Timed copies per size (1 to 1000). Default 10.
    pub repetitions: u32,
}

impl Default for TransferParams {
    fn default() -> Self {
        Self {
            sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            copies: CopyKind::ALL.to_vec(),
            warmup: 3,
            repetitions: 10,
        }
    }
}

/// Copy/compute overlap and concurrent kernels.
///
/// The defaults make each phase long (copy ~5 ms, GEMM ~22 ms on an H200) so launch and
/// join costs stay under the overlap check's +2%; phases under 10 ms are judged more loosely.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsParams {
    /// Pinned host-to-device copy, bytes (1 MiB to 4 GiB). Default 256 MiB.
    pub copy_bytes: u64,
    /// The compute kernel is an fp32 GEMM of this order (256 to 16384). Default 8192.
    pub gemm_size: u32,
    /// Independent kernels launched on 1 stream, then on as many streams (2 to 32). Default 8.
    pub kernels: u32,
    /// How long each independent kernel spins, µs (10 to 100000). Default 500.
    pub kernel_us: u32,
    /// Untimed rounds first (0 to 20). Default 2.
    pub warmup: u32,
    /// Timed rounds (1 to 100). Default 5.
    pub repetitions: u32,
}

impl Default for StreamsParams {
    fn default() -> Self {
        Self { copy_bytes: 256 * MIB, gemm_size: 8192, kernels: 8, kernel_us: 500, warmup: 2, repetitions: 5 }
    }
}

/// A GEMM element type.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Fp32,
    /// fp32 storage, tensor cores with TF32 inputs.
    Tf32,
    Fp16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Self; 4] = [Self::Fp32, Self::Tf32, Self::Fp16, Self::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Tf32 => "tf32",
            Self::Fp16 => "fp16",
            Self::Bf16 => "bf16",
        }
    }

    /// Largest accepted error against the host reference, as
    /// `max |gpu - host| / sqrt(k)` with inputs uniform in [-1, 1]. tf32 and fp16 keep 10
    /// mantissa bits: over the sampled outputs inputs rounded to them read about 4e-4, truncated
    /// about 9.5e-4, while inputs at bf16's 7 bits read about 3.2e-3; 1.5e-3 tells the two apart
    /// (`lab::checks` tests it), where 4e-3 passed a GEMM that quietly ran in bf16.
    pub fn tolerance(self) -> f64 {
        match self {
            Self::Fp32 => 1e-4,
            Self::Tf32 | Self::Fp16 => 1.5e-3,
            Self::Bf16 => 2e-2,
        }
    }
}

/// cuBLAS GEMM throughput and correctness per element type.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionParams {
    /// Square matrix orders (64 to 16384), at most 8. Default 1024, 4096, 8192.
    pub sizes: Vec<u32>,
    /// Default: all four.
    pub dtypes: Vec<Dtype>,
    /// Untimed GEMMs first (0 to 50). Default 3.
    pub warmup: u32,
    /// Timed GEMMs (1 to 200). Default 10.
    pub repetitions: u32,
}

impl Default for PrecisionParams {
    fn default() -> Self {
        Self { sizes: vec![1024, 4096, 8192], dtypes: Dtype::ALL.to_vec(), warmup: 3, repetitions: 10 }
    }
}

/// Launch, event and synchronize latency with an empty kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyParams {
    /// Untimed calls first (0 to 10000). Default 100.
    pub warmup: u32,
    /// Timed calls of each kind (10 to 100000). Default 2000.
    pub repetitions: u32,
}

impl Default for LatencyParams {
    fn default() -> Self {
        Self { warmup: 100, repetitions: 2000 }
    }
}

/// Two GPUs (NVML indexes) copied between, both directions.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct GpuPair {
    pub a: u32,
    pub b: u32,
}

/// Bandwidth and latency between GPUs, with peer access enabled and disabled
/// (then the driver stages each copy through pinned host memory), like
/// cuda-samples' p2pBandwidthLatencyTest.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct P2pParams {
    /// Bytes of each bandwidth copy (1 MiB to 4 GiB). Default 256 MiB.
    pub size: u64,
    /// Untimed copies before timing each pair and mode (0 to 20). Default 3.
    pub warmup: u32,
    /// Timed copies per pair and mode (1 to 100). Default 10. Latency takes 10× as many 4-byte copies.
    pub repetitions: u32,
    /// Pairs to measure, each in both directions. Empty (the default): every pair of the server's GPUs.
    /// The server fills in the pairs it will measure, so a stored run lists them.
    pub pairs: Vec<GpuPair>,
}

impl Default for P2pParams {
    fn default() -> Self {
        Self { size: 256 * MIB, warmup: 3, repetitions: 10, pairs: Vec::new() }
    }
}

impl P2pParams {
    /// Every GPU the pairs involve, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<u32> = self.pairs.iter().flat_map(|p| [p.a, p.b]).collect();
        crate::order::sort(&mut devices);
        devices.dedup();
        devices
    }
}

/// Body of `POST /api/runs`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// NVML index of the GPU.
    pub device: u32,
    pub params: ExperimentParams,
    /// Run even where other processes are computing on the GPU.
    #[serde(default)]
    pub force: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::lab::ChartSpec;

    #[test]
    fn params_default_from_an_empty_object() {
        let p: ExperimentParams = serde_json::from_str(r#"{"kind":"transfer"}"#).unwrap();
        let ExperimentParams::Transfer(t) = p else { panic!("not transfer") };
        assert_eq!(t.sizes.first(), Some(&(4 * KIB)));
        assert_eq!(t.sizes.last(), Some(&(1 << 30)));
        assert_eq!(t.copies, CopyKind::ALL);
    }

    #[test]
    fn copy_names_are_serdes_and_say_their_path() {
        for copy in CopyKind::ALL {
            assert_eq!(serde_json::to_value(copy).unwrap(), serde_json::Value::from(copy.name()));
            assert_eq!(CopyKind::parse(copy.name()), Some(copy));
        }
        assert_eq!(CopyKind::parse("d2d_sm"), None);
        assert!(CopyKind::D2d.label().contains("cuMemcpyDtoDAsync"));
        assert!(CopyKind::D2dKernel.label().contains("SM copy kernel"));
        assert!(CopyKind::D2dKernel.on_device() && !CopyKind::H2dPinned.on_device());
        assert_eq!(CopyKind::names(), "h2d_pageable, h2d_pinned, d2h_pageable, d2h_pinned, d2d or d2d_kernel");
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected() {
        assert!(serde_json::from_str::<ExperimentParams>(r#"{"kind":"memory","blokcs":3}"#).is_err());
        assert!(serde_json::from_str::<ExperimentParams>(r#"{"kind":"fft"}"#).is_err());
    }

    #[test]
    fn kinds_parse_by_name() {
        for kind in ExperimentKind::ALL {
            assert_eq!(ExperimentKind::parse(kind.name()), Some(kind));
            assert_eq!(kind.default_params().kind(), kind);
        }
        assert_eq!(ExperimentKind::parse("fft"), None);
    }

    #[test]
    fn experiment_names_are_serdes() {
        for kind in ExperimentKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::Value::from(kind.name()));
            assert_eq!(kind.name().parse::<ExperimentKind>(), Ok(kind));
        }
        assert_eq!(ExperimentKind::names(), "memory, transfer, streams, precision, latency, p2p or collectives");
        let err = "fft".parse::<ExperimentKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "'fft' is not an experiment; use memory, transfer, streams, precision, latency, p2p or collectives"
        );
    }

    #[test]
    fn p2p_pairs_name_their_gpus() {
        let p: ExperimentParams =
            serde_json::from_str(r#"{"kind":"p2p","pairs":[{"a":2,"b":0},{"a":0,"b":1}]}"#).unwrap();
        let ExperimentParams::P2p(p) = p else { panic!("not p2p") };
        assert_eq!(p.devices(), vec![0, 1, 2]);
        assert_eq!(p.size, 256 * MIB);
        let chart = serde_json::to_string(&ChartSpec::Heatmap { row_label: "from".into(), col_label: "to".into() });
        assert_eq!(chart.unwrap(), r#"{"type":"heatmap","row_label":"from","col_label":"to"}"#);
    }
}
