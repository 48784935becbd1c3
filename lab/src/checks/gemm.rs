//! The GEMM checks: C = A·B compared with the host over whole sampled rows and columns, a random tile
//! after every timed repetition, and every row's and column's sum (a checksum that sees all of C).

use shared::lab::Check;

use super::spread;

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
    /// Σ_i A[i, l] for each l: column j of C must sum to this row times B's column j.
    a_column_sums: Vec<f64>,
    /// Σ_j B[l, j] over the columns seen: row i of C must sum to A's row i times this.
    b_row_sums: Vec<f64>,
    /// Σ_j C[i, j] over the columns seen.
    c_row_sums: Vec<f64>,
    /// Columns seen (the row sums are whole once all n are).
    seen: usize,
    sums: GemmSums,
}

/// Every row's and every column's sum of a GEMM's output C against the host's A·(B·1) and (1ᵀA)·B:
/// a checksum that sees all of C (a wrong or missing element anywhere moves its row's and column's
/// sums), where the sampled rows and columns and the tiles see a part of it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GemmSums {
    /// `max |sum(gpu) - sum(host)|` (infinite where a sum is not finite: a NaN left in C).
    pub worst: f64,
    /// ("row" or "column", index) of the worst.
    pub at: (&'static str, usize),
    /// Sums compared (2n when every column arrived).
    pub compared: u64,
    /// Order of the matrix compared.
    pub order: usize,
}

impl GemmSums {
    fn record(&mut self, line: &'static str, index: usize, got: f64, reference: f64) {
        let error = if got.is_finite() { (got - reference).abs() } else { f64::INFINITY };
        self.compared += 1;
        if error > self.worst || (error.is_nan() && !self.worst.is_nan()) {
            self.worst = error;
            self.at = (line, index);
        }
    }
}

impl GemmSampler {
    /// `a(i)` is element `i` of A (column-major).
    pub fn new(n: usize, a: impl Fn(usize) -> f64) -> Self {
        let rows = spread(n, GEMM_SAMPLED);
        let a_rows = rows.iter().map(|&r| (0..n).map(|l| a(r + l * n)).collect()).collect();
        let a_column_sums = (0..n).map(|l| (0..n).map(|i| a(i + l * n)).sum()).collect();
        Self {
            n,
            cols: spread(n, GEMM_SAMPLED),
            rows,
            a_rows,
            errors: GemmErrors { order: n, ..GemmErrors::default() },
            a_column_sums,
            b_row_sums: vec![0.0; n],
            c_row_sums: vec![0.0; n],
            seen: 0,
            sums: GemmSums { order: n, ..GemmSums::default() },
        }
    }

    /// The sampled comparison and, once every column arrived, the row sums' too (`a(i)` as in `new`).
    pub fn finish(mut self, a: impl Fn(usize) -> f64) -> (GemmErrors, GemmSums) {
        let n = self.n;
        if self.seen == n {
            let mut reference = vec![0.0; n];
            for (l, &bl) in self.b_row_sums.iter().enumerate() {
                for (i, r) in reference.iter_mut().enumerate() {
                    *r += a(i + l * n) * bl;
                }
            }
            for (i, (&got, &r)) in self.c_row_sums.iter().zip(&reference).enumerate() {
                self.sums.record("row", i, got, r);
            }
        }
        (self.errors, self.sums)
    }

    /// Columns `j0..` of C (`c`, a multiple of n values), with `a(i)` and `b(i)` elements of A and B.
    pub fn columns(&mut self, j0: usize, c: &[f64], a: impl Fn(usize) -> f64 + Sync, b: impl Fn(usize) -> f64) {
        let n = self.n;
        for (dj, got) in c.chunks_exact(n).enumerate() {
            let j = j0 + dj;
            let b_col: Vec<f64> = (0..n).map(|l| b(l + j * n)).collect();
            self.seen += 1;
            for (sum, &bl) in self.b_row_sums.iter_mut().zip(&b_col) {
                *sum += bl;
            }
            for (sum, &g) in self.c_row_sums.iter_mut().zip(got) {
                *sum += g;
            }
            let column_sum: f64 = self.a_column_sums.iter().zip(&b_col).map(|(x, y)| x * y).sum();
            self.sums.record("column", j, got.iter().sum(), column_sum);
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

/// What the checksum says: all 2n sums within `tolerance` of `|error| / k`. Independent elements'
/// errors add like a random walk, so n elements each within the element check's `tolerance · sqrt(k)`
/// sum to about `tolerance · sqrt(k) · sqrt(n)`, which is `tolerance · k` for a square GEMM (k = n).
pub fn gemm_sums(name: String, sums: &GemmSums, tolerance: f64) -> Check {
    let n = sums.order;
    let scaled = sums.worst / n as f64;
    Check {
        name,
        passed: n > 0 && sums.compared as usize == 2 * n && scaled.is_finite() && scaled <= tolerance,
        detail: format!(
            "{} of {} row and column sums of the {n}×{n} output against A·(B·1) and (1ᵀA)·B on the host: \
             max |error|/k {scaled:.2e} at {} {} (tolerance {tolerance:.0e}: an element off by more than {:.3} \
             anywhere moves its sums past it)",
            sums.compared,
            2 * n,
            sums.at.0,
            sums.at.1,
            tolerance * n as f64
        ),
    }
}
