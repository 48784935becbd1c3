//! The correctness checks behind every lab figure: pure functions from what a run observed
//! (bytes compared with a known pattern, sampled GEMM outputs, pool readings, kernel outputs)
//! to [`Check`]s. The CUDA executor feeds them what the GPU produced; the simulated executor
//! feeds them model data that is right unless `--simulate-fault wrong-result:INDEX` says
//! otherwise, so the tests that inject a fault run this same code.

use crate::values::CopyKind;
use shared::lab::{Check, MemoryStep};
use shared::units::format_bytes;

mod gemm;

#[cfg(feature = "cuda")]
pub use self::gemm::GEMM_SAMPLED;
pub use self::gemm::{GEMM_TILE, GemmErrors, GemmSampler, GemmSums, GemmTiles, gemm, gemm_sums, gemm_tiles, tile_at};

/// The 8 pattern bytes of 8-byte word `word` for `seed` (little-endian). The CUDA kernels in
/// `cuda::CHECK_KERNELS` compute the same function; change both together.
pub fn pattern_word(seed: u64, word: u64) -> u64 {
    let mut x = seed ^ word.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    x
}

/// Byte `index` of the pattern for `seed`.
fn pattern_byte(seed: u64, index: u64) -> u8 {
    (pattern_word(seed, index >> 3) >> ((index & 7) * 8)) as u8
}

/// Writes the pattern for `seed` into `buf`, which starts at byte `offset` of the pattern.
pub fn fill_pattern(buf: &mut [u8], seed: u64, offset: u64) {
    let mut index = offset;
    let head = usize::try_from((8 - offset % 8) % 8).unwrap_or(0).min(buf.len());
    let (first, rest) = buf.split_at_mut(head);
    for b in first {
        *b = pattern_byte(seed, index);
        index += 1;
    }
    let mut words = rest.chunks_exact_mut(8);
    for chunk in &mut words {
        chunk.copy_from_slice(&pattern_word(seed, index >> 3).to_le_bytes());
        index += 8;
    }
    for b in words.into_remainder() {
        *b = pattern_byte(seed, index);
        index += 1;
    }
}

/// Bytes compared with the pattern and how many differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PatternCompare {
    pub compared: u64,
    pub differ: u64,
    /// The first byte that differs.
    pub first: Option<u64>,
}

impl PatternCompare {
    /// Adds a later part of the same buffer.
    pub fn add(&mut self, other: PatternCompare) {
        self.compared += other.compared;
        self.differ += other.differ;
        self.first = self.first.or(other.first);
    }

    fn describe(&self) -> String {
        match self.first {
            _ if self.compared == 0 => "nothing was compared".to_owned(),
            Some(first) => {
                format!("{} of {} bytes differ, the first at byte {first}", self.differ, format_bytes(self.compared))
            }
            None => format!("all {} byte-exact", format_bytes(self.compared)),
        }
    }

    fn passed(&self) -> bool {
        self.compared > 0 && self.differ == 0
    }
}

/// Compares `buf`, which starts at byte `offset` of the pattern for `seed`, with the pattern.
pub fn compare_pattern(buf: &[u8], seed: u64, offset: u64) -> PatternCompare {
    let mut result = PatternCompare { compared: buf.len() as u64, ..PatternCompare::default() };
    let mut word = (u64::MAX, 0u64);
    for (i, &b) in buf.iter().enumerate() {
        let index = offset + i as u64;
        if word.0 != index >> 3 {
            word = (index >> 3, pattern_word(seed, index >> 3));
        }
        if b != (word.1 >> ((index & 7) * 8)) as u8 {
            result.differ += 1;
            result.first = result.first.or(Some(index));
        }
    }
    result
}

/// The pattern a copy of `bytes` of kind `copy` carries: different for every kind and size, so
/// a copy that did not happen (the destination still holds an earlier size's pattern) fails.
pub fn copy_seed(copy: CopyKind, bytes: u64) -> u64 {
    let kind =
        copy.name().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    pattern_word(kind, bytes)
}

/// A poison for the destination before it is copied to: anything but the pattern (the CUDA copies'
/// alone poison: the simulation writes nothing it could skip).
#[cfg(any(feature = "cuda", test))]
pub fn poison_seed(seed: u64) -> u64 {
    !seed
}

/// One copy size's destination after its timed copies, compared with the source's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyVerification {
    pub copy: CopyKind,
    pub bytes: u64,
    pub compare: PatternCompare,
}

/// One check per copy kind timed: every size timed (`timed`: kind and bytes) must have been
/// verified, and every verified destination must hold the source's pattern byte for byte.
pub fn copies(timed: &[(CopyKind, u64)], verified: &[CopyVerification]) -> Vec<Check> {
    let mut kinds: Vec<CopyKind> = Vec::new();
    for &(copy, _) in timed {
        if !kinds.contains(&copy) {
            kinds.push(copy);
        }
    }
    kinds
        .into_iter()
        .map(|copy| {
            let mut problems = Vec::new();
            let mut compared = 0;
            let sizes: Vec<u64> = timed.iter().filter(|(c, _)| *c == copy).map(|(_, b)| *b).collect();
            for &bytes in &sizes {
                match verified.iter().find(|v| v.copy == copy && v.bytes == bytes) {
                    None => problems.push(format!("{}: not verified", format_bytes(bytes))),
                    Some(v) if !v.compare.passed() => {
                        problems.push(format!("{}: {}", format_bytes(bytes), v.compare.describe()));
                    }
                    Some(v) => compared += v.compare.compared,
                }
            }
            let detail = if problems.is_empty() {
                format!(
                    "destination compared with the source's pattern after the timed copies of each of the {} sizes \
                     ({} in all): byte-exact",
                    sizes.len(),
                    format_bytes(compared)
                )
            } else {
                problems.join("; ")
            };
            Check {
                name: format!("{} copies are byte-exact at every size", copy.name()),
                passed: problems.is_empty(),
                detail,
            }
        })
        .collect()
}

/// The pool's readings around the trim: after the frees (the step before the trim) it holds more
/// than it hands out; after the trim (the last step) it holds no more than is still allocated.
pub fn memory(steps: &[MemoryStep]) -> Vec<Check> {
    let mut checks = Vec::new();
    let (Some(trimmed), Some(freed)) = (steps.last(), steps.iter().rev().nth(1)) else {
        return vec![Check {
            name: "the pool caches freed blocks".into(),
            passed: false,
            detail: format!("{} steps recorded; the check needs the steps before and after the trim", steps.len()),
        }];
    };
    checks.push(Check {
        name: "the pool caches freed blocks".into(),
        passed: freed.reserved > freed.allocated,
        detail: format!(
            "after the frees ({}): reserved {} vs allocated {}; reserved must be larger",
            freed.label,
            format_bytes(freed.reserved),
            format_bytes(freed.allocated)
        ),
    });
    checks.push(Check {
        name: "empty_cache returns the cached memory".into(),
        passed: freed.reserved > freed.allocated && trimmed.reserved <= trimmed.allocated,
        detail: format!(
            "reserved {} → {} after the trim, with {} still allocated; reserved must drop to what is allocated",
            format_bytes(freed.reserved),
            format_bytes(trimmed.reserved),
            format_bytes(trimmed.allocated)
        ),
    });
    checks
}

/// `count` indices spread over `0..n`, the first and the last included, ascending, each once.
pub fn spread(n: usize, count: usize) -> Vec<usize> {
    if n == 0 || count == 0 {
        return Vec::new();
    }
    if count >= n {
        return (0..n).collect();
    }
    let mut out: Vec<usize> = (0..count).map(|i| i * (n - 1) / (count - 1).max(1)).collect();
    out.dedup();
    out
}

/// What the streams experiment's kernels and copy produced, read back after the last round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamsOutputs {
    /// The copied buffer compared with the host's pattern.
    pub copied: PatternCompare,
    /// The GEMM's sampled output.
    pub gemm: GemmErrors,
    /// The GEMM's row and column sums.
    pub gemm_sums: GemmSums,
    /// What every timed GEMM left of the NaN poison written before it.
    pub poisoned: TimedGemms,
    /// Cycles each spin kernel of the last round says it spun (0: it never wrote).
    pub spun: Vec<u64>,
    /// Cycles each was asked to spin.
    pub cycles: u64,
    /// Spin kernels launched in the last round.
    pub launched: usize,
}

/// Timed GEMMs whose output was poisoned with NaN before them and counted after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimedGemms {
    /// GEMMs counted.
    pub checked: usize,
    /// GEMMs timed.
    pub expected: usize,
    /// Output values still holding the poison, summed over them.
    pub poisoned: u64,
}

/// The streams experiment's outputs: copied bytes, the GEMM (fp32 tolerance) and every spin kernel.
pub fn streams(o: &StreamsOutputs) -> Vec<Check> {
    let short = o.spun.iter().filter(|&&c| c < o.cycles).count();
    let all_ran = o.launched > 0 && o.spun.len() == o.launched && short == 0;
    vec![
        Check {
            name: "the copied bytes arrive intact".into(),
            passed: o.copied.passed(),
            detail: format!(
                "the device buffer, poisoned before each timed copy, compared with the host's pattern after each and \
                 at the end: {}",
                o.copied.describe()
            ),
        },
        Check {
            name: "every timed GEMM wrote all of its output".into(),
            passed: o.poisoned.expected > 0 && o.poisoned.checked == o.poisoned.expected && o.poisoned.poisoned == 0,
            detail: format!(
                "{} of {} timed GEMMs counted: {} output values still held the NaN written before them",
                o.poisoned.checked, o.poisoned.expected, o.poisoned.poisoned
            ),
        },
        gemm("the GEMM's output matches the host".into(), &o.gemm, crate::values::Dtype::Fp32.tolerance()),
        gemm_sums(
            "the GEMM's every row and column sum matches the host".into(),
            &o.gemm_sums,
            crate::values::Dtype::Fp32.tolerance(),
        ),
        Check {
            name: "every spin kernel ran to its end".into(),
            passed: all_ran,
            detail: format!(
                "{} of {} kernels wrote how long they spun; {short} spun less than the {} cycles asked",
                o.spun.len(),
                o.launched,
                o.cycles
            ),
        },
    ]
}

/// A p2p copy's destination after the copies of one direction and mode.
pub fn p2p_destination(from: u32, to: u32, peer: bool, compare: &PatternCompare) -> Check {
    let mode = if peer { "peer access enabled" } else { "peer access disabled" };
    Check {
        name: format!("GPU {from} → {to} copies are byte-exact, {mode}"),
        passed: compare.passed(),
        detail: format!("GPU {to}'s destination compared with GPU {from}'s source pattern: {}", compare.describe()),
    }
}

#[cfg(test)]
mod tests;
