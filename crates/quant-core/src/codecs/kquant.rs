//! mq4-k: GGML's k-quant design (the Q4_K super-block of llama.cpp's ggml-quants.c) over
//! FWHT-256-rotated weights. The block bytes are exactly GGML's `block_q4_K`; what tessera
//! adds is the rotation beneath it (applied by `crate::api`; this codec sees the stored
//! domain) and its own min/max encoder. Seed 001 § 1c measured this hierarchical per-32
//! header as the best use of 144 bytes, and asks that its provenance be named.
//!
//! Layout, 144 bytes per 256 weights along I, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | [0..2) | fp16 `d`, super-scale of the sub-block scales |
//! | [2..4) | fp16 `dmin`, super-scale of the sub-block mins |
//! | [4..16) | 12 bytes: eight 6-bit scales `sc_j` and eight 6-bit mins `m_j` (GGML's packing) |
//! | [16..144) | 128 bytes of nibbles |
//!
//! Sub-block j (j = 0..8) holds weights 32j..32j+32. With `q` the 12 scale bytes
//! (GGML's `get_scale_min_k4`): for j < 4, `sc_j = q[j] & 63`, `m_j = q[j+4] & 63`; for
//! j >= 4, `sc_j = (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4)` and
//! `m_j = (q[j+4] >> 4) | ((q[j] >> 6) << 4)`. Nibbles: for each 64-weight chunk c (0..4),
//! byte `qs[32c + l]` holds weight 64c+l in its low nibble and weight 64c+32+l in its high
//! nibble (l = 0..32). Decode: `w = (d * sc_j) * q - (dmin * m_j)`, the products in the
//! decode's float type, exactly as GGML's `dequantize_row_q4_K`.
//!
//! Encoder (min/max, the starting point of GGML's make_qkx quantizers without their
//! least-squares search): per sub-block, `lo_j = min(min w, 0)` (GGML's mins are offsets
//! below zero, stored unsigned, so a sub-block above zero is fitted from 0) and
//! `hi_j = max w`. Then, every fp16 and 6-bit value rounded to nearest, and every later step
//! computed against the already-rounded values (the decoder's exact ones):
//! `dmin = f16(max_j(-lo_j) / 63)`, `m_j = round(-lo_j / dmin)`, `M_j = dmin * m_j`;
//! `need_j = (hi_j + M_j) / 15` (the step that reaches hi_j from the stored min);
//! `d = f16(max_j need_j / 63)`, `sc_j = round(need_j / d)`, `S_j = d * sc_j`; and
//! `q = clamp(rint((w + M_j) / S_j), 0, 15)` (q = 0 where S_j == 0).
//!
//! Error bound: the grid `{S_j q - M_j}` misses [lo_j, hi_j] by at most `M_j - (-lo_j)`
//! below and `15 (need_j - S_j)` above, so `|w - ŵ| <= max(S_j / 2, dmin / 2, 15 d / 2)` up to
//! f32 rounding whenever d and dmin are normal fp16 (the 6-bit codes are then within half a
//! unit: `need_j / d <= 63 / (1 - 2^-11) < 63.5`). Rounding the 6-bit codes up instead would
//! make the bound S_j / 2, but measured on rotated Gaussian rows it costs 4% MSE and 70% on
//! the tail-1% MSE, so the nearest rule (GGML's) is kept. A super-scale beyond fp16 is
//! refused with [`QuantError::ScaleOutOfRange`].
//!
//! Error-aware encoder ([`EncoderEffort::ErrorAware`], issue 9), in the spirit of GGML's
//! make_qkx2_quants: same bytes, same decoder. It keeps the min/max super-scales and searches
//! each sub-block's 6-bit scale and min codes around the min/max ones, scoring each candidate
//! with nearest codes against the stored `d * sc`, `dmin * m` by a squared error weighted
//! toward large weights (as the affine family's search); a block keeps the min/max encoding
//! unless the search beats it on plain squared error as decoded. See docs/QUALITY.md.

use super::affine256::{check_inline_buffers, code4, min_max, pass, tail_weights};
use super::util::{read_f16, write_f16};
use crate::api::EncoderEffort;
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;
use half::f16;

/// Offset of the 12 packed scale/min bytes.
pub const SCALES_OFFSET: usize = 4;
/// Offset of the 128 nibble bytes.
pub const QS_OFFSET: usize = 16;
/// Weights per sub-block.
pub const SUB: usize = 32;
/// Sub-blocks per block.
pub const NSUB: usize = 8;

/// GGML's mq4-k / Q4_K codec.
pub struct Mq4KCodec;

/// Sub-block j's 6-bit (scale, min), GGML's `get_scale_min_k4`.
#[inline(always)]
pub fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins into GGML's 12 bytes (the inverse of [`scale_min`]).
pub fn pack_scale_min(sc: &[u8; NSUB], m: &[u8; NSUB]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..NSUB {
        let (ls, lm) = (sc[j] & 63, m[j] & 63);
        if j < 4 {
            q[j] |= ls;
            q[j + 4] |= lm;
        } else {
            q[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            q[j - 4] |= (ls >> 4) << 6;
            q[j] |= (lm >> 4) << 6;
        }
    }
    q
}

/// The nearest fp16 to x; `None` when that is infinite.
#[inline]
fn f16_finite(x: f32) -> Option<f16> {
    let h = f16::from_f32(x);
    h.is_finite().then_some(h)
}

/// The 6-bit code `rint(clamp(x / unit, 0, 63))` (GGML's `nearest_int` rounds half to even
/// the same way), 0 for a zero unit.
#[inline]
fn code6(x: f32, unit: f32) -> u8 {
    if unit == 0.0 {
        return 0;
    }
    let c = (x / unit).clamp(0.0, 63.0);
    ((c + 8_388_608.0).to_bits() & 0x3F) as u8
}

/// The fitted header of one block: fp16 super-scales and the 6-bit sub-block codes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fit {
    d: f16,
    dmin: f16,
    ls: [u8; NSUB],
    lm: [u8; NSUB],
}

impl Fit {
    /// Sub-block j's (scale, min) as the decoder computes them: `d * sc`, `dmin * m` in f32.
    #[inline]
    fn sub(&self, j: usize) -> (f32, f32) {
        (
            self.d.to_f32() * self.ls[j] as f32,
            self.dmin.to_f32() * self.lm[j] as f32,
        )
    }
}

/// The min/max encoder's header (module docs). `Err` carries the block's (lo, hi).
fn fit_minmax(w: &[f32]) -> Result<Fit, (f32, f32)> {
    let mut neg_lo = [0f32; NSUB];
    let mut hi = [0f32; NSUB];
    for (j, sub) in w.chunks_exact(SUB).enumerate() {
        let (l, h) = min_max(sub);
        neg_lo[j] = -(l.min(0.0));
        hi[j] = h;
    }
    let out_of_range = || min_max(w);
    let max_m = neg_lo.iter().fold(0f32, |a, &b| a.max(b));
    let dmin16 = f16_finite(max_m / 63.0).ok_or_else(out_of_range)?;
    let dmin = dmin16.to_f32();
    let mut lm = [0u8; NSUB];
    let mut need = [0f32; NSUB];
    for j in 0..NSUB {
        lm[j] = code6(neg_lo[j], dmin);
        need[j] = (hi[j] + dmin * lm[j] as f32) / 15.0;
    }
    let max_s = need.iter().fold(0f32, |a, &b| a.max(b));
    let d16 = f16_finite(max_s / 63.0).ok_or_else(out_of_range)?;
    let d = d16.to_f32();
    let mut ls = [0u8; NSUB];
    for j in 0..NSUB {
        ls[j] = code6(need[j], d);
    }
    Ok(Fit {
        d: d16,
        dmin: dmin16,
        ls,
        lm,
    })
}

/// The nearest 4-bit code of `x` in a sub-block of (scale, min): the stored rule.
#[inline(always)]
fn code(x: f32, scale: f32, min: f32) -> u8 {
    if scale == 0.0 {
        0
    } else {
        code4((x + min) / scale)
    }
}

/// Writes a fitted block: header, packed 6-bit codes and nearest nibbles.
fn write_block(w: &[f32], fit: &Fit, block: &mut [u8]) {
    write_f16(block, 0, fit.d);
    write_f16(block, 2, fit.dmin);
    block[SCALES_OFFSET..QS_OFFSET].copy_from_slice(&pack_scale_min(&fit.ls, &fit.lm));
    let sub: [(f32, f32); NSUB] = std::array::from_fn(|j| fit.sub(j));
    let qs = &mut block[QS_OFFSET..];
    for c in 0..NSUB / 2 {
        let (j0, j1) = (2 * c, 2 * c + 1);
        let lo_half = &w[j0 * SUB..j1 * SUB];
        let hi_half = &w[j1 * SUB..(j1 + 1) * SUB];
        for (l, o) in qs[SUB * c..SUB * (c + 1)].iter_mut().enumerate() {
            *o = code(lo_half[l], sub[j0].0, sub[j0].1)
                | (code(hi_half[l], sub[j1].0, sub[j1].1) << 4);
        }
    }
}

/// Squared error of a fitted block as the decoder reconstructs it (`S q - M` in f32 from
/// the stored codes), summed in f64.
fn block_sse_f64(w: &[f32], fit: &Fit) -> f64 {
    let mut acc = 0f64;
    for (j, sub) in w.chunks_exact(SUB).enumerate() {
        let (s, m) = fit.sub(j);
        for &x in sub {
            let r = s * code(x, s, m) as f32 - m;
            acc += (r as f64 - x as f64).powi(2);
        }
    }
    acc
}

/// (plain, tail-weighted) squared error of a sub-block under (scale, min), codes by a
/// multiplication with `1/scale` (a ranking; [`block_sse_f64`] decides).
#[inline]
fn sub_pass(w: &[f32], wt: &[f32], scale: f32, min: f32) -> (f32, f32) {
    if scale == 0.0 {
        let (mut se, mut wse) = (0f32, 0f32);
        for (&x, &q) in w.iter().zip(wt) {
            let e = -min - x;
            se += e * e;
            wse += q * (e * e);
        }
        return (se, wse);
    }
    // w = s q - m is the affine grid of zero -m.
    pass(w, wt, scale, -min)
}

/// 6-bit scale codes the error-aware search tries below and above the min/max one: a smaller
/// scale clips the sub-block's extremes a little for a finer grid (seed 001's clipping
/// trade), a larger one absorbs the 6-bit rounding.
const LS_DOWN: i32 = 4;
const LS_UP: i32 = 1;
/// 6-bit min codes tried either side of the min/max one.
const LM_SPAN: i32 = 2;

/// The error-aware encoder's header. It keeps the min/max encoder's fp16 super-scales `d`
/// and `dmin`, and for each sub-block searches the 6-bit (scale, min) codes around the
/// min/max ones ([`LS_DOWN`], [`LS_UP`], [`LM_SPAN`]) for the lowest squared error weighted
/// by [`tail_weights`], every candidate scored with nearest codes against the stored
/// `d * sc` and `dmin * m`, as the decoder reconstructs. The result is kept only when its
/// squared error as decoded (f64) beats `base`, the min/max encoder's header.
fn fit_error_aware(w: &[f32], base: &Fit) -> Fit {
    let (d, dmin) = (base.d.to_f32(), base.dmin.to_f32());
    let mut fit = *base;
    let mut wt = [0f32; SUB];
    for (j, sub) in w.chunks_exact(SUB).enumerate() {
        let (l, h) = min_max(sub);
        tail_weights(sub, l.abs().max(h.abs()), &mut wt);
        let (ls0, lm0) = (base.ls[j] as i32, base.lm[j] as i32);
        let (_, mut best_wse) = sub_pass(sub, &wt, d * ls0 as f32, dmin * lm0 as f32);
        for ls in (ls0 - LS_DOWN).max(0)..=(ls0 + LS_UP).min(63) {
            for lm in (lm0 - LM_SPAN).max(0)..=(lm0 + LM_SPAN).min(63) {
                let (_, wse) = sub_pass(sub, &wt, d * ls as f32, dmin * lm as f32);
                if wse < best_wse {
                    best_wse = wse;
                    fit.ls[j] = ls as u8;
                    fit.lm[j] = lm as u8;
                }
            }
        }
    }
    if fit != *base && block_sse_f64(w, &fit) < block_sse_f64(w, base) {
        fit
    } else {
        *base
    }
}

/// Encodes one 256-weight block into its 144 bytes. `Err` carries the block's (lo, hi).
fn encode_block(w: &[f32], block: &mut [u8], effort: EncoderEffort) -> Result<(), (f32, f32)> {
    let base = fit_minmax(w)?;
    let fit = match effort {
        EncoderEffort::MinMax => base,
        EncoderEffort::ErrorAware => fit_error_aware(w, &base),
    };
    write_block(w, &fit, block);
    Ok(())
}

/// Decodes one 144-byte block into 256 weights.
#[inline]
pub(crate) fn decode_block<T: Real>(block: &[u8], out: &mut [T]) {
    let d = T::from_f32(read_f16(block, 0));
    let dmin = T::from_f32(read_f16(block, 2));
    let q = &block[SCALES_OFFSET..QS_OFFSET];
    let qs = &block[QS_OFFSET..];
    for c in 0..NSUB / 2 {
        let (sc0, m0) = scale_min(2 * c, q);
        let (sc1, m1) = scale_min(2 * c + 1, q);
        let (s0, z0) = (d * T::from_f32(sc0 as f32), dmin * T::from_f32(m0 as f32));
        let (s1, z1) = (d * T::from_f32(sc1 as f32), dmin * T::from_f32(m1 as f32));
        let (lo, hi) = out[2 * SUB * c..2 * SUB * (c + 1)].split_at_mut(SUB);
        for (l, &b) in qs[SUB * c..SUB * (c + 1)].iter().enumerate() {
            lo[l] = s0 * T::from_f32((b & 0xF) as f32) - z0;
            hi[l] = s1 * T::from_f32((b >> 4) as f32) - z1;
        }
    }
}

fn decode_rows<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let spec = t.format().spec();
    let (bw, bb) = (spec.block_weights as usize, spec.block_bytes as usize);
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let row = t.row(row0 + r);
        for (block, o) in row.chunks_exact(bb).zip(dst.chunks_exact_mut(bw)) {
            decode_block(block, o);
        }
    }
}

impl FormatCodec for Mq4KCodec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        self.encode_rows_effort(format, cols, src, weights, scales, EncoderEffort::MinMax)
    }
    fn encode_rows_effort(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
        effort: EncoderEffort,
    ) -> Result<(), QuantError> {
        let (rows, bw, bb) = check_inline_buffers(format, cols, src, weights, scales)?;
        if rows == 0 {
            return Ok(());
        }
        let row_bytes = weights.len() / rows;
        for (w, row) in src
            .chunks_exact(cols)
            .zip(weights.chunks_exact_mut(row_bytes))
        {
            for (k, (wb, block)) in w.chunks_exact(bw).zip(row.chunks_exact_mut(bb)).enumerate() {
                encode_block(wb, block, effort).map_err(|(lo, hi)| {
                    QuantError::ScaleOutOfRange {
                        format,
                        col: k * bw,
                        lo,
                        hi,
                        header: "fp16",
                    }
                })?;
            }
        }
        Ok(())
    }
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode_rows(t, row0, out)
    }
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode_rows(t, row0, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_every_6_bit_pair() {
        for seed in 0..64u8 {
            let sc: [u8; NSUB] =
                std::array::from_fn(|j| (seed.wrapping_mul(7) + 13 * j as u8) & 63);
            let m: [u8; NSUB] =
                std::array::from_fn(|j| (seed.wrapping_mul(11) + 29 * j as u8 + 5) & 63);
            let q = pack_scale_min(&sc, &m);
            for j in 0..NSUB {
                assert_eq!(scale_min(j, &q), (sc[j], m[j]), "seed {seed} j {j}");
            }
        }
    }

    #[test]
    fn six_bit_codes_round_to_nearest_and_clamp() {
        assert_eq!(code6(0.49, 1.0), 0);
        assert_eq!(code6(2.5, 1.0), 2);
        assert_eq!(code6(0.51, 1.0), 1);
        assert_eq!(code6(62.6, 1.0), 63);
        assert_eq!(code6(1e9, 1.0), 63);
        assert_eq!(code6(-1.0, 1.0), 0);
        assert_eq!(code6(5.0, 0.0), 0);
        assert!(f16_finite(65519.0).is_some());
        assert!(f16_finite(65520.0).is_none());
    }
}
