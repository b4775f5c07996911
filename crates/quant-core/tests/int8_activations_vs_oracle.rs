//! The opt-in int8-activation path (`gemm_with(KernelPath::Int8Activations, ..)`) of every
//! format that has one, against the f64 oracle of the exact product, over the same edge
//! shapes and batches as tests/cpu_kernels_vs_oracle.rs, with fresh random data each run and
//! outputs poisoned before each call.
//!
//! Its declared tolerance (quant_core::kernels::int8act): each output within
//! `Σ_i |w_i| Δ_b(i) / 2 + 1e-5 M` of the exact product, `Δ_b` the int8 step of the
//! 32-block of activations that value i sits in (`int8_activation_bound` computes that
//! term; the step is rounded to f32, so it gets a 1e-4 relative slack) and M the magnitude
//! of the f32 arithmetic (`rounded_reference` below).
//!
//! The rounding term is a worst case and loose for typical data, so each output is also
//! held to `1e-5 M` against `Σ_i w_i x̂_i`, the f64 product with the rounded activations
//! (`int8_rounded_activations`): the bound checks the rounding, this the kernel.
//!
//! `TESSERA_FORMATS=q4_k,int4-g64` narrows the run; `TESSERA_SEED` replays one.

use quant_core::api::decode_rows_stored_f64;
use quant_core::kernels::{
    KernelPath, gemm_with, has_int8_activations, int8_activation_bound, int8_rounded_activations,
};
use quant_core::oracle::{POISON, reference_gemm};
use quant_core::tensor::QTensor;
use quant_core::testdata::{Rng, activations, fresh_seed, weights};
use quant_core::{EncodeOptions, Format, encode};

/// The exact path's accumulation bound, kept on top of the rounding term.
const ACCUMULATION: f64 = 1e-5;
/// Slack on the rounding term for the f32 rounding of the step.
const STEP_SLACK: f64 = 1e-4;
const BATCHES: [usize; 7] = [1, 2, 3, 4, 8, 16, 64];

fn selected() -> Vec<Format> {
    let all: Vec<Format> = match std::env::var("TESSERA_FORMATS") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("format name"))
            .collect(),
        Err(_) => Format::all().collect(),
    };
    all.into_iter()
        .filter(|f| has_int8_activations(*f))
        .collect()
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
fn rounded_reference(t: &QTensor<'_>, x: &[f32], s: usize) -> (Vec<f64>, Vec<f64>) {
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

fn seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

/// The edge shapes of tests/cpu_kernels_vs_oracle.rs.
fn edge_shapes(f: Format) -> Vec<(usize, usize)> {
    let spec = f.spec();
    let mut cols: Vec<usize> = if spec.whole_blocks_only {
        let bw = spec.block_weights as usize;
        vec![bw, 256, 512, 1024]
    } else {
        let g = spec.group_size().unwrap_or(64) as usize;
        vec![1, 7, 33, g - 1, g + 1, 2 * g + 17, 129, 200, 201, 300, 1000]
    };
    cols.sort();
    cols.dedup();
    let rows = [1usize, 3, 17, 130];
    let mut out = Vec::new();
    for (k, &c) in cols.iter().enumerate() {
        out.push((rows[k % rows.len()], c));
    }
    out.push((1, cols[cols.len() - 1]));
    out.push((257, cols[0]));
    // Long rows: past 8192 columns the kernels walk rows four at a time; 37 rows end in a
    // partial tile.
    out.push((6, if spec.whole_blocks_only { 8448 } else { 8457 }));
    out.push((37, if spec.whole_blocks_only { 16640 } else { 16449 }));
    out
}

#[test]
fn every_int8_activation_kernel_meets_its_declared_bound() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let formats = selected();
    let mut failures = Vec::new();
    for f in formats {
        for (rows, cols) in edge_shapes(f) {
            let w = weights(&mut rng, rows, cols);
            let opts = EncodeOptions {
                rotation_seed: rng.next_u64(),
                ..Default::default()
            };
            let t = encode(f, rows, cols, &w, &opts)
                .unwrap_or_else(|e| panic!("{f} [{rows}, {cols}] encode: {e}"));
            for s in BATCHES {
                let x = activations(&mut rng, s, cols);
                let mut y = vec![POISON; s * rows];
                let path =
                    gemm_with(KernelPath::Int8Activations, &t.view(), &x, s, &mut y).expect("gemm");
                assert_eq!(path, KernelPath::Int8Activations, "{f}");
                let r = reference_gemm(&t.view(), &x, s);
                let bound = int8_activation_bound(&t.view(), &x, s);
                let (yh, magh) = rounded_reference(&t.view(), &x, s);
                for i in 0..y.len() {
                    let tight = (y[i] as f64 - yh[i]).abs();
                    if tight.is_nan() || tight > ACCUMULATION * magh[i] {
                        failures.push(format!(
                            "{f} O={rows} I={cols} S={s} output {i}: {} vs Σ w x̂ = {} (error {tight:.3e} > 1e-5 of {:.3e})",
                            y[i], yh[i], magh[i]
                        ));
                        break;
                    }
                    let allowed = bound[i] * (1.0 + STEP_SLACK) + ACCUMULATION * magh[i];
                    let err = (y[i] as f64 - r.y[i]).abs();
                    if !y[i].is_finite() || err > allowed {
                        failures.push(format!(
                            "{f} O={rows} I={cols} S={s} output {i}: {} vs {} (error {err:.3e}, allowed {allowed:.3e})",
                            y[i], r.y[i]
                        ));
                        break;
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// The two checks together: on Gaussian activations the declared bound is about 1.2e-2 of
/// Σ|w x| (module docs) — too loose to notice a weight scale 1% off — while the check
/// against `Σ w x̂` catches that on most outputs.
#[test]
fn a_one_percent_scale_error_is_caught_by_the_rounded_reference() {
    let mut rng = Rng::new(seed());
    let (rows, cols) = (64, 4096);
    let w = weights(&mut rng, rows, cols);
    let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    let t = encode(Format::Q8_0, rows, cols, &w, &EncodeOptions::default()).expect("encode");
    let mut y = vec![POISON; rows];
    gemm_with(KernelPath::Int8Activations, &t.view(), &x, 1, &mut y).expect("gemm");
    let r = reference_gemm(&t.view(), &x, 1);
    let bound = int8_activation_bound(&t.view(), &x, 1);
    let (yh, magh) = rounded_reference(&t.view(), &x, 1);
    let (mut by_bound, mut by_rounded) = (0, 0);
    for i in 0..rows {
        let rho = bound[i] / r.magnitude[i];
        assert!(rho > 5e-3 && rho < 3e-2, "row {i}: rho {rho:.3e}");
        assert!(
            (y[i] as f64 - yh[i]).abs() <= ACCUMULATION * magh[i],
            "row {i}"
        );
        // The same output with every weight 1% too large.
        let wrong = 1.01 * y[i] as f64;
        let allowed = bound[i] * (1.0 + STEP_SLACK) + ACCUMULATION * magh[i];
        by_bound += usize::from((wrong - r.y[i]).abs() > allowed);
        by_rounded += usize::from((wrong - yh[i]).abs() > ACCUMULATION * magh[i]);
    }
    assert!(
        by_rounded > rows * 3 / 4,
        "caught on {by_rounded} of {rows} rows"
    );
    assert!(
        by_bound < rows / 4,
        "the bound alone caught it on {by_bound} rows"
    );
}

/// The error statistics the module docs quote, at a bench shape (4096 x 4096, one
/// activation row): `cargo test -p quant-core --release --test int8_activations_vs_oracle
/// -- --ignored --nocapture`. Prints, per format, the median / 99th percentile / largest
/// `|y - y_ref| / Σ|w x|`, the median and largest rounding term ρ of the declared bound,
/// the largest error / bound, and the largest `|y - Σ w x̂| / M` (the arithmetic term), for
/// the test suite's activations (N(0, 1) with one channel at 50) and plain N(0, 1) ones.
#[test]
#[ignore]
fn error_statistics_at_a_bench_shape() {
    let seed = std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(99);
    let mut rng = Rng::new(seed);
    let (rows, cols) = (4096, 4096);
    let w = weights(&mut rng, rows, cols);
    let with_outlier = activations(&mut rng, 1, cols);
    let gaussian: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    println!("seed {seed}, [{rows} x {cols}], testdata::weights");
    for (kind, x) in [("N(0,1) + one 50", &with_outlier), ("N(0,1)", &gaussian)] {
        for f in selected() {
            let t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
            let mut y = vec![POISON; rows];
            gemm_with(KernelPath::Int8Activations, &t.view(), x, 1, &mut y).expect("gemm");
            let r = reference_gemm(&t.view(), x, 1);
            let bound = int8_activation_bound(&t.view(), x, 1);
            let (yh, magh) = rounded_reference(&t.view(), x, 1);
            let arith = (0..rows)
                .map(|i| (y[i] as f64 - yh[i]).abs() / magh[i])
                .fold(0f64, f64::max);
            let mut err: Vec<f64> = (0..rows)
                .map(|i| (y[i] as f64 - r.y[i]).abs() / r.magnitude[i])
                .collect();
            let mut rho: Vec<f64> = (0..rows).map(|i| bound[i] / r.magnitude[i]).collect();
            let ratio = (0..rows)
                .map(|i| {
                    let allowed = bound[i] * (1.0 + STEP_SLACK) + ACCUMULATION * magh[i];
                    (y[i] as f64 - r.y[i]).abs() / allowed
                })
                .fold(0f64, f64::max);
            err.sort_by(f64::total_cmp);
            rho.sort_by(f64::total_cmp);
            println!(
                "{kind:16} {:12} error median {:.2e} p99 {:.2e} max {:.2e} | rho median {:.2e} max {:.2e} | error/bound max {ratio:.2} | vs Σ w x̂: max {arith:.1e} of M",
                f.name(),
                err[rows / 2],
                err[rows * 99 / 100],
                err[rows - 1],
                rho[rows / 2],
                rho[rows - 1]
            );
        }
    }
}
