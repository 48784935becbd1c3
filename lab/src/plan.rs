//! What an experiment will take before anything runs (device, pinned and host memory) and what
//! a bad parameter says: the types every kind's [`Experiment`](super::experiments::Experiment)
//! answers with (`experiments::validate` and `experiments::footprint` ask the kind).

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

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
