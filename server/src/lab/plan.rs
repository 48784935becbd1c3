//! Checking an experiment's parameters and working out what it will take
//! (device, pinned and host memory) before anything runs.

use shared::lab::{
    ExperimentParams, LatencyParams, MemoryParams, P2pParams, PrecisionParams, StreamsParams, TransferParams,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// What a CUDA context, cuBLAS and the kernels take on the device besides the experiment's buffers.
pub const CONTEXT_OVERHEAD: u64 = 768 * MIB;

/// A parameter out of range, with what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

/// Memory an experiment asks for at its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footprint {
    /// Buffers on the device, not counting [`CONTEXT_OVERHEAD`].
    pub device: u64,
    pub pinned_host: u64,
    pub host: u64,
}

impl Footprint {
    /// Host memory of both kinds: what the host-memory guard counts.
    pub fn host_total(&self) -> u64 {
        self.pinned_host.saturating_add(self.host)
    }
}

fn range<T: PartialOrd + std::fmt::Display + Copy>(
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

fn bytes(name: &str, value: u64, min: u64, max: u64) -> Result<(), ParamError> {
    let hint = format!(" bytes ({} to {})", shared::units::format_bytes(min), shared::units::format_bytes(max));
    range(name, value, min, max, &hint)
}

/// Checks every parameter, naming the first bad one and its allowed range.
pub fn validate(params: &ExperimentParams) -> Result<(), ParamError> {
    match params {
        ExperimentParams::Memory(p) => validate_memory(p),
        ExperimentParams::Transfer(p) => validate_transfer(p),
        ExperimentParams::Streams(p) => validate_streams(p),
        ExperimentParams::Precision(p) => validate_precision(p),
        ExperimentParams::Latency(p) => validate_latency(p),
        ExperimentParams::P2p(p) => validate_p2p(p),
    }
}

fn validate_memory(p: &MemoryParams) -> Result<(), ParamError> {
    bytes("block_bytes", p.block_bytes, MIB, 16 * GIB)?;
    range("blocks", p.blocks, 1, 64, "")?;
    range("free_every", p.free_every, 1, 64, "")?;
    range("repetitions", p.repetitions, 1, 100, "")
}

fn validate_transfer(p: &TransferParams) -> Result<(), ParamError> {
    if p.sizes.is_empty() || p.sizes.len() > 32 {
        return Err(ParamError(format!("'sizes' must list 1 to 32 sizes, got {}", p.sizes.len())));
    }
    for &size in &p.sizes {
        bytes("sizes", size, 4 * KIB, GIB)?;
    }
    if p.copies.is_empty() {
        return Err(ParamError(format!("'copies' must name at least one of {}", shared::lab::CopyKind::names())));
    }
    range("warmup", p.warmup, 0, 100, "")?;
    range("repetitions", p.repetitions, 1, 1000, "")
}

fn validate_streams(p: &StreamsParams) -> Result<(), ParamError> {
    bytes("copy_bytes", p.copy_bytes, MIB, 4 * GIB)?;
    range("gemm_size", p.gemm_size, 256, 16384, "")?;
    range("kernels", p.kernels, 2, 32, "")?;
    range("kernel_us", p.kernel_us, 10, 100_000, " µs")?;
    range("warmup", p.warmup, 0, 20, "")?;
    range("repetitions", p.repetitions, 1, 100, "")
}

fn validate_precision(p: &PrecisionParams) -> Result<(), ParamError> {
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

fn validate_latency(p: &LatencyParams) -> Result<(), ParamError> {
    range("warmup", p.warmup, 0, 10_000, "")?;
    range("repetitions", p.repetitions, 10, 100_000, "")
}

fn validate_p2p(p: &P2pParams) -> Result<(), ParamError> {
    bytes("size", p.size, MIB, 4 * GIB)?;
    range("warmup", p.warmup, 0, 20, "")?;
    range("repetitions", p.repetitions, 1, 100, "")?;
    if p.pairs.len() > 64 {
        return Err(ParamError(format!("'pairs' must list at most 64 pairs, got {}", p.pairs.len())));
    }
    Ok(())
}

/// Peak memory of a (validated) experiment; for p2p, on each GPU it involves.
pub fn footprint(params: &ExperimentParams) -> Footprint {
    match params {
        // Every block, plus one more for the fresh-allocation timing.
        ExperimentParams::Memory(p) => {
            Footprint { device: (u64::from(p.blocks) + 1) * p.block_bytes, ..Footprint::default() }
        }
        ExperimentParams::Transfer(p) => {
            let max = p.sizes.iter().copied().max().unwrap_or(0);
            let uses = |kinds: &[shared::lab::CopyKind]| p.copies.iter().any(|c| kinds.contains(c));
            use shared::lab::CopyKind::{D2d, D2dKernel, D2hPageable, D2hPinned, H2dPageable, H2dPinned};
            Footprint {
                device: if uses(&[D2d, D2dKernel]) { 2 * max } else { max },
                pinned_host: if uses(&[H2dPinned, D2hPinned]) { max } else { 0 },
                host: if uses(&[H2dPageable, D2hPageable]) { max } else { 0 },
            }
        }
        ExperimentParams::Streams(p) => {
            let matrix = u64::from(p.gemm_size).pow(2) * 4;
            Footprint { device: p.copy_bytes + 3 * matrix, pinned_host: p.copy_bytes, host: 0 }
        }
        ExperimentParams::Precision(p) => {
            let n = u64::from(p.sizes.iter().copied().max().unwrap_or(0));
            // A, B and C in fp32 at most; on the host, A and B in fp32 plus one converted pair.
            Footprint { device: 3 * n * n * 4, pinned_host: 0, host: n * n * (2 * 4 + 2 * 2) }
        }
        ExperimentParams::Latency(_) => Footprint { device: MIB, ..Footprint::default() },
        // A source and a destination of `size` on every GPU (bidirectional copies use both);
        // the driver's staging buffers for peer-disabled copies are its own.
        ExperimentParams::P2p(p) => Footprint { device: 2 * p.size + MIB, ..Footprint::default() },
    }
}

/// Runs that would likely pass the time limit are refused up front with this estimate, ms.
/// A rough upper bound from the work the parameters ask for, not a promise.
pub fn estimate_ms(params: &ExperimentParams) -> u64 {
    let ms = match params {
        ExperimentParams::Memory(p) => 50.0 + f64::from(p.blocks) * 2.0 + f64::from(p.repetitions) * 20.0,
        ExperimentParams::Transfer(p) => {
            // Pageable copies at ~5 GB/s bound the sweep.
            let bytes: u64 = p.sizes.iter().sum();
            let copies = p.copies.len() as f64 * f64::from(p.warmup + p.repetitions);
            bytes as f64 / 5e6 * copies + 1000.0
        }
        ExperimentParams::Streams(p) => {
            let gemm_ms = 2.0 * f64::from(p.gemm_size).powi(3) / 40e9;
            f64::from(p.warmup + p.repetitions) * (4.0 * gemm_ms + 2.0 * f64::from(p.kernels * p.kernel_us) / 1e3)
                + 2000.0
        }
        ExperimentParams::Precision(p) => {
            let rounds = f64::from(p.warmup + p.repetitions) * p.dtypes.len() as f64;
            p.sizes.iter().map(|&n| 2.0 * f64::from(n).powi(3) / 40e9 * rounds + 1500.0).sum()
        }
        ExperimentParams::Latency(p) => f64::from(p.warmup + p.repetitions) * 5.0 * 0.02 + 1000.0,
        ExperimentParams::P2p(p) => {
            // Per pair: both directions and bidirectional, peer-disabled copies at ~10 GB/s bound it.
            let copies = f64::from(p.warmup + p.repetitions) * 4.0;
            p.pairs.len().max(1) as f64 * (copies * p.size as f64 / 1e7 + 500.0) + 1000.0
        }
    };
    ms as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::lab::{CopyKind, ExperimentKind};

    #[test]
    fn defaults_are_valid() {
        for kind in ExperimentKind::ALL {
            validate(&kind.default_params()).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
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
