//! The 256-weight affine family (hfq4-g256, mq4-g256, mq4-g256-v2, mq4c-g256) and mq4-k:
//! byte layouts against hand-built blocks, encoder rules (fp16 round-trip discipline,
//! constant halves, nibble placement), error bounds in the stored and the logical domain,
//! determinism, refusals, and seed 001's quality ordering.
//!
//! `TESSERA_SEED` replays the randomized tests that print a seed.

use half::f16;
use proptest::prelude::*;
use quant_core::codec::codec_for;
use quant_core::codecs::kquant::{pack_scale_min, scale_min};
use quant_core::rotation;
use quant_core::testdata::{Rng, fresh_seed, weights};
use quant_core::{EncodeOptions, Format, QTensor, QuantError, decode, encode, encode_rows};

const AFFINE: [Format; 4] = [
    Format::Hfq4G256,
    Format::Mq4G256,
    Format::Mq4G256V2,
    Format::Mq4cG256,
];
const ALL: [Format; 5] = [
    Format::Hfq4G256,
    Format::Mq4G256,
    Format::Mq4G256V2,
    Format::Mq4cG256,
    Format::Mq4K,
];

fn seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

fn f16v(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

fn f16b(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

/// Encodes [rows, cols] in the stored domain with the codec alone (no rotation).
fn encode_stored(f: Format, cols: usize, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let rows = src.len() / cols;
    let mut w = vec![0u8; f.spec().weight_bytes(rows, cols).unwrap() as usize];
    codec_for(f).encode_rows(f, cols, src, &mut w, &mut [])?;
    Ok(w)
}

fn view(f: Format, cols: usize, bytes: &[u8]) -> QTensor<'_> {
    let rows = bytes.len() / f.spec().row_bytes(cols).unwrap() as usize;
    QTensor::new(f, rows, cols, bytes, &[], 0).unwrap()
}

/// Decodes stored bytes in the stored domain with the codec's f32 decode.
fn dec32(f: Format, cols: usize, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; bytes.len() / f.spec().row_bytes(cols).unwrap() as usize * cols];
    codec_for(f).decode_rows_f32(&view(f, cols, bytes), 0, &mut out);
    out
}

/// The same decode in f64 (the oracle's instantiation).
fn dec64(f: Format, cols: usize, bytes: &[u8]) -> Vec<f64> {
    let mut out = vec![0f64; bytes.len() / f.spec().row_bytes(cols).unwrap() as usize * cols];
    codec_for(f).decode_rows_f64(&view(f, cols, bytes), 0, &mut out);
    out
}

/// Packs 256 codes into the family's 128-byte payload (weight 2b low, 2b+1 high).
fn pack_payload(q: &[u8]) -> Vec<u8> {
    q.chunks_exact(2).map(|p| p[0] | (p[1] << 4)).collect()
}

/// The code of weight i in a 136-byte block.
fn code_136(block: &[u8], i: usize) -> u8 {
    let b = block[8 + i / 2];
    if i.is_multiple_of(2) { b & 0xF } else { b >> 4 }
}

/// The code of weight i in a 144-byte mq4-k block.
fn code_144(block: &[u8], i: usize) -> u8 {
    let (c, l) = (i / 64, i % 64);
    let b = block[16 + 32 * c + l % 32];
    if l < 32 { b & 0xF } else { b >> 4 }
}

// ---------------------------------------------------------------- hand-built layouts

#[test]
fn hfq4_and_mq4_hand_built_block_decodes_exactly() {
    let q: Vec<u8> = (0..256).map(|i| (i % 16) as u8).collect();
    let mut block = Vec::new();
    block.extend_from_slice(&0.5f32.to_le_bytes());
    block.extend_from_slice(&(-3.0f32).to_le_bytes());
    block.extend(pack_payload(&q));
    assert_eq!(block.len(), 136);
    for f in [Format::Hfq4G256, Format::Mq4G256] {
        let w32 = dec32(f, 256, &block);
        let w64 = dec64(f, 256, &block);
        for i in 0..256 {
            let want = (i % 16) as f32 * 0.5 - 3.0;
            assert_eq!(w32[i], want, "{f} weight {i}");
            assert_eq!(w64[i], want as f64, "{f} weight {i} (f64)");
        }
    }
}

#[test]
fn v2_hand_built_block_uses_half_headers_in_order() {
    let q: Vec<u8> = (0..256).map(|i| ((i * 5 + 3) % 16) as u8).collect();
    let mut block = Vec::new();
    // Half 0: scale 0.25, zero -1; half 1: scale 2, zero 10.
    for v in [0.25f32, -1.0, 2.0, 10.0] {
        block.extend_from_slice(&f16b(v));
    }
    block.extend(pack_payload(&q));
    // The u32 view of seed 001: scale in the low 16 bits, zero in the high 16 bits.
    let word = u32::from_le_bytes(block[0..4].try_into().unwrap());
    assert_eq!(word & 0xFFFF, f16::from_f32(0.25).to_bits() as u32);
    assert_eq!(word >> 16, f16::from_f32(-1.0).to_bits() as u32);
    let w = dec32(Format::Mq4G256V2, 256, &block);
    let w64 = dec64(Format::Mq4G256V2, 256, &block);
    for i in 0..256 {
        let qi = q[i] as f32;
        let want = if i < 128 {
            qi * 0.25 - 1.0
        } else {
            qi * 2.0 + 10.0
        };
        assert_eq!(w[i], want, "weight {i}");
        assert_eq!(w64[i], want as f64, "weight {i} (f64)");
    }
}

#[test]
fn mq4c_hand_built_block_ignores_nothing_but_the_pad() {
    let q: Vec<u8> = (0..256).map(|i| ((i * 7 + 1) % 16) as u8).collect();
    let mut block = Vec::new();
    block.extend_from_slice(&f16b(0.125));
    block.extend_from_slice(&f16b(-0.75));
    block.extend_from_slice(&[0, 0, 0, 0]);
    block.extend(pack_payload(&q));
    let w = dec32(Format::Mq4cG256, 256, &block);
    for i in 0..256 {
        assert_eq!(w[i], q[i] as f32 * 0.125 - 0.75, "weight {i}");
    }
}

#[test]
fn mq4k_hand_built_block_matches_ggml_packing() {
    // sc = [1, 2, 3, 4, 53, 20, 33, 63], m = [5, 6, 7, 8, 17, 40, 0, 62], packed by hand
    // following GGML's quantize_row_q4_K_ref (j >= 4 spill their top 2 bits into bytes 0-7).
    let scales: [u8; 12] = [
        0xC1, 0x42, 0x83, 0xC4, 0x45, 0x86, 0x07, 0xC8, 0x15, 0x84, 0x01, 0xEF,
    ];
    let sc = [1u8, 2, 3, 4, 53, 20, 33, 63];
    let m = [5u8, 6, 7, 8, 17, 40, 0, 62];
    for j in 0..8 {
        assert_eq!(scale_min(j, &scales), (sc[j], m[j]), "sub-block {j}");
    }
    assert_eq!(pack_scale_min(&sc, &m), scales);
    let q: Vec<u8> = (0..256).map(|i| ((i * 3 + i / 32) % 16) as u8).collect();
    let mut block = Vec::new();
    block.extend_from_slice(&f16b(0.5)); // d
    block.extend_from_slice(&f16b(0.25)); // dmin
    block.extend_from_slice(&scales);
    let mut qs = [0u8; 128];
    for c in 0..4 {
        for l in 0..32 {
            qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
        }
    }
    block.extend_from_slice(&qs);
    assert_eq!(block.len(), 144);
    let w = dec32(Format::Mq4K, 256, &block);
    let w64 = dec64(Format::Mq4K, 256, &block);
    for i in 0..256 {
        let j = i / 32;
        let want = 0.5 * sc[j] as f32 * q[i] as f32 - 0.25 * m[j] as f32;
        assert_eq!(w[i], want, "weight {i}");
        assert_eq!(w64[i], want as f64, "weight {i} (f64)");
        assert_eq!(code_144(&block, i), q[i]);
    }
}

// ---------------------------------------------------------------- encoder placement

#[test]
fn encoder_puts_weight_129_in_the_right_nibble() {
    let mut w = vec![0f32; 256];
    w[129] = 15.0;
    for f in AFFINE {
        let b = encode_stored(f, 256, &w).unwrap();
        for (k, &byte) in b[8..].iter().enumerate() {
            // Weight 129 = 2*64 + 1: high nibble of payload byte 64.
            assert_eq!(byte, if k == 64 { 0xF0 } else { 0 }, "{f} payload byte {k}");
        }
        assert_eq!(dec32(f, 256, &b), w, "{f}");
    }
    let b = encode_stored(Format::Mq4K, 256, &w).unwrap();
    for (k, &byte) in b[16..].iter().enumerate() {
        // Weight 129: chunk 2, l = 1, low nibble of qs[65].
        assert_eq!(byte, if k == 65 { 0x0F } else { 0 }, "mq4-k qs byte {k}");
    }
    // Weight 161 = 64*2 + 32 + 1: high nibble of the same byte.
    let mut w2 = vec![0f32; 256];
    w2[161] = 15.0;
    let b = encode_stored(Format::Mq4K, 256, &w2).unwrap();
    for (k, &byte) in b[16..].iter().enumerate() {
        assert_eq!(byte, if k == 65 { 0xF0 } else { 0 }, "mq4-k qs byte {k}");
    }
    let rec = dec32(Format::Mq4K, 256, &b);
    assert!(
        (rec[161] - 15.0).abs() <= 15.0 * f16v(1.0 / 63.0) / 2.0,
        "{}",
        rec[161]
    );
}

#[test]
fn v2_encoder_writes_half_headers_in_order() {
    // Half 0 spans [-1, 2], half 1 spans [10, 40]: the header order is visible in the bytes.
    let mut w = vec![0f32; 256];
    for i in 0..128 {
        w[i] = -1.0 + 3.0 * (i as f32 / 127.0);
        w[128 + i] = 10.0 + 30.0 * (i as f32 / 127.0);
    }
    let b = encode_stored(Format::Mq4G256V2, 256, &w).unwrap();
    assert_eq!(&b[0..2], &f16b(0.2));
    assert_eq!(&b[2..4], &f16b(-1.0));
    assert_eq!(&b[4..6], &f16b(2.0));
    assert_eq!(&b[6..8], &f16b(10.0));
    assert_eq!(code_136(&b, 127), 15);
    assert_eq!(code_136(&b, 128), 0);
    assert_eq!(code_136(&b, 255), 15);
}

// ---------------------------------------------------------------- v2 vs v1 and constants

#[test]
fn v2_with_equal_halves_is_bit_identical_to_hfq4() {
    let mut rng = Rng::new(seed());
    for _ in 0..200 {
        let scale = f16::from_f32(rng.normal().abs() * 0.01 + 1e-4);
        let zero = f16::from_f32(rng.normal());
        let q: Vec<u8> = (0..256).map(|_| rng.below(16) as u8).collect();
        let payload = pack_payload(&q);
        let mut v1 = Vec::new();
        v1.extend_from_slice(&scale.to_f32().to_le_bytes());
        v1.extend_from_slice(&zero.to_f32().to_le_bytes());
        v1.extend_from_slice(&payload);
        let mut v2 = Vec::new();
        for _ in 0..2 {
            v2.extend_from_slice(&scale.to_le_bytes());
            v2.extend_from_slice(&zero.to_le_bytes());
        }
        v2.extend_from_slice(&payload);
        let (a, b) = (
            dec32(Format::Hfq4G256, 256, &v1),
            dec32(Format::Mq4G256V2, 256, &v2),
        );
        let (a64, b64) = (
            dec64(Format::Hfq4G256, 256, &v1),
            dec64(Format::Mq4G256V2, 256, &v2),
        );
        for i in 0..256 {
            assert_eq!(a[i].to_bits(), b[i].to_bits(), "weight {i}");
            assert_eq!(a64[i].to_bits(), b64[i].to_bits(), "weight {i} (f64)");
        }
        // mq4c with the same pair is the same numbers too.
        let mut c = Vec::new();
        c.extend_from_slice(&scale.to_le_bytes());
        c.extend_from_slice(&zero.to_le_bytes());
        c.extend_from_slice(&[0; 4]);
        c.extend_from_slice(&payload);
        let cw = dec32(Format::Mq4cG256, 256, &c);
        assert!(a.iter().zip(&cw).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn v2_constant_half_decodes_to_the_f16_of_the_constant() {
    let mut rng = Rng::new(seed());
    let mut w: Vec<f32> = (0..256).map(|_| rng.normal()).collect();
    w[..128].fill(0.37);
    let b = encode_stored(Format::Mq4G256V2, 256, &w).unwrap();
    assert_eq!(&b[0..2], &[0, 0], "constant half's scale is 0");
    assert_eq!(&b[2..4], &f16b(0.37));
    let rec = dec32(Format::Mq4G256V2, 256, &b);
    let want = f16v(0.37);
    assert_ne!(
        want, 0.37f32,
        "0.37 is not an f16, so this checks the rounding"
    );
    for (i, &v) in rec[..128].iter().enumerate() {
        assert_eq!(v, want, "weight {i}");
        assert_eq!(code_136(&b, i), 0);
    }
    // The same rule for mq4c and hfq4 over a whole constant block.
    let c = vec![-0.37f32; 256];
    let bc = encode_stored(Format::Mq4cG256, 256, &c).unwrap();
    assert!(
        dec32(Format::Mq4cG256, 256, &bc)
            .iter()
            .all(|&v| v == f16v(-0.37))
    );
    let bh = encode_stored(Format::Hfq4G256, 256, &c).unwrap();
    assert!(
        dec32(Format::Hfq4G256, 256, &bh)
            .iter()
            .all(|&v| v == -0.37)
    );
    assert_eq!(&bh[0..4], &0f32.to_le_bytes());
}

// ---------------------------------------------------------------- fp16 discipline

/// Random stored-domain blocks: Gaussian, shifted and scaled, some with wide offsets.
fn random_blocks(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut w = Vec::with_capacity(n * 256);
    for k in 0..n {
        let scale = 10f32.powf(rng.uniform() as f32 * 6.0 - 4.0);
        let offset = if k % 3 == 0 {
            rng.normal() * 20.0 * scale
        } else {
            0.0
        };
        w.extend((0..256).map(|_| rng.normal() * scale + offset));
    }
    w
}

#[test]
fn fp16_formats_quantize_against_the_round_tripped_header() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let w = random_blocks(&mut rng, 500);
    for f in [Format::Mq4G256V2, Format::Mq4cG256] {
        let b = encode_stored(f, 256, &w).unwrap();
        for (k, (blk, wb)) in b.chunks_exact(136).zip(w.chunks_exact(256)).enumerate() {
            for (i, &x) in wb.iter().enumerate() {
                let h = if f == Format::Mq4G256V2 && i >= 128 {
                    4
                } else {
                    0
                };
                let s16 = f16::from_le_bytes([blk[h], blk[h + 1]]).to_f32();
                let z16 = f16::from_le_bytes([blk[h + 2], blk[h + 3]]).to_f32();
                let want = if s16 == 0.0 {
                    0
                } else {
                    ((x - z16) / s16).clamp(0.0, 15.0).round_ties_even() as u8
                };
                assert_eq!(
                    code_136(blk, i),
                    want,
                    "seed {seed} {f} block {k} weight {i}"
                );
            }
        }
        // Idempotence: re-encoding the decoded values gives the same bytes.
        let rec = dec32(f, 256, &b);
        assert_eq!(encode_stored(f, 256, &rec).unwrap(), b, "seed {seed} {f}");
    }
    // mq4-k: codes against the f32 reconstruction of the 6-bit header.
    let b = encode_stored(Format::Mq4K, 256, &w).unwrap();
    for (k, (blk, wb)) in b.chunks_exact(144).zip(w.chunks_exact(256)).enumerate() {
        let (d, dmin) = (
            f16::from_le_bytes([blk[0], blk[1]]).to_f32(),
            f16::from_le_bytes([blk[2], blk[3]]).to_f32(),
        );
        for (i, &x) in wb.iter().enumerate() {
            let (sc, m) = scale_min(i / 32, &blk[4..16]);
            let (s, z) = (d * sc as f32, dmin * m as f32);
            let want = if s == 0.0 {
                0
            } else {
                ((x + z) / s).clamp(0.0, 15.0).round_ties_even() as u8
            };
            assert_eq!(
                code_144(blk, i),
                want,
                "seed {seed} mq4-k block {k} weight {i}"
            );
        }
    }
}

// ---------------------------------------------------------------- error bounds

/// f32 slack of one affine reconstruction whose terms are at most `mag` in magnitude.
fn slack(mag: f32) -> f32 {
    8.0 * f32::EPSILON * mag + 1e-30
}

/// Checks every group's error against its derived bound; returns the worst error / step.
fn check_affine_bounds(f: Format, w: &[f32], b: &[u8], rec: &[f32]) -> Result<f32, String> {
    let groups = if f == Format::Mq4G256V2 { 2 } else { 1 };
    let gw = 256 / groups;
    let mut worst = 0f32;
    for (k, (blk, (wb, ob))) in b
        .chunks_exact(136)
        .zip(w.chunks_exact(256).zip(rec.chunks_exact(256)))
        .enumerate()
    {
        for g in 0..groups {
            let (x, o) = (&wb[g * gw..(g + 1) * gw], &ob[g * gw..(g + 1) * gw]);
            let lo = x.iter().copied().fold(f32::MAX, f32::min);
            let hi = x.iter().copied().fold(f32::MIN, f32::max);
            let s = if hi == lo { 0.0 } else { (hi - lo) / 15.0 };
            let (st, z) = match f {
                Format::Hfq4G256 | Format::Mq4G256 => {
                    let st = f32::from_le_bytes(blk[0..4].try_into().unwrap());
                    let z = f32::from_le_bytes(blk[4..8].try_into().unwrap());
                    if st != s || z != lo {
                        return Err(format!("block {k}: f32 header ({st}, {z}) != ({s}, {lo})"));
                    }
                    (st, z)
                }
                _ => {
                    let h = 4 * g;
                    let st = f16::from_le_bytes([blk[h], blk[h + 1]]).to_f32();
                    let z = f16::from_le_bytes([blk[h + 2], blk[h + 3]]).to_f32();
                    if st != f16v(s) || z != f16v(lo) {
                        return Err(format!(
                            "block {k} group {g}: header ({st}, {z}) is not f16 of ({s}, {lo})"
                        ));
                    }
                    (st, z)
                }
            };
            // The grid {z + q st} covers [z, z + 15 st]; outside it the error is the
            // distance to the nearest end, which fp16 rounding of (st, z) can open up.
            let bound = (st / 2.0).max(z - lo).max(hi - z - 15.0 * st)
                + slack(lo.abs() + hi.abs() + 15.0 * st);
            // Where |lo|, |hi| <= 64 steps (every rotated Gaussian block), the header's
            // rounding costs at most 15·2^-11 + 64·2^-11 of a step: the error is st/2.
            // (fp16 headers: normal fp16 steps only; a subnormal step's rounding is coarser.)
            let fp16_normal = matches!(f, Format::Hfq4G256 | Format::Mq4G256) || s >= 6.2e-5;
            let typical = lo.abs().max(hi.abs()) <= 64.0 * s && fp16_normal;
            for (i, (&a, &r)) in x.iter().zip(o).enumerate() {
                let e = (a - r).abs();
                if e > bound || (typical && e > st / 2.0 + slack(lo.abs() + hi.abs() + 15.0 * st)) {
                    return Err(format!(
                        "block {k} group {g} weight {i}: |{a} - {r}| = {e} > {bound} (step {st})"
                    ));
                }
                if st > 0.0 {
                    worst = worst.max(e / st);
                }
            }
        }
    }
    Ok(worst)
}

/// mq4-k: the error is within half a step inside the grid and within the grid's miss of
/// [lo_j, hi_j] outside it; with normal fp16 super-scales that miss is at most dmin/2 below
/// and 15·d/2 above. The super-scales are the nearest fp16 of max/63.
fn check_kquant_bounds(w: &[f32], b: &[u8], rec: &[f32]) -> Result<f32, String> {
    let mut worst = 0f32;
    for (k, (blk, (wb, ob))) in b
        .chunks_exact(144)
        .zip(w.chunks_exact(256).zip(rec.chunks_exact(256)))
        .enumerate()
    {
        let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let dmin = f16::from_le_bytes([blk[2], blk[3]]).to_f32();
        let normal = |x: f32| x >= 6.2e-5;
        let mut max_need = 0f32;
        let mut max_m = 0f32;
        for j in 0..8 {
            let (x, o) = (&wb[32 * j..32 * j + 32], &ob[32 * j..32 * j + 32]);
            let lo = x.iter().copied().fold(0f32, f32::min);
            let hi = x.iter().copied().fold(f32::MIN, f32::max);
            let (sc, m) = scale_min(j, &blk[4..16]);
            let (s, mm) = (d * sc as f32, dmin * m as f32);
            let sl = slack(lo.abs() + hi.abs() + 15.0 * s + mm);
            let miss_lo = -mm - lo;
            let miss_hi = hi - (15.0 * s - mm);
            if normal(d)
                && normal(dmin)
                && (miss_lo > dmin / 2.0 + sl || miss_hi > 15.0 * d / 2.0 + sl)
            {
                return Err(format!(
                    "block {k} sub {j}: grid [{}, {}] misses [{lo}, {hi}] by more than (dmin/2, 15d/2) = ({}, {})",
                    -mm,
                    15.0 * s - mm,
                    dmin / 2.0,
                    7.5 * d
                ));
            }
            let bound = (s / 2.0).max(miss_lo).max(miss_hi) + sl;
            max_need = max_need.max((hi + mm) / 15.0);
            max_m = max_m.max(-lo);
            for (i, (&a, &r)) in x.iter().zip(o).enumerate() {
                let e = (a - r).abs();
                if e > bound {
                    return Err(format!(
                        "block {k} sub {j} weight {i}: |{a} - {r}| = {e} > {bound} (S {s})"
                    ));
                }
                if s > 0.0 {
                    worst = worst.max(e / s);
                }
            }
        }
        if dmin != f16v(max_m / 63.0) || d != f16v(max_need / 63.0) {
            return Err(format!(
                "block {k}: (d, dmin) = ({d}, {dmin}), want f16 of ({}, {})",
                max_need / 63.0,
                max_m / 63.0
            ));
        }
    }
    Ok(worst)
}

fn check_bounds(f: Format, w: &[f32], b: &[u8], rec: &[f32]) -> Result<f32, String> {
    match f {
        Format::Mq4K => check_kquant_bounds(w, b, rec),
        _ => check_affine_bounds(f, w, b, rec),
    }
}

fn block_strategy() -> impl Strategy<Value = Vec<f32>> {
    (
        -1000.0f32..1000.0,
        -6.0f32..3.0,
        prop::collection::vec(-1.0f32..1.0, 256),
        0usize..4,
        any::<bool>(),
    )
        .prop_map(|(offset, log_scale, v, constant, offset_on)| {
            let scale = 10f32.powf(log_scale);
            let off = if offset_on { offset } else { 0.0 };
            let mut w: Vec<f32> = v.iter().map(|&x| off + scale * x).collect();
            match constant {
                1 => w[..128].fill(off + scale * v[0]),
                2 => w[128..].fill(off),
                _ => {}
            }
            w
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn stored_domain_error_is_within_the_derived_bound(w in block_strategy()) {
        for f in ALL {
            let b = encode_stored(f, 256, &w).unwrap();
            let rec = dec32(f, 256, &b);
            if let Err(e) = check_bounds(f, &w, &b, &rec) {
                prop_assert!(false, "{}: {}", f, e);
            }
        }
    }
}

#[test]
fn random_blocks_stay_within_bounds_and_report_worst_error() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let w = random_blocks(&mut rng, 2000);
    for f in ALL {
        let b = encode_stored(f, 256, &w).unwrap();
        let rec = dec32(f, 256, &b);
        let worst =
            check_bounds(f, &w, &b, &rec).unwrap_or_else(|e| panic!("seed {seed} {f}: {e}"));
        println!("{f}: worst |w - rec| / step = {worst:.4}");
    }
}

#[test]
fn rotated_formats_error_is_the_same_in_both_domains() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let (rows, cols) = (21, 1024);
    let w = weights(&mut rng, rows, cols);
    let rot_seed = rng.next_u64();
    let opts = EncodeOptions {
        rotation_seed: rot_seed,
        ..Default::default()
    };
    for f in [
        Format::Mq4G256,
        Format::Mq4G256V2,
        Format::Mq4cG256,
        Format::Mq4K,
    ] {
        let t = encode(f, rows, cols, &w, &opts).unwrap();
        let rec = decode(&t.view()).unwrap();
        // Stored domain: rotate the input the way the encoder did, decode without un-rotating.
        let mut wr: Vec<f64> = w.iter().map(|&v| v as f64).collect();
        rotation::forward_rows(&mut wr, cols, rot_seed);
        let mut recr = vec![0f64; rows * cols];
        quant_core::api::decode_rows_stored_f64(&t.view(), 0, &mut recr);
        let wr32: Vec<f32> = {
            let mut v = w.clone();
            rotation::forward_rows(&mut v, cols, rot_seed);
            v
        };
        let mut recr32 = vec![0f32; rows * cols];
        codec_for(f).decode_rows_f32(&t.view(), 0, &mut recr32);
        // The stored-domain bound holds for what the api encoded.
        check_bounds(f, &wr32, &t.weights, &recr32)
            .unwrap_or_else(|e| panic!("seed {seed} {f}: {e}"));
        for (blk, ((a, b), (ar, br))) in w
            .chunks_exact(256)
            .zip(rec.chunks_exact(256))
            .zip(wr.chunks_exact(256).zip(recr.chunks_exact(256)))
            .enumerate()
        {
            let logical: f64 = a
                .iter()
                .zip(b)
                .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
                .sum();
            let stored: f64 = ar.iter().zip(br).map(|(&x, &y)| (x - y).powi(2)).sum();
            let norm: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum();
            // Orthonormal rotation: equal squared error, up to the f32 rotation's rounding.
            let tol = 1e-5 * stored + 1e-10 * norm;
            assert!(
                (logical - stored).abs() <= tol,
                "seed {seed} {f} block {blk}: {logical} vs {stored}"
            );
            // Every logical weight's error is at most its block's stored-domain L2 error.
            let l2 = stored.sqrt() * (1.0 + 1e-5) + 1e-6 * norm.sqrt();
            for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x as f64 - y as f64).abs() <= l2,
                    "seed {seed} {f} block {blk} weight {i}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------- determinism and refusals

#[test]
fn every_byte_is_written_deterministically() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let (rows, cols) = (9, 768);
    let mut w = weights(&mut rng, rows, cols);
    w[..cols].fill(0.0); // a zero row: constant blocks everywhere
    w[cols..cols + 128].fill(0.5); // one constant half
    for f in ALL {
        let spec = f.spec();
        let n = spec.weight_bytes(rows, cols).unwrap() as usize;
        let opts = EncodeOptions {
            rotation_seed: 7,
            ..Default::default()
        };
        let mut a = vec![0x00u8; n];
        let mut b = vec![0xFFu8; n];
        encode_rows(f, rows, cols, 0, &w, &mut a, &mut [], &opts).unwrap();
        encode_rows(f, rows, cols, 0, &w, &mut b, &mut [], &opts).unwrap();
        assert_eq!(a, b, "seed {seed} {f}");
        // Streaming row blocks writes the same bytes as the whole-tensor encode.
        let t = encode(f, rows, cols, &w, &opts).unwrap();
        assert_eq!(t.weights, a, "seed {seed} {f}");
        let mut c = vec![0xA5u8; n];
        let rb = spec.row_bytes(cols).unwrap() as usize;
        for r0 in (0..rows).step_by(4) {
            let n_r = 4.min(rows - r0);
            encode_rows(
                f,
                rows,
                cols,
                r0,
                &w[r0 * cols..(r0 + n_r) * cols],
                &mut c[r0 * rb..(r0 + n_r) * rb],
                &mut [],
                &opts,
            )
            .unwrap();
        }
        assert_eq!(c, a, "seed {seed} {f} (streamed)");
        if f == Format::Mq4cG256 {
            assert!(
                a.chunks_exact(136).all(|blk| blk[4..8] == [0, 0, 0, 0]),
                "pad bytes are zero"
            );
        }
    }
}

#[test]
fn partial_blocks_are_refused_by_name() {
    let w = vec![0.1f32; 4 * 300];
    for f in ALL {
        let err = encode(f, 4, 300, &w, &EncodeOptions::default()).unwrap_err();
        assert_eq!(
            err,
            QuantError::PartialBlock {
                format: f,
                cols: 300,
                block: 256
            },
            "{f}"
        );
        assert!(err.to_string().contains(f.name()), "{err}");
        // The codec refuses a direct call too, rather than panicking.
        let mut buf = vec![0u8; 4 * 2 * f.spec().block_bytes as usize];
        let err = codec_for(f)
            .encode_rows(f, 300, &w, &mut buf, &mut [])
            .unwrap_err();
        assert!(
            matches!(err, QuantError::PartialBlock { format, .. } if format == f),
            "{f}: {err}"
        );
    }
}

#[test]
fn wrong_buffer_sizes_are_errors_not_panics() {
    let w = vec![0.1f32; 2 * 256];
    for f in ALL {
        let mut short = vec![0u8; 10];
        let err = codec_for(f)
            .encode_rows(f, 256, &w, &mut short, &mut [])
            .unwrap_err();
        assert!(
            matches!(err, QuantError::BufferSize { what: "weight", .. }),
            "{f}: {err}"
        );
        let mut ok = vec![0u8; f.spec().weight_bytes(2, 256).unwrap() as usize];
        let err = codec_for(f)
            .encode_rows(f, 256, &w, &mut ok, &mut [0u8; 4])
            .unwrap_err();
        assert!(
            matches!(err, QuantError::BufferSize { what: "scale", .. }),
            "{f}: {err}"
        );
        let err = codec_for(f)
            .encode_rows(f, 256, &w[..300], &mut ok, &mut [])
            .unwrap_err();
        assert!(matches!(err, QuantError::InputSize { .. }), "{f}: {err}");
    }
}

#[test]
fn values_beyond_the_header_encoding_are_refused() {
    // 1e5 is beyond fp16 (65504): v2 / mq4c cannot store it as a zero point.
    let mut w = vec![0f32; 512];
    w[300] = -1e5;
    for f in [Format::Mq4G256V2, Format::Mq4cG256] {
        let err = encode_stored(f, 512, &w).unwrap_err();
        assert_eq!(
            err,
            QuantError::ScaleOutOfRange {
                format: f,
                col: 256,
                lo: -1e5,
                hi: 0.0,
                header: "fp16"
            }
        );
        assert!(err.to_string().contains(f.name()), "{err}");
    }
    // f32 headers and mq4-k's 6-bit mins under an fp16 dmin hold it (dmin = 1e5/63).
    for f in [Format::Hfq4G256, Format::Mq4K] {
        let b = encode_stored(f, 512, &w).unwrap();
        let rec = dec32(f, 512, &b);
        assert!((rec[300] + 1e5).abs() < 1e5 / 15.0, "{f}: {}", rec[300]);
    }
    // mq4-k's dmin overflows fp16 once a min passes 63 * 65504.
    w[300] = -5e6;
    let err = encode_stored(Format::Mq4K, 512, &w).unwrap_err();
    assert!(
        matches!(
            err,
            QuantError::ScaleOutOfRange {
                format: Format::Mq4K,
                col: 256,
                ..
            }
        ),
        "{err}"
    );
    // hfq4: a block spanning more than f32::MAX has no finite f32 step.
    w[300] = -3e38;
    w[301] = 3e38;
    let err = encode_stored(Format::Hfq4G256, 512, &w).unwrap_err();
    assert!(
        matches!(err, QuantError::ScaleOutOfRange { header: "f32", .. }),
        "{err}"
    );
}

// ---------------------------------------------------------------- quality (seed 001)

#[test]
fn quality_ordering_matches_seed_001() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    // 28 rows x 128 blocks = 3584 blocks; rows 3, 10, 17, 24 are outlier rows.
    let (rows, cols) = (28, 256 * 128);
    let w = weights(&mut rng, rows, cols);
    let opts = EncodeOptions {
        rotation_seed: rng.next_u64(),
        ..Default::default()
    };
    let mse = |f: Format, normal_only: bool| {
        let t = encode(f, rows, cols, &w, &opts).unwrap();
        let rec = decode(&t.view()).unwrap();
        let (mut acc, mut n) = (0f64, 0usize);
        for (o, (a, b)) in w.chunks_exact(cols).zip(rec.chunks_exact(cols)).enumerate() {
            if normal_only && o % 7 == 3 {
                continue;
            }
            acc += a
                .iter()
                .zip(b)
                .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
                .sum::<f64>();
            n += cols;
        }
        acc / n as f64
    };
    for normal_only in [false, true] {
        let v1 = mse(Format::Mq4G256, normal_only);
        let v2 = mse(Format::Mq4G256V2, normal_only);
        let c = mse(Format::Mq4cG256, normal_only);
        let k = mse(Format::Mq4K, normal_only);
        let h = mse(Format::Hfq4G256, normal_only);
        println!(
            "seed {seed} ({}): MSE hfq4 {h:.4e} mq4 {v1:.4e} v2 {v2:.4e} mq4c {c:.4e} mq4-k {k:.4e}; \
             v2/v1 {:.4} mq4c/v1 {:.5} mq4-k/v2 {:.4} mq4-k/v1 {:.4}",
            if normal_only {
                "normal rows"
            } else {
                "all rows"
            },
            v2 / v1,
            c / v1,
            k / v2,
            k / v1
        );
        if !normal_only {
            // With the outlier rows (spikes up to ~100) the MSE is dominated by a few blocks
            // and the ordering can flip (2 of 150 random seeds did); seed 001's claims are
            // about ordinary post-FWHT weights, checked on the normal rows below.
            continue;
        }
        assert!(v2 < v1, "seed {seed}: v2 {v2} !< v1 {v1}");
        // Seed 001: an fp16 header costs nothing on ordinary post-FWHT blocks (on the outlier
        // rows an fp16 zero point is coarse, 0.0625 steps above 64: mq4c trailed v1 by 1.9%
        // over all rows at seed 1795995844907085788).
        assert!(
            (c / v1 - 1.0).abs() < 0.005,
            "seed {seed}: mq4c {c} vs v1 {v1}"
        );
        assert!(k < v2, "seed {seed}: mq4-k {k} !< v2 {v2}");
        // Seed 001 measured v2/v1 = 0.838 and mq4-k/v2 = 0.62 on real rotated weights;
        // margins well short of those keep a half-working encoder from passing.
        assert!(v2 / v1 < 0.9, "seed {seed}: v2/v1 = {}", v2 / v1);
        assert!(k / v2 < 0.75, "seed {seed}: mq4-k/v2 = {}", k / v2);
    }
}
