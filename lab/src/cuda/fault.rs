//! Faults injected on purpose into the CUDA path, to show each correctness check catching what it
//! is there to catch on real hardware. Read from [`FAULT_VAR`] by `gpudash bench` alone; the server
//! never injects one.

/// The environment variable `gpudash bench` reads a fault from.
pub const FAULT_VAR: &str = "GPUDASH_BENCH_FAULT";

/// One fault, in the first place of its experiment that it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// transfer: the timed copies of the first copy kind and size are not made (the window is
    /// timed empty), so only the re-poisoned destination can tell.
    SkipCopy,
    /// precision: after each timed GEMM of the first type and size, a 32×32 tile of C is zeroed
    /// where that repetition's random-tile check looks, between the sampled rows and columns.
    CorruptTile,
    /// precision: the timed GEMMs of the first type and size are not made (their windows timed
    /// empty); streams: the timed rounds' GEMMs are not made. Only C's NaN poison, written before
    /// every timed GEMM, can tell.
    SkipGemm,
    /// precision: after the last timed GEMM of the first type and size, a 32×32 tile of C is zeroed
    /// at a random place on none of the sampled rows and columns, which no tile check reads.
    CorruptRandom,
    /// streams: the timed rounds' copies are not made (the destination is re-poisoned before each).
    SkipStreamCopy,
    /// streams: the timed rounds' last spin kernel is not launched.
    SkipSpin,
    /// p2p: the timed copies of the first pair's first mode are not made (each destination is
    /// re-poisoned after the warm-ups).
    SkipP2pCopy,
    /// memory: the last step's trim (empty_cache) is not made, so the pool keeps every freed block.
    SkipTrim,
    /// latency: the last of the queued counting kernels is not launched.
    SkipLaunch,
    /// transfer: the d2d copy kernel is handed its length rounded down to whole 16-byte vectors, so
    /// the byte tail (and an unaligned copy's last bytes) are never copied.
    KernelNoTail,
    /// collectives: the timed calls of the first collective at the first size are not made (each
    /// rank's output is poisoned after the warm-ups).
    SkipCollective,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::SkipCopy,
        Fault::CorruptTile,
        Fault::SkipGemm,
        Fault::CorruptRandom,
        Fault::SkipStreamCopy,
        Fault::SkipSpin,
        Fault::SkipP2pCopy,
        Fault::SkipTrim,
        Fault::SkipLaunch,
        Fault::KernelNoTail,
        Fault::SkipCollective,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::SkipCopy => "skip-copy",
            Fault::CorruptTile => "corrupt-tile",
            Fault::SkipGemm => "skip-gemm",
            Fault::CorruptRandom => "corrupt-random",
            Fault::SkipStreamCopy => "skip-stream-copy",
            Fault::SkipSpin => "skip-spin",
            Fault::SkipP2pCopy => "skip-p2p-copy",
            Fault::SkipTrim => "skip-trim",
            Fault::SkipLaunch => "skip-launch",
            Fault::KernelNoTail => "kernel-no-tail",
            Fault::SkipCollective => "skip-collective",
        }
    }

    /// A fault by name; the error lists the names allowed.
    pub fn parse(text: &str) -> Result<Fault, String> {
        let text = text.trim();
        Self::ALL.into_iter().find(|f| f.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|f| f.name()).collect();
            format!("{FAULT_VAR}='{text}' is not a fault; use one of {} (or leave it unset)", names.join(", "))
        })
    }

    /// The fault [`FAULT_VAR`] names, if it is set and not empty.
    pub fn from_env() -> Result<Option<Fault>, String> {
        match std::env::var(FAULT_VAR) {
            Ok(text) if !text.trim().is_empty() => Self::parse(&text).map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_by_name_and_others_refused_with_the_names() {
        for fault in Fault::ALL {
            assert_eq!(Fault::parse(fault.name()), Ok(fault));
        }
        let refused = Fault::parse("melt").unwrap_err();
        assert!(
            refused.contains(
                "skip-copy, corrupt-tile, skip-gemm, corrupt-random, skip-stream-copy, skip-spin, skip-p2p-copy, \
                 skip-trim, skip-launch, kernel-no-tail, skip-collective"
            ),
            "{refused}"
        );
    }
}
