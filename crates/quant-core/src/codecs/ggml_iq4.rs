//! GGML's non-linear 4-bit formats, byte-identical to llama.cpp's `block_iq4_nl` (GGUF
//! type 20) and `block_iq4_xs` (type 23). Each nibble indexes GGML's 16-entry table
//! [`KVALUES_IQ4NL`]; the value is `d * table[q]` (iq4_nl) or `d * (ls - 32) * table[q]`
//! (iq4_xs, `ls` the 6-bit scale of the weight's 32-weight sub-block).
//!
//! Layouts, little-endian:
//!
//! | format | bytes | fields |
//! | --- | --- | --- |
//! | iq4_nl | 18 per 32 | fp16 d, `qs[16]` |
//! | iq4_xs | 136 per 256 | fp16 d, u16 scales_h, `scales_l[4]`, `qs[128]` |
//!
//! Within each 32 weights (one iq4_nl block, one iq4_xs sub-block with 16 `qs` bytes),
//! weight j < 16 is the low nibble of byte j and weight j + 16 the high nibble. The iq4_xs
//! sub-block `ib` has `ls = ((scales_l[ib/2] >> 4*(ib%2)) & 0xF) | (((scales_h >> 2*ib) & 3) << 4)`.
//!
//! Encoders are ports of `quantize_row_iq4_nl_ref` (no scale search: `ntry = -1`) and
//! `quantize_row_iq4_xs_ref` (GGML's `quantize_iq4_xs` without an importance matrix,
//! searching 15 scales per sub-block, eight sub-blocks side by side in
//! `super::ggml_search`), both through `quantize_row_iq4_nl_impl`.

// The ports keep GGML's index loops so they can be read side by side with ggml-quants.c.
#![allow(clippy::needless_range_loop)]
use super::ggml_common::{
    BlockCodec, GROUP_MAX_EPS, GgmlBlock, get_fp16, int, nearest_int, put_fp16,
};
use super::ggml_search::{avx2_dispatch, iq4_fit_lanes, iq4_nearest, to_lanes};
use crate::real::Real;

/// GGML's `kvalues_iq4nl`.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

pub struct Iq4Nl;
pub struct Iq4Xs;

pub static IQ4_NL_CODEC: BlockCodec<Iq4Nl> = BlockCodec::new();
pub static IQ4_XS_CODEC: BlockCodec<Iq4Xs> = BlockCodec::new();

/// The search of `quantize_row_iq4_nl_impl` with `ntry = -1` (iq4_nl: no importance
/// weights, so `weight = x²`, and no scale sweep): codes into `l`, returns the block scale
/// (0 for an all-zero block, whose codes stay 0).
#[inline(always)]
fn fit_block_nl(xb: &[f32], l: &mut [u8]) -> f32 {
    let v0 = KVALUES_IQ4NL[0] as f32;
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in xb {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let id = 1.0 / (max / v0);
    // The table look-ups first (independent per weight, so they vectorize), then GGML's
    // sequential sums.
    let mut q = [0f32; 32];
    for ((o, qv), &x) in l.iter_mut().zip(q.iter_mut()).zip(xb) {
        (*o, *qv) = iq4_nearest(id * x);
    }
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (&qv, &x) in q.iter().zip(xb) {
        let w = x * x;
        sumqx += w * qv * x;
        sumq2 += w * qv * qv;
    }
    if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 }
}

/// Packs 32 codes into 16 bytes, weight j low nibble and j + 16 high nibble.
#[inline(always)]
fn pack32(l: &[u8], q: &mut [u8]) {
    for j in 0..16 {
        q[j] = l[j] | (l[16 + j] << 4);
    }
}

impl GgmlBlock for Iq4Nl {
    const WEIGHTS: usize = 32;
    const BYTES: usize = 18;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Iq4Nl::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            out[j] = d * int::<T>(i32::from(KVALUES_IQ4NL[(q & 0xF) as usize]));
            out[j + 16] = d * int::<T>(i32::from(KVALUES_IQ4NL[(q >> 4) as usize]));
        }
    }
}

impl Iq4Nl {
    #[inline(always)]
    pub(super) fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let mut l = [0u8; 32];
        let d = fit_block_nl(x, &mut l);
        put_fp16(out, 0, d)?;
        pack32(&l, &mut out[2..18]);
        Ok(())
    }
}

impl Iq4Xs {
    #[inline(always)]
    pub(super) fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        const NTRY: i32 = 7;
        let mut l = [0u8; 256];
        let scales = iq4_fit_lanes(&to_lanes::<32>(x), NTRY);
        let (mut max_scale, mut amax_scale) = (0f32, 0f32);
        for &d in &scales {
            if d.abs() > amax_scale {
                amax_scale = d.abs();
                max_scale = d;
            }
        }
        let d = -max_scale / 32.0;
        put_fp16(out, 0, d)?;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        for ib in 0..8 {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 0..32 {
                l[32 * ib + j] = iq4_nearest(idl * x[32 * ib + j]).0;
            }
            let ls = (ls + 32) as u8;
            scales_l[ib / 2] |= (ls & 0xF) << (4 * (ib % 2));
            scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
        out[2..4].copy_from_slice(&scales_h.to_le_bytes());
        out[4..8].copy_from_slice(&scales_l);
        for i in 0..8 {
            pack32(
                &l[32 * i..32 * i + 32],
                &mut out[8 + 16 * i..8 + 16 * i + 16],
            );
        }
        Ok(())
    }
}

impl GgmlBlock for Iq4Xs {
    const WEIGHTS: usize = 256;
    const BYTES: usize = 136;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Iq4Xs::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        let scales_l = &b[4..8];
        for ib in 0..8 {
            let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF)
                | ((((scales_h >> (2 * ib)) & 3) as u8) << 4);
            let dl = d * int::<T>(i32::from(ls) - 32);
            let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
            let o = &mut out[32 * ib..32 * ib + 32];
            for j in 0..16 {
                o[j] = dl * int::<T>(i32::from(KVALUES_IQ4NL[(qs[j] & 0xF) as usize]));
                o[j + 16] = dl * int::<T>(i32::from(KVALUES_IQ4NL[(qs[j] >> 4) as usize]));
            }
        }
    }
}
