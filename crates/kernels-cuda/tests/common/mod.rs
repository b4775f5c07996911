//! Shared pieces of the GEMV conformance suites (device and host emulation): the formats
//! under test, the edge shapes, test data and the oracle comparison.

#![allow(dead_code)]

use kernels_cuda::caps::{self, Op};
use quant_core::oracle::{reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, fresh_seed, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};

/// Batches every conformance run covers.
pub const S_LIST: [usize; 6] = [1, 2, 3, 4, 8, 16];
/// Magnitude-relative error allowed of a GPU kernel (DESIGN.md, seed 000).
pub const TOLERANCE: f64 = 1e-4;

/// Formats of the capability table, narrowed by `TESSERA_FORMATS=name1,name2` if set.
pub fn formats_under_test() -> Vec<Format> {
    let all = caps::formats(Op::Gemv);
    match std::env::var("TESSERA_FORMATS") {
        Ok(list) if !list.trim().is_empty() => {
            let wanted: Vec<Format> = list
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse::<Format>()
                        .unwrap_or_else(|e| panic!("TESSERA_FORMATS: {e}"))
                })
                .collect();
            all.into_iter().filter(|f| wanted.contains(f)).collect()
        }
        _ => all,
    }
}

/// The run's seed: `TESSERA_SEED` to replay a failure, else fresh. Printed by the caller.
pub fn run_seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

/// Edge shapes [O, I] for a format: O = 1, odd I, I smaller than a group, partial groups,
/// blocks and 128x128 tiles, and rows long enough for the kernels' vector loads.
pub fn shapes(format: Format) -> Vec<(usize, usize)> {
    let spec = format.spec();
    if spec.whole_blocks_only {
        vec![(1, 256), (3, 512), (130, 768), (5, 2048), (33, 1280)]
    } else {
        vec![
            (1, 1),
            (1, 7),
            (2, 33),
            (5, 100),
            (7, 257),
            (130, 300),
            (9, 999),
            (64, 1024),
            (3, 4096),
            // Several 16-row tiles and a partial one, on the tensor cores where they exist.
            (45, 2048),
        ]
    }
}

/// A fresh random tensor (outlier rows included) of `format`.
pub fn tensor(format: Format, rows: usize, cols: usize, rng: &mut Rng) -> EncodedTensor {
    let w = weights(rng, rows, cols);
    let opts = EncodeOptions {
        rotation_seed: rng.next_u64(),
        ..Default::default()
    };
    encode(format, rows, cols, &w, &opts)
        .unwrap_or_else(|e| panic!("encode {format} [{rows}, {cols}]: {e}"))
}

pub fn inputs(s: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    activations(rng, s, cols)
}

/// Compares `y` ([S, O]) with the f64 oracle; `Err` names the worst output.
pub fn check(t: &EncodedTensor, x: &[f32], s: usize, y: &[f32]) -> Result<f64, String> {
    check_at(t, x, s, y, TOLERANCE)
}

/// [`check`] at another tolerance (the GEMM's `GemmPrecision::F16`).
pub fn check_at(
    t: &EncodedTensor,
    x: &[f32],
    s: usize,
    y: &[f32],
    tolerance: f64,
) -> Result<f64, String> {
    let r = reference_gemm(&t.view(), x, s);
    let w = worst_error(y, &r);
    if w.error <= tolerance {
        Ok(w.error)
    } else {
        let (k, o) = (w.index / t.rows, w.index % t.rows);
        Err(format!(
            "{} [{}, {}] S={s}: error {:.3e} at s={k}, o={o}: got {}, want {} (magnitude {:.3e})",
            t.format, t.rows, t.cols, w.error, y[w.index], r.y[w.index], r.magnitude[w.index]
        ))
    }
}

/// The end of a suite that must have run something: `ran` runs of `what` happened (one at
/// least) and none failed (the failures listed).
pub fn assert_ran_clean(ran: usize, what: &str, failures: &[String]) {
    println!("{ran} {what}");
    assert!(ran > 0, "no format under test: 0 {what}");
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Formats with a GEMM row, narrowed like [`formats_under_test`].
pub fn gemm_formats_under_test() -> Vec<Format> {
    let gemm = caps::formats(Op::Gemm);
    formats_under_test()
        .into_iter()
        .filter(|f| gemm.contains(f))
        .collect()
}

/// GEMM shapes [O, I] for the tensor-core kernel: several 256-row blocks with a partial
/// one, a single row shorter than a stage, and (I = 1984) a partial last stage where the
/// format's k-blocks allow it; callers skip a shape the tensor-core kernel does not take
/// (I = 1984 for the 64-byte k-blocks), which `gemm_shapes_cover_every_format` bounds.
pub fn gemm_shapes(format: Format) -> Vec<(usize, usize)> {
    if format.spec().whole_blocks_only {
        vec![(300, 768), (1, 256), (33, 1280)]
    } else {
        vec![(300, 1024), (1, 128), (33, 1984), (33, 1920)]
    }
}

/// Per-format seed derived from the run seed, so one format's failure replays alone.
pub fn format_rng(seed: u64, format: Format) -> Rng {
    Rng::new(seed ^ (format as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}
