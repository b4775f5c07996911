//! mxfp4: byte layout (low nibble first, 16 bytes per 32 weights, one UE8M0 byte per block),
//! partial last blocks, the shared-exponent choice, round-trip error bounds and
//! deterministic output.
//!
//! Decoded values are checked against the test's own reading of the layout:
//! `E2M1[nibble] * 2^(scale - 127)` with nibble `(byte[g*16 + j/2] >> 4*(j%2)) & 0xF`.

use proptest::prelude::*;
use quant_core::codec::codec_for;
use quant_core::oracle::POISON;
use quant_core::tables::E2M1;
use quant_core::testdata::{Rng, activations, fresh_seed, weights};
use quant_core::{
    EncodeOptions, EncodedTensor, Format, ScaleEncoding, ScaleLayout, decode, encode, encode_rows,
    gemm,
};

const F: Format = Format::Mxfp4;

fn enc(rows: usize, cols: usize, w: &[f32]) -> EncodedTensor {
    encode(F, rows, cols, w, &EncodeOptions::default()).unwrap()
}

fn pow2(e: u8) -> f64 {
    if e == 0xFF {
        f64::NAN
    } else {
        2f64.powi(i32::from(e) - 127)
    }
}

/// (nibble, scale byte) of weight (o, i), read per the documented layout.
fn stored(t: &EncodedTensor, o: usize, i: usize) -> (u8, u8) {
    let ng = t.cols.div_ceil(32);
    let byte = t.weights[o * ng * 16 + (i / 32) * 16 + (i % 32) / 2];
    ((byte >> (4 * (i % 2))) & 0xF, t.scales[o * ng + i / 32])
}

#[test]
fn registry_row_declares_the_layout() {
    let s = F.spec();
    assert_eq!((s.block_weights, s.block_bytes), (32, 16));
    assert_eq!(
        s.scales,
        ScaleLayout::PerGroup {
            group: 32,
            encoding: ScaleEncoding::Ue8m0
        }
    );
    assert_eq!(s.weight_bytes(3, 33).unwrap(), 3 * 32);
    assert_eq!(s.scale_bytes(3, 33).unwrap(), 3 * 2);
}

#[test]
fn byte_layout_of_one_block() {
    // Every E2M1 value once, at scale 2^0: amax = 6, floor(log2 6) - 2 = 0.
    let mut w: Vec<f32> = E2M1.to_vec();
    w.extend(E2M1.iter().map(|v| v * 0.5)); // halves: 0.25 and 0.75 are ties
    let t = enc(1, 32, &w);
    assert_eq!(t.scales, [127]);
    assert_eq!(t.weights.len(), 16);
    // Weight 2b in the low nibble, 2b+1 in the high nibble.
    assert_eq!(
        &t.weights[..8],
        &[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]
    );
    // 0, 0.25 (tie -> 0), 0.5, 0.75 (tie -> 1.0), 1, 1.5, 2, 3; negatives likewise.
    assert_eq!(
        &t.weights[8..],
        &[0x00, 0x21, 0x32, 0x54, 0x88, 0xA9, 0xBA, 0xDC]
    );
    let d = decode(&t.view()).unwrap();
    assert_eq!(&d[..16], &E2M1[..]);
}

#[test]
fn partial_last_block_is_zero_padded_and_ignored() {
    let w: Vec<f32> = (0..2 * 33).map(|k| (k as f32 - 30.0) * 0.25).collect();
    let t = enc(2, 33, &w);
    assert_eq!(t.weights.len(), 2 * 32);
    assert_eq!(t.scales.len(), 4);
    for o in 0..2 {
        let last = &t.weights[o * 32 + 16..o * 32 + 32];
        assert_eq!(last[0] >> 4, 0, "padding nibble after weight 32 is zero");
        assert!(last[1..].iter().all(|&b| b == 0), "padding bytes are zero");
    }
    // Decoders ignore padding: fill it with junk, decode is unchanged.
    let mut junk = t.clone();
    for o in 0..2 {
        junk.weights[o * 32 + 16] |= 0x70;
        junk.weights[o * 32 + 17..o * 32 + 32].fill(0x77);
    }
    let j = EncodedTensor::from_parts(F, 2, 33, junk.weights, junk.scales, None).unwrap();
    assert_eq!(decode(&j.view()).unwrap(), decode(&t.view()).unwrap());
}

#[test]
fn exponent_choice() {
    // Spec exponent: amax = 6 * 2^3 -> X = 3, all exact.
    let w: Vec<f32> = (0..32).map(|k| E2M1[k % 16] * 8.0).collect();
    assert_eq!(enc(1, 32, &w).scales, [130]);
    // amax = 7.9 * 2^-4: X = -4 saturates every 7.9 to 6 (error 1.9 * 2^-4 each); X + 1
    // gives 3.95 -> 4 * 2^-3 (error 0.1 * 2^-4): X + 1 wins.
    let w = vec![7.9 / 16.0; 32];
    let t = enc(1, 32, &w);
    assert_eq!(t.scales, [127 - 3]);
    assert!(decode(&t.view()).unwrap().iter().all(|&v| v == 0.5));
    // One value at 7.9 and the rest small: the spec exponent keeps the resolution.
    let mut w = vec![0.5f32; 32];
    w[5] = 7.9;
    assert_eq!(enc(1, 32, &w).scales, [127]);
    // All zero: scale byte 0, codes 0.
    let t = enc(1, 40, &[0.0; 40]);
    assert_eq!(t.scales, [0, 0]);
    assert!(t.weights.iter().all(|&b| b == 0));
}

#[test]
fn extreme_magnitudes_stay_finite() {
    // X + 1 would round 3.3e38 / 2^126 = 3.88 up to 4 * 2^126 = 2^128: infinite.
    let mut w = vec![3.3e38f32; 32];
    w.extend([f32::MAX, -f32::MAX, 1.0, f32::from_bits(1)]);
    w.extend(std::iter::repeat_n(f32::from_bits(7), 28));
    let t = enc(1, 64, &w);
    let d = decode(&t.view()).unwrap();
    assert!(
        d.iter().all(|v| v.is_finite()),
        "{:?} {:?}",
        t.scales,
        &d[..4]
    );
    assert!((d[0] - w[0]).abs() <= w[0] / 3.0);
    assert!((d[32] - w[32]).abs() <= w[32] / 3.0);
    assert_eq!(t.scales[1], 127 + 125);
}

#[test]
fn decode_follows_the_documented_layout() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for (rows, cols) in [(1, 1), (3, 31), (2, 33), (5, 64), (7, 100), (130, 300)] {
        // Foreign bytes, every scale byte including the NaN 0xFF.
        let nb = F.spec().weight_bytes(rows, cols).unwrap() as usize;
        let ns = F.spec().scale_bytes(rows, cols).unwrap() as usize;
        let wb: Vec<u8> = (0..nb).map(|_| rng.next_u64() as u8).collect();
        let sb: Vec<u8> = (0..ns)
            .map(|k| {
                if k < 256 {
                    k as u8
                } else {
                    rng.next_u64() as u8
                }
            })
            .collect();
        let t = EncodedTensor::from_parts(F, rows, cols, wb.clone(), sb.clone(), None).unwrap();
        let d = decode(&t.view()).unwrap();
        assert_eq!(t.weights, wb);
        for o in 0..rows {
            for i in 0..cols {
                let (nib, e) = stored(&t, o, i);
                let want = (E2M1[nib as usize] as f64 * pow2(e)) as f32;
                let got = d[o * cols + i];
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "seed {seed} [{rows},{cols}] ({o},{i}): {got} != {want}"
                );
            }
        }
    }
}

#[test]
fn a_nan_scale_poisons_exactly_its_row() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let (rows, cols) = (17, 100);
    let w = weights(&mut rng, rows, cols);
    let mut t = enc(rows, cols, &w);
    let o = rng.below(rows);
    t.scales[o * 4 + 2] = 0xFF;
    let x = activations(&mut rng, 3, cols);
    let mut y = vec![POISON; 3 * rows];
    gemm(&t.view(), &x, 3, &mut y).unwrap();
    for (k, v) in y.iter().enumerate() {
        assert_eq!(v.is_nan(), k % rows == o, "seed {seed} output {k}: {v}");
    }
}

#[test]
fn encode_rows_writes_every_byte_deterministically() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let spec = F.spec();
    for (rows, cols) in [(5, 33), (3, 1), (9, 100), (4, 64)] {
        let w = weights(&mut rng, rows, cols);
        let whole = enc(rows, cols, &w);
        for fill in [0x00u8, 0xFF] {
            let mut wb = vec![fill; spec.weight_bytes(rows, cols).unwrap() as usize];
            let mut sb = vec![fill; spec.scale_bytes(rows, cols).unwrap() as usize];
            // Uneven row chunks: 2, then the rest.
            for (row0, n) in [(0, 2), (2, rows - 2)] {
                let wr = spec.weight_range(row0, n, cols).unwrap();
                let sr = spec.scale_range(row0, n, rows, cols).unwrap();
                let src = &w[row0 * cols..(row0 + n) * cols];
                encode_rows(
                    F,
                    rows,
                    cols,
                    row0,
                    src,
                    &mut wb[wr],
                    &mut sb[sr],
                    &EncodeOptions::default(),
                )
                .unwrap();
            }
            assert_eq!(wb, whole.weights, "[{rows},{cols}] fill {fill:#x}");
            assert_eq!(sb, whole.scales, "[{rows},{cols}] fill {fill:#x}");
        }
    }
}

#[test]
fn codec_refuses_wrong_buffers_instead_of_panicking() {
    let c = codec_for(F);
    let src = [1.0f32; 66];
    let run = |cols: usize, src: &[f32], nw: usize, ns: usize| {
        c.encode_rows(F, cols, src, &mut vec![0; nw], &mut vec![0; ns])
    };
    assert!(run(33, &src, 63, 4).is_err());
    assert!(run(33, &src, 64, 3).is_err());
    assert!(run(32, &src, 64, 4).is_err());
    assert!(run(33, &src, 64, 4).is_ok());
    // Zero rows is a valid (empty) row block.
    assert!(run(33, &[], 0, 0).is_ok());
    let opts = EncodeOptions::default();
    assert!(encode_rows(F, 3, 33, 1, &[], &mut [], &mut [], &opts).is_ok());
}

/// Squared error of `block` under shared exponent `x`, by the test's own rounding: the
/// nearest E2M1 magnitude (ties to even code), saturating at 6.
fn sse_at(block: &[f32], x: i32) -> f64 {
    let grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    block
        .iter()
        .map(|&w| {
            let a = (w as f64).abs() / 2f64.powi(x);
            let mut best = 0;
            for (c, &g) in grid.iter().enumerate() {
                let (d, db) = ((g - a).abs(), (grid[best] - a).abs());
                if d < db || (d == db && c % 2 == 0) {
                    best = c;
                }
            }
            let e = grid[best] * 2f64.powi(x) - (w as f64).abs();
            e * e
        })
        .sum()
}

fn spread_weights() -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..20, 1usize..200, any::<u64>(), -100i32..100).prop_map(|(rows, cols, seed, e0)| {
        let mut rng = Rng::new(seed);
        let w = (0..rows * cols)
            .map(|_| rng.normal() * 2f32.powi(e0 - rng.below(12) as i32))
            .collect();
        (rows, cols, w)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With X in {e, e+1} (e = floor(log2 amax) - 2): values in [0, 2 * 2^X) are off by at
    /// most 2^(X-2) (the grid step there is 2^(X-1)); in [2, 6] * 2^X the relative error is
    /// at most 1/4; above 6 * 2^X (saturation, X = e only) at most 1/3. Hence
    /// |err| <= |w| / 3 + 2^(X-2) <= |w| / 3 + amax / 8, as amax >= 2^(e+2).
    /// The chosen exponent also never does worse than the spec's own X = e.
    #[test]
    fn round_trip_error_is_bounded((rows, cols, w) in spread_weights()) {
        let t = enc(rows, cols, &w);
        let d = decode(&t.view()).unwrap();
        for (o, (row, drow)) in w.chunks(cols).zip(d.chunks(cols)).enumerate() {
            for (g, (block, dblock)) in row.chunks(32).zip(drow.chunks(32)).enumerate() {
                let amax = block.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                let floor_for = 2f64.powi(-129);
                for (&x, &y) in block.iter().zip(dblock) {
                    let bound = (x as f64).abs() / 3.0 + (amax / 8.0).max(floor_for);
                    prop_assert!(((y - x) as f64).abs() <= bound, "({},{}) {} -> {}", o, g, x, y);
                }
                let (_, e) = stored(&t, o, g * 32);
                let spec_x = if amax == 0.0 { -127 } else { (amax.log2().floor() as i32 - 2).clamp(-127, 127) };
                let chosen = i32::from(e) - 127;
                prop_assert!(chosen == spec_x || chosen == spec_x + 1);
                let sse: f64 = block.iter().zip(dblock).map(|(&a, &b)| ((a - b) as f64).powi(2)).sum();
                prop_assert!(sse <= sse_at(block, spec_x), "chose {} over spec {}", chosen, spec_x);
            }
        }
    }
}

/// The worked example of docs/FORMATS.md, byte for byte.
#[test]
fn docs_worked_example() {
    let t = enc(2, 3, &[0.3, -1.2, 0.05, 2.5, -0.001, 0.7]);
    let mut want = [0u8; 32];
    want[..2].copy_from_slice(&[0xE2, 0x00]);
    want[16..18].copy_from_slice(&[0x86, 0x03]);
    assert_eq!(t.weights, want);
    assert_eq!(t.scales, [0x7D, 0x7E]);
    let d = decode(&t.view()).unwrap();
    assert_eq!(d, [0.25, -1.0, 0.0, 2.0, -0.0, 0.75]);
    assert!(d[4].is_sign_negative());
}
