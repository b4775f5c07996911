//! Cross-format properties that tie each registry row to its codec:
//! - the codec writes every byte of exactly the registry's byte ranges, deterministically;
//! - streaming row blocks through `encode_rows` gives the same bytes as a whole-tensor encode;
//! - decode(encode(w)) stays within the format's declared relative RMS error;
//! - a buffer of the wrong length is refused by name, never sliced.

use proptest::prelude::*;
use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, QTensor, QuantError, decode, encode, encode_rows};

/// Declared worst relative RMS error (‖ŵ - w‖ / ‖w‖ over a row of at least 8 weights) of
/// each format on Gaussian rows. Calibrated from the worst row of 300 cases of this strategy
/// (about 6,000 rows a format) plus about 25% margin; outlier rows are covered by each
/// codec's own per-weight bounds. Exhaustive on purpose: a new format must declare its bound.
fn rms_bound(f: Format) -> f64 {
    match f {
        Format::F32 => 0.0,
        Format::F16 => 5e-4,
        Format::Bf16 => 4e-3,
        Format::Int8Row => 0.015,
        Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0 => 0.06,
        Format::Mq4K => 0.12,
        Format::Mq4G256V2 => 0.18,
        Format::Hfq4G256 | Format::Mq4G256 | Format::Mq4cG256 => 0.2,
        Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256 => 0.21,
        Format::Int4Row => 0.22,
        Format::Mxfp4 => 0.24,
        // 2 bits a weight: a short row's RMS is a small sample. Worst rows measured
        // (2026-11-30, 400 seeds x 5 rows each at 61, 64, 100, 128, 200, 320, 600 columns,
        // N(0, 0.02)): 0.272 at 61 columns, 0.212 at 600; CI once drew 0.3017 on a
        // 61-column row (seed 9836342786824544882), past the 0.3 this bound used to be.
        Format::E8Lattice => 0.33,
        Format::Int3G64 => 0.36,
        Format::Int2Row => 0.9,
        // GGML's reference encoders (worst rows measured on 300 cases: q8_0 0.0093,
        // q4_0 0.145, q4_1 0.118, q5_0 0.072, q5_1 0.058, q2_k 0.351, q3_k 0.181, q4_k 0.083,
        // q5_k 0.043, q6_k 0.021, iq4_nl 0.110, iq4_xs 0.090, gguf-mxfp4 0.187).
        Format::Q8_0 => 0.012,
        Format::Q6K => 0.027,
        Format::Q5K => 0.055,
        Format::Q5_1 => 0.075,
        Format::Q5_0 => 0.09,
        Format::Q4K => 0.11,
        Format::Iq4Xs => 0.12,
        Format::Iq4Nl => 0.14,
        Format::Q4_1 => 0.15,
        Format::Q4_0 => 0.19,
        Format::Q3K => 0.23,
        Format::GgufMxfp4 => 0.24,
        Format::Q2K => 0.44,
    }
}

fn gaussian(seed: u64, rows: usize, cols: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..rows * cols).map(|_| rng.normal() * 0.02).collect()
}

fn cols_for(f: Format, want: usize) -> usize {
    let spec = f.spec();
    if spec.whole_blocks_only {
        let b = spec.block_weights as usize;
        want.div_ceil(b).max(1) * b
    } else {
        want
    }
}

fn encode_prefilled(
    f: Format,
    rows: usize,
    cols: usize,
    w: &[f32],
    fill: u8,
) -> (Vec<u8>, Vec<u8>) {
    let spec = f.spec();
    let mut wb = vec![fill; spec.weight_bytes(rows, cols).unwrap() as usize];
    let mut sb = vec![fill; spec.scale_bytes(rows, cols).unwrap() as usize];
    encode_rows(
        f,
        rows,
        cols,
        0,
        w,
        &mut wb,
        &mut sb,
        &EncodeOptions::default(),
    )
    .unwrap();
    (wb, sb)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn codecs_fill_exactly_the_registry_ranges(rows in 1usize..140, want in 1usize..700, seed: u64) {
        for f in Format::all() {
            let cols = cols_for(f, want);
            let w = weights(&mut Rng::new(seed), rows, cols);
            let a = encode_prefilled(f, rows, cols, &w, 0x00);
            let b = encode_prefilled(f, rows, cols, &w, 0xFF);
            prop_assert!(a == b, "{} [{}, {}]: output depends on the buffer's old contents", f, rows, cols);
            let whole = encode(f, rows, cols, &w, &EncodeOptions::default()).unwrap();
            prop_assert!(whole.weights == a.0 && whole.scales == a.1, "{}: parallel encode differs", f);
        }
    }

    #[test]
    fn streaming_row_blocks_equals_whole_encode(rows in 1usize..300, want in 1usize..400, seed: u64) {
        for f in Format::all() {
            let cols = cols_for(f, want);
            let spec = f.spec();
            let w = weights(&mut Rng::new(seed), rows, cols);
            let whole = encode(f, rows, cols, &w, &EncodeOptions::default()).unwrap();
            let mut wb = vec![0u8; whole.weights.len()];
            let mut sb = vec![0u8; whole.scales.len()];
            let step = spec.row_block();
            let mut row0 = 0;
            while row0 < rows {
                let n = step.min(rows - row0);
                let wr = spec.weight_range(row0, n, cols).unwrap();
                let sr = spec.scale_range(row0, n, rows, cols).unwrap();
                encode_rows(f, rows, cols, row0, &w[row0 * cols..(row0 + n) * cols],
                    &mut wb[wr], &mut sb[sr], &EncodeOptions::default()).unwrap();
                row0 += n;
            }
            prop_assert!(wb == whole.weights && sb == whole.scales, "{} [{}, {}]", f, rows, cols);
        }
    }

    #[test]
    fn round_trip_error_is_within_the_declared_bound(rows in 1usize..40, want in 8usize..600, seed: u64) {
        for f in Format::all() {
            let cols = cols_for(f, want);
            let w = gaussian(seed, rows, cols);
            let t = encode(f, rows, cols, &w, &EncodeOptions {
                    rotation_seed: seed,
                    ..Default::default()
                }).unwrap();
            let d = decode(&t.view()).unwrap();
            for (o, (wr, dr)) in w.chunks(cols).zip(d.chunks(cols)).enumerate() {
                let num: f64 = wr.iter().zip(dr).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
                let den: f64 = wr.iter().map(|a| (*a as f64).powi(2)).sum();
                let rel = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
                prop_assert!(rel <= rms_bound(f), "{} [{}, {}] row {}: rel RMS {:.4}", f, rows, cols, o, rel);
            }
        }
    }
}

#[test]
fn wrong_buffer_lengths_are_refused_by_name() {
    for f in Format::all() {
        let cols = cols_for(f, 300);
        let spec = f.spec();
        let wb = vec![0u8; spec.weight_bytes(2, cols).unwrap() as usize + 1];
        let sb = vec![0u8; spec.scale_bytes(2, cols).unwrap() as usize];
        match QTensor::new(f, 2, cols, &wb, &sb, 0) {
            Err(QuantError::BufferSize { what: "weight", .. }) => {}
            other => panic!("{f}: {other:?}"),
        }
        if spec.scale_bytes(2, cols).unwrap() > 0 {
            let wb = vec![0u8; spec.weight_bytes(2, cols).unwrap() as usize];
            let sb = vec![0u8; spec.scale_bytes(2, cols).unwrap() as usize - 1];
            assert!(matches!(
                QTensor::new(f, 2, cols, &wb, &sb, 0),
                Err(QuantError::BufferSize { what: "scale", .. })
            ));
        }
    }
}

#[test]
fn non_finite_input_is_refused_with_its_position() {
    let mut w = vec![0.5f32; 2 * 256];
    w[256 + 7] = f32::NAN;
    for f in Format::all() {
        let err = encode(f, 2, 256, &w, &EncodeOptions::default()).unwrap_err();
        assert_eq!(
            err,
            QuantError::NonFiniteInput {
                format: f,
                row: 1,
                col: 7
            },
            "{f}"
        );
    }
}
