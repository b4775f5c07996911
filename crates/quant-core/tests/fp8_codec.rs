//! fp8-e4m3-b128 (f32 and UE8M0 tile scales): byte layout, tile indexing on non-square and
//! partial tile grids, passthrough of foreign bytes, NaN propagation through the GEMM,
//! round-trip error bounds and deterministic output.
//!
//! Expectations are computed here with the test's own tile-index formula
//! `(o / 128) * ceil(I / 128) + i / 128` and the OCP decode, not with the codec's helpers.

use proptest::prelude::*;
use quant_core::codec::codec_for;
use quant_core::codecs::fp8::ue8m0_scale;
use quant_core::oracle::POISON;
use quant_core::tables::{E4M3_FN, ue8m0};
use quant_core::testdata::{Rng, activations, fresh_seed, weights};
use quant_core::{
    EncodeOptions, EncodedTensor, Format, ScaleEncoding, ScaleLayout, decode, encode, encode_rows,
    gemm,
};

const FORMATS: [Format; 2] = [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0];
const T: usize = 128;

fn tile(cols: usize, o: usize, i: usize) -> usize {
    (o / T) * cols.div_ceil(T) + i / T
}

/// The value of stored scale `k`, read per the format's declared encoding.
fn scale_at(f: Format, scales: &[u8], k: usize) -> f32 {
    match f {
        Format::Fp8E4m3B128 => f32::from_le_bytes(scales[4 * k..4 * k + 4].try_into().unwrap()),
        Format::Fp8E4m3B128Ue8m0 => match scales[k] {
            0xFF => f32::NAN,
            e => 2f64.powi(i32::from(e) - 127) as f32,
        },
        other => panic!("not an fp8 format: {other}"),
    }
}

fn enc(f: Format, rows: usize, cols: usize, w: &[f32]) -> EncodedTensor {
    encode(f, rows, cols, w, &EncodeOptions::default()).unwrap()
}

#[test]
fn registry_rows_declare_the_tiles_and_encodings() {
    for (f, e) in FORMATS
        .iter()
        .zip([ScaleEncoding::F32, ScaleEncoding::Ue8m0])
    {
        let s = f.spec();
        assert_eq!(s.legacy.fmt, Some(7));
        assert_eq!((s.block_weights, s.block_bytes), (1, 1));
        assert_eq!(
            s.scales,
            ScaleLayout::PerTile {
                rows: 128,
                cols: 128,
                encoding: e
            }
        );
        assert_eq!(s.row_block(), 128);
    }
}

#[test]
fn byte_layout_of_a_2x3_tensor() {
    // amax = 7, so the f32 scale is 7/448 = 2^-6 and w/scale = 64 w.
    let w = [1.0, -2.0, 0.5, 0.0, 3.5, 7.0];
    let codes = [0x68, 0xF0, 0x60, 0x00, 0x76, 0x7E];
    for f in FORMATS {
        let t = enc(f, 2, 3, &w);
        assert_eq!(t.weights, codes, "{f}");
        match f {
            Format::Fp8E4m3B128 => assert_eq!(t.scales, 0.015625f32.to_le_bytes()),
            // Smallest power of two >= 7/448 is 2^-6: byte 127 - 6.
            Format::Fp8E4m3B128Ue8m0 => assert_eq!(t.scales, [121]),
            other => panic!("{other}"),
        }
        assert_eq!(
            decode(&t.view()).unwrap(),
            w,
            "{f}: these weights are exact in E4M3"
        );
    }
    // A non-power-of-two scale: amax = 1, f32 scale = 1/448.
    let w = [1.0, 0.5, -0.25, 0.1, 0.0, -1.0];
    let t = enc(Format::Fp8E4m3B128, 2, 3, &w);
    assert_eq!(t.scales, (1.0f32 / 448.0).to_le_bytes());
    // 448, 224, -112, 44.8 -> 44 (step 4 in [32, 64)), 0, -448.
    assert_eq!(t.weights, [0x7E, 0x76, 0xEE, 0x63, 0x00, 0xFE]);
    // The UE8M0 scale is 2^-8 (2^-9 < 1/448 <= 2^-8): 1 -> 256, 0.1 -> 25.6 -> 26.
    let t = enc(Format::Fp8E4m3B128Ue8m0, 2, 3, &w);
    assert_eq!(t.scales, [119]);
    assert_eq!(t.weights, [0x78, 0x70, 0xE8, 0x5D, 0x00, 0xF8]);
}

/// Weights where tile (bt, bj) has largest magnitude 448 * 2^(k - 10), k = bt * nj + bj, at
/// one tile-specific position; everything else is small noise below it.
fn tiled_weights(rows: usize, cols: usize, rng: &mut Rng) -> (Vec<f32>, Vec<(usize, usize, f32)>) {
    let (nt, nj) = (rows.div_ceil(T), cols.div_ceil(T));
    let mut w = vec![0f32; rows * cols];
    let mut spikes = Vec::new();
    for bt in 0..nt {
        for bj in 0..nj {
            let k = (bt * nj + bj) as i32;
            let amax = 448.0 * 2f32.powi(k - 10);
            let (r0, r1) = (bt * T, ((bt + 1) * T).min(rows));
            let (c0, c1) = (bj * T, ((bj + 1) * T).min(cols));
            for o in r0..r1 {
                for i in c0..c1 {
                    w[o * cols + i] = amax * 0.9 * (rng.uniform() as f32 * 2.0 - 1.0);
                }
            }
            let (o, i) = (r0 + rng.below(r1 - r0), c0 + rng.below(c1 - c0));
            let v = if k % 2 == 0 { amax } else { -amax };
            w[o * cols + i] = v;
            spikes.push((o, i, v));
        }
    }
    (w, spikes)
}

const EDGE_SHAPES: [(usize, usize); 8] = [
    (384, 300),
    (300, 384),
    (1, 1),
    (129, 128),
    (128, 129),
    (130, 130),
    (257, 1),
    (1, 257),
];

#[test]
fn tile_indexing_on_partial_and_non_square_grids() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for f in FORMATS {
        for (rows, cols) in EDGE_SHAPES {
            let (w, spikes) = tiled_weights(rows, cols, &mut rng);
            let t = enc(f, rows, cols, &w);
            let nscales = rows.div_ceil(T) * cols.div_ceil(T);
            let per = if f == Format::Fp8E4m3B128 { 4 } else { 1 };
            assert_eq!(t.scales.len(), nscales * per);
            assert_eq!(t.weights.len(), rows * cols);
            // Scale k is exactly 2^(k - 10): amax / 448 under both encodings.
            for k in 0..nscales {
                assert_eq!(
                    scale_at(f, &t.scales, k),
                    2f32.powi(k as i32 - 10),
                    "{f} [{rows},{cols}] scale {k}"
                );
            }
            // Each spike is at full scale: code ±448 in its own tile.
            for &(o, i, v) in &spikes {
                let b = t.weights[o * cols + i];
                assert_eq!(b, if v > 0.0 { 0x7E } else { 0xFE }, "{f} spike ({o},{i})");
            }
            // Every weight decodes as E4M3[b] * scale[its tile], bit for bit, and lands
            // within E4M3's rounding of the input (a wrong tile would be off by 2^k).
            let d = decode(&t.view()).unwrap();
            for o in 0..rows {
                for i in 0..cols {
                    let s = scale_at(f, &t.scales, tile(cols, o, i));
                    let b = t.weights[o * cols + i];
                    let x = w[o * cols + i];
                    assert_eq!(
                        d[o * cols + i].to_bits(),
                        (E4M3_FN[b as usize] * s).to_bits()
                    );
                    let bound = x.abs() / 16.0 + s / 1024.0;
                    assert!(
                        (d[o * cols + i] - x).abs() <= bound,
                        "seed {seed} {f} [{rows},{cols}] ({o},{i}): {x} -> {}",
                        d[o * cols + i]
                    );
                }
            }
        }
    }
}

#[test]
fn passthrough_bytes_survive_from_parts_and_decode_exactly() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for f in FORMATS {
        for (rows, cols) in [(130usize, 130usize), (384, 300), (1, 1)] {
            // Every code appears (NaN codes included), in random order.
            let bytes: Vec<u8> = (0..rows * cols)
                .map(|k| {
                    if k < 256 {
                        k as u8
                    } else {
                        rng.next_u64() as u8
                    }
                })
                .collect();
            let n = rows.div_ceil(T) * cols.div_ceil(T);
            let scales: Vec<u8> = match f {
                Format::Fp8E4m3B128 => (0..n)
                    .flat_map(|_| ((rng.normal() * 1e-3) as f32).to_le_bytes())
                    .collect(),
                // All 256 UE8M0 bytes are legal input; 0xFF makes a NaN tile.
                _ => (0..n).map(|_| rng.next_u64() as u8).collect(),
            };
            let t = EncodedTensor::from_parts(f, rows, cols, bytes.clone(), scales.clone(), None)
                .unwrap();
            let d = decode(&t.view()).unwrap();
            assert_eq!(t.weights, bytes, "stored bytes untouched");
            assert_eq!(t.scales, scales);
            assert_eq!(t.view().weights(), &bytes[..]);
            for o in 0..rows {
                for i in 0..cols {
                    let b = bytes[o * cols + i];
                    let want = E4M3_FN[b as usize] * scale_at(f, &scales, tile(cols, o, i));
                    let got = d[o * cols + i];
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "seed {seed} {f} ({o},{i}) byte {b:#04x}: {got} != {want}"
                    );
                    if b & 0x7F == 0x7F {
                        assert!(got.is_nan(), "NaN code must decode to NaN");
                    }
                }
            }
        }
    }
}

#[test]
fn a_nan_weight_poisons_exactly_its_row() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for f in FORMATS {
        for (rows, cols) in [(130, 200), (3, 7), (257, 129)] {
            let w = weights(&mut rng, rows, cols);
            let mut t = enc(f, rows, cols, &w);
            let (o, i) = (rng.below(rows), rng.below(cols));
            t.weights[o * cols + i] = 0x7F;
            for s in [1, 2, 3, 8, 16] {
                let x = activations(&mut rng, s, cols);
                let mut y = vec![POISON; s * rows];
                gemm(&t.view(), &x, s, &mut y).unwrap();
                for k in 0..s {
                    for r in 0..rows {
                        let v = y[k * rows + r];
                        if r == o {
                            assert!(
                                v.is_nan() && v.to_bits() != POISON.to_bits(),
                                "seed {seed} {f} row {r} S={s}: {v}"
                            );
                        } else {
                            assert!(
                                v.is_finite(),
                                "seed {seed} {f} [{rows},{cols}] NaN at ({o},{i}) leaked into row {r}, s {k}: {v}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ue8m0_scale_is_the_smallest_covering_power_of_two() {
    for k in -130..=119 {
        let p = 2f64.powi(k);
        let amax = (448.0 * p) as f32;
        if amax == 0.0 || amax as f64 != 448.0 * p {
            continue;
        }
        let want = (k + 127).clamp(0, 254) as u8;
        assert_eq!(ue8m0_scale(amax), want, "amax = 448 * 2^{k}");
        assert_eq!(
            ue8m0_scale(amax.next_up()),
            (k + 128).clamp(0, 254) as u8,
            "just above 448 * 2^{k}"
        );
    }
    assert_eq!(ue8m0_scale(0.0), 0);
    // f32::MAX / 448 is about 2^119.2.
    assert_eq!(ue8m0_scale(f32::MAX), 127 + 120);
    assert_eq!(ue8m0_scale(f32::from_bits(1)), 0, "clamped to 2^-127");
    let mut rng = Rng::new(fresh_seed());
    for _ in 0..100_000 {
        let amax = f32::from_bits((rng.next_u64() as u32) & 0x7FFF_FFFF);
        if !amax.is_finite() {
            continue;
        }
        let e = ue8m0_scale(amax);
        let s = ue8m0(e) as f64;
        assert!(448.0 * s >= amax as f64, "{amax:e} -> byte {e}");
        if e > 0 {
            assert!(
                448.0 * s / 2.0 < amax as f64,
                "{amax:e} -> byte {e}: not the smallest"
            );
        }
    }
}

#[test]
fn extreme_magnitudes_stay_finite_and_zero_tiles_are_zero() {
    for f in FORMATS {
        // Tile 0 holds f32::MAX (448 * scale would overflow), tile 1 only zeros (and -0),
        // tile 2 only f32 subnormals.
        let cols = 300;
        let mut w = vec![0f32; cols];
        w[0] = f32::MAX;
        w[1] = -f32::MAX;
        w[2] = 3.0e38;
        w[3] = 1.0;
        w[130] = -0.0;
        for (k, v) in w[256..].iter_mut().enumerate() {
            *v = f32::from_bits(k as u32 * 3 + 1);
        }
        let t = enc(f, 1, cols, &w);
        let d = decode(&t.view()).unwrap();
        assert!(d.iter().all(|v| v.is_finite()), "{f}: {:?}", &d[..4]);
        for k in [0, 1, 2] {
            assert!(
                (d[k] - w[k]).abs() <= w[k].abs() / 16.0,
                "{f}: {} -> {}",
                w[k],
                d[k]
            );
        }
        assert!(d[128..256].iter().all(|&v| v == 0.0));
        assert!(d[130].is_sign_negative(), "{f}: -0 keeps its sign");
        assert!(
            d[256..]
                .iter()
                .zip(&w[256..])
                .all(|(a, b)| (a - b).abs() <= b.abs())
        );
        if f == Format::Fp8E4m3B128 {
            // UE8M0 cannot go below 2^-127 * 2^-9; an f32 scale can.
            assert!(
                d[256..].iter().any(|&v| v != 0.0),
                "a subnormal tile is not all zero"
            );
        }
    }
    assert_eq!(
        scale_at(
            Format::Fp8E4m3B128,
            &enc(Format::Fp8E4m3B128, 1, 3, &[0.0; 3]).scales,
            0
        ),
        0.0
    );
    assert_eq!(enc(Format::Fp8E4m3B128Ue8m0, 1, 3, &[0.0; 3]).scales, [0]);
}

#[test]
fn encode_rows_writes_every_byte_deterministically() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for f in FORMATS {
        let spec = f.spec();
        for (rows, cols) in [(300, 300), (129, 128), (1, 1), (384, 129)] {
            let w = weights(&mut rng, rows, cols);
            let whole = enc(f, rows, cols, &w);
            for fill in [0x00u8, 0xFF] {
                let mut wb = vec![fill; spec.weight_bytes(rows, cols).unwrap() as usize];
                let mut sb = vec![fill; spec.scale_bytes(rows, cols).unwrap() as usize];
                let mut row0 = 0;
                while row0 < rows {
                    let n = 128.min(rows - row0);
                    let wr = spec.weight_range(row0, n, cols).unwrap();
                    let sr = spec.scale_range(row0, n, rows, cols).unwrap();
                    encode_rows(
                        f,
                        rows,
                        cols,
                        row0,
                        &w[row0 * cols..(row0 + n) * cols],
                        &mut wb[wr],
                        &mut sb[sr],
                        &EncodeOptions::default(),
                    )
                    .unwrap();
                    row0 += n;
                }
                assert_eq!(wb, whole.weights, "{f} [{rows},{cols}] fill {fill:#x}");
                assert_eq!(sb, whole.scales, "{f} [{rows},{cols}] fill {fill:#x}");
            }
        }
    }
}

#[test]
fn codec_refuses_wrong_buffers_instead_of_panicking() {
    for f in FORMATS {
        let c = codec_for(f);
        let src = [1.0f32; 6];
        let per = if f == Format::Fp8E4m3B128 { 4 } else { 1 };
        let run = |cols: usize, src: &[f32], nw: usize, ns: usize| {
            c.encode_rows(f, cols, src, &mut vec![0; nw], &mut vec![0; ns])
        };
        assert!(run(3, &src, 5, per).is_err());
        assert!(run(3, &src, 6, per + 1).is_err());
        assert!(run(4, &src, 6, per).is_err());
        assert!(run(3, &src, 6, per).is_ok());
        assert!(run(3, &[], 0, 0).is_ok(), "zero rows");
    }
}

/// Weights spread over many binades, so tiles mix normal and subnormal E4M3 codes.
fn spread_weights() -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..300, 1usize..300, any::<u64>(), -60i32..60).prop_map(|(rows, cols, seed, e0)| {
        let mut rng = Rng::new(seed);
        let w = (0..rows * cols)
            .map(|_| {
                let binade = e0 - rng.below(24) as i32;
                rng.normal() * 2f32.powi(binade)
            })
            .collect();
        (rows, cols, w)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// |decode(encode(w)) - w| <= 2^-4 |w| (E4M3's half-ulp for normals) + scale * 2^-10
    /// (half the subnormal step 2^-9), with 2^-20 |w| of f32 slack for the division, the
    /// rounding of amax/448 and the decode product.
    #[test]
    fn round_trip_error_is_within_e4m3_rounding((rows, cols, w) in spread_weights()) {
        for f in FORMATS {
            let t = enc(f, rows, cols, &w);
            let d = decode(&t.view()).unwrap();
            for o in 0..rows {
                for i in 0..cols {
                    let s = scale_at(f, &t.scales, tile(cols, o, i)) as f64;
                    let (x, y) = (w[o * cols + i] as f64, d[o * cols + i] as f64);
                    let bound = x.abs() * (1.0 / 16.0 + 1.0 / (1u64 << 20) as f64) + s / 1024.0;
                    prop_assert!((y - x).abs() <= bound, "{} [{},{}] ({},{}): {} -> {}", f, rows, cols, o, i, x, y);
                }
            }
            if f == Format::Fp8E4m3B128Ue8m0 {
                // The power-of-two scale covers amax: no weight is beyond 448 * scale.
                for (k, &x) in w.iter().enumerate() {
                    let s = scale_at(f, &t.scales, tile(cols, k / cols, k % cols));
                    prop_assert!(x.abs() <= 448.0 * s, "{} saturates under scale {}", x, s);
                }
            }
        }
    }
}

/// The worked example of docs/FORMATS.md, byte for byte.
#[test]
fn docs_worked_example() {
    let w = [0.3f32, -1.2, 0.05, 2.5, -0.001, 0.7];
    let t = enc(Format::Fp8E4m3B128, 2, 3, &w);
    assert_eq!(t.weights, [0x65, 0xF5, 0x51, 0x7E, 0xA3, 0x70]);
    assert_eq!(t.scales, [0x6E, 0xDB, 0xB6, 0x3B]);
    let d = decode(&t.view()).unwrap();
    assert_eq!(
        d,
        [
            0.29017857,
            -1.1607143,
            0.050223216,
            2.5,
            -0.0009591239,
            0.71428573
        ]
    );
    let t = enc(Format::Fp8E4m3B128Ue8m0, 2, 3, &w);
    assert_eq!(t.weights, [0x62, 0xF2, 0x4D, 0x7A, 0xA0, 0x6B]);
    assert_eq!(t.scales, [0x78]);
    let d = decode(&t.view()).unwrap();
    assert_eq!(d, [0.3125, -1.25, 0.05078125, 2.5, -0.0009765625, 0.6875]);
}
