//! Cross-format properties that tie each registry row to its codec:
//! - the codec writes every byte of exactly the registry's byte ranges, deterministically;
//! - streaming row blocks through `encode_rows` gives the same bytes as a whole-tensor encode;
//! - decode(encode(w)) stays within the format's declared relative RMS error;
//! - a buffer of the wrong length is refused by name, never sliced.

use proptest::prelude::*;
use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, QTensor, QuantError, decode, encode, encode_rows};

/// Declared worst relative RMS error (‖ŵ - w‖ / ‖w‖ over a row) of each format on
/// Gaussian rows with outliers. Exhaustive on purpose: a new format must declare its bound.
fn rms_bound(f: Format) -> f64 {
    match f {
        Format::F32 => 0.0,
        Format::F16 | Format::Bf16 => 4e-3,
        Format::Int8Row | Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0 => 0.08,
        Format::Int4Row
        | Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Hfq4G256
        | Format::Mq4G256
        | Format::Mq4G256V2
        | Format::Mq4cG256
        | Format::Mq4K
        | Format::Mxfp4 => 0.35,
        // Signed-max groups of 128+ and the 256-weight E8 block follow a 20x spike of an
        // outlier row and flush the rest of the group towards zero. Worst rows measured over
        // 10,000 cases of this file's strategy (198,652 rows): int4-g128 0.369, int4-g192
        // 0.409, int4-g256 0.449, int3-g64 0.490, e8-lattice 0.619.
        Format::Int4G128 | Format::Int4G192 | Format::Int4G256 => 0.5,
        Format::Int3G64 => 0.6,
        Format::E8Lattice => 0.75,
        Format::Int2Row => 1.0,
    }
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

fn encode_prefilled(f: Format, rows: usize, cols: usize, w: &[f32], fill: u8) -> (Vec<u8>, Vec<u8>) {
    let spec = f.spec();
    let mut wb = vec![fill; spec.weight_bytes(rows, cols).unwrap() as usize];
    let mut sb = vec![fill; spec.scale_bytes(rows, cols).unwrap() as usize];
    encode_rows(f, rows, cols, 0, w, &mut wb, &mut sb, &EncodeOptions::default()).unwrap();
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
    fn round_trip_error_is_within_the_declared_bound(rows in 1usize..40, want in 1usize..600, seed: u64) {
        for f in Format::all() {
            let cols = cols_for(f, want);
            let w = weights(&mut Rng::new(seed), rows, cols);
            let t = encode(f, rows, cols, &w, &EncodeOptions { rotation_seed: seed }).unwrap();
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
        assert_eq!(err, QuantError::NonFiniteInput { format: f, row: 1, col: 7 }, "{f}");
    }
}
