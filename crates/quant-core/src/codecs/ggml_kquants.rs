//! GGML's k-quants: 256-weight super-blocks, byte-identical to llama.cpp's `block_q2_K` ...
//! `block_q6_K` (GGUF type ids 10 to 14). q4_k is the same block as `mq4-k` (see
//! [`super::kquant`], whose decode it reuses) over unrotated weights.
//!
//! Layouts, little-endian, fp16 `d` / `dmin`:
//!
//! | format | bytes | fields, in order | sub-blocks |
//! | --- | --- | --- | --- |
//! | q2_k | 84 | `scales[16]`, `qs[64]`, d, dmin | 16 x 16: 4-bit scale (low) and min (high) per byte; `w = d*sc*q - dmin*m`, q 2-bit |
//! | q3_k | 110 | `hmask[32]`, `qs[64]`, `scales[12]`, d | 16 x 16: 6-bit scales `s`; `w = d*(s-32) * (q - 4*!h)`, q 2-bit, h the hmask bit |
//! | q4_k | 144 | d, dmin, `scales[12]`, `qs[128]` | 8 x 32: 6-bit scale/min (`get_scale_min_k4`); `w = d*sc*q - dmin*m` |
//! | q5_k | 176 | d, dmin, `scales[12]`, `qh[32]`, `qs[128]` | as q4_k with a fifth bit from qh |
//! | q6_k | 210 | `ql[128]`, `qh[64]`, `scales[16]` (int8), d | 16 x 16: `w = d*sc*(q - 32)`, q 6-bit |
//!
//! Bit placement (GGML's; weight index within the block): for q2_k and q3_k, weight
//! `128h + 32s + 16k + l` (h < 2, s < 4, k < 2, l < 16) is bits `2s..2s+2` of
//! `qs[32h + 16k + l]` and uses scale `8h + 2s + k`; q3_k's high bit is bit `4h + s` of
//! `hmask[16k + l]`. For q4_k/q5_k, weight `64c + l` (l < 32) is the low nibble of
//! `qs[32c + l]` and weight `64c + 32 + l` the high nibble; q5_k's fifth bits are bits
//! `2c` and `2c + 1` of `qh[l]`. For q6_k, weight `128h + 32s + l` takes its low 4 bits
//! from `ql[64h + 32(s%2) + l]` (low nibble for s < 2, high for s >= 2) and its top 2
//! from bits `2s..2s+2` of `qh[32h + l]`, with scale `8h + 2s + l/16`. The q3_k 6-bit
//! scale k is `(scales[k%8] >> 4*(k/8)) & 0xF | ((scales[8 + k%4] >> 2*(k/4)) & 3) << 4`.
//!
//! Encoders are ports of `quantize_row_q{2,3,4,5,6}_K_ref` (the reference paths llama.cpp
//! uses without an importance matrix), built on `super::ggml_common`'s helpers; the q2_k, q4_k, q5_k and q6_k scale searches
//! run eight sub-blocks at a time (`super::ggml_search`), with GGML's arithmetic per sub-block.

// The ports keep GGML's index loops so they can be read side by side with ggml-quants.c.
#![allow(clippy::needless_range_loop)]
use super::ggml_common::{
    BlockCodec, GROUP_MAX_EPS, GgmlBlock, get_fp16, int, make_q3_quants, nearest_int, put_fp16,
};
use super::ggml_search::{LANES, avx2_dispatch, qkx2_lanes, qx_rmse1_lanes, to_lanes};
use super::kquant::{self, pack_scale_min, scale_min};
use crate::real::Real;

pub struct Q2K;
pub struct Q3K;
pub struct Q4K;
pub struct Q5K;
pub struct Q6K;

pub static Q2_K_CODEC: BlockCodec<Q2K> = BlockCodec::new();
pub static Q3_K_CODEC: BlockCodec<Q3K> = BlockCodec::new();
pub static Q4_K_CODEC: BlockCodec<Q4K> = BlockCodec::new();
pub static Q5_K_CODEC: BlockCodec<Q5K> = BlockCodec::new();
pub static Q6_K_CODEC: BlockCodec<Q6K> = BlockCodec::new();

const QK_K: usize = 256;

/// Packs 2-bit codes `l[j + l + 32s]` of each 128-half into `qs` (q2_k / q3_k order).
#[inline(always)]
fn pack2(l: &[u8; QK_K], qs: &mut [u8]) {
    for h in 0..QK_K / 128 {
        let j = 128 * h;
        for i in 0..32 {
            qs[32 * h + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

/// The (scale, min) fits of the eight 32-weight sub-blocks for q4_k / q5_k: GGML's
/// weights `sqrt(mean(x²)) + |x|` and `make_qkx2_quants`, the eight searched side by side
/// (see [`super::ggml_search`]). Codes go to `l` in weight order.
#[inline(always)]
fn fit_sub32x8(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) -> ([f32; 8], [f32; 8]) {
    let xl = to_lanes::<32>(x);
    let mut sum_x2 = [0f32; LANES];
    for row in &xl {
        for c in 0..LANES {
            sum_x2[c] += row[c] * row[c];
        }
    }
    let mut av_x = [0f32; LANES];
    for c in 0..LANES {
        av_x[c] = (sum_x2[c] / 32.0).sqrt();
    }
    let mut weights = [[0f32; LANES]; 32];
    for (w, row) in weights.iter_mut().zip(&xl) {
        for c in 0..LANES {
            w[c] = av_x[c] + row[c].abs();
        }
    }
    let mut codes = [[0u8; LANES]; 32];
    let fit = qkx2_lanes::<32, false>(nmax, &xl, &weights, &mut codes, rmin, 0.1, nstep);
    for (i, row) in codes.iter().enumerate() {
        for c in 0..LANES {
            l[32 * c + i] = row[c];
        }
    }
    fit
}

/// The shared tail of the q4_k / q5_k reference encoders: 6-bit scales and mins against
/// fp16 `d` / `dmin`, then codes re-quantized against the stored values. Writes d, dmin and
/// the 12 scale bytes at `out[0..16]` and leaves the codes (0..=nmax) in `l`.
#[inline(always)]
fn kx_header(
    x: &[f32],
    nmax: i32,
    scales: &[f32; 8],
    mins: &[f32; 8],
    l: &mut [u8; QK_K],
    out: &mut [u8],
) -> Result<(), ()> {
    let max_scale = scales.iter().fold(0f32, |a, &s| if s > a { s } else { a });
    let max_min = mins.iter().fold(0f32, |a, &m| if m > a { m } else { a });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // `uint8_t ls = nearest_int(...)`: C's conversion wraps, then MIN(63, .).
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let packed = pack_scale_min(&ls, &lm);
    let d = put_fp16(out, 0, max_scale / 63.0)?;
    let dmin = put_fp16(out, 2, max_min / 63.0)?;
    out[4..16].copy_from_slice(&packed);
    for j in 0..8 {
        let (sc, m) = scale_min(j, &packed);
        let dd = d * sc as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dd).clamp(0, nmax) as u8;
        }
    }
    Ok(())
}

impl Q2K {
    #[inline(always)]
    fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        const Q4SCALE: f32 = 15.0;
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for g in 0..2 {
            let xl = to_lanes::<16>(&x[128 * g..128 * g + 128]);
            let mut weights = [[0f32; LANES]; 16];
            for (w, row) in weights.iter_mut().zip(&xl) {
                for c in 0..LANES {
                    w[c] = row[c].abs();
                }
            }
            let mut codes = [[0u8; LANES]; 16];
            let (s, m) = qkx2_lanes::<16, true>(3, &xl, &weights, &mut codes, -0.5, 0.1, 15);
            for c in 0..LANES {
                let j = 8 * g + c;
                for i in 0..16 {
                    l[16 * j + i] = codes[i][c];
                }
                scales[j] = s[c];
                mins[j] = m[c];
            }
        }
        for j in 0..16 {
            let (s, m) = (scales[j], mins[j]);
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let mut sc = [0u8; 16];
        let d = if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_fp16(&mut out[80..], 0, max_scale / Q4SCALE)?
        } else {
            put_fp16(&mut out[80..], 0, 0.0)?
        };
        let dmin = if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) as u8) << 4;
            }
            put_fp16(&mut out[80..], 2, max_min / Q4SCALE)?
        } else {
            put_fp16(&mut out[80..], 2, 0.0)?
        };
        out[..16].copy_from_slice(&sc);
        for j in 0..16 {
            let dd = d * (sc[j] & 0xF) as f32;
            if dd == 0.0 {
                continue;
            }
            let dm = dmin * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / dd).clamp(0, 3) as u8;
            }
        }
        pack2(&l, &mut out[16..80]);
        Ok(())
    }
}

impl GgmlBlock for Q2K {
    const WEIGHTS: usize = QK_K;
    const BYTES: usize = 84;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Q2K::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 80);
        let min: T = get_fp16(b, 82);
        let (scales, qs) = (&b[..16], &b[16..80]);
        for h in 0..2 {
            let q = &qs[32 * h..32 * h + 32];
            for s in 0..4 {
                let shift = 2 * s;
                for k in 0..2 {
                    let sc = scales[8 * h + 2 * s + k];
                    let dl = d * int::<T>(i32::from(sc & 0xF));
                    let ml = min * int::<T>(i32::from(sc >> 4));
                    let base = 128 * h + 32 * s + 16 * k;
                    for i in 0..16 {
                        let c = (q[16 * k + i] >> shift) & 3;
                        out[base + i] = dl * int::<T>(i32::from(c)) - ml;
                    }
                }
            }
        }
    }
}

/// The sixteen 6-bit q3_k scales (0..=63, before the -32 offset) from their 12 bytes.
#[inline]
fn q3_scale(sc: &[u8], k: usize) -> i32 {
    let low = (sc[k % 8] >> (4 * (k / 8))) & 0xF;
    let high = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    i32::from(low | (high << 4))
}

impl GgmlBlock for Q3K {
    const WEIGHTS: usize = QK_K;
    const BYTES: usize = 110;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(
                4,
                &x[16 * j..16 * j + 16],
                &mut l[16 * j..16 * j + 16],
                true,
            );
            let a = scales[j].abs();
            if a > amax {
                amax = a;
                max_scale = scales[j];
            }
        }
        let mut sc = [0u8; 12];
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let v = (nearest_int(iscale * scales[j]).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = v & 0xF;
                } else {
                    sc[j - 8] |= (v & 0xF) << 4;
                }
                sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
            }
            put_fp16(out, 108, 1.0 / iscale)?
        } else {
            put_fp16(out, 108, 0.0)?
        };
        out[96..108].copy_from_slice(&sc);
        for j in 0..16 {
            let dd = d * (q3_scale(&sc, j) - 32) as f32;
            if dd == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / dd).clamp(-4, 3) + 4) as i8;
            }
        }
        let hmask = &mut out[..32];
        hmask.fill(0);
        let mut codes = [0u8; QK_K];
        for (j, (c, &v)) in codes.iter_mut().zip(&l).enumerate() {
            let mut v = v as u8;
            if v > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            *c = v;
        }
        pack2(&codes, &mut out[32..96]);
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let (hm, qs, sc) = (&b[..32], &b[32..96], &b[96..108]);
        let d_all: T = get_fp16(b, 108);
        for h in 0..2 {
            let q = &qs[32 * h..32 * h + 32];
            for s in 0..4 {
                let shift = 2 * s;
                let m = 1u8 << (4 * h + s);
                for k in 0..2 {
                    let dl = d_all * int::<T>(q3_scale(sc, 8 * h + 2 * s + k) - 32);
                    let base = 128 * h + 32 * s + 16 * k;
                    for i in 0..16 {
                        let lo = i32::from((q[16 * k + i] >> shift) & 3);
                        let hi = if hm[16 * k + i] & m != 0 { 0 } else { 4 };
                        out[base + i] = dl * int::<T>(lo - hi);
                    }
                }
            }
        }
    }
}

impl Q4K {
    #[inline(always)]
    fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_sub32x8(x, 15, -1.0, 20, &mut l);
        kx_header(x, 15, &scales, &mins, &mut l, out)?;
        let qs = &mut out[16..144];
        for c in 0..4 {
            for i in 0..32 {
                qs[32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
        Ok(())
    }
}

impl GgmlBlock for Q4K {
    const WEIGHTS: usize = QK_K;
    const BYTES: usize = 144;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Q4K::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        kquant::decode_block(b, out)
    }
}

impl Q5K {
    #[inline(always)]
    fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_sub32x8(x, 31, -0.5, 15, &mut l);
        kx_header(x, 31, &scales, &mins, &mut l, out)?;
        let (qh, ql) = out[16..176].split_at_mut(32);
        qh.fill(0);
        for c in 0..4 {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for i in 0..32 {
                let mut l1 = l[64 * c + i];
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                let mut l2 = l[64 * c + 32 + i];
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                ql[32 * c + i] = l1 | (l2 << 4);
            }
        }
        Ok(())
    }
}

impl GgmlBlock for Q5K {
    const WEIGHTS: usize = QK_K;
    const BYTES: usize = 176;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Q5K::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        let min: T = get_fp16(b, 2);
        let sc = &b[4..16];
        let (qh, ql) = (&b[16..48], &b[48..176]);
        for c in 0..4 {
            let (sc1, m1) = scale_min(2 * c, sc);
            let (sc2, m2) = scale_min(2 * c + 1, sc);
            let (d1, z1) = (d * int::<T>(i32::from(sc1)), min * int::<T>(i32::from(m1)));
            let (d2, z2) = (d * int::<T>(i32::from(sc2)), min * int::<T>(i32::from(m2)));
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for i in 0..32 {
                let q = ql[32 * c + i];
                let h1 = if qh[i] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[i] & u2 != 0 { 16 } else { 0 };
                out[64 * c + i] = d1 * int::<T>(i32::from(q & 0xF) + h1) - z1;
                out[64 * c + 32 + i] = d2 * int::<T>(i32::from(q >> 4) + h2) - z2;
            }
        }
    }
}

impl Q6K {
    #[inline(always)]
    fn encode_body(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for g in 0..2 {
            let xl = to_lanes::<16>(&x[128 * g..128 * g + 128]);
            let mut codes = [[0i8; LANES]; 16];
            let s = qx_rmse1_lanes::<16>(32, &xl, &mut codes);
            for c in 0..LANES {
                let ib = 8 * g + c;
                for i in 0..16 {
                    l[16 * ib + i] = codes[i][c];
                }
                scales[ib] = s[c];
            }
        }
        for ib in 0..16 {
            let s = scales[ib];
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            out.fill(0);
            return Ok(());
        }
        let iscale = -128.0 / max_scale;
        let d = put_fp16(out, 208, 1.0 / iscale)?;
        let mut sc = [0i8; 16];
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
            out[192 + ib] = sc[ib] as u8;
        }
        for j in 0..16 {
            let dd = d * sc[j] as f32;
            if dd == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / dd).clamp(-32, 31) + 32) as i8;
            }
        }
        let (ql, qh) = out[..192].split_at_mut(128);
        for h in 0..2 {
            let j = 128 * h;
            for i in 0..32 {
                let q = |k: usize| l[j + i + 32 * k] as u8;
                ql[64 * h + i] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
                ql[64 * h + 32 + i] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
                qh[32 * h + i] =
                    (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
        Ok(())
    }
}

impl GgmlBlock for Q6K {
    const WEIGHTS: usize = QK_K;
    const BYTES: usize = 210;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        avx2_dispatch!(Q6K::encode_body, x, out)
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        // GGML's loop computes weights l, l+32, l+64, l+96 together; this one walks each
        // 32-weight group k (low 4 bits from ql[l] or ql[l+32], low or high nibble; top 2
        // bits from qh[l] >> 2k) in 16-weight halves of one scale, which vectorizes. The
        // arithmetic, (d * sc) * q in the decode type, is GGML's.
        let d: T = get_fp16(b, 208);
        for h in 0..2 {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..128 + 32 * h + 32];
            let sc = &b[192 + 8 * h..192 + 8 * h + 8];
            let o = &mut out[128 * h..128 * h + 128];
            for k in 0..4 {
                let (lo_at, nib) = ((k % 2) * 32, (k / 2) * 4);
                for half in 0..2 {
                    let s = d * int::<T>(i32::from(sc[2 * k + half] as i8));
                    for l in 16 * half..16 * half + 16 {
                        let q = ((ql[lo_at + l] >> nib) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4);
                        o[32 * k + l] = s * int::<T>(i32::from(q) - 32);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{Rng, weights};

    /// The AVX2 build of each encoder (what `encode` runs on this machine when it has AVX2)
    /// and the baseline build (`encode_body` called directly) write the same bytes.
    fn both_paths_agree<B: GgmlBlock>(body: fn(&[f32], &mut [u8]) -> Result<(), ()>) {
        let w = weights(&mut Rng::new(0xA5A5), 16, 1024);
        for x in w.chunks_exact(B::WEIGHTS) {
            let (mut a, mut b) = (vec![0u8; B::BYTES], vec![0u8; B::BYTES]);
            assert_eq!(B::encode(x, &mut a), body(x, &mut b));
            assert_eq!(a, b);
        }
    }

    #[test]
    fn dispatched_and_baseline_encoders_agree() {
        both_paths_agree::<Q2K>(Q2K::encode_body);
        both_paths_agree::<Q4K>(Q4K::encode_body);
        both_paths_agree::<Q5K>(Q5K::encode_body);
        both_paths_agree::<Q6K>(Q6K::encode_body);
        both_paths_agree::<super::super::ggml_iq4::Iq4Xs>(
            super::super::ggml_iq4::Iq4Xs::encode_body,
        );
        both_paths_agree::<super::super::ggml_iq4::Iq4Nl>(
            super::super::ggml_iq4::Iq4Nl::encode_body,
        );
    }
}
