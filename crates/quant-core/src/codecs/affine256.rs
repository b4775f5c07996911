//! The 136-byte affine 4-bit family: hfq4-g256 (qt=6), mq4-g256 (qt=13), mq4-g256-v2 (qt=44)
//! and mq4c-g256 (qt=45). Seed 001 (MQ4 V2) is the origin of the v2 and mq4c layouts.
//!
//! Every format here stores a row as I/256 blocks of 136 bytes (the registry's `block_bytes`),
//! and every block keeps the same 128-byte nibble payload at offset 8: weight 2b of the block
//! is the low nibble of payload byte b, weight 2b+1 the high nibble, q in [0, 15], and
//! `w = q * scale + zero`. Only the 8-byte header differs (little-endian throughout):
//!
//! | format | [0..4) | [4..8) | scale/zero apply to |
//! | --- | --- | --- | --- |
//! | hfq4-g256, mq4-g256 | f32 scale | f32 zero | all 256 weights |
//! | mq4-g256-v2 | fp16 scale, fp16 zero | fp16 scale, fp16 zero | weights 0-127, then 128-255 |
//! | mq4c-g256 | fp16 scale, fp16 zero | four zero bytes | all 256 weights |
//!
//! (For v2 each 4-byte word is one u32 with the scale in its low 16 bits and the zero in its
//! high 16 bits, which is the same bytes as "scale then zero".) mq4-g256 is hfq4-g256's bytes
//! over FWHT-256-rotated weights; the rotation is applied by `crate::api`, so the codecs here
//! see the stored domain only and `Hfq4Codec` serves both.
//!
//! Encoder (seed 001 § 3): per scale group, `lo = min`, `hi = max`, `scale = (hi - lo) / 15`,
//! `zero = lo`, `q = clamp(rint((w - zero) / scale), 0, 15)` (rint: round half to even), so
//! both extremes of a group are representable. The fp16 formats quantize against the
//! fp16-round-tripped header (`scale = f32(f16(step))`, `zero = f32(f16(lo))`): the encoder's
//! reconstruction is then exactly the decoder's, which seed 001 calls mandatory. A constant
//! group (hi == lo) stores scale 0, zero = lo (rounded to the header precision) and q = 0; so
//! does a group whose scale rounds to zero. A group whose scale or zero overflows its header
//! encoding is refused with [`QuantError::ScaleOutOfRange`] rather than stored as infinity.

use super::util::{read_f16, read_f32, write_f16, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;
use half::f16;

/// Offset of the 128-byte nibble payload inside every block of the family.
pub const PAYLOAD_OFFSET: usize = 8;
/// Weights covered by one v2 header half (and by half of the payload).
pub const HALF: usize = 128;

/// One scale/zero pair per half-block; formats with one pair per block repeat it.
type Header = [(f32, f32); 2];

/// The layout-specific half of a codec: how a block's header is written and read.
trait Layout {
    /// Name of the header encoding, for errors.
    const HEADER: &'static str;
    /// Fits the header to the 256 stored-domain weights `w`, writes it into `block[..8]` and
    /// returns the (scale, zero) pairs the nibbles must be quantized against. `Err` carries
    /// the (lo, hi) of a group the header cannot hold.
    fn write_header(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)>;
    /// Reads a block's header.
    fn read_header(block: &[u8]) -> Header;
}

/// hfq4-g256 / mq4-g256: f32 scale, f32 zero for the whole block.
pub struct Hfq4Codec;
/// mq4-g256-v2: (fp16 scale, fp16 zero) for weights 0-127, then for 128-255.
pub struct Mq4V2Codec;
/// mq4c-g256: fp16 scale, fp16 zero, four zero pad bytes, for the whole block.
pub struct Mq4cCodec;

/// (min, max) of a non-empty slice of finite values, in a form LLVM vectorizes.
#[inline]
pub(crate) fn min_max(v: &[f32]) -> (f32, f32) {
    const L: usize = 8;
    let mut lo = [v[0]; L];
    let mut hi = [v[0]; L];
    let mut chunks = v.chunks_exact(L);
    for c in &mut chunks {
        for k in 0..L {
            lo[k] = if c[k] < lo[k] { c[k] } else { lo[k] };
            hi[k] = if c[k] > hi[k] { c[k] } else { hi[k] };
        }
    }
    for &x in chunks.remainder() {
        lo[0] = if x < lo[0] { x } else { lo[0] };
        hi[0] = if x > hi[0] { x } else { hi[0] };
    }
    let lo = lo.iter().fold(lo[0], |a, &b| if b < a { b } else { a });
    let hi = hi.iter().fold(hi[0], |a, &b| if b > a { b } else { a });
    (lo, hi)
}

/// `rint(clamp(v, 0, 15))` as a code. Adding 2^23 leaves an f32 whose low mantissa bits are
/// the integer rounded half-to-even (the default rounding mode), without a libm call, so
/// the loop around it vectorizes on baseline x86-64. NaN (never produced from finite
/// inputs) maps to 0.
#[inline(always)]
pub(crate) fn code4(v: f32) -> u8 {
    let c = v.clamp(0.0, 15.0);
    ((c + 8_388_608.0).to_bits() & 0xF) as u8
}

/// Quantizes `w` against `w = q * scale + zero` into packed nibbles (two weights a byte, low
/// nibble first): `out.len() == w.len() / 2`. A zero scale gives all-zero codes.
#[inline]
pub(crate) fn quantize_affine(w: &[f32], scale: f32, zero: f32, out: &mut [u8]) {
    if scale == 0.0 {
        out.fill(0);
        return;
    }
    for (pair, o) in w.chunks_exact(2).zip(out.iter_mut()) {
        // Division, not multiplication by 1/scale: it is the seed's rule, and it keeps a
        // weight that sits exactly on a level on that level.
        let q0 = code4((pair[0] - zero) / scale);
        let q1 = code4((pair[1] - zero) / scale);
        *o = q0 | (q1 << 4);
    }
}

/// Decodes 256 weights from a 128-byte payload under a per-half header.
#[inline]
fn decode_block<T: Real>(hdr: &Header, payload: &[u8], out: &mut [T]) {
    for (h, &(scale, zero)) in hdr.iter().enumerate() {
        let (s, z) = (T::from_f32(scale), T::from_f32(zero));
        let bytes = &payload[h * HALF / 2..(h + 1) * HALF / 2];
        for (&b, pair) in bytes
            .iter()
            .zip(out[h * HALF..(h + 1) * HALF].chunks_exact_mut(2))
        {
            pair[0] = T::from_f32((b & 0xF) as f32) * s + z;
            pair[1] = T::from_f32((b >> 4) as f32) * s + z;
        }
    }
}

/// The affine step of a group and its f32 zero: `(hi - lo) / 15`, 0 for a constant group.
#[inline]
fn step(lo: f32, hi: f32) -> f32 {
    if hi == lo { 0.0 } else { (hi - lo) / 15.0 }
}

/// Rounds a group's (step, lo) to fp16. `None` when either overflows fp16.
#[inline]
fn f16_pair(lo: f32, hi: f32) -> Option<(f16, f16)> {
    let s = f16::from_f32(step(lo, hi));
    let z = f16::from_f32(lo);
    (s.is_finite() && z.is_finite()).then_some((s, z))
}

impl Layout for Hfq4Codec {
    const HEADER: &'static str = "f32";
    fn write_header(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let (lo, hi) = min_max(w);
        let scale = step(lo, hi);
        // hi - lo overflows f32 only for blocks spanning more than f32::MAX.
        if !scale.is_finite() {
            return Err((lo, hi));
        }
        write_f32(block, 0, scale);
        write_f32(block, 4, lo);
        Ok([(scale, lo); 2])
    }
    fn read_header(block: &[u8]) -> Header {
        let p = (read_f32(block, 0), read_f32(block, 4));
        [p, p]
    }
}

impl Layout for Mq4V2Codec {
    const HEADER: &'static str = "fp16";
    fn write_header(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let mut hdr = [(0.0, 0.0); 2];
        for (h, half) in w.chunks_exact(HALF).enumerate() {
            let (lo, hi) = min_max(half);
            let (s, z) = f16_pair(lo, hi).ok_or((lo, hi))?;
            write_f16(block, 4 * h, s);
            write_f16(block, 4 * h + 2, z);
            // Quantize against the round-tripped header: the decoder's exact values.
            hdr[h] = (s.to_f32(), z.to_f32());
        }
        Ok(hdr)
    }
    fn read_header(block: &[u8]) -> Header {
        [
            (read_f16(block, 0), read_f16(block, 2)),
            (read_f16(block, 4), read_f16(block, 6)),
        ]
    }
}

impl Layout for Mq4cCodec {
    const HEADER: &'static str = "fp16";
    fn write_header(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let (lo, hi) = min_max(w);
        let (s, z) = f16_pair(lo, hi).ok_or((lo, hi))?;
        write_f16(block, 0, s);
        write_f16(block, 2, z);
        // The pad keeps the payload at +8 (seed 001 § 1b); it is part of the format: zeros.
        block[4..PAYLOAD_OFFSET].fill(0);
        let p = (s.to_f32(), z.to_f32());
        Ok([p, p])
    }
    fn read_header(block: &[u8]) -> Header {
        let p = (read_f16(block, 0), read_f16(block, 2));
        [p, p]
    }
}

/// Checks a direct codec call's buffers against the registry (the api has already done so
/// on its path; this keeps a direct caller's mistake an error rather than a panic) and
/// returns (rows, block weights, block bytes).
pub(crate) fn check_inline_buffers(
    format: Format,
    cols: usize,
    src: &[f32],
    weights: &[u8],
    scales: &[u8],
) -> Result<(usize, usize, usize), QuantError> {
    let spec = format.spec();
    let rows = src.len().checked_div(cols).unwrap_or(0);
    spec.check_shape(rows.max(1), cols)?;
    if rows * cols != src.len() {
        return Err(QuantError::InputSize {
            format,
            rows,
            cols,
            expected: (rows as u64 + 1) * cols as u64,
            got: src.len(),
        });
    }
    let expected = spec.weight_bytes(rows, cols)?;
    if expected != weights.len() as u64 {
        return Err(QuantError::BufferSize {
            format,
            what: "weight",
            rows,
            cols,
            expected,
            got: weights.len(),
        });
    }
    if !scales.is_empty() {
        return Err(QuantError::BufferSize {
            format,
            what: "scale",
            rows,
            cols,
            expected: 0,
            got: scales.len(),
        });
    }
    Ok((rows, spec.block_weights as usize, spec.block_bytes as usize))
}

fn encode_rows_with<L: Layout>(
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
    let row_bytes = weights.len() / rows;
    for (w, row) in src
        .chunks_exact(cols)
        .zip(weights.chunks_exact_mut(row_bytes))
    {
        for (k, (wb, block)) in w.chunks_exact(bw).zip(row.chunks_exact_mut(bb)).enumerate() {
            let hdr =
                L::write_header(wb, block).map_err(|(lo, hi)| QuantError::ScaleOutOfRange {
                    format,
                    col: k * bw,
                    lo,
                    hi,
                    header: L::HEADER,
                })?;
            let payload = &mut block[PAYLOAD_OFFSET..];
            for (h, &(scale, zero)) in hdr.iter().enumerate() {
                quantize_affine(
                    &wb[h * HALF..(h + 1) * HALF],
                    scale,
                    zero,
                    &mut payload[h * HALF / 2..(h + 1) * HALF / 2],
                );
            }
        }
    }
    Ok(())
}

fn decode_rows_with<L: Layout, T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let spec = t.format().spec();
    let (bw, bb) = (spec.block_weights as usize, spec.block_bytes as usize);
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let row = t.row(row0 + r);
        for (block, o) in row.chunks_exact(bb).zip(dst.chunks_exact_mut(bw)) {
            decode_block(&L::read_header(block), &block[PAYLOAD_OFFSET..], o);
        }
    }
}

macro_rules! affine_codec {
    ($codec:ty) => {
        impl FormatCodec for $codec {
            fn encode_rows(
                &self,
                format: Format,
                cols: usize,
                src: &[f32],
                weights: &mut [u8],
                scales: &mut [u8],
            ) -> Result<(), QuantError> {
                encode_rows_with::<$codec>(format, cols, src, weights, scales)
            }
            fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
                decode_rows_with::<$codec, f32>(t, row0, out)
            }
            fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
                decode_rows_with::<$codec, f64>(t, row0, out)
            }
        }
    };
}

affine_codec!(Hfq4Codec);
affine_codec!(Mq4V2Codec);
affine_codec!(Mq4cCodec);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code4_is_rint_clamped() {
        for (v, q) in [
            (-3.0, 0),
            (0.49, 0),
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (14.5, 14),
            (14.51, 15),
            (99.0, 15),
        ] {
            assert_eq!(code4(v), q, "{v}");
            assert_eq!(code4(v) as f32, v.clamp(0.0, 15.0).round_ties_even(), "{v}");
        }
        assert_eq!(code4(f32::NAN), 0);
    }

    #[test]
    fn layout_constants_match_the_registry() {
        for f in [
            Format::Hfq4G256,
            Format::Mq4G256,
            Format::Mq4G256V2,
            Format::Mq4cG256,
        ] {
            let s = f.spec();
            assert_eq!(s.block_weights as usize, 2 * HALF);
            assert_eq!(s.block_bytes as usize, PAYLOAD_OFFSET + HALF);
        }
    }

    #[test]
    fn min_max_matches_a_fold() {
        let v: Vec<f32> = (0..37).map(|k| ((k * 7919) % 101) as f32 - 50.0).collect();
        let want = v
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        assert_eq!(min_max(&v), want);
    }
}
