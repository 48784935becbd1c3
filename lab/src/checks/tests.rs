#![allow(clippy::unwrap_used)]

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
    sampled_and_summed(n, a, b, c).0
}

fn sampled_and_summed(n: usize, a: &[f64], b: &[f64], c: &[f64]) -> (GemmErrors, GemmSums) {
    let mut sampler = GemmSampler::new(n, |i| a[i]);
    for (k, chunk) in c.chunks(5 * n).enumerate() {
        sampler.columns(5 * k, chunk, |i| a[i], |i| b[i]);
    }
    sampler.finish(|i| a[i])
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
        gemm_sums: GemmSums { worst: 0.0, at: ("row", 0), compared: 128, order: 64 },
        poisoned: TimedGemms { checked: 6, expected: 6, poisoned: 0 },
        spun: vec![1000; 8],
        cycles: 1000,
        launched: 8,
    };
    assert!(streams(&good).iter().all(|c| c.passed), "{:?}", streams(&good));
    let failed = |o: StreamsOutputs| streams(&o).into_iter().filter(|c| !c.passed).map(|c| c.name).collect::<Vec<_>>();
    let copied = PatternCompare { differ: 1, first: Some(9), ..good.copied };
    assert_eq!(failed(StreamsOutputs { copied, ..good.clone() }), ["the copied bytes arrive intact"]);
    let gemm = GemmErrors { worst: 1.0, ..good.gemm };
    assert_eq!(failed(StreamsOutputs { gemm, ..good.clone() }), ["the GEMM's output matches the host"]);
    let gemm_sums = GemmSums { worst: f64::INFINITY, ..good.gemm_sums };
    assert_eq!(
        failed(StreamsOutputs { gemm_sums, ..good.clone() }),
        ["the GEMM's every row and column sum matches the host"]
    );
    for poisoned in [TimedGemms { poisoned: 1, ..good.poisoned }, TimedGemms { checked: 5, ..good.poisoned }] {
        assert_eq!(failed(StreamsOutputs { poisoned, ..good.clone() }), ["every timed GEMM wrote all of its output"]);
    }
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

/// C = A·B of inputs first rounded by `round`, sampled against the exact product.
fn rounded_gemm_error(n: usize, round: impl Fn(f64) -> f64) -> GemmErrors {
    let mut rng = fastrand::Rng::with_seed(3);
    let a: Vec<f64> = (0..n * n).map(|_| f64::from(rng.f32() * 2.0 - 1.0)).collect();
    let b: Vec<f64> = (0..n * n).map(|_| f64::from(rng.f32() * 2.0 - 1.0)).collect();
    let (ar, br): (Vec<f64>, Vec<f64>) = (a.iter().map(|&v| round(v)).collect(), b.iter().map(|&v| round(v)).collect());
    sampled(n, &a, &b, &product(n, &ar, &br))
}

#[test]
fn the_tf32_tolerance_passes_tf32_inputs_and_refuses_bf16_precision() {
    // tf32 keeps 10 mantissa bits: truncated (the worse of the two roundings) it passes...
    let tf32 = |v: f64| f64::from(f32::from_bits((v as f32).to_bits() & !((1 << 13) - 1)));
    let n = 512;
    let tolerance = crate::values::Dtype::Tf32.tolerance();
    let kept = gemm("tf32".into(), &rounded_gemm_error(n, tf32), tolerance);
    assert!(kept.passed, "{kept:?}");
    // ...while inputs at bf16's 7 bits (what a GEMM that quietly ran in bf16 would read) fail it.
    let bf16 = |v: f64| f64::from(half::bf16::from_f64(v).to_f32());
    let lost = gemm("bf16 inputs".into(), &rounded_gemm_error(n, bf16), tolerance);
    assert!(!lost.passed, "{lost:?}");
}

#[test]
fn the_tile_check_sees_a_spoiled_tile_of_any_repetition_and_names_its_seed() {
    let n = 96;
    let mut rng = fastrand::Rng::with_seed(5);
    let a: Vec<f64> = (0..n * n).map(|_| rng.f64() - 0.5).collect();
    let b: Vec<f64> = (0..n * n).map(|_| rng.f64() - 0.5).collect();
    let c = product(n, &a, &b);
    let read = |(i0, j0): (usize, usize)| -> Vec<f64> {
        (0..GEMM_TILE * GEMM_TILE).map(|k| c[(i0 + k % GEMM_TILE) + (j0 + k / GEMM_TILE) * n]).collect()
    };
    for spoiled in [None, Some(0), Some(4)] {
        let mut tiles = GemmTiles::new(n, 42);
        for repetition in 0..5 {
            let at = tile_at(n, 42, repetition);
            let mut got = read(at);
            if spoiled == Some(repetition) {
                got.iter_mut().for_each(|v| *v = 0.0);
            }
            tiles.add(at, &got, |i| a[i], |i| b[i]);
        }
        let check = gemm_tiles("tiles".into(), &tiles, 5, 1e-4);
        assert_eq!(check.passed, spoiled.is_none(), "{check:?}");
        assert!(check.detail.contains("(seed 42)"), "{check:?}");
    }
    assert!(!gemm_tiles("too few".into(), &GemmTiles::new(n, 1), 5, 1e-4).passed, "a repetition left unread fails");
    assert_ne!(tile_at(n, 42, 0), tile_at(n, 42, 1), "each repetition looks somewhere new");
}

#[test]
fn the_sums_see_a_wrong_element_the_sampled_rows_and_columns_miss() {
    let n = 96;
    let mut rng = fastrand::Rng::with_seed(8);
    let a: Vec<f64> = (0..n * n).map(|_| rng.f64() * 2.0 - 1.0).collect();
    let b: Vec<f64> = (0..n * n).map(|_| rng.f64() * 2.0 - 1.0).collect();
    let c = product(n, &a, &b);
    let (errors, sums) = sampled_and_summed(n, &a, &b, &c);
    assert_eq!(sums.compared, 2 * n as u64);
    assert!(gemm_sums("ok".into(), &sums, 1e-4).passed, "{:?}", gemm_sums("ok".into(), &sums, 1e-4));
    assert!(gemm("ok".into(), &errors, 1e-4).passed);
    // Row 1, column 1 is in no sampled row or column: only the sums can tell.
    let mut wrong = c.clone();
    wrong[1 + n] += 0.5;
    let (errors, sums) = sampled_and_summed(n, &a, &b, &wrong);
    assert!(gemm("missed".into(), &errors, 1e-4).passed, "the sampled check cannot see (1, 1)");
    let caught = gemm_sums("wrong".into(), &sums, 1e-4);
    assert!(!caught.passed && (caught.detail.contains("row 1 ") || caught.detail.contains("column 1 ")), "{caught:?}");
    // A NaN left anywhere (a skipped GEMM over a poisoned C) fails; so does a column never handed over.
    let mut nan = c.clone();
    nan[40 + 41 * n] = f64::NAN;
    assert!(!gemm_sums("nan".into(), &sampled_and_summed(n, &a, &b, &nan).1, 1e-4).passed);
    let mut short = GemmSampler::new(n, |i| a[i]);
    short.columns(0, &c[..n * (n - 1)], |i| a[i], |i| b[i]);
    assert!(!gemm_sums("short".into(), &short.finish(|i| a[i]).1, 1e-4).passed);
}

#[test]
fn the_sums_pass_an_output_rounded_to_each_type_at_its_tolerance() {
    let n = 512;
    let mut rng = fastrand::Rng::with_seed(9);
    let a: Vec<f64> = (0..n * n).map(|_| f64::from(rng.f32() * 2.0 - 1.0)).collect();
    let b: Vec<f64> = (0..n * n).map(|_| f64::from(rng.f32() * 2.0 - 1.0)).collect();
    let c = product(n, &a, &b);
    let fp16 = |v: f64| f64::from(half::f16::from_f64(v).to_f32());
    let bf16 = |v: f64| f64::from(half::bf16::from_f64(v).to_f32());
    for (dtype, round) in
        [(crate::values::Dtype::Fp16, &fp16 as &dyn Fn(f64) -> f64), (crate::values::Dtype::Bf16, &bf16)]
    {
        let rounded: Vec<f64> = c.iter().map(|&v| round(v)).collect();
        let check = gemm_sums("rounded".into(), &sampled_and_summed(n, &a, &b, &rounded).1, dtype.tolerance());
        assert!(check.passed, "{dtype:?}: {check:?}");
        // A 32×32 tile zeroed away from the sampled rows and columns fails at that type's tolerance.
        let mut spoiled = rounded.clone();
        for j in 40..72 {
            spoiled[j * n + 100..j * n + 132].iter_mut().for_each(|v| *v = 0.0);
        }
        let check = gemm_sums("spoiled".into(), &sampled_and_summed(n, &a, &b, &spoiled).1, dtype.tolerance());
        assert!(!check.passed, "{dtype:?}: {check:?}");
    }
}
