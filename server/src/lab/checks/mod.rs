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
    pub fn columns(&mut self, j0: usize, c: &[f64], a: impl Fn(usize) -> f64 + Sync, b: impl Fn(usize) -> f64) {
        let n = self.n;
        for (dj, got) in c.chunks_exact(n).enumerate() {
            let j = j0 + dj;
            let b_col: Vec<f64> = (0..n).map(|l| b(l + j * n)).collect();
            if self.cols.contains(&j) {
                let reference = column_reference(n, &a, &b_col);
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

/// Column `A·b_col` of an n×n column-major A (element `a(i)`), its rows split over the host's cores:
/// a whole column at n = 8192 is 67 M multiply-adds, most of a GEMM check's time on one core.
fn column_reference(n: usize, a: &(impl Fn(usize) -> f64 + Sync), b_col: &[f64]) -> Vec<f64> {
    let mut reference = vec![0.0; n];
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (t, part) in reference.chunks_mut(per).enumerate() {
            scope.spawn(move || {
                let i0 = t * per;
                for (l, &bl) in b_col.iter().enumerate() {
                    for (k, r) in part.iter_mut().enumerate() {
                        *r += a(i0 + k + l * n) * bl;
                    }
                }
            });
        }
    });
    reference
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

/// The side of the random tile checked after every timed GEMM (smaller matrices: their order).
pub const GEMM_TILE: usize = 32;

/// Random tiles of a GEMM's output, one read after each timed repetition: the sampled rows and
/// columns see only the last repetition's output and 0.4% of it at n = 8192; a tile per repetition
/// sees every timed GEMM, somewhere new each time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GemmTiles {
    pub errors: GemmErrors,
    /// Tiles compared (one per timed repetition).
    pub tiles: u32,
    /// The seed the tiles' positions came from (printed, so a failure can be found again).
    pub seed: u64,
}

impl GemmTiles {
    pub fn new(n: usize, seed: u64) -> Self {
        Self { errors: GemmErrors { order: n, ..GemmErrors::default() }, tiles: 0, seed }
    }

    /// The tile at rows `i0..`, columns `j0..` of C = A·B (n×n, column-major; `a(i)`, `b(i)` elements of
    /// A and B), read from the GPU as `got` (column-major, [`GEMM_TILE`] or n rows a column).
    pub fn add(&mut self, (i0, j0): (usize, usize), got: &[f64], a: impl Fn(usize) -> f64, b: impl Fn(usize) -> f64) {
        let n = self.errors.order;
        let t = GEMM_TILE.min(n);
        // The tile's rows of A, gathered once (A is column-major: a row is strided).
        let rows: Vec<Vec<f64>> = (0..t).map(|di| (0..n).map(|l| a(i0 + di + l * n)).collect()).collect();
        for (dj, column) in got.chunks_exact(t).enumerate() {
            let j = j0 + dj;
            let b_col: Vec<f64> = (0..n).map(|l| b(l + j * n)).collect();
            for (di, &g) in column.iter().enumerate() {
                let reference: f64 = rows[di].iter().zip(&b_col).map(|(x, y)| x * y).sum();
                let error = if g.is_finite() { (g - reference).abs() } else { f64::INFINITY };
                self.errors.compared += 1;
                if error > self.errors.worst || (error.is_nan() && !self.errors.worst.is_nan()) {
                    self.errors.worst = error;
                    self.errors.at = (i0 + di, j);
                }
            }
        }
        self.tiles += 1;
    }
}

/// Where repetition `repetition`'s tile lies in an n×n output, from `seed`.
pub fn tile_at(n: usize, seed: u64, repetition: u32) -> (usize, usize) {
    let t = GEMM_TILE.min(n);
    let mut rng = fastrand::Rng::with_seed(seed ^ u64::from(repetition).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (rng.usize(0..=n - t), rng.usize(0..=n - t))
}

/// What the tile check says: one tile per timed repetition (`repetitions`), each within `tolerance`.
pub fn gemm_tiles(name: String, tiles: &GemmTiles, repetitions: u32, tolerance: f64) -> Check {
    let n = tiles.errors.order;
    let t = GEMM_TILE.min(n);
    let scaled = tiles.errors.worst / (n as f64).sqrt();
    let complete = tiles.tiles == repetitions && tiles.errors.compared as usize == repetitions as usize * t * t;
    Check {
        name,
        passed: n > 0 && repetitions > 0 && complete && scaled.is_finite() && scaled <= tolerance,
        detail: format!(
            "{} of {repetitions} timed repetitions had a random {t}×{t} tile read back (seed {}): max error/sqrt(k) \
             {scaled:.2e} at row {}, column {} (tolerance {tolerance:.0e})",
            tiles.tiles, tiles.seed, tiles.errors.at.0, tiles.errors.at.1
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
mod tests;
