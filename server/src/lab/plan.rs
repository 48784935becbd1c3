//! Checking an experiment's parameters and working out what it will take
//! (device, pinned and host memory) before anything runs: each kind answers
//! through its [`Experiment`](super::experiments::Experiment).

use shared::lab::ExperimentParams;

use super::experiments::{self, MIB};

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

/// Checks every parameter, naming the first bad one and its allowed range.
pub fn validate(params: &ExperimentParams) -> Result<(), ParamError> {
    experiments::of(params).validate(params)
}

/// Peak memory of a (validated) experiment; for multi-GPU kinds, on each GPU it involves.
pub fn footprint(params: &ExperimentParams) -> Footprint {
    experiments::of(params).footprint(params)
}

/// Runs that would likely pass the time limit are refused up front with this estimate, ms.
/// A rough upper bound from the work the parameters ask for, not a promise.
pub fn estimate_ms(params: &ExperimentParams) -> u64 {
    experiments::of(params).estimate_ms(params)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::lab::experiments::GIB;
    use shared::lab::{
        CopyKind, ExperimentKind, LatencyParams, MemoryParams, PrecisionParams, StreamsParams, TransferParams,
    };

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
