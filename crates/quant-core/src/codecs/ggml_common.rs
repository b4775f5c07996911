//! The machinery every GGML block codec shares: a [`GgmlBlock`] trait (one block's encode
//! and decode), the generic [`BlockCodec`] that walks rows of blocks for the
//! [`FormatCodec`] trait, and faithful ports of the scalar helpers of llama.cpp's
//! `ggml-quants.c` that the reference quantizers (`quantize_row_*_ref`) are built from (the
//! searches that dominate encode time run several sub-blocks at once in
//! [`super::ggml_search`]).
//!
//! The ports keep GGML's operation order and its f32 arithmetic (no fused multiply-add:
//! Rust never contracts), so an encoder fed the same floats makes the same choices as
//! GGML's reference. Two deliberate differences, both only where GGML reads stale or
//! out-of-range data: scratch code buffers start at zero for every block (GGML reuses a
//! stack buffer across blocks, so an all-zero sub-block may carry the previous block's
//! codes under a zero scale; the decoded values are identical), and a header that would
//! round to an infinite fp16 is refused ([`QuantError::ScaleOutOfRange`]) instead of
//! written.

// The ports keep GGML's index loops so they can be read side by side with ggml-quants.c.
#![allow(clippy::needless_range_loop)]
use super::affine256::{check_inline_buffers, min_max};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;
use half::f16;
use std::marker::PhantomData;

/// GGML's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// One GGML block type: `WEIGHTS` weights in `BYTES` bytes (the registry row's
/// `block_weights` / `block_bytes`; `tests/ggml_codecs.rs` checks they agree).
pub(crate) trait GgmlBlock: Send + Sync + 'static {
    const WEIGHTS: usize;
    const BYTES: usize;
    /// The encoding of the block's header, named in [`QuantError::ScaleOutOfRange`].
    const HEADER: &'static str = "fp16";
    /// Encodes `WEIGHTS` finite values into `BYTES` bytes, writing every byte.
    /// `Err(())` when a header value would not fit its encoding.
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()>;
    /// Decodes `BYTES` bytes into `WEIGHTS` values, in GGML's operation order.
    fn decode<T: Real>(b: &[u8], out: &mut [T]);
}

/// The codec of one GGML block type.
pub struct BlockCodec<B>(PhantomData<fn() -> B>);

impl<B> BlockCodec<B> {
    pub(crate) const fn new() -> Self {
        BlockCodec(PhantomData)
    }
}

fn decode_rows<B: GgmlBlock, T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let row = t.row(row0 + r);
        for (block, o) in row
            .chunks_exact(B::BYTES)
            .zip(dst.chunks_exact_mut(B::WEIGHTS))
        {
            B::decode(block, o);
        }
    }
}

impl<B: GgmlBlock> FormatCodec for BlockCodec<B> {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let (rows, bw, bb) = check_inline_buffers(format, cols, src, weights, scales)?;
        if rows == 0 {
            return Ok(());
        }
        debug_assert_eq!((bw, bb), (B::WEIGHTS, B::BYTES));
        let row_bytes = weights.len() / rows;
        for (w, row) in src
            .chunks_exact(cols)
            .zip(weights.chunks_exact_mut(row_bytes))
        {
            for (k, (x, block)) in w.chunks_exact(bw).zip(row.chunks_exact_mut(bb)).enumerate() {
                B::encode(x, block).map_err(|()| {
                    let (lo, hi) = min_max(x);
                    QuantError::ScaleOutOfRange {
                        format,
                        col: k * bw,
                        lo,
                        hi,
                        header: B::HEADER,
                    }
                })?;
            }
        }
        Ok(())
    }
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode_rows::<B, f32>(t, row0, out)
    }
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode_rows::<B, f64>(t, row0, out)
    }
}

/// GGML's `GGML_FP32_TO_FP16` (round to nearest even), refusing an infinite result.
#[inline]
pub(crate) fn fp16(x: f32) -> Result<f16, ()> {
    let h = f16::from_f32(x);
    if h.is_finite() { Ok(h) } else { Err(()) }
}

/// Writes `x` as fp16 at `at` and returns the value the decoder will read back.
#[inline]
pub(crate) fn put_fp16(b: &mut [u8], at: usize, x: f32) -> Result<f32, ()> {
    let h = fp16(x)?;
    b[at..at + 2].copy_from_slice(&h.to_le_bytes());
    Ok(h.to_f32())
}

/// The fp16 at `at`, widened exactly.
#[inline(always)]
pub(crate) fn get_fp16<T: Real>(b: &[u8], at: usize) -> T {
    T::from_f32(f16::from_le_bytes([b[at], b[at + 1]]).to_f32())
}

/// A small integer as a decode value (exact in both f32 and f64).
#[inline(always)]
pub(crate) fn int<T: Real>(v: i32) -> T {
    T::from_f32(v as f32)
}

/// GGML's `nearest_int`: round to nearest, ties to even, by adding 1.5 * 2^23. Exact for
/// |x| <= 2^22; beyond that it returns what GGML's would (GGML asserts in debug builds).
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007F_FFFF) as i32 - 0x0040_0000
}

/// The signed value of largest magnitude (first one wins a tie), and its magnitude.
#[inline]
pub(crate) fn signed_amax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        let a = v.abs();
        if a > amax {
            amax = a;
            max = v;
        }
    }
    (max, amax)
}

/// GGML's `make_q3_quants`: codes `L + nmax` in `[0, 2 nmax)`; with `do_rmse`, a few
/// coordinate-descent passes on the x²-weighted error. Returns the scale.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let n = x.len();
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    if do_rmse {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        let mut l = [0i32; 256];
        for i in 0..n {
            l[i] = clamp(nearest_int(iscale * x[i]));
            let w = x[i] * x[i];
            sumlx += w * x[i] * l[i] as f32;
            suml2 += w * l[i] as f32 * l[i] as f32;
        }
        for _ in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let mut slx = sumlx - w * x[i] * l[i] as f32;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * l[i] as f32 * l[i] as f32;
                    let new_l = clamp(nearest_int(x[i] * sl2 / slx));
                    if new_l != l[i] {
                        slx += w * x[i] * new_l as f32;
                        sl2 += w * new_l as f32 * new_l as f32;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l[i] = new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for i in 0..n {
            l_out[i] = (l[i] + nmax) as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (clamp(nearest_int(iscale * v)) + nmax) as i8;
    }
    1.0 / iscale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-0.49), 0);
        assert_eq!(nearest_int(31.2), 31);
        assert_eq!(nearest_int(-128.0), -128);
    }

    #[test]
    fn fp16_refuses_overflow() {
        assert!(fp16(65504.0).is_ok());
        assert!(fp16(1e6).is_err());
    }
}
