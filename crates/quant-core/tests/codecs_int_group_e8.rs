//! Byte-level layout, round-trip error bounds and determinism of the int4-g{gs}, int3-g64 and
//! e8-lattice codecs (docs/FORMATS.md).
//!
//! Error bounds checked here (d is the stored scale that covers the weight):
//! - int4-g / int3-g64: |w - ŵ| <= |d|/2 where the code was not clamped (w/d <= qmax + ½),
//!   and <= |d| where it was (only the side opposite the signed max can clamp).
//! - e8-lattice: |w - ŵ| <= d·(2 + ‖c‖) per weight, c_j = max(0, |w_j|/d - 4) over the
//!   weight's 8-vector (so 2d wherever the vector stays within ±4d); block squared error
//!   <= 64·d₃.₅² with d₃.₅ = f16(amax/3.5); and every 8-vector is coded by the nearest point
//!   of the box at its block's d (checked against an exhaustive per-coset search).
//!   Derivations in docs/FORMATS.md.

use half::f16;
use proptest::prelude::*;
use quant_core::codecs::e8;
use quant_core::testdata::Rng;
use quant_core::{EncodeOptions, Format, QTensor, decode, encode, encode_rows};

const INT4_GROUPED: [Format; 8] = [
    Format::Int4G16,
    Format::Int4G32,
    Format::Int4G48,
    Format::Int4G64,
    Format::Int4G96,
    Format::Int4G128,
    Format::Int4G192,
    Format::Int4G256,
];

fn all_formats() -> Vec<Format> {
    let mut v = INT4_GROUPED.to_vec();
    v.push(Format::Int3G64);
    v.push(Format::E8Lattice);
    v
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())
}

fn decode_bytes(f: Format, rows: usize, cols: usize, w: &[u8], s: &[u8]) -> Vec<f32> {
    let t = QTensor::new(f, rows, cols, w, s, 0).unwrap();
    decode(&t).unwrap()
}

fn signed_absmax(v: &[f32]) -> f32 {
    v.iter()
        .fold(0f32, |m, &x| if x.abs() > m.abs() { x } else { m })
}

/// Deterministic weights, a few exact zeros mixed in.
fn sample(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            if rng.below(13) == 0 {
                0.0
            } else {
                rng.normal() * scale
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Layout: hand-built bytes decode to exact values; the encoder puts weight 9 in its bits.
// ---------------------------------------------------------------------------------------

#[test]
fn int4_g16_hand_built_row_decodes_exactly() {
    // I = 19: two groups (16 + a partial 3), 10 bytes, the last high nibble unused.
    let w = [0x80u8, 0xF0, 0x19, 0x7A, 0x8C, 0x00, 0x81, 0x23, 0x45, 0x06];
    let mut s = Vec::new();
    for d in [0.5f32, -2.0] {
        s.extend_from_slice(&d.to_le_bytes());
    }
    let q: [i32; 19] = [
        -8, 0, -8, 7, 1, -7, 2, -1, 4, 0, -8, -8, -7, 0, -5, -6, -3, -4, -2,
    ];
    let want: Vec<f32> = q
        .iter()
        .enumerate()
        .map(|(i, &q)| q as f32 * if i < 16 { 0.5 } else { -2.0 })
        .collect();
    assert_eq!(decode_bytes(Format::Int4G16, 1, 19, &w, &s), want);
}

#[test]
fn int4_g_encoder_puts_weight_9_in_the_high_nibble_of_byte_4() {
    // Group 0 (gs 16): signed max -1.0 at weight 3, so d = -1/-8 = 0.125 and weight 9
    // (0.5) is q = 4, nibble 12. Group 1 is all zero: d = -0.0, every nibble 8.
    let mut x = vec![0f32; 20];
    x[3] = -1.0;
    x[9] = 0.5;
    let t = encode(Format::Int4G16, 1, 20, &x, &EncodeOptions::default()).unwrap();
    let mut want = vec![0x88u8; 10];
    want[1] = 0x08; // weight 3 (q = -8) in the high nibble
    want[4] = 0xC8; // weight 9 (q = 4) in the high nibble, weight 8 (q = 0) low
    assert_eq!(t.weights, want);
    assert_eq!(f32_at(&t.scales, 0), 0.125);
    assert_eq!(f32_at(&t.scales, 1).to_bits(), (-0.0f32).to_bits());
}

#[test]
fn int4_g_with_one_group_is_byte_identical_to_int4_row() {
    for (f, cols) in [
        (Format::Int4G64, 37),
        (Format::Int4G256, 256),
        (Format::Int4G16, 16),
    ] {
        let x = sample(7 + cols as u64, 3 * cols, 0.3);
        let g = encode(f, 3, cols, &x, &EncodeOptions::default()).unwrap();
        let r = encode(Format::Int4Row, 3, cols, &x, &EncodeOptions::default()).unwrap();
        assert_eq!(g.weights, r.weights, "{f} I={cols}");
        assert_eq!(g.scales, r.scales, "{f} I={cols}");
    }
}

/// A 24-bit int3 word from its eight 3-bit fields, written as an octal literal's digits.
fn int3_word_bytes(word: u32) -> [u8; 3] {
    let b = word.to_le_bytes();
    [b[0], b[1], b[2]]
}

#[test]
fn int3_hand_built_row_decodes_exactly() {
    // I = 75: group 0 is 8 words of codes 0..7 (octal digits, weight 8k+j = digit j from the
    // right) under d = 0.25; group 1 is 11 weights in two words under d = -2.0, the second
    // word partial (weights 72..74 = stored 7, 0, 5; the rest zero bits).
    let mut w = Vec::new();
    for _ in 0..8 {
        w.extend_from_slice(&int3_word_bytes(0o7654_3210));
    }
    assert_eq!(&w[..3], &[0x88, 0xC6, 0xFA]);
    w.extend_from_slice(&int3_word_bytes(0o0123_4567));
    w.extend_from_slice(&int3_word_bytes(0o507));
    assert_eq!(
        w.len(),
        Format::Int3G64.spec().row_bytes(75).unwrap() as usize
    );
    let mut s = Vec::new();
    for d in [0.25f32, -2.0] {
        s.extend_from_slice(&d.to_le_bytes());
    }
    let mut want: Vec<f32> = (0..64).map(|i| ((i % 8) as f32 - 4.0) * 0.25).collect();
    for u in [7, 6, 5, 4, 3, 2, 1, 0, 7, 0, 5] {
        want.push((u as f32 - 4.0) * -2.0);
    }
    assert_eq!(decode_bytes(Format::Int3G64, 1, 75, &w, &s), want);
}

#[test]
fn int3_encoder_puts_weight_9_in_bits_3_to_5_of_word_1() {
    // Signed max -1.0 at weight 3: d = -1/-4 = 0.25; weight 9 (0.5) is q = 2, stored 6.
    let mut x = vec![0f32; 16];
    x[3] = -1.0;
    x[9] = 0.5;
    let t = encode(Format::Int3G64, 1, 16, &x, &EncodeOptions::default()).unwrap();
    let mut want = int3_word_bytes(0o4444_0444).to_vec();
    want.extend_from_slice(&int3_word_bytes(0o4444_4464));
    assert_eq!(t.weights, want);
    assert_eq!(f32_at(&t.scales, 0), 0.25);
}

/// An e8 code from its fields, as docs/FORMATS.md defines them.
fn e8_code(s: u32, u: [u32; 7], m: u32) -> u32 {
    let mut c = s;
    for (j, &uj) in u.iter().enumerate() {
        c |= uj << (1 + 3 * j);
    }
    c | m << 22
}

/// The code of the zero vector: integer coset, every k_j = 0 (u_j = 4), k_7 = 0 (m = 2).
fn e8_zero_code() -> u32 {
    e8_code(0, [4; 7], 2)
}

fn e8_block_bytes(d: f16, codes: &[u32]) -> Vec<u8> {
    let mut b = d.to_le_bytes().to_vec();
    for k in 0..32 {
        let c = codes.get(k).copied().unwrap_or(0);
        b.extend_from_slice(&c.to_le_bytes()[..3]);
    }
    b
}

#[test]
fn e8_registry_geometry_matches_the_codec() {
    let spec = Format::E8Lattice.spec();
    assert_eq!(spec.block_weights as usize, e8::BLOCK_WEIGHTS);
    assert_eq!(spec.block_bytes as usize, e8::BLOCK_BYTES);
    assert_eq!(e8::BLOCK_BYTES, 98);
}

#[test]
fn e8_hand_built_block_decodes_exactly() {
    // I = 20: one partial block (codes 0..2, the third covering weights 16..19 only).
    let a = e8_code(1, [0, 1, 2, 3, 4, 5, 6], 3); // half coset; Σk = -7, p = 1, k7 = 3
    let b = e8_code(0, [7, 0, 0, 0, 0, 0, 1], 0); // Σk = -20, p = 0, k7 = -4
    let c = e8_code(0, [4, 4, 4, 4, 4, 4, 5], 0); // Σk = 1, p = 1, k7 = -3
    let w = e8_block_bytes(f16::from_f32(0.5), &[a, b, c]);
    let s = 2.0f32.to_le_bytes(); // the tensor scale: every weight is d·2·v = v
    let mut want = vec![-3.5f32, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5];
    want.extend_from_slice(&[3.0, -4.0, -4.0, -4.0, -4.0, -4.0, -3.0, -4.0]);
    want.extend_from_slice(&[0.0, 0.0, 0.0, 0.0]);
    assert_eq!(decode_bytes(Format::E8Lattice, 1, 20, &w, &s), want);
    // Weights 20..23 of code c would be 0, 0, 1, -3: ignored, but decoded by a wider row.
    let mut w2 = w.clone();
    w2.extend_from_slice(&e8_block_bytes(f16::from_f32(0.0), &[]));
    let wide = decode_bytes(Format::E8Lattice, 1, 257, &w2, &s);
    assert_eq!(&wide[20..24], &[0.0, 0.0, 1.0, -3.0]);
}

#[test]
fn e8_every_code_is_a_distinct_box_point_of_e8() {
    for code in 0u32..1 << 24 {
        let (k, s) = e8::unpack(code);
        assert!(
            k.iter().all(|&kj| (-4..=3).contains(&kj)),
            "{code:#x}: {k:?}"
        );
        assert_eq!(k.iter().sum::<i32>().rem_euclid(2), 0, "{code:#x}: {k:?}");
        assert_eq!(e8::pack(&k, s), code, "{code:#x}");
    }
}

#[test]
fn e8_encoder_puts_weight_9_in_field_u1_of_code_1() {
    // Weights 9 and 10 = 0.75 and 0.25, the rest 0: at d = 0.75/3 = 0.25 the vector
    // (0, 3, 1, 0, 0, 0, 0, 0) is an integer point of even sum, so the search lands on it
    // with zero error. Code 1 = s 0, u = (4, 7, 5, 4, 4, 4, 4), m = 2.
    let mut x = vec![0f32; 256];
    x[9] = 0.75;
    x[10] = 0.25;
    let t = encode(Format::E8Lattice, 1, 256, &x, &EncodeOptions::default()).unwrap();
    let mut codes = vec![e8_zero_code(); 32];
    codes[1] = e8_code(0, [4, 7, 5, 4, 4, 4, 4], 2);
    assert_eq!(t.weights, e8_block_bytes(f16::from_f32(0.25), &codes));
    assert_eq!(&t.weights[..2], &[0x00, 0x34]);
    assert_eq!(t.scales, 1.0f32.to_le_bytes());
    assert_eq!(decode(&t.view()).unwrap(), x);
}

// ---------------------------------------------------------------------------------------
// Round trips with error bounds.
// ---------------------------------------------------------------------------------------

/// Encodes, decodes and checks the grouped-integer bounds; returns the first violation.
fn check_int_group(f: Format, rows: usize, cols: usize, x: &[f32]) -> Result<(), String> {
    let t = encode(f, rows, cols, x, &EncodeOptions::default()).map_err(|e| e.to_string())?;
    let y = decode(&t.view()).map_err(|e| e.to_string())?;
    let gs = f.spec().group_size().unwrap() as usize;
    let (lo, hi) = if f == Format::Int3G64 {
        (4i32, 3i32)
    } else {
        (8, 7)
    };
    let ng = t.scales.len() / 4 / rows;
    for o in 0..rows {
        for (g, wg) in x[o * cols..(o + 1) * cols].chunks(gs).enumerate() {
            let d = f32_at(&t.scales, o * ng + g);
            let want_d = signed_absmax(wg) / -(lo as f32);
            if d.to_bits() != want_d.to_bits() {
                return Err(format!(
                    "{f} row {o} group {g}: scale {d}, signed-max rule gives {want_d}"
                ));
            }
            for (j, &w) in wg.iter().enumerate() {
                let i = o * cols + g * gs + j;
                let bound = if d == 0.0 {
                    0.0
                } else if w / d <= hi as f32 + 0.5 {
                    d.abs() / 2.0
                } else {
                    d.abs()
                };
                let err = (w - y[i]).abs();
                if err > bound * (1.0 + 1e-5) + 1e-30 {
                    return Err(format!(
                        "{f} [{rows}, {cols}] w[{o}, {}] = {w}: decoded {} (d {d}, bound {bound})",
                        g * gs + j,
                        y[i]
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The least squared distance from `y` to a point of E8 inside the codec's box, by an
/// exhaustive search over each coordinate's 8 values with a parity state (independent of the
/// codec's round-and-flip search).
fn e8_box_optimum(y: &[f32]) -> f64 {
    let mut best = f64::INFINITY;
    for half in [0.0f64, 0.5] {
        let mut dp = [0f64, f64::INFINITY];
        for &yj in y {
            let mut next = [f64::INFINITY; 2];
            for k in -4i32..=3 {
                let e = yj as f64 - (k as f64 + half);
                let p = (k & 1) as usize;
                for (from, &c) in dp.iter().enumerate() {
                    next[from ^ p] = next[from ^ p].min(c + e * e);
                }
            }
            dp = next;
        }
        best = best.min(dp[0]);
    }
    best
}

/// Encodes, decodes and checks the e8 bounds and the optimality of every code.
fn check_e8(rows: usize, cols: usize, x: &[f32]) -> Result<(), String> {
    let f = Format::E8Lattice;
    let t = encode(f, rows, cols, x, &EncodeOptions::default()).map_err(|e| e.to_string())?;
    let y = decode(&t.view()).map_err(|e| e.to_string())?;
    if t.scales != 1.0f32.to_le_bytes() {
        return Err(format!("tensor scale bytes {:?}", t.scales));
    }
    let rb = t.weights.len() / rows;
    for o in 0..rows {
        let row = &x[o * cols..(o + 1) * cols];
        let dec = &y[o * cols..(o + 1) * cols];
        for (b, (wb, yb)) in row.chunks(256).zip(dec.chunks(256)).enumerate() {
            let at = o * rb + b * 98;
            let d = f16::from_le_bytes([t.weights[at], t.weights[at + 1]]).to_f32();
            let amax = wb.iter().fold(0f32, |m, v| m.max(v.abs()));
            if amax == 0.0 {
                if d != 0.0 || yb.iter().any(|&v| v != 0.0) {
                    return Err(format!("row {o} block {b}: zero block decodes to d {d}"));
                }
                continue;
            }
            let mut sse = 0f64;
            for (k, (xv, yv)) in wb.chunks(8).zip(yb.chunks(8)).enumerate() {
                // How far the vector reaches past ±4d (the box's reach), in units of d.
                let reach: f32 = xv
                    .iter()
                    .map(|w| (w.abs() / d - 4.0).max(0.0).powi(2))
                    .sum();
                let bound = d * (2.0 + reach.sqrt()) * (1.0 + 1e-3) + 1e-6 * amax;
                for (i, (&w, &v)) in xv.iter().zip(yv).enumerate() {
                    let e = (w - v).abs();
                    if e > bound {
                        return Err(format!(
                            "row {o} block {b} weight {}: {w} -> {v} (d {d}, bound {bound})",
                            8 * k + i
                        ));
                    }
                    sse += (e as f64).powi(2);
                }
            }
            // The stored d is the candidate of least block error (each scored at its own
            // nearest points), up to float noise in the encoder's f32 sums.
            let mut xp = wb.to_vec();
            xp.resize(256, 0.0);
            let best = e8::DENOMINATORS
                .iter()
                .map(|c| f16::from_f32((amax / c).min(65504.0)).to_f32())
                .filter(|&dc| dc > 0.0)
                .map(|dc| {
                    let e: f64 = xp
                        .chunks(8)
                        .map(|v| e8_box_optimum(&v.iter().map(|w| w / dc).collect::<Vec<_>>()))
                        .sum();
                    e * (dc as f64).powi(2)
                })
                .fold(f64::INFINITY, f64::min);
            let chosen: f64 = xp
                .chunks(8)
                .map(|v| e8_box_optimum(&v.iter().map(|w| w / d).collect::<Vec<_>>()))
                .sum::<f64>()
                * (d as f64).powi(2);
            if chosen > best * (1.0 + 1e-4) + 1e-12 {
                return Err(format!(
                    "row {o} block {b}: d {d} scores {chosen}, a candidate scores {best}"
                ));
            }
            let d35 = f16::from_f32(amax / 3.5).to_f32() as f64;
            if sse > 64.7 * d35 * d35 {
                return Err(format!(
                    "row {o} block {b}: block squared error {sse} > 64.7·{d35}²"
                ));
            }
            // Each 8-vector (zero padded) is coded by the nearest box point at this d.
            let mut yp = yb.to_vec();
            yp.resize(256, f32::NAN);
            for (k, (xv, yv)) in xp.chunks(8).zip(yp.chunks(8)).enumerate() {
                let ys: Vec<f32> = xv.iter().map(|v| v / d).collect();
                let opt = e8_box_optimum(&ys);
                // The decoded point in units of d, padding taken from the code itself.
                let cb = &t.weights[at + 2 + 3 * k..at + 5 + 3 * k];
                let code = cb[0] as u32 | (cb[1] as u32) << 8 | (cb[2] as u32) << 16;
                let v = e8::point(code);
                let got: f64 = ys
                    .iter()
                    .zip(&v)
                    .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                    .sum();
                if got > opt + 1e-4 * (1.0 + opt) {
                    return Err(format!(
                        "row {o} block {b} vector {k}: error {got}, optimum {opt}"
                    ));
                }
                let shown = yv.iter().zip(&v).all(|(a, b)| a.is_nan() || *a == *b * d);
                if !shown {
                    return Err(format!(
                        "row {o} block {b} vector {k}: decode {yv:?} != {v:?}·{d}"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn edge_shapes_round_trip_within_bounds() {
    // Partial last group/block, odd I, I below one group, I = 1, one exact block.
    let shapes = [
        1usize, 2, 7, 15, 16, 17, 33, 63, 64, 65, 127, 129, 191, 255, 256, 257, 300, 1001,
    ];
    let mut seed = 1;
    for f in all_formats() {
        for &cols in &shapes {
            for rows in [1usize, 3] {
                seed += 1;
                let x = sample(seed, rows * cols, 0.05);
                let r = if f == Format::E8Lattice {
                    check_e8(rows, cols, &x)
                } else {
                    check_int_group(f, rows, cols, &x)
                };
                r.unwrap_or_else(|e| panic!("{f} [{rows}, {cols}]: {e}"));
            }
        }
    }
}

#[test]
fn all_zero_rows_decode_to_zero() {
    for f in all_formats() {
        for cols in [1usize, 37, 64, 300] {
            let x = vec![0f32; 2 * cols];
            let t = encode(f, 2, cols, &x, &EncodeOptions::default()).unwrap();
            assert!(
                decode(&t.view()).unwrap().iter().all(|&v| v == 0.0),
                "{f} I={cols}"
            );
            if f == Format::E8Lattice {
                // d = 0 and all-zero codes.
                assert!(t.weights.iter().all(|&b| b == 0), "{f} I={cols}");
            } else {
                assert!(
                    t.scales
                        .chunks(4)
                        .all(|s| f32::from_le_bytes(s.try_into().unwrap()) == 0.0)
                );
            }
        }
    }
}

#[test]
fn e8_huge_and_tiny_weights_stay_finite() {
    // amax/3 above f16's range: d saturates at 65504 instead of becoming infinite.
    let mut x = sample(99, 300, 1.0e6);
    x[5] = 3.0e38;
    let t = encode(Format::E8Lattice, 1, 300, &x, &EncodeOptions::default()).unwrap();
    let y = decode(&t.view()).unwrap();
    assert!(y.iter().all(|v| v.is_finite()));
    assert_eq!(f16::from_le_bytes([t.weights[0], t.weights[1]]), f16::MAX);
    // Far below f16's subnormals every candidate d is 0: the block is stored as zero.
    let x = vec![1.0e-12f32; 8];
    let t = encode(Format::E8Lattice, 1, 8, &x, &EncodeOptions::default()).unwrap();
    assert!(t.weights.iter().all(|&b| b == 0));
}

#[test]
fn outlier_rows_round_trip_within_bounds() {
    let mut rng = Rng::new(1234);
    let x = quant_core::testdata::weights(&mut rng, 14, 700);
    for f in all_formats() {
        let r = if f == Format::E8Lattice {
            check_e8(14, 700, &x)
        } else {
            check_int_group(f, 14, 700, &x)
        };
        r.unwrap_or_else(|e| panic!("{e}"));
    }
}

fn values(max_len: usize) -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..4, 1usize..max_len).prop_flat_map(|(rows, cols)| {
        let v = prop_oneof![
            1 => Just(0.0f32),
            8 => (1.0e-2f32..1.0e2, any::<bool>()).prop_map(|(m, neg)| if neg { -m } else { m }),
        ];
        (
            Just(rows),
            Just(cols),
            proptest::collection::vec(v, rows * cols),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn int4_grouped_round_trip(k in 0usize..8, (rows, cols, x) in values(600)) {
        let f = INT4_GROUPED[k];
        check_int_group(f, rows, cols, &x).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn int3_round_trip((rows, cols, x) in values(600)) {
        check_int_group(Format::Int3G64, rows, cols, &x).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn e8_round_trip((rows, cols, x) in values(700)) {
        check_e8(rows, cols, &x).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------
// Determinism: every output byte is written.
// ---------------------------------------------------------------------------------------

#[test]
fn every_output_byte_is_written() {
    let opts = EncodeOptions::default();
    for f in all_formats() {
        let spec = f.spec();
        for (rows, cols) in [(3usize, 37usize), (2, 300), (1, 1), (4, 64)] {
            let x = sample(rows as u64 * 1000 + cols as u64, rows * cols, 0.1);
            // Two row blocks: rows 0..1 (which owns e8's tensor scale) and the rest.
            let mut blocks = vec![(0usize, 1usize)];
            if rows > 1 {
                blocks.push((1, rows - 1));
            }
            for (row0, n) in blocks {
                let wr = spec.weight_range(row0, n, cols).unwrap();
                let sr = spec.scale_range(row0, n, rows, cols).unwrap();
                let src = &x[row0 * cols..(row0 + n) * cols];
                let mut outs = Vec::new();
                for fill in [0x00u8, 0xFF] {
                    let mut w = vec![fill; wr.len()];
                    let mut s = vec![fill; sr.len()];
                    encode_rows(f, rows, cols, row0, src, &mut w, &mut s, &opts).unwrap();
                    outs.push((w, s));
                }
                assert_eq!(outs[0], outs[1], "{f} [{rows}, {cols}] rows {row0}+{n}");
            }
        }
    }
}

#[test]
fn direct_codec_calls_with_wrong_buffers_are_errors() {
    use quant_core::codec::codec_for;
    for f in all_formats() {
        let c = codec_for(f);
        let x = vec![0.5f32; 40];
        let rb = f.spec().row_bytes(20).unwrap() as usize;
        let sb = f.spec().scale_bytes(2, 20).unwrap() as usize;
        let mut w = vec![0u8; 2 * rb];
        let mut s = vec![0u8; sb];
        assert!(c.encode_rows(f, 20, &x, &mut w, &mut s).is_ok(), "{f}");
        assert!(
            c.encode_rows(f, 20, &x, &mut w[1..], &mut s).is_err(),
            "{f}"
        );
        assert!(
            c.encode_rows(f, 20, &x, &mut w, &mut [0u8; 3]).is_err(),
            "{f}"
        );
        assert!(c.encode_rows(f, 0, &x, &mut w, &mut s).is_err(), "{f}");
        assert!(c.encode_rows(f, 21, &x, &mut w, &mut s).is_err(), "{f}");
    }
}

// ---------------------------------------------------------------------------------------
// The worked examples of docs/FORMATS.md, byte for byte.
// ---------------------------------------------------------------------------------------

const DOC_X: [f32; 16] = [
    0.12, -0.50, 0.03, 0.25, -0.07, 0.31, 0.0, -0.18, 0.44, 0.09, -0.22, 0.15, 0.05, -0.33, 0.27,
    0.01,
];

#[test]
fn docs_int4_g16_worked_example() {
    let mut x = DOC_X.to_vec();
    x.extend_from_slice(&[2.0, -1.1, 0.6, 0.9, -0.3]);
    let t = encode(Format::Int4G16, 1, 21, &x, &EncodeOptions::default()).unwrap();
    assert_eq!(
        t.weights,
        [
            0x0A, 0xC8, 0xD7, 0x58, 0x9F, 0xA4, 0x39, 0x8C, 0xC0, 0x46, 0x09
        ]
    );
    assert_eq!(t.scales, [0x00, 0x00, 0x80, 0x3D, 0x00, 0x00, 0x80, 0xBE]);
    let want = [
        0.125, -0.5, 0.0, 0.25, -0.0625, 0.3125, 0.0, -0.1875, 0.4375, 0.0625, -0.25, 0.125,
        0.0625, -0.3125, 0.25, 0.0, 2.0, -1.0, 0.5, 1.0, -0.25,
    ];
    assert_eq!(decode(&t.view()).unwrap(), want);
}

#[test]
fn docs_int3_g64_worked_example() {
    let mut x = DOC_X[..9].to_vec();
    x.push(-0.9);
    let t = encode(Format::Int3G64, 1, 10, &x, &EncodeOptions::default()).unwrap();
    assert_eq!(t.weights, [0x15, 0xCB, 0x72, 0x06, 0x00, 0x00]);
    assert_eq!(&t.weights[..3], &int3_word_bytes(0o3454_5425));
    assert_eq!(t.scales, [0x66, 0x66, 0x66, 0x3E]);
    let d = 0.9f32 / 4.0;
    let want: Vec<f32> = [1, -2, 0, 1, 0, 1, 0, -1, 2, -4]
        .iter()
        .map(|&q| q as f32 * d)
        .collect();
    assert_eq!(decode(&t.view()).unwrap(), want);
}

#[test]
fn docs_e8_worked_example() {
    let t = encode(Format::E8Lattice, 1, 16, &DOC_X, &EncodeOptions::default()).unwrap();
    let mut codes = vec![e8_zero_code(); 32];
    codes[0] = e8_code(0, [5, 0, 4, 6, 3, 7, 4], 1);
    codes[1] = e8_code(1, [7, 4, 2, 5, 4, 1, 6], 1);
    assert_eq!(codes[0], 0x677A0A);
    assert_eq!(codes[1], 0x71954F);
    assert_eq!(e8_zero_code(), 0xA49248);
    assert_eq!(t.weights, e8_block_bytes(f16::from_bits(0x3000), &codes));
    assert_eq!(t.scales, [0x00, 0x00, 0x80, 0x3F]);
    let want = [
        0.125, -0.5, 0.0, 0.25, -0.125, 0.375, 0.0, -0.125, 0.4375, 0.0625, -0.1875, 0.1875,
        0.0625, -0.3125, 0.3125, -0.0625,
    ];
    assert_eq!(decode(&t.view()).unwrap(), want);
}
