//! The collectives experiment's rules: its parameters and their limits, nccl-tests' bandwidth formulas, the values every rank must hold after each collective, and
//! the DDP step's plan (gradient bytes, DDP's buckets, the backward pass's FLOPs).
//!
//! Bandwidth follows nccl-tests (`doc/PERFORMANCE.md`): `algbw = bytes / time`, and `busbw` scales it by
//! what each collective must move over the slowest link, so figures of different collectives and rank
//! counts compare with the hardware's peak: all_reduce × 2(n−1)/n, all_gather and reduce_scatter
//! × (n−1)/n with `bytes` the whole gathered buffer, broadcast × 1.

use serde::{Deserialize, Serialize};

use crate::experiments::precision::params::Dtype;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Smallest and largest size of one collective's buffer.
pub const MIN_SIZE: u64 = 8;
pub const MAX_SIZE: u64 = GIB;
/// Most GPUs one run may join: sums of rank+1 stay exact in bf16 (16·17/2 = 136 ≤ 256).
pub const MAX_GPUS: usize = 16;
/// The types a collective and the DDP step take (the page's choices).
pub const DTYPES: [Dtype; 2] = [Dtype::Fp32, Dtype::Bf16];
/// PyTorch's `DistributedDataParallel` default `bucket_cap_mb`.
pub const DEFAULT_BUCKET_CAP_MB: u32 = 25;
/// DDP's first bucket is capped at 1 MiB (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`), so the first
/// all-reduce starts early in the backward pass.
pub const FIRST_BUCKET_BYTES: u64 = MIB;

/// One NCCL collective.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Sum over ranks, the result on every rank (DDP's gradient all-reduce).
    AllReduce,
    /// Each rank's piece, concatenated on every rank (FSDP's parameter gather).
    AllGather,
    /// Sum over ranks, each rank keeping its 1/n (FSDP's gradient reduce).
    ReduceScatter,
    /// Rank 0's buffer on every rank (DDP's start-up parameter sync).
    Broadcast,
}

impl Collective {
    pub const ALL: [Self; 4] = [Self::AllReduce, Self::AllGather, Self::ReduceScatter, Self::Broadcast];

    /// The name in JSON, figures and on the command line: "all_reduce".
    pub fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "all_reduce",
            Self::AllGather => "all_gather",
            Self::ReduceScatter => "reduce_scatter",
            Self::Broadcast => "broadcast",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name.trim())
    }

    /// "all_reduce, all_gather, reduce_scatter or broadcast".
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|c| c.name()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// nccl-tests' bus bandwidth factor for `n` ranks: busbw = algbw × factor.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Self::AllReduce => 2.0 * (n - 1.0) / n,
            Self::AllGather | Self::ReduceScatter => (n - 1.0) / n,
            Self::Broadcast => 1.0,
        }
    }

    /// Elements each rank sends and receives for a buffer of `size` bytes of `elem` bytes each,
    /// rounded as nccl-tests rounds: (send, receive). all_gather and reduce_scatter take `size` as the
    /// whole gathered buffer, so each rank's piece is size/n, at least one element.
    pub fn counts(self, size: u64, elem: u64, n: usize) -> (u64, u64) {
        let n = n.max(1) as u64;
        let total = (size / elem.max(1)).max(1);
        match self {
            Self::AllReduce | Self::Broadcast => (total, total),
            Self::AllGather => {
                let piece = (total / n).max(1);
                (piece, piece * n)
            }
            Self::ReduceScatter => {
                let piece = (total / n).max(1);
                (piece * n, piece)
            }
        }
    }

    /// The bytes nccl-tests reports as the size, after rounding: the larger of send and receive.
    pub fn bytes(self, size: u64, elem: u64, n: usize) -> u64 {
        let (send, recv) = self.counts(size, elem, n);
        send.max(recv) * elem.max(1)
    }

    /// What element `i` of rank `rank`'s result must be when every rank `r` filled its buffer with
    /// r+1: all_reduce n(n+1)/2, all_gather the piece's rank+1, reduce_scatter n(n+1)/2, broadcast 1
    /// (rank 0's value). `piece` is each rank's element count for all_gather.
    pub fn expected(self, n: usize, piece: u64, i: u64) -> f64 {
        let n = n as f64;
        match self {
            Self::AllReduce | Self::ReduceScatter => n * (n + 1.0) / 2.0,
            Self::AllGather => (i / piece.max(1)) as f64 + 1.0,
            Self::Broadcast => 1.0,
        }
    }
}

/// nccl-tests' algorithm bandwidth, GB/s: `bytes` moved in `ms`.
pub fn algbw_gbs(bytes: u64, ms: f64) -> f64 {
    if ms > 0.0 { bytes as f64 / (ms * 1e-3) / 1e9 } else { 0.0 }
}

/// nccl-tests' bus bandwidth, GB/s; 0 on one rank (nothing crosses a link).
pub fn busbw_gbs(collective: Collective, n: usize, bytes: u64, ms: f64) -> f64 {
    algbw_gbs(bytes, ms) * collective.bus_factor(n)
}

/// What the DDP step view models: one `DistributedDataParallel` step's backward pass and its
/// gradient all-reduce, on a stack of square linear layers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DdpParams {
    /// Model parameters (1 M to 20 B). Default 1.3 B.
    pub parameters: u64,
    /// Gradient and GEMM type, fp32 or bf16. Default bf16.
    pub dtype: Dtype,
    /// `bucket_cap_mb` (1 to 1024, MiB). Default 25, DDP's.
    pub bucket_cap_mb: u32,
    /// Tokens per GPU per step (batch × sequence length; 128 to 65536). Default 4096.
    pub tokens: u32,
    /// Width of the square layers the parameters are split into (256 to 16384, a multiple of 64). Default 2048.
    pub hidden: u32,
}

impl Default for DdpParams {
    fn default() -> Self {
        Self {
            parameters: 1_300_000_000,
            dtype: Dtype::Bf16,
            bucket_cap_mb: DEFAULT_BUCKET_CAP_MB,
            tokens: 4096,
            hidden: 2048,
        }
    }
}

/// One gradient bucket: the layers whose gradients it carries (counted from the last layer, the order
/// the backward pass produces them) and its bytes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Index of its first layer in backward order (0 = the model's last layer).
    pub first: u32,
    pub layers: u32,
    pub bytes: u64,
}

/// The DDP step's plan, from [`DdpParams`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DdpPlan {
    /// Square layers of `hidden`² parameters: parameters / hidden², rounded, at least 1.
    pub layers: u32,
    /// Parameters actually modelled: layers × hidden².
    pub parameters: u64,
    /// Gradient bytes all-reduced every step: parameters × the type's size.
    pub gradient_bytes: u64,
    pub buckets: Vec<Bucket>,
    /// Forward FLOPs: 2 × parameters × tokens (one multiply and one add per parameter per token).
    pub forward_flops: f64,
    /// Backward FLOPs: 2 × forward. Each layer's backward is two GEMMs the size of its forward one:
    /// the input gradient dX = Wᵀ·dY and the weight gradient dW = dY·Xᵀ.
    pub backward_flops: f64,
}

/// Bytes of one element of `dtype` as stored.
pub fn element_bytes(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::Fp32 | Dtype::Tf32 => 4,
        Dtype::Fp16 | Dtype::Bf16 => 2,
    }
}

impl DdpParams {
    /// The layers, buckets and FLOPs of this (validated) step. Buckets follow DDP's rule
    /// (`_compute_bucket_assignment_by_size`): gradients are added in backward order and a bucket closes
    /// once it holds at least its cap (1 MiB for the first, `bucket_cap_mb` after), so a bucket exceeds
    /// the cap by less than one layer and no layer is split.
    pub fn plan(&self) -> DdpPlan {
        let layer_params = u64::from(self.hidden.max(1)).pow(2);
        let layers = ((self.parameters as f64 / layer_params as f64).round() as u64).clamp(1, u64::from(u32::MAX));
        let layers = u32::try_from(layers).unwrap_or(u32::MAX);
        let parameters = u64::from(layers) * layer_params;
        let layer_bytes = layer_params * element_bytes(self.dtype);
        let cap = u64::from(self.bucket_cap_mb) * MIB;
        let mut buckets = Vec::new();
        let mut open = Bucket { first: 0, layers: 0, bytes: 0 };
        for layer in 0..layers {
            open.layers += 1;
            open.bytes += layer_bytes;
            let limit = if buckets.is_empty() { FIRST_BUCKET_BYTES } else { cap };
            if open.bytes >= limit {
                buckets.push(open);
                open = Bucket { first: layer + 1, layers: 0, bytes: 0 };
            }
        }
        if open.layers > 0 {
            buckets.push(open);
        }
        let forward_flops = 2.0 * parameters as f64 * f64::from(self.tokens);
        DdpPlan {
            layers,
            parameters,
            gradient_bytes: parameters * element_bytes(self.dtype),
            buckets,
            forward_flops,
            backward_flops: 2.0 * forward_flops,
        }
    }
}

/// NCCL collectives over several GPUs in one process (one communicator per GPU), and the DDP step.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CollectivesParams {
    /// Which collectives to time. Default: all four.
    pub collectives: Vec<Collective>,
    /// Buffer sizes in bytes, 8 B to 1 GiB, a multiple of the element size, at most 32 of them; for
    /// all_gather and reduce_scatter the whole gathered buffer, as nccl-tests counts.
    /// Default: 8 B, then powers of 4 from 1 KiB to 1 GiB.
    pub sizes: Vec<u64>,
    /// fp32 or bf16. Default fp32 (what torch.distributed's reference figures used).
    pub dtype: Dtype,
    /// Untimed calls of each collective and size first (0 to 100). Default 5.
    pub warmup: u32,
    /// Timed calls of each (1 to 200). Default 20.
    pub repetitions: u32,
    /// NVML indexes of the GPUs to join. Empty (the default): every GPU of the server. The server fills
    /// in the GPUs it will use, so a stored run lists them.
    pub gpus: Vec<u32>,
    /// The DDP step view; `null` leaves it out.
    pub ddp: Option<DdpParams>,
}

impl Default for CollectivesParams {
    fn default() -> Self {
        let mut sizes = vec![8];
        sizes.extend((0..11).map(|i| 1024u64 << (2 * i)));
        Self {
            collectives: Collective::ALL.to_vec(),
            sizes,
            dtype: Dtype::Fp32,
            warmup: 5,
            repetitions: 20,
            gpus: Vec::new(),
            ddp: Some(DdpParams::default()),
        }
    }
}

/// A collectives parameter out of range, with what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectivesParamError(pub String);

impl std::fmt::Display for CollectivesParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CollectivesParamError {}

fn within<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    v: T,
    min: T,
    max: T,
) -> Result<(), CollectivesParamError> {
    if v < min || v > max {
        return Err(CollectivesParamError(format!("'{name}' must be from {min} to {max}, got '{v}'")));
    }
    Ok(())
}

fn fp32_or_bf16(name: &str, dtype: Dtype) -> Result<(), CollectivesParamError> {
    if DTYPES.contains(&dtype) {
        Ok(())
    } else {
        Err(CollectivesParamError(format!("'{name}' must be fp32 or bf16, got '{}'", dtype.name())))
    }
}

impl CollectivesParams {
    /// Checks every parameter, naming the first bad one and what is allowed.
    pub fn validate(&self) -> Result<(), CollectivesParamError> {
        if self.collectives.is_empty() {
            return Err(CollectivesParamError(format!(
                "'collectives' must name at least one of {}",
                Collective::names()
            )));
        }
        if self.sizes.is_empty() || self.sizes.len() > 32 {
            return Err(CollectivesParamError(format!("'sizes' must list 1 to 32 sizes, got {}", self.sizes.len())));
        }
        fp32_or_bf16("dtype", self.dtype)?;
        let elem = element_bytes(self.dtype);
        for &size in &self.sizes {
            if !(MIN_SIZE..=MAX_SIZE).contains(&size) || size % elem != 0 {
                return Err(CollectivesParamError(format!(
                    "'sizes' must each be from 8 to 1073741824 bytes (8 B to 1.00 GiB) and a multiple of {elem} \
                     ({} elements), got '{size}'",
                    self.dtype.name()
                )));
            }
        }
        within("warmup", self.warmup, 0, 100)?;
        within("repetitions", self.repetitions, 1, 200)?;
        if self.gpus.len() > MAX_GPUS {
            return Err(CollectivesParamError(format!(
                "'gpus' must list at most {MAX_GPUS} GPUs, got {}",
                self.gpus.len()
            )));
        }
        if let Some(d) = &self.ddp {
            within("ddp.parameters", d.parameters, 1_000_000, 20_000_000_000)?;
            fp32_or_bf16("ddp.dtype", d.dtype)?;
            within("ddp.bucket_cap_mb", d.bucket_cap_mb, 1, 1024)?;
            within("ddp.tokens", d.tokens, 128, 65536)?;
            within("ddp.hidden", d.hidden, 256, 16384)?;
            if d.hidden % 64 != 0 {
                return Err(CollectivesParamError(format!(
                    "'ddp.hidden' must be a multiple of 64, got '{}'",
                    d.hidden
                )));
            }
        }
        Ok(())
    }

    /// Fills in every GPU when none is named, and checks the named ones against the server's `all`;
    /// sorted, each once.
    pub fn resolve_gpus(&mut self, all: &[u32]) -> Result<(), CollectivesParamError> {
        if all.is_empty() {
            return Err(CollectivesParamError("collectives need at least one GPU; this server has none".into()));
        }
        if self.gpus.is_empty() {
            self.gpus = all.to_vec();
        }
        if let Some(missing) = self.gpus.iter().find(|g| !all.contains(g)) {
            return Err(CollectivesParamError(format!(
                "'gpus' names GPU {missing}, which this server does not have (it has {all:?})"
            )));
        }
        shared::order::sort(&mut self.gpus);
        self.gpus.dedup();
        if self.gpus.len() > MAX_GPUS {
            self.gpus.truncate(MAX_GPUS);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The factors of nccl-tests' `src/{all_reduce,all_gather,reduce_scatter,broadcast}.cu` (`getBw`),
    /// with algbw in GB/s (10^9 bytes) over seconds.
    #[test]
    fn bandwidth_follows_nccl_tests() {
        let algbw = algbw_gbs(GIB, 10.0);
        assert!((algbw - 107.374).abs() < 1e-3, "{algbw}");
        assert!((busbw_gbs(Collective::AllReduce, 8, GIB, 10.0) - algbw * 14.0 / 8.0).abs() < 1e-9);
        assert!((busbw_gbs(Collective::AllGather, 8, GIB, 10.0) - algbw * 7.0 / 8.0).abs() < 1e-9);
        assert!((busbw_gbs(Collective::ReduceScatter, 4, GIB, 10.0) - algbw * 3.0 / 4.0).abs() < 1e-9);
        assert!((busbw_gbs(Collective::Broadcast, 8, GIB, 10.0) - algbw).abs() < 1e-9);
        // Two ranks: all_reduce moves each byte once each way, busbw = algbw.
        assert!((Collective::AllReduce.bus_factor(2) - 1.0).abs() < 1e-12);
        // One rank: nothing crosses a link.
        for c in Collective::ALL.into_iter().filter(|&c| c != Collective::Broadcast) {
            assert_eq!(busbw_gbs(c, 1, GIB, 1.0), 0.0, "{c:?}");
        }
        assert_eq!(algbw_gbs(GIB, 0.0), 0.0);
    }

    #[test]
    fn gathered_sizes_count_the_whole_buffer_rounded_to_the_ranks() {
        assert_eq!(Collective::AllGather.counts(GIB, 4, 8), (GIB / 32, GIB / 4));
        assert_eq!(Collective::ReduceScatter.counts(GIB, 4, 8), (GIB / 4, GIB / 32));
        assert_eq!(Collective::AllReduce.bytes(GIB, 2, 8), GIB);
        // 8 bytes of fp32 over 8 ranks: one element each, 32 bytes gathered.
        assert_eq!(Collective::AllGather.bytes(8, 4, 8), 32);
        assert_eq!(Collective::AllGather.bytes(100, 4, 3), 96);
    }

    #[test]
    fn expected_values_are_the_sums_of_rank_plus_one() {
        assert_eq!(Collective::AllReduce.expected(8, 0, 5), 36.0);
        assert_eq!(Collective::ReduceScatter.expected(2, 0, 0), 3.0);
        assert_eq!(Collective::AllGather.expected(4, 10, 0), 1.0);
        assert_eq!(Collective::AllGather.expected(4, 10, 39), 4.0);
        assert_eq!(Collective::Broadcast.expected(8, 0, 7), 1.0);
        // Every expected value at MAX_GPUS is an integer bf16 holds exactly (8 significant bits).
        let top = Collective::AllReduce.expected(MAX_GPUS, 0, 0);
        assert!(top <= 256.0 && top.fract() == 0.0, "{top}");
    }

    #[test]
    fn ddp_plan_buckets_like_pytorch() {
        let plan = DdpParams::default().plan();
        // 1.3e9 / 2048² = 309.9 → 310 layers of 4 Mi parameters, 8 MiB of bf16 gradients each.
        assert_eq!(plan.layers, 310);
        assert_eq!(plan.parameters, 310 * 2048 * 2048);
        assert_eq!(plan.gradient_bytes, plan.parameters * 2);
        // First bucket: one 8 MiB layer reaches the 1 MiB cap; then 4 layers (32 MiB ≥ 25 MiB) each.
        assert_eq!(plan.buckets[0], Bucket { first: 0, layers: 1, bytes: 8 * MIB });
        assert_eq!(plan.buckets[1], Bucket { first: 1, layers: 4, bytes: 32 * MIB });
        assert_eq!(plan.buckets.len(), 1 + 309usize.div_ceil(4));
        assert_eq!(plan.buckets.iter().map(|b| b.bytes).sum::<u64>(), plan.gradient_bytes);
        assert_eq!(plan.buckets.iter().map(|b| b.layers).sum::<u32>(), plan.layers);
        assert!((plan.forward_flops - 2.0 * plan.parameters as f64 * 4096.0).abs() < 1.0);
        assert!((plan.backward_flops - 2.0 * plan.forward_flops).abs() < 1.0);
        // A cap above the whole model: one layer, then everything else in one bucket.
        let big =
            DdpParams { parameters: 4 * 1024 * 1024 * 3, hidden: 1024, bucket_cap_mb: 1024, ..DdpParams::default() };
        let plan = big.plan();
        assert_eq!(plan.layers, 12);
        assert_eq!(plan.buckets.len(), 2);
        assert_eq!(plan.buckets[1], Bucket { first: 1, layers: 11, bytes: 11 * 2 * MIB });
    }

    #[test]
    fn defaults_validate_and_bad_values_say_what_is_allowed() {
        CollectivesParams::default().validate().unwrap();
        let bad = |p: CollectivesParams| p.validate().unwrap_err().to_string();
        let d = CollectivesParams::default;
        assert!(bad(CollectivesParams { collectives: vec![], ..d() }).contains("all_reduce, all_gather"));
        assert!(bad(CollectivesParams { sizes: vec![2 * GIB], ..d() }).contains("8 B to 1.00 GiB"));
        assert!(bad(CollectivesParams { sizes: vec![6], ..d() }).contains("multiple of 4"));
        assert!(bad(CollectivesParams { dtype: Dtype::Fp16, ..d() }).contains("'dtype' must be fp32 or bf16"));
        assert!(bad(CollectivesParams { repetitions: 0, ..d() }).contains("'repetitions' must be from 1 to 200"));
        let ddp = |f: fn(&mut DdpParams)| {
            let mut p = DdpParams::default();
            f(&mut p);
            bad(CollectivesParams { ddp: Some(p), ..d() })
        };
        assert!(ddp(|p| p.bucket_cap_mb = 0).contains("'ddp.bucket_cap_mb'"));
        assert!(ddp(|p| p.hidden = 1000).contains("multiple of 64"));
        assert!(ddp(|p| p.dtype = Dtype::Tf32).contains("'ddp.dtype' must be fp32 or bf16"));
        let json: CollectivesParams = serde_json::from_str(r#"{"collectives":["broadcast"],"ddp":null}"#).unwrap();
        assert_eq!(json.collectives, vec![Collective::Broadcast]);
        assert!(json.ddp.is_none());
        assert!(serde_json::from_str::<CollectivesParams>(r#"{"collectives":["all_to_all"]}"#).is_err());
    }

    #[test]
    fn gpus_resolve_to_the_servers() {
        let mut p = CollectivesParams::default();
        p.resolve_gpus(&[0, 1]).unwrap();
        assert_eq!(p.gpus, vec![0, 1]);
        let mut named = CollectivesParams { gpus: vec![1, 0, 1], ..CollectivesParams::default() };
        named.resolve_gpus(&[0, 1, 2]).unwrap();
        assert_eq!(named.gpus, vec![0, 1]);
        let mut unknown = CollectivesParams { gpus: vec![3], ..CollectivesParams::default() };
        assert!(unknown.resolve_gpus(&[0]).unwrap_err().0.contains("names GPU 3"));
        assert!(CollectivesParams::default().resolve_gpus(&[]).is_err());
    }
}
