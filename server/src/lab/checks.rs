//! The correctness checks behind every lab figure: pure functions from what a run observed
//! (bytes compared with a known pattern, sampled GEMM outputs, pool readings, kernel outputs)
//! to [`Check`]s. The CUDA executor feeds them what the GPU produced; the simulated executor
//! feeds them model data that is right unless `--simulate-fault wrong-result:INDEX` says
//! otherwise, so the tests that inject a fault run this same code.

use shared::lab::{Check, CopyKind, MemoryStep};
use shared::units::format_bytes;

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

/// A poison for the destination before it is copied to: anything but the pattern.
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

/// Rows and columns of a GEMM's output compared with the host.
pub const GEMM_SAMPLED: usize = 16;

/// The worst error found comparing a GEMM's output with the host.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GemmErrors {
    /// `max |gpu - host|` (infinite where the GPU gave a non-finite value).
    pub worst: f64,
    /// (row, column) of the worst.
    pub at: (usize, usize),
    /// Elements compared.
    pub compared: u64,
    /// Order of the matrix compared.
    pub order: usize,
}

/// Compares C = A·B (n×n, column-major) with the host over [`GEMM_SAMPLED`] whole rows and
/// [`GEMM_SAMPLED`] whole columns spread over C (the last row and column included). C is handed
/// over in chunks of whole columns, so the GPU's output never has to sit in host memory at once.
pub struct GemmSampler {
    n: usize,
    rows: Vec<usize>,
    cols: Vec<usize>,
    /// The sampled rows of A.
    a_rows: Vec<Vec<f64>>,
    pub errors: GemmErrors,
}

impl GemmSampler {
    /// `a(i)` is element `i` of A (column-major).
    pub fn new(n: usize, a: impl Fn(usize) -> f64) -> Self {
        let rows = spread(n, GEMM_SAMPLED);
        let a_rows = rows.iter().map(|&r| (0..n).map(|l| a(r + l * n)).collect()).collect();
        Self {
            n,
            cols: spread(n, GEMM_SAMPLED),
            rows,
            a_rows,
            errors: GemmErrors { order: n, ..GemmErrors::default() },
        }
    }

    /// Columns `j0..` of C (`c`, a multiple of n values), with `a(i)` and `b(i)` elements of A and B.
    pub fn columns(&mut self, j0: usize, c: &[f64], a: impl Fn(usize) -> f64, b: impl Fn(usize) -> f64) {
        let n = self.n;
        for (dj, got) in c.chunks_exact(n).enumerate() {
            let j = j0 + dj;
            let b_col: Vec<f64> = (0..n).map(|l| b(l + j * n)).collect();
            if self.cols.contains(&j) {
                let mut reference = vec![0.0; n];
                for (l, &bl) in b_col.iter().enumerate() {
                    for (i, r) in reference.iter_mut().enumerate() {
                        *r += a(i + l * n) * bl;
                    }
                }
                for (i, (&g, &r)) in got.iter().zip(&reference).enumerate() {
                    self.record(i, j, g, r);
                }
            } else {
                for k in 0..self.rows.len() {
                    let i = self.rows[k];
                    let r: f64 = self.a_rows[k].iter().zip(&b_col).map(|(x, y)| x * y).sum();
                    self.record(i, j, got[i], r);
                }
            }
        }
    }

    fn record(&mut self, i: usize, j: usize, got: f64, reference: f64) {
        let error = if got.is_finite() { (got - reference).abs() } else { f64::INFINITY };
        self.errors.compared += 1;
        if error > self.errors.worst || (error.is_nan() && !self.errors.worst.is_nan()) {
            self.errors.worst = error;
            self.errors.at = (i, j);
        }
    }
}

/// What a GEMM check says: the sampled output within `tolerance` (of `max error / sqrt(k)`).
pub fn gemm(name: String, errors: &GemmErrors, tolerance: f64) -> Check {
    let n = errors.order;
    let scaled = errors.worst / (n as f64).sqrt();
    let expected = 2 * GEMM_SAMPLED.min(n) * n - GEMM_SAMPLED.min(n).pow(2);
    Check {
        name,
        passed: n > 0 && errors.compared as usize >= expected && scaled.is_finite() && scaled <= tolerance,
        detail: format!(
            "{} elements compared ({} whole rows and columns spread over the {n}×{n} output, the last included): \
             max error/sqrt(k) {scaled:.2e} at row {}, column {} (tolerance {tolerance:.0e})",
            errors.compared,
            GEMM_SAMPLED.min(n),
            errors.at.0,
            errors.at.1
        ),
    }
}

/// What the streams experiment's kernels and copy produced, read back after the last round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamsOutputs {
    /// The copied buffer compared with the host's pattern.
    pub copied: PatternCompare,
    /// The GEMM's sampled output.
    pub gemm: GemmErrors,
    /// Cycles each spin kernel of the last round says it spun (0: it never wrote).
    pub spun: Vec<u64>,
    /// Cycles each was asked to spin.
    pub cycles: u64,
    /// Spin kernels launched in the last round.
    pub launched: usize,
}

/// The streams experiment's outputs: copied bytes, the GEMM (fp32 tolerance) and every spin kernel.
pub fn streams(o: &StreamsOutputs) -> Vec<Check> {
    let short = o.spun.iter().filter(|&&c| c < o.cycles).count();
    let all_ran = o.launched > 0 && o.spun.len() == o.launched && short == 0;
    vec![
        Check {
            name: "the copied bytes arrive intact".into(),
            passed: o.copied.passed(),
            detail: format!("the device buffer compared with the host's pattern: {}", o.copied.describe()),
        },
        gemm("the GEMM's output matches the host".into(), &o.gemm, shared::lab::Dtype::Fp32.tolerance()),
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_depends_on_seed_and_position_and_reads_back_at_any_offset() {
        let mut buf = vec![0u8; 1000];
        fill_pattern(&mut buf, 7, 3);
        assert_eq!(compare_pattern(&buf, 7, 3), PatternCompare { compared: 1000, differ: 0, first: None });
        // The bytes the word function gives, little-endian.
        assert_eq!(buf[5], pattern_word(7, 1).to_le_bytes()[0]);
        // Another seed (a stale buffer of another size) or another offset (a copy from the wrong place) fails.
        assert!(compare_pattern(&buf, 8, 3).differ > 900);
        assert!(compare_pattern(&buf, 7, 4099).differ > 900);
        assert_ne!(copy_seed(CopyKind::D2d, 4096), copy_seed(CopyKind::D2d, 16384));
        assert_ne!(copy_seed(CopyKind::D2d, 4096), copy_seed(CopyKind::H2dPinned, 4096));
    }

    #[test]
    fn a_copy_check_fails_on_a_flipped_byte_a_poisoned_destination_or_a_size_not_verified() {
        let seed = copy_seed(CopyKind::H2dPinned, 4096);
        let mut dst = vec![0u8; 4096];
        fill_pattern(&mut dst, seed, 0);
        let ok = compare_pattern(&dst, seed, 0);
        let verified = |compare| CopyVerification { copy: CopyKind::H2dPinned, bytes: 4096, compare };
        let timed = [(CopyKind::H2dPinned, 4096)];
        assert!(copies(&timed, &[verified(ok)])[0].passed);
        dst[4095] ^= 0x10;
        let check = &copies(&timed, &[verified(compare_pattern(&dst, seed, 0))])[0];
        assert!(!check.passed && check.detail.contains("first at byte 4095"), "{check:?}");
        fill_pattern(&mut dst, poison_seed(seed), 0);
        assert!(!copies(&timed, &[verified(compare_pattern(&dst, seed, 0))])[0].passed, "a copy that never ran");
        let both = [(CopyKind::H2dPinned, 4096), (CopyKind::H2dPinned, 8192)];
        let check = &copies(&both, &[verified(ok)])[0];
        assert!(!check.passed && check.detail.contains("8.00 KiB: not verified"), "{check:?}");
        assert!(!copies(&timed, &[verified(PatternCompare::default())])[0].passed, "nothing compared");
    }

    fn step(label: &str, allocated: u64, reserved: u64) -> MemoryStep {
        MemoryStep { label: label.into(), allocated, reserved, nvml_used: None }
    }

    #[test]
    fn the_memory_checks_want_a_cache_after_the_frees_and_none_after_the_trim() {
        let gib = 1 << 30;
        let good = [step("start", 0, 0), step("free all", 0, 2 * gib), step("empty_cache", 0, 0)];
        assert!(memory(&good).iter().all(|c| c.passed), "{:?}", memory(&good));
        // Nothing cached: both fail (the old check passed whenever reserved was 0 before the trim).
        let uncached = [step("start", 0, 0), step("free all", 0, 0), step("empty_cache", 0, 0)];
        assert!(memory(&uncached).iter().all(|c| !c.passed));
        // The trim kept memory nothing uses.
        let kept = [step("free all", gib, 3 * gib), step("empty_cache", gib, 2 * gib)];
        let checks = memory(&kept);
        assert!(checks[0].passed && !checks[1].passed, "{checks:?}");
        assert!(checks[1].detail.contains("1.00 GiB still allocated"), "{checks:?}");
        assert!(!memory(&[])[0].passed);
    }

    #[test]
    fn spread_takes_the_first_and_the_last() {
        assert_eq!(spread(100, 4), vec![0, 33, 66, 99]);
        assert_eq!(spread(3, 16), vec![0, 1, 2]);
        assert_eq!(spread(0, 16), Vec::<usize>::new());
    }

    /// C = A·B for n×n column-major matrices, in f64.
    fn product(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; n * n];
        for j in 0..n {
            for l in 0..n {
                for i in 0..n {
                    c[i + j * n] += a[i + l * n] * b[l + j * n];
                }
            }
        }
        c
    }

    fn sampled(n: usize, a: &[f64], b: &[f64], c: &[f64]) -> GemmErrors {
        let mut sampler = GemmSampler::new(n, |i| a[i]);
        for (k, chunk) in c.chunks(5 * n).enumerate() {
            sampler.columns(5 * k, chunk, |i| a[i], |i| b[i]);
        }
        sampler.errors
    }

    #[test]
    fn the_gemm_check_finds_a_wrong_element_in_any_sampled_row_or_column() {
        let n = 40;
        let mut rng = fastrand::Rng::with_seed(1);
        let a: Vec<f64> = (0..n * n).map(|_| rng.f64() - 0.5).collect();
        let b: Vec<f64> = (0..n * n).map(|_| rng.f64() - 0.5).collect();
        let c = product(n, &a, &b);
        let right = sampled(n, &a, &b, &c);
        assert_eq!(right.compared, (2 * 16 * n - 256) as u64);
        assert!(gemm("ok".into(), &right, 1e-4).passed, "{:?}", gemm("ok".into(), &right, 1e-4));
        // The last row, a middle column (outside any corner tile); the last column, a middle row.
        for (i, j) in [(n - 1, 20), (17, n - 1), (0, 0)] {
            let mut wrong = c.clone();
            wrong[i + j * n] += 0.5;
            let check = gemm("wrong".into(), &sampled(n, &a, &b, &wrong), 1e-4);
            assert!(!check.passed && check.detail.contains(&format!("row {i}, column {j}")), "{check:?}");
        }
        let mut nan = c.clone();
        nan[5 + 39 * n] = f64::NAN;
        assert!(!gemm("nan".into(), &sampled(n, &a, &b, &nan), 1e-4).passed);
        // Fewer elements than the sampling promises (a chunk never handed over) fails too.
        let mut short = GemmSampler::new(n, |i| a[i]);
        short.columns(0, &c[..n * 10], |i| a[i], |i| b[i]);
        assert!(!gemm("short".into(), &short.errors, 1e-4).passed);
    }

    #[test]
    fn the_streams_checks_fail_on_each_wrong_output() {
        let good = StreamsOutputs {
            copied: PatternCompare { compared: 1 << 20, differ: 0, first: None },
            gemm: GemmErrors { worst: 0.0, at: (0, 0), compared: 2 * 16 * 64 - 256, order: 64 },
            spun: vec![1000; 8],
            cycles: 1000,
            launched: 8,
        };
        assert!(streams(&good).iter().all(|c| c.passed), "{:?}", streams(&good));
        let failed =
            |o: StreamsOutputs| streams(&o).into_iter().filter(|c| !c.passed).map(|c| c.name).collect::<Vec<_>>();
        let copied = PatternCompare { differ: 1, first: Some(9), ..good.copied };
        assert_eq!(failed(StreamsOutputs { copied, ..good.clone() }), ["the copied bytes arrive intact"]);
        let gemm = GemmErrors { worst: 1.0, ..good.gemm };
        assert_eq!(failed(StreamsOutputs { gemm, ..good.clone() }), ["the GEMM's output matches the host"]);
        let mut spun = good.spun.clone();
        spun[3] = 0;
        assert_eq!(failed(StreamsOutputs { spun, ..good }), ["every spin kernel ran to its end"]);
        assert_eq!(failed(StreamsOutputs { spun: vec![1000; 7], ..good }), ["every spin kernel ran to its end"]);
    }

    #[test]
    fn the_p2p_check_names_direction_and_mode() {
        let ok = PatternCompare { compared: 64 << 20, differ: 0, first: None };
        let check = p2p_destination(1, 0, false, &ok);
        assert!(check.passed);
        assert_eq!(check.name, "GPU 1 → 0 copies are byte-exact, peer access disabled");
        assert!(!p2p_destination(0, 1, true, &PatternCompare { differ: 3, first: Some(0), ..ok }).passed);
    }
}
