//! The precision experiment's GEMM timings turned into TFLOP/s curves and the checks against the host.

use shared::lab::{ChartSpec, Point, RunResult, Series};
use crate::experiments::precision::params::Dtype;

use crate::checks::{self, GemmErrors, GemmSums, GemmTiles};
use crate::report::empty;
use crate::report::figure;
use crate::stats::rates;

/// One GEMM configuration of the precision experiment.
#[derive(Debug, Clone)]
pub struct GemmSample {
    pub dtype: Dtype,
    pub size: u32,
    pub times_ms: Vec<f64>,
    /// The output's sampled rows and columns compared with the host.
    pub errors: GemmErrors,
    /// Every row's and column's sum of the last timed repetition's output compared with the host.
    pub sums: GemmSums,
    /// A random tile of each timed repetition's output compared with the host.
    pub tiles: GemmTiles,
}

pub fn precision(samples: &[GemmSample]) -> RunResult {
    let mut r = empty(
        ChartSpec::Lines {
            x_label: "matrix order n (n×n×n)".into(),
            y_label: "TFLOP/s".into(),
            log_x: true,
            log_y: false,
        },
        "TFLOP/s",
    );
    for dtype in Dtype::ALL {
        let mine: Vec<&GemmSample> = samples.iter().filter(|s| s.dtype == dtype).collect();
        if mine.is_empty() {
            continue;
        }
        let mut points = Vec::new();
        for s in mine {
            let flop = 2.0 * f64::from(s.size).powi(3);
            if let Some(y) = rates(flop, &s.times_ms, 1e-12) {
                points.push(Point { x: f64::from(s.size), y });
                r.figures.extend(figure(&format!("{} {}", dtype.name(), s.size), "TFLOP/s", Some(y)));
            }
            let name = format!("{} {} matches the host", dtype.name(), s.size);
            r.checks.push(checks::gemm(name, &s.errors, dtype.tolerance()));
            let name = format!("{} {}: every row and column sum matches the host", dtype.name(), s.size);
            r.checks.push(checks::gemm_sums(name, &s.sums, dtype.tolerance()));
            let name = format!("{} {}: every timed GEMM matches the host on a random tile", dtype.name(), s.size);
            let repetitions = u32::try_from(s.times_ms.len()).unwrap_or(u32::MAX);
            r.checks.push(checks::gemm_tiles(name, &s.tiles, repetitions, dtype.tolerance()));
        }
        r.series.push(Series { name: dtype.name().to_owned(), points });
    }
    r.notes.push("cuBLAS GEMM on uniform random data in [-1, 1]; fp16/bf16 accumulate in fp32.".into());
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn precision_checks_use_the_tolerance_of_each_type() {
        let compared = 2 * 16 * 1024 - 256;
        let s = |dtype, worst: f64| GemmSample {
            dtype,
            size: 1024,
            times_ms: vec![1.0],
            errors: GemmErrors { worst: worst * 32.0, at: (1023, 7), compared, order: 1024 },
            sums: GemmSums { worst: worst * 1024.0, at: ("column", 9), compared: 2048, order: 1024 },
            tiles: GemmTiles {
                errors: GemmErrors { worst: worst * 32.0, at: (40, 41), compared: 32 * 32, order: 1024 },
                tiles: 1,
                seed: 7,
            },
        };
        let r = precision(&[s(Dtype::Fp32, 1e-6), s(Dtype::Bf16, 0.5)]);
        assert!(r.checks[3].detail.contains("row 1023, column 7"), "{:?}", r.checks[3]);
        assert!(r.checks[4].detail.contains("at column 9"), "{:?}", r.checks[4]);
        assert!(r.checks[5].detail.contains("(seed 7)") && r.checks[5].detail.contains("row 40"), "{:?}", r.checks[5]);
        assert_eq!(r.passed(), Some(false));
        assert!(r.checks[..3].iter().all(|c| c.passed) && r.checks[3..].iter().all(|c| !c.passed), "{:?}", r.checks);
        assert!((r.figures[0].stats.median - 2.147).abs() < 0.01, "{:?}", r.figures[0]);
    }
}
