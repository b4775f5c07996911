//! e8-lattice (fmt=6): 8-dimensional E8 lattice vector quantization, 98 bytes per 256
//! weights along I (3.0625 bits a weight), plus one f32 tensor scale in the sidecar.
//!
//! Block (256 weights; a row's partial last block is zero-padded on encode, and the padding
//! is ignored on decode):
//! - bytes [0, 2): fp16 block scale `d`;
//! - bytes [2, 98): 32 codes of 24 bits, 3 bytes each, little-endian; code k covers weights
//!   8k..8k+7 of the block.
//!
//! A code is a point v of E8 = D8 ∪ (D8 + ½·1), D8 = integer vectors of even sum, inside the
//! box k_j ∈ [-4, 3] on the integer parts k_j = v_j - s/2:
//! - bit 0: coset s (0: integer coordinates, 1: half-integer coordinates);
//! - bits 1..22: u_0..u_6, three bits each (u_j at bit 1 + 3j), k_j = u_j - 4;
//! - bits 22..24: m, with k_7 = 2m - 4 + p where p = (Σ_{j<7} k_j) mod 2 (non-negative), so
//!   Σ k_j is even by construction and every one of the 2^24 codes is a distinct valid point.
//!
//! Weight j of code k decodes to `(d · t) · v_j`, t the tensor scale (the encoder writes 1.0:
//! row blocks are encoded independently, so no encoder sees the whole tensor).
//!
//! The encoder tries block scales d = f16(amax / c) for c in {3, 3.5, .., 6} (quantizing against
//! the fp16-rounded d, as mq4-g256-v2 does), finds for each 8-vector the nearest box-clamped
//! point of each coset (Conway & Sloane's D8 decoder: round every coordinate, and if the sum
//! is odd move the one coordinate whose move to its second-nearest allowed value costs least),
//! keeps the closer coset, and keeps the d of lowest block squared error. A block whose scale
//! is zero stores all-zero codes. Layout and a worked example: docs/FORMATS.md.

use super::util::{read_f16, read_f32, write_f16, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;
use half::f16;

/// Weights a block covers along I (the registry's `block_weights`).
pub const BLOCK_WEIGHTS: usize = 256;
/// Bytes of the fp16 block scale at the start of a block.
pub const HEADER_BYTES: usize = 2;
/// Bytes of one 24-bit code.
pub const CODE_BYTES: usize = 3;
/// Dimension of the lattice: weights a code covers.
pub const DIM: usize = 8;
/// Codes a block holds.
pub const CODES: usize = BLOCK_WEIGHTS / DIM;
/// Bytes of a block (the registry's `block_bytes`).
pub const BLOCK_BYTES: usize = HEADER_BYTES + CODES * CODE_BYTES;

/// Range of the integer parts k_j of a stored point.
const K_MIN: i32 = -4;
const K_MAX: i32 = 3;
/// Bit position of u_0 and of m within a code.
const U_SHIFT: u32 = 1;
const M_SHIFT: u32 = 22;

/// The c of the candidate block scales d = f16(amax / c); ties keep the earlier one. 3.5 puts
/// amax on the outermost half-integer value; larger c clip the block's largest weights to
/// code the bulk more finely. Measured on N(0, 1) rows (512 x 4096, relative MSE): c = 3.5
/// alone 0.0551, the search over [3, 4] in steps of 1/8 0.0427 (the same as c = 4 alone),
/// this list 0.0316 (docs/FORMATS.md).
pub const DENOMINATORS: [f32; 7] = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0];

/// The integer parts k and coset s of the point a code denotes: v_j = k_j + s/2.
#[inline(always)]
pub fn unpack(code: u32) -> ([i32; DIM], u32) {
    let s = code & 1;
    let mut k = [0i32; DIM];
    let mut usum = 0u32;
    for (j, kj) in k.iter_mut().take(DIM - 1).enumerate() {
        let u = (code >> (U_SHIFT + 3 * j as u32)) & 0x7;
        usum += u;
        *kj = u as i32 + K_MIN;
    }
    // Σ k_j = Σ u_j - 28, so the parities agree; u is unsigned, so this p is never negative.
    let p = (usum & 1) as i32;
    let m = ((code >> M_SHIFT) & 0x3) as i32;
    k[DIM - 1] = 2 * m + K_MIN + p;
    (k, s)
}

/// The code of the point with integer parts k (each in [-4, 3], even sum) in coset s.
#[inline(always)]
pub fn pack(k: &[i32; DIM], s: u32) -> u32 {
    let mut code = s & 1;
    let mut ksum = 0i32;
    for (j, &kj) in k.iter().take(DIM - 1).enumerate() {
        ksum += kj;
        code |= ((kj - K_MIN) as u32) << (U_SHIFT + 3 * j as u32);
    }
    let p = ksum & 1;
    let m = (k[DIM - 1] - K_MIN - p) >> 1;
    code | ((m as u32) & 0x3) << M_SHIFT
}

/// The coordinates v_j of the point a code denotes.
#[inline(always)]
pub fn point(code: u32) -> [f32; DIM] {
    let (k, s) = unpack(code);
    let half = s as f32 * 0.5;
    k.map(|kj| kj as f32 + half)
}

#[inline(always)]
fn read_code(b: &[u8]) -> u32 {
    b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16
}

/// 1.5·2^23: `(v + RINT) - RINT` rounds v to the nearest integer (ties to even) for
/// |v| < 2^22, in plain float arithmetic that vectorises on every target.
const RINT: f32 = 12_582_912.0;
const K_MIN_F: f32 = K_MIN as f32;
const K_MAX_F: f32 = K_MAX as f32;

/// One coordinate of the nearest-point search, in the integer-part domain t = y - s/2.
#[derive(Copy, Clone)]
struct Lane {
    /// The nearest allowed integer part.
    r: f32,
    /// Its squared error.
    err: f32,
    /// The second-nearest allowed integer part (the other parity).
    alt: f32,
    /// The extra squared error of moving from `r` to `alt`.
    delta: f32,
}

#[inline(always)]
fn lane(t: f32) -> Lane {
    // Clamping before rounding keeps r in the box and |t| far below RINT's limit.
    let tc = if t > K_MAX_F { K_MAX_F } else { t };
    let tc = if tc < K_MIN_F { K_MIN_F } else { tc };
    let r = (tc + RINT) - RINT;
    let e = t - r;
    // The neighbour on t's side, or the other one where the box cuts that off.
    let alt = r + if e >= 0.0 { 1.0 } else { -1.0 };
    let alt = if alt > K_MAX_F { K_MAX_F - 1.0 } else { alt };
    let alt = if alt < K_MIN_F { K_MIN_F + 1.0 } else { alt };
    let ea = t - alt;
    Lane {
        r,
        err: e * e,
        alt,
        delta: ea * ea - e * e,
    }
}

/// 1.0 where an integer-valued sum is odd, 0.0 where it is even (branch-free).
#[inline(always)]
fn odd(sum: f32) -> f32 {
    let h = sum * 0.5;
    let f = h - ((h + RINT) - RINT);
    4.0 * f * f
}

/// The box-clamped nearest point search of one block at one scale, for both cosets of all
/// 32 vectors at once: Conway & Sloane's D8 decoder (round every coordinate; on an odd sum,
/// move the one coordinate whose move to its second-nearest allowed value costs least),
/// run on t = y for the integer coset and t = y - ½ for the half-integer one.
///
/// Laid out coordinate-major (`xt[j][k]` is coordinate j of vector k) so that every step is
/// one operation across the 32 vectors, which the compiler vectorises. `keep(j, k, l0, l1)`
/// sees every lane (the final pass records them to build codes; the scale search ignores
/// them). Returns each coset's squared error per vector, in units of d².
#[inline(always)]
fn sweep(
    xt: &[[f32; CODES]; DIM],
    inv_d: f32,
    mut keep: impl FnMut(usize, usize, Lane, Lane),
) -> [[f32; CODES]; 2] {
    let mut err = [[0f32; CODES]; 2];
    let mut rsum = [[0f32; CODES]; 2];
    // f32::MAX, not infinity, so that `odd * mind` is 0 on an even sum whatever mind is.
    let mut mind = [[f32::MAX; CODES]; 2];
    for (j, xj) in xt.iter().enumerate() {
        for k in 0..CODES {
            let y = xj[k] * inv_d;
            let l0 = lane(y);
            let l1 = lane(y - 0.5);
            err[0][k] += l0.err;
            err[1][k] += l1.err;
            rsum[0][k] += l0.r;
            rsum[1][k] += l1.r;
            mind[0][k] = if l0.delta < mind[0][k] {
                l0.delta
            } else {
                mind[0][k]
            };
            mind[1][k] = if l1.delta < mind[1][k] {
                l1.delta
            } else {
                mind[1][k]
            };
            keep(j, k, l0, l1);
        }
    }
    for s in 0..2 {
        for k in 0..CODES {
            err[s][k] += odd(rsum[s][k]) * mind[s][k];
        }
    }
    err
}

/// Squared error (in units of x²) of coding a block at scale `d`.
fn block_error(xt: &[[f32; CODES]; DIM], d: f32) -> f32 {
    let err = sweep(xt, 1.0 / d, |_, _, _, _| {});
    let mut total = 0f32;
    for (&e0, &e1) in err[0].iter().zip(&err[1]) {
        total += if e1 < e0 { e1 } else { e0 };
    }
    total * d * d
}

/// The 32 codes of a block at scale `d`.
fn block_codes(xt: &[[f32; CODES]; DIM], d: f32) -> [u32; CODES] {
    let mut r = [[[0f32; CODES]; DIM]; 2];
    let mut alt = [[[0f32; CODES]; DIM]; 2];
    let mut delta = [[[0f32; CODES]; DIM]; 2];
    let err = sweep(xt, 1.0 / d, |j, k, l0, l1| {
        for (s, l) in [l0, l1].into_iter().enumerate() {
            r[s][j][k] = l.r;
            alt[s][j][k] = l.alt;
            delta[s][j][k] = l.delta;
        }
    });
    let mut codes = [0u32; CODES];
    for (k, code) in codes.iter_mut().enumerate() {
        // Ties go to the integer coset, so the encoding is a function of the input.
        let s = usize::from(err[1][k] < err[0][k]);
        let mut kv = [0i32; DIM];
        let mut rsum = 0f32;
        for (j, kj) in kv.iter_mut().enumerate() {
            *kj = r[s][j][k] as i32;
            rsum += r[s][j][k];
        }
        if odd(rsum) != 0.0 {
            // The first least delta, as the sweep's running minimum found it; j = 0 seeds
            // it, so even all-NaN deltas (absurd inputs) move a coordinate to the other parity.
            let mut bj = 0;
            for j in 1..DIM {
                if delta[s][j][k] < delta[s][bj][k] {
                    bj = j;
                }
            }
            kv[bj] = alt[s][bj][k] as i32;
        }
        *code = pack(&kv, s as u32);
    }
    codes
}

/// Encodes one zero-padded block into its 98 bytes.
fn encode_block(x: &[f32; BLOCK_WEIGHTS], out: &mut [u8]) {
    let mut amax = 0f32;
    let mut xt = [[0f32; CODES]; DIM];
    for (k, v) in x.chunks_exact(DIM).enumerate() {
        for (j, &w) in v.iter().enumerate() {
            xt[j][k] = w;
            amax = amax.max(w.abs());
        }
    }
    // No baseline for d = 0 is needed: the zero vector is a box point, so any non-zero d
    // codes the block at least as well as zeros do.
    let mut best: Option<(f16, f32)> = None;
    for c in DENOMINATORS {
        // Clamp so an enormous block saturates its codes instead of storing an infinite d.
        let d16 = f16::from_f32((amax / c).min(f16::MAX.to_f32()));
        let d = d16.to_f32();
        if d == 0.0 || best.is_some_and(|(b, _)| b == d16) {
            continue;
        }
        let err = block_error(&xt, d);
        // Ties keep the earlier candidate, so the choice is a function of the input.
        if best.is_none_or(|(_, e)| err < e) {
            best = Some((d16, err));
        }
    }
    let best = best.map_or(f16::ZERO, |(d, _)| d);
    write_f16(out, 0, best);
    let out = &mut out[HEADER_BYTES..BLOCK_BYTES];
    if best.to_f32() == 0.0 {
        out.fill(0);
        return;
    }
    let codes = block_codes(&xt, best.to_f32());
    for (code, cb) in codes.iter().zip(out.chunks_exact_mut(CODE_BYTES)) {
        cb.copy_from_slice(&code.to_le_bytes()[..CODE_BYTES]);
    }
}

fn decode<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    // The view's sidecar was checked against the registry: exactly one f32.
    let ts = T::from_f32(read_f32(t.scales(), 0));
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let row = t.row(row0 + r);
        for (blk, dst) in row
            .chunks_exact(BLOCK_BYTES)
            .zip(dst.chunks_mut(BLOCK_WEIGHTS))
        {
            let scale = T::from_f32(read_f16(blk, 0)) * ts;
            let codes = blk[HEADER_BYTES..].chunks_exact(CODE_BYTES);
            for (cb, dst) in codes.zip(dst.chunks_mut(DIM)) {
                let v = point(read_code(cb));
                for (o, &vj) in dst.iter_mut().zip(&v) {
                    *o = scale * T::from_f32(vj);
                }
            }
        }
    }
}

/// The e8-lattice codec.
pub struct E8Codec;

impl FormatCodec for E8Codec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        if cols == 0 {
            return Err(QuantError::EmptyShape {
                format,
                rows: 0,
                cols,
            });
        }
        let rows = src.len() / cols;
        if rows * cols != src.len() {
            let expected = (rows as u64 + 1) * cols as u64;
            return Err(QuantError::InputSize {
                format,
                rows,
                cols,
                expected,
                got: src.len(),
            });
        }
        let spec = format.spec();
        let overflow = || QuantError::SizeOverflow { format, rows, cols };
        let row_bytes = usize::try_from(spec.row_bytes(cols)?).map_err(|_| overflow())?;
        let expected = row_bytes.checked_mul(rows).ok_or_else(overflow)?;
        let buffer = |what, expected: usize, got: usize| QuantError::BufferSize {
            format,
            what,
            rows,
            cols,
            expected: expected as u64,
            got,
        };
        if weights.len() != expected {
            return Err(buffer("weight", expected, weights.len()));
        }
        // The tensor scale belongs to the row block that starts at row 0; others get none.
        let tensor_scale = usize::try_from(spec.scale_bytes(1, cols)?).map_err(|_| overflow())?;
        if !scales.is_empty() && scales.len() != tensor_scale {
            return Err(buffer("scale", tensor_scale, scales.len()));
        }
        if !scales.is_empty() {
            write_f32(scales, 0, 1.0);
        }
        let mut x = [0f32; BLOCK_WEIGHTS];
        for (row, out) in src
            .chunks_exact(cols)
            .zip(weights.chunks_exact_mut(row_bytes))
        {
            for (xb, ob) in row
                .chunks(BLOCK_WEIGHTS)
                .zip(out.chunks_exact_mut(BLOCK_BYTES))
            {
                x[..xb.len()].copy_from_slice(xb);
                x[xb.len()..].fill(0.0);
                encode_block(&x, ob);
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
