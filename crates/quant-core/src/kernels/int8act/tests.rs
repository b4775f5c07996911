//! The int8-activation kernels at every SIMD level this CPU has: against the f64 oracle of
//! the exact product at their declared per-output bound (module docs of [`super`]),
//! `|y - y_ref| <= Σ|w_i| Δ_b / 2 · (1 + 1e-4) + 1e-5 · M`, and against the f64 product
//! with the rounded activations `Σ w_i x̂_i` at `1e-5 · M` (M: [`rounded_reference`]).

use super::*;
use crate::api::decode_rows_stored_f64;
use crate::oracle::{POISON, reference_gemm};
use crate::testdata::{Rng, activations, fresh_seed, weights};
use crate::{EncodeOptions, encode};

/// The exact kernels' accumulation bound, kept on top of the activation rounding term.
const ACCUMULATION: f64 = 1e-5;
/// Slack on the rounding term for the f32 rounding of the step and of `x / step`.
const STEP_SLACK: f64 = 1e-4;
const BATCHES: [usize; 6] = [1, 2, 3, 4, 5, 8];

/// The formats with an int8-activation kernel.
fn int8_formats() -> Vec<Format> {
    Format::all().filter(|f| has_int8_activations(*f)).collect()
}

fn seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

fn shapes(f: Format) -> Vec<(usize, usize)> {
    let spec = f.spec();
    if spec.whole_blocks_only {
        let bw = spec.block_weights as usize;
        // 8448 columns: past ONE_ROW_MAX_COLS, so the four-row tiles and (S = 1) two
        // column panels run too; 16896 three panels; 16896 + bw, for blocks shorter than
        // the 256-weight units, storage blocks after the last panel's units.
        return vec![
            (1, bw),
            (7, 2 * bw),
            (130, 256),
            (37, 1024),
            (3, 2048),
            (9, 8448),
            (3, 16896),
            (3, 16896 + bw),
        ];
    }
    let g = spec.group_size().unwrap_or(64) as usize;
    vec![
        (1, 1),
        (3, 7),
        (5, 33),
        (17, g - 1),
        (6, g + 1),
        (9, 2 * g + 17),
        (130, 129),
        (131, 200),
        (2, 1000),
        (37, 2048),
        // Past ONE_ROW_MAX_COLS: the four-row tiles and two column panels, with a partial
        // last chunk; then three panels (int4-row / int4-g64, one row at a time up to
        // INT4_QUADS_ONE_ROW_MAX_COLS: one panel, then two).
        (9, 8448 + g + 3),
        (3, 16896 + g + 3),
    ]
}

/// Formats whose weights are affine in their codes (`s·q + z`, or `d·sc·q - dmin·m`): their
/// kernels add the zero / min term in f32, next to a code term that can be as large, so the
/// f32 error of the sum scales with the offsets, not only with `Σ|w x̂|`.
const AFFINE: [Format; 7] = [
    Format::Q4K,
    Format::Q5K,
    Format::Mq4K,
    Format::Hfq4G256,
    Format::Mq4G256,
    Format::Mq4G256V2,
    Format::Mq4cG256,
];

/// `Σ_i w_i x̂_i` in f64 with the rounded activations, and the magnitude its f32 error is
/// measured against, both [S, O]: `Σ_i |w_i x̂_i|`, plus, for the [`AFFINE`] formats,
/// `2 Σ_i W_i |x̂_i|` with `W_i` the largest |weight| of i's storage block — a bound on
/// the offset terms (|z| and the code term `|s q| <= |w| + |z|` are at most a block's
/// range away from its weights).
pub(super) fn rounded_reference(t: &QTensor<'_>, x: &[f32], s: usize) -> (Vec<f64>, Vec<f64>) {
    let (rows, cols) = (t.rows(), t.cols());
    let xh = int8_rounded_activations(t, x, s);
    let affine = AFFINE.contains(&t.format());
    let block = t.format().spec().block_weights.max(1) as usize;
    let (mut y, mut mag) = (vec![0f64; s * rows], vec![0f64; s * rows]);
    let mut w = vec![0f64; cols];
    let mut wmax = vec![0f64; cols];
    for o in 0..rows {
        decode_rows_stored_f64(t, o, &mut w);
        for (m, b) in wmax.chunks_mut(block).zip(w.chunks(block)) {
            let top = b.iter().fold(0f64, |a, v| a.max(v.abs()));
            m.fill(if affine { 2.0 * top } else { 0.0 });
        }
        for k in 0..s {
            let xk = &xh[k * cols..(k + 1) * cols];
            y[k * rows + o] = w.iter().zip(xk).map(|(a, b)| a * b).sum();
            mag[k * rows + o] = w
                .iter()
                .zip(&wmax)
                .zip(xk)
                .map(|((a, m), b)| (a.abs() + m) * b.abs())
                .sum();
        }
    }
    (y, mag)
}

/// Worst error relative to Σ|w x| and worst ratio of the error to its bound, over a run.
#[derive(Default)]
struct Seen {
    metric: f64,
    rho: f64,
    ratio: f64,
}

/// Checks every output of `y` against the declared bound; returns the failures.
fn check(
    what: &str,
    y: &[f32],
    t: &QTensor<'_>,
    x: &[f32],
    s: usize,
    seen: &mut Seen,
) -> Vec<String> {
    let r = reference_gemm(t, x, s);
    let bound = int8_activation_bound(t, x, s);
    let (yh, magh) = rounded_reference(t, x, s);
    let mut fails = Vec::new();
    for i in 0..y.len() {
        // The kernel's arithmetic: the product with the rounded activations, to 1e-5.
        let tight = (y[i] as f64 - yh[i]).abs();
        if tight > ACCUMULATION * magh[i] {
            fails.push(format!(
                "{what}: output {i}: {} vs Σ w x̂ = {} (error {tight:.3e} > 1e-5 of {:.3e})",
                y[i], yh[i], magh[i]
            ));
            continue;
        }
        let (got, want, mag) = (y[i] as f64, r.y[i], r.magnitude[i]);
        let allowed = bound[i] * (1.0 + STEP_SLACK) + ACCUMULATION * magh[i];
        let err = (got - want).abs();
        if !got.is_finite() || err > allowed {
            fails.push(format!(
                "{what}: output {i}: {got} vs {want} (error {err:.3e}, bound {allowed:.3e}, Σ|wx| {mag:.3e})"
            ));
            continue;
        }
        if mag > 0.0 {
            seen.metric = seen.metric.max(err / mag);
            seen.rho = seen.rho.max(bound[i] / mag);
        }
        if allowed > 0.0 {
            seen.ratio = seen.ratio.max(err / allowed);
        }
    }
    fails
}

#[test]
fn every_int8_kernel_meets_its_bound_at_every_level() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    let levels = SimdLevel::available();
    eprintln!("levels tested: {levels:?} (seed {seed})");
    for f in int8_formats() {
        let mut seen = Seen::default();
        for (rows, cols) in shapes(f) {
            let w = weights(&mut rng, rows, cols);
            let opts = EncodeOptions {
                rotation_seed: rng.next_u64(),
                ..Default::default()
            };
            let t = encode(f, rows, cols, &w, &opts).expect("encode");
            for s in BATCHES {
                let x = activations(&mut rng, s, cols);
                for &level in &levels {
                    let mut y = vec![POISON; s * rows];
                    let path =
                        gemm_with_at(KernelPath::Int8Activations, level, &t.view(), &x, s, &mut y)
                            .expect("gemm");
                    let runs = has_int8_activations_at(f, level);
                    assert_eq!(path == KernelPath::Int8Activations, runs, "{f} {level:?}");
                    if !runs {
                        // The exact kernel ran (the oracle suite holds it to 1e-5).
                        continue;
                    }
                    let what = format!("{f} {level:?} O={rows} I={cols} S={s}");
                    failures.extend(check(&what, &y, &t.view(), &x, s, &mut seen));
                }
            }
        }
        eprintln!(
            "{f}: worst |y - y_ref| / Σ|wx| {:.2e}; worst bound term ρ {:.2e}; worst error / bound {:.2}",
            seen.metric, seen.rho, seen.ratio
        );
    }
    let mut failing: Vec<String> = failures
        .iter()
        .map(|f| f.split(" O=").next().unwrap_or_default().to_string())
        .collect();
    failing.sort();
    failing.dedup();
    let first: Vec<String> = failures.iter().take(20).cloned().collect();
    assert!(
        failures.is_empty(),
        "seed {seed}: {} failures, in (format, level): {}; first:\n{}",
        failures.len(),
        failing.join(", "),
        first.join("\n")
    );
}

/// Every level computes the same integer sums and the same f32 scalings block by block;
/// only the order of the final f32 additions differs, so the levels agree within the f32
/// accumulation bound (much closer than the activation-rounding bound they all meet).
#[test]
fn levels_agree_with_each_other() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    for f in int8_formats() {
        let (rows, cols) = (67, 1024);
        let w = weights(&mut rng, rows, cols);
        let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        let x = activations(&mut rng, 3, cols);
        let r = reference_gemm(&t.view(), &x, 3);
        let mut first: Option<Vec<f32>> = None;
        // Levels where the kernel does not run (fp8 below AVX-512) run the exact one.
        for level in SimdLevel::available()
            .into_iter()
            .filter(|&l| has_int8_activations_at(f, l))
        {
            let mut y = vec![POISON; 3 * rows];
            gemm_with_at(KernelPath::Int8Activations, level, &t.view(), &x, 3, &mut y)
                .expect("gemm");
            if let Some(y0) = &first {
                for i in 0..y.len() {
                    let d = (y[i] as f64 - y0[i] as f64).abs();
                    assert!(
                        d <= ACCUMULATION * r.magnitude[i],
                        "seed {seed} {f} {level:?} output {i}: {} vs {} (Σ|wx| {})",
                        y[i],
                        y0[i],
                        r.magnitude[i]
                    );
                }
            } else {
                first = Some(y);
            }
        }
    }
}

#[test]
fn the_default_stays_exact_and_unsupported_formats_say_so() {
    let mut rng = Rng::new(7);
    let (rows, cols) = (9, 256);
    let w = weights(&mut rng, rows, cols);
    let x = activations(&mut rng, 1, cols);
    for f in [Format::Q4K, Format::Fp8E4m3B128, Format::Int3G64] {
        let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        let (mut a, mut b) = (vec![POISON; rows], vec![POISON; rows]);
        crate::gemm(&t.view(), &x, 1, &mut a).expect("gemm");
        let path = gemm_with(KernelPath::Exact, &t.view(), &x, 1, &mut b).expect("gemm");
        assert_eq!(path, KernelPath::Exact);
        assert_eq!(a, b, "{f}: gemm is the exact path");
        let path = gemm_with(KernelPath::Int8Activations, &t.view(), &x, 1, &mut b).expect("gemm");
        assert_eq!(path == KernelPath::Int8Activations, has_int8_activations(f));
    }
    assert!(has_int8_activations(Format::Q6K));
    assert!(!has_int8_activations(Format::Int3G64));
    // fp8's kernel needs AVX-512 BF16 and VBMI, and an AVX-512 level.
    assert!(!has_int8_activations_at(
        Format::Fp8E4m3B128,
        SimdLevel::Avx2
    ));
    assert_eq!(
        has_int8_activations(Format::Fp8E4m3B128),
        fp8_bf16::runs_at(SimdLevel::detect())
    );
}

#[test]
fn fp8_bf16_activations_round_to_nearest_even_and_keep_the_order_a_bijection() {
    use fp8_bf16::{bf16_of, order};
    assert_eq!(bf16_of(1.0), 0x3F80);
    // Halfway cases go to the even neighbour.
    assert_eq!(bf16_of(f32::from_bits(0x3F80_8000)), 0x3F80);
    assert_eq!(bf16_of(f32::from_bits(0x3F81_8000)), 0x3F82);
    assert_eq!(bf16_of(f32::from_bits(0x3F80_8001)), 0x3F81);
    assert_eq!(bf16_of(-2.5), 0xC020);
    // Subnormals to (signed) zero: vdpbf16ps reads them as zero.
    assert_eq!(bf16_of(f32::from_bits(1)), 0);
    assert_eq!(bf16_of(-f32::from_bits(0x007F_FFFF)), 0x8000);
    assert!(f32::from_bits(u32::from(bf16_of(f32::NAN)) << 16).is_nan());
    // A NaN whose payload sits in the low 16 bits stays NaN (plain rounding would make it
    // infinity); infinities stay infinities.
    assert_eq!(bf16_of(f32::from_bits(0x7F80_0001)), 0x7FC0);
    assert_eq!(bf16_of(f32::INFINITY), 0x7F80);
    assert_eq!(bf16_of(f32::NEG_INFINITY), 0xFF80);
    let mut rng = Rng::new(5);
    for _ in 0..10_000 {
        let v = rng.normal() * 100.0;
        let r = f32::from_bits(u32::from(bf16_of(v)) << 16);
        // 8 significant bits: half a unit in the last place is at most 2^-8 of |v|.
        assert!((v - r).abs() <= v.abs() / 256.0, "{v} -> {r}");
    }
    let mut seen = [false; 64];
    for i in 0..64 {
        seen[order(i)] = true;
    }
    assert!(seen.iter().all(|&v| v));
}

#[test]
fn fp8_nan_codes_poison_exactly_their_row_on_the_fast_path() {
    if !has_int8_activations(Format::Fp8E4m3B128) {
        eprintln!("skipped: this CPU has no AVX-512 BF16 + VBMI (fp8 runs the exact kernel)");
        return;
    }
    let mut rng = Rng::new(13);
    let (rows, cols) = (6, 300);
    let w = weights(&mut rng, rows, cols);
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let mut t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        // Row 2's code 257 (the third tile's, past the last whole 64-chunk) and row 4's
        // code 0 become NaN codes.
        t.weights[2 * cols + 257] = 0x7F;
        t.weights[4 * cols] = 0xFF;
        let x = activations(&mut rng, 3, cols);
        let mut y = vec![POISON; 3 * rows];
        let path = gemm_with(KernelPath::Int8Activations, &t.view(), &x, 3, &mut y).expect("gemm");
        assert_eq!(path, KernelPath::Int8Activations);
        for k in 0..3 {
            for o in 0..rows {
                let v = y[k * rows + o];
                assert_eq!(v.is_nan(), o == 2 || o == 4, "{f} row {o} S-row {k}: {v}");
            }
        }
    }
}

#[test]
fn a_non_finite_activation_poisons_only_the_outputs_it_touches() {
    let mut rng = Rng::new(11);
    let (rows, cols) = (5, 512);
    let w = weights(&mut rng, rows, cols);
    let mut x = activations(&mut rng, 2, cols);
    x[cols + 100] = f32::NAN;
    for f in [Format::Q8_0, Format::Fp8E4m3B128] {
        let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        for level in SimdLevel::available() {
            let mut y = vec![POISON; 2 * rows];
            gemm_with_at(KernelPath::Int8Activations, level, &t.view(), &x, 2, &mut y)
                .expect("gemm");
            assert!(y[..rows].iter().all(|v| v.is_finite()), "{f} {level:?}");
            assert!(y[rows..].iter().all(|v| v.is_nan()), "{f} {level:?}");
        }
    }
}

#[test]
fn quantized_blocks_round_to_nearest_within_half_a_step() {
    let mut rng = Rng::new(3);
    for _ in 0..200 {
        let x: [f32; 32] = std::array::from_fn(|_| rng.normal() * 3.0);
        let mut q = [0i8; 32];
        let (d, sums) = quantize_block(&x, &mut q);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(d, amax / 127.0);
        for h in 0..2 {
            let want: i32 = q[16 * h..16 * h + 16].iter().map(|&v| i32::from(v)).sum();
            assert_eq!(sums[h], want);
        }
        for (v, &c) in x.iter().zip(&q) {
            assert!((-127..=127).contains(&c));
            assert!(
                (v - d * f32::from(c)).abs() <= d * 0.5 * (1.0 + 1e-5),
                "{v} {c} {d}"
            );
        }
    }
    let mut q = [1i8; 32];
    assert_eq!(quantize_block(&[0.0; 32], &mut q), (0.0, [0, 0]));
    let mut bad = [1.0f32; 32];
    bad[9] = f32::INFINITY;
    assert!(quantize_block(&bad, &mut q).0.is_nan());
    assert_eq!(q, [0; 32]);
}

/// fp8's scalar twin (what `dot_rows` runs at a level without AVX-512 BF16; `gemm_with_at`
/// never asks it, so it is called directly) computes `Σ w x̂` with the bf16 activations.
#[test]
fn fp8_scalar_twin_computes_the_rounded_product() {
    let mut rng = Rng::new(17);
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        for (rows, cols, s) in [(3, 1, 1), (130, 200, 2), (5, 300, 3)] {
            let w = weights(&mut rng, rows, cols);
            let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
            let x = activations(&mut rng, s, cols);
            let acts = QActs::new(QLayout::Bf16, &x, s, cols);
            let mut y = vec![POISON; rows * s];
            fp8_bf16::FP8.dot_rows(SimdLevel::Portable, &t.view(), &acts, 0, rows, &mut y);
            let (yh, magh) = rounded_reference(&t.view(), &x, s);
            for o in 0..rows {
                for k in 0..s {
                    let (got, want) = (y[o * s + k] as f64, yh[k * rows + o]);
                    assert!(
                        (got - want).abs() <= ACCUMULATION * magh[k * rows + o],
                        "{f} [{rows} x {cols}] S={s} row {o} k {k}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// fp8's long rows at S = 1 (past ONE_ROW_MAX_COLS: column panels), on row ranges that
/// cross a 128-row scale band (rows 124..132 start at 125) and with a partial last chunk.
#[test]
fn fp8_long_rows_in_panels_match_the_rounded_product() {
    if !has_int8_activations(Format::Fp8E4m3B128) {
        eprintln!("skipped: this CPU has no AVX-512 BF16 + VBMI (fp8 runs the exact kernel)");
        return;
    }
    let mut rng = Rng::new(23);
    let (rows, cols) = (133, ONE_ROW_MAX_COLS + 200 + 7);
    let w = weights(&mut rng, rows, cols);
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        let x = activations(&mut rng, 1, cols);
        let (yh, magh) = rounded_reference(&t.view(), &x, 1);
        for row0 in [0, 1] {
            let acts = QActs::new(QLayout::Bf16, &x, 1, cols);
            let n = rows - row0;
            let mut y = vec![POISON; n];
            let level = SimdLevel::detect();
            fp8_bf16::FP8.dot_rows(level, &t.view(), &acts, row0, n, &mut y);
            for (r, &got) in y.iter().enumerate() {
                let o = row0 + r;
                assert!(
                    (got as f64 - yh[o]).abs() <= ACCUMULATION * magh[o],
                    "{f} row {o} (start {row0}): {got} vs {}",
                    yh[o]
                );
            }
        }
    }
}

/// Long rows at S = 1 through both forms of every int8-activation kernel, column panels
/// and not ([`super::panels`]), at every level: whichever form this CPU takes by default,
/// the other one is held to the same bound here.
#[test]
fn long_rows_meet_the_bound_with_and_without_column_panels() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for f in int8_formats() {
        let kernel = int8_kernel_for(f).expect("an int8 format has a kernel");
        let mut seen = Seen::default();
        for (rows, cols) in shapes(f).into_iter().filter(|s| s.1 > ONE_ROW_MAX_COLS) {
            let w = weights(&mut rng, rows, cols);
            let opts = EncodeOptions {
                rotation_seed: rng.next_u64(),
                ..Default::default()
            };
            let t = encode(f, rows, cols, &w, &opts).expect("encode");
            let x = activations(&mut rng, 1, cols);
            let mut xr = x.clone();
            rotate_activations(&t.view(), &mut xr);
            let acts = QActs::new(kernel.layout(), &xr, 1, cols);
            for level in SimdLevel::available() {
                if !kernel.runs_at(level) {
                    continue;
                }
                for panels in [false, true] {
                    let mut y = vec![POISON; rows];
                    kernel.dot_rows_panels(panels, level, &t.view(), &acts, 0, rows, &mut y);
                    let what = format!("{f} {level:?} panels {panels} O={rows} I={cols}");
                    failures.extend(check(&what, &y, &t.view(), &x, 1, &mut seen));
                }
            }
        }
    }
    let first: Vec<String> = failures.iter().take(20).cloned().collect();
    assert!(
        failures.is_empty(),
        "seed {seed}: {} failures; first:\n{}",
        failures.len(),
        first.join("\n")
    );
}
