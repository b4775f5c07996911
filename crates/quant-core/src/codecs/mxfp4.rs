//! mxfp4 (OCP Microscaling MXFP4, as gpt-oss ships it): E2M1 codes with one UE8M0 scale per
//! 32 weights.
//!
//! Layout: a row is `ceil(I/32)` blocks of 16 bytes; weight `32g + 2b` is the low nibble of
//! byte b of block g and weight `32g + 2b + 1` its high nibble. Each nibble is an E2M1 code
//! (bit 3 sign, then 2 exponent bits, 1 mantissa bit). The sidecar holds one UE8M0 byte per
//! block, `scale[o * ceil(I/32) + g]`, and `w = E2M1[nibble] * 2^(scale - 127)`. A partial
//! last block is padded with zero codes, which decoders ignore.
//!
//! Encoder: the OCP MX shared exponent `X = floor(log2(amax)) - 2` (2 is E2M1's largest
//! exponent), clamped to the UE8M0 range, then every weight is rounded to the nearest E2M1
//! value of `w / 2^X`, ties to even, saturating at ±6. `X` lets the top of the block (up to
//! 8 * 2^X) saturate at 6 * 2^X; `X + 1` never saturates but has half the resolution. The
//! encoder tries both and keeps the one with the lower block squared error (ties keep `X`),
//! rejecting a candidate whose decoded values would overflow f32. An all-zero block stores
//! scale byte 0, as the OCP reference does.

use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tables::{E2M1, UE8M0_BIAS, e2m1_encode, ue8m0};
use crate::tensor::QTensor;

/// Weights a block covers.
const BLOCK: usize = 32;
/// Bytes of one block's codes.
const BLOCK_BYTES: usize = BLOCK / 2;
/// The largest exponent of an E2M1 value (6 = 1.5 * 2^2).
const E2M1_EMAX: i32 = 2;

pub struct Mxfp4Codec;

/// `2^k` as an f32, for k in [-127, 127] (2^-127 is a subnormal, still exact).
fn pow2_f32(k: i32) -> f32 {
    ue8m0((k + UE8M0_BIAS) as u8)
}

/// Codes and squared error of `block` under shared exponent `x`. A candidate whose decoded
/// values overflow f32 has an infinite error, so it never wins the comparison.
fn quantize_block(block: &[f32], x: i32, codes: &mut [u8; BLOCK]) -> f64 {
    let inv = pow2_f32(-x);
    let scale = pow2_f32(x);
    let mut sse = 0f64;
    for (c, &w) in codes.iter_mut().zip(block) {
        *c = e2m1_encode(w * inv);
        let e = (E2M1[*c as usize] * scale) as f64 - w as f64;
        sse += e * e;
    }
    sse
}

/// The shared exponent the OCP MX spec prescribes for a block of largest magnitude `amax`,
/// clamped to what a UE8M0 byte holds (the NaN byte excluded).
fn spec_exponent(amax: f32) -> i32 {
    if amax == 0.0 {
        return -UE8M0_BIAS;
    }
    // floor(log2(amax)) from the f64 exponent field: every f32, subnormals included, is a
    // normal f64.
    let floor = (((amax as f64).to_bits() >> 52) & 0x7FF) as i32 - 1023;
    (floor - E2M1_EMAX).clamp(-UE8M0_BIAS, UE8M0_BIAS)
}

/// Encodes one block (up to 32 weights) into its 16 code bytes; returns the scale byte.
fn encode_block(block: &[f32], out: &mut [u8]) -> u8 {
    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    let x = spec_exponent(amax);
    let mut codes = [0u8; BLOCK];
    let mut alt = [0u8; BLOCK];
    // X itself never overflows: amax < 2^(X+3), so every decoded value is at most 6 * 2^X.
    let mut best_x = x;
    let sse = quantize_block(block, x, &mut codes);
    if amax != 0.0 && x < UE8M0_BIAS && quantize_block(block, x + 1, &mut alt) < sse {
        codes = alt;
        best_x = x + 1;
    }
    // The padding codes of a partial block were never written: they stay 0.
    for (b, pair) in out.iter_mut().zip(codes.chunks_exact(2)) {
        *b = pair[0] | (pair[1] << 4);
    }
    (best_x + UE8M0_BIAS) as u8
}

fn decode<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let cols = t.cols();
    let ng = cols.div_ceil(BLOCK);
    let scales = t.scales();
    for (r, dst) in out.chunks_exact_mut(cols).enumerate() {
        let o = row0 + r;
        let row = t.row(o);
        for (g, (d, bytes)) in dst
            .chunks_mut(BLOCK)
            .zip(row.chunks_exact(BLOCK_BYTES))
            .enumerate()
        {
            let s = T::from_f32(ue8m0(scales[o * ng + g]));
            for (i, v) in d.iter_mut().enumerate() {
                let nibble = (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
                *v = T::from_f32(E2M1[nibble as usize]) * s;
            }
        }
    }
}

impl FormatCodec for Mxfp4Codec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let n = src.len() / cols.max(1);
        if cols == 0 || n * cols != src.len() {
            return Err(QuantError::InputSize {
                format,
                rows: n,
                cols,
                expected: (n as u64).saturating_add(1).saturating_mul(cols as u64),
                got: src.len(),
            });
        }
        let spec = format.spec();
        let wr = spec.weight_range(0, n, cols)?;
        let sr = spec.scale_range(0, n, n, cols)?;
        for (what, expected, got) in [
            ("weight", wr.len(), weights.len()),
            ("scale", sr.len(), scales.len()),
        ] {
            if expected != got {
                return Err(QuantError::BufferSize {
                    format,
                    what,
                    rows: n,
                    cols,
                    expected: expected as u64,
                    got,
                });
            }
        }
        if n == 0 {
            return Ok(());
        }
        let row_bytes = wr.len() / n;
        let ng = sr.len() / n;
        for ((row, wrow), srow) in src
            .chunks_exact(cols)
            .zip(weights.chunks_exact_mut(row_bytes))
            .zip(scales.chunks_exact_mut(ng))
        {
            for ((block, wblock), s) in row
                .chunks(BLOCK)
                .zip(wrow.chunks_exact_mut(BLOCK_BYTES))
                .zip(srow.iter_mut())
            {
                *s = encode_block(block, wblock);
            }
        }
        Ok(())
    }

    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode(t, row0, out)
    }

    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode(t, row0, out)
    }
}
