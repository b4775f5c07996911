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
//!
//! Error-aware encoder ([`EncoderEffort::ErrorAware`], issue 9): the same bytes and the same
//! decoder; only the choice of each group's (scale, zero) differs. `search_affine` searches
//! scales between `range / 15` and `range / 16` and zeros that keep both extremes within half
//! a step, scoring every candidate as stored (fp16-round-tripped for v2 / mq4c) with nearest
//! codes, by a squared error that weighs large weights more (`TAIL_WEIGHT`); a group keeps
//! the min/max pair unless a candidate beats it on plain squared error too. docs/QUALITY.md
//! has the measured effect on MiniLM.

use super::util::{read_f16, read_f32, write_f16, write_f32};
use crate::api::EncoderEffort;
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
    /// [`Self::write_header`] with the error-aware search of [`search_affine`] per group.
    fn write_header_error_aware(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)>;
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

/// `rint(clamp(v, 0, 15))` as a float: the value of [`code4`]'s code, computed without
/// leaving the float registers so that the search loops vectorize.
#[inline(always)]
pub(crate) fn code4f(v: f32) -> f32 {
    (v.clamp(0.0, 15.0) + 8_388_608.0) - 8_388_608.0
}

/// Squared error of `w` quantized to nearest codes against `w = q * scale + zero` exactly as
/// [`quantize_affine`] codes it (division) and the decoder reconstructs it (f32 product and
/// sum), summed in f64.
pub(crate) fn sse_affine_f64(w: &[f32], scale: f32, zero: f32) -> f64 {
    w.iter()
        .map(|&x| {
            let r = if scale == 0.0 {
                zero
            } else {
                code4f((x - zero) / scale) * scale + zero
            };
            (r as f64 - x as f64).powi(2)
        })
        .sum()
}

/// Weight of the search's objective on the tail: weight `x` counts `1 + TAIL_WEIGHT (x/a)²`
/// times in the squared error, `a` the group's largest |x|. Zero would weigh every value
/// alike (plain MSE), which on MiniLM buys more MSE at twice the tail-1% MSE;
/// docs/QUALITY.md has the measured trade-off.
pub(crate) const TAIL_WEIGHT: f32 = 16.0;
/// Trial scales of the search: `range / (15 + k / (SCALES - 1))`, k = 0..SCALES.
const SCALES: usize = 6;
/// Trial zeros at the min/max scale; fewer at smaller scales, where the region narrows.
const ZEROS: usize = 4;
/// Weighted least-squares re-fits of the winner to its own codes.
const REFITS: usize = 3;

/// Per-weight objective weights of a group, `1 + TAIL_WEIGHT (x/a)²`, into `out[..w.len()]`.
#[inline]
pub(crate) fn tail_weights(w: &[f32], amax: f32, out: &mut [f32]) {
    let k = if amax > 0.0 {
        TAIL_WEIGHT / (amax * amax)
    } else {
        0.0
    };
    for (o, &x) in out.iter_mut().zip(w) {
        *o = 1.0 + k * x * x;
    }
}

const LANES: usize = 8;

/// Squared error of nearest codes at (scale, zero), `scale > 0`: (plain, weighted by `wt`).
/// Codes are computed with a multiplication by `1/scale`: a ranking only, as
/// [`sse_affine_f64`] decides with the stored division codes.
#[inline]
pub(crate) fn pass(w: &[f32], wt: &[f32], scale: f32, zero: f32) -> (f32, f32) {
    let inv = 1.0 / scale;
    let (mut se, mut wse) = ([0f32; LANES], [0f32; LANES]);
    for (c, cw) in w.chunks_exact(LANES).zip(wt.chunks_exact(LANES)) {
        for k in 0..LANES {
            let e = code4f((c[k] - zero) * inv) * scale + zero - c[k];
            se[k] += e * e;
            wse[k] += cw[k] * (e * e);
        }
    }
    (se.iter().sum(), wse.iter().sum())
}

/// The weighted least-squares (scale, zero) of the nearest codes at (scale, zero): the line
/// through the (code, weight) pairs with the least weighted squared residual. `None` when
/// every weight has the same code.
#[inline]
pub(crate) fn refit(w: &[f32], wt: &[f32], scale: f32, zero: f32) -> Option<(f32, f32)> {
    let inv = 1.0 / scale;
    let mut acc = [[0f32; LANES]; 5];
    for (c, cw) in w.chunks_exact(LANES).zip(wt.chunks_exact(LANES)) {
        for k in 0..LANES {
            let l = code4f((c[k] - zero) * inv);
            let (x, q) = (c[k], cw[k]);
            acc[0][k] += q;
            acc[1][k] += q * l;
            acc[2][k] += q * l * l;
            acc[3][k] += q * x;
            acc[4][k] += q * l * x;
        }
    }
    let [sw, sl, sl2, sx, slx] = acc.map(|a| a.iter().map(|&v| v as f64).sum::<f64>());
    let det = sw * sl2 - sl * sl;
    if det <= 0.0 {
        return None;
    }
    Some((
        ((sw * slx - sl * sx) / det) as f32,
        ((sl2 * sx - sl * slx) / det) as f32,
    ))
}

/// The error-aware (scale, zero) of one affine group `w` (a multiple of 8 weights, at most
/// 256) with extremes `lo < hi`; `base` is the min/max pair as the header stores it.
///
/// Candidates live in the *bounded* region: scale between the min/max step `range / 15` and
/// `range / 16`, zero such that both extremes stay within half a step of the grid (so every
/// weight reconstructs within half a step, never more than the min/max encoder's bound).
/// The search tries a lattice of that region — [`SCALES`] scales, up to [`ZEROS`] evenly
/// spaced zeros each — then [`REFITS`] weighted least-squares re-fits of the winner to its own
/// codes (projected back into the region). Every candidate is first rounded by `round` to
/// what the header stores (`None`: unstorable, skipped) and scored with that stored pair, as
/// the decoder reconstructs. The objective is the squared error weighted by
/// [`tail_weights`], among candidates whose plain squared error is not above `base`'s; the
/// winner must also beat `base` in f64 with the exact division codes, so no group ever ends
/// worse than the min/max encoder.
pub(crate) fn search_affine(
    w: &[f32],
    lo: f32,
    hi: f32,
    base: (f32, f32),
    round: impl Fn(f32, f32) -> Option<(f32, f32)>,
) -> (f32, f32) {
    let range = hi - lo;
    if hi <= lo
        || base.0 <= 0.0
        || !range.is_finite()
        || w.len() > 256
        || !w.len().is_multiple_of(LANES)
    {
        return base;
    }
    let mut wt_buf = [0f32; 256];
    let wt = &mut wt_buf[..w.len()];
    tail_weights(w, lo.abs().max(hi.abs()), wt);
    let (base_se, base_wse) = pass(w, wt, base.0, base.1);
    let (mut best, mut best_wse) = (base, base_wse);
    // Rounds (s, z) to the header and keeps it when it wins; the clamp keeps the pair in the
    // bounded region (up to the header's rounding, which the f64 check below absorbs).
    let mut try_pair = |s: f32, z: f32, best: &mut (f32, f32)| {
        let Some((s, _)) = round(s, lo) else { return };
        if s <= 0.0 {
            return;
        }
        let Some((_, z)) = round(s, z.max(hi - 15.5 * s).min(lo + 0.5 * s)) else {
            return;
        };
        let (se, wse) = pass(w, wt, s, z);
        if se <= base_se && wse < best_wse {
            *best = (s, z);
            best_wse = wse;
        }
    };
    for k in 0..SCALES {
        let t = k as f32 / (SCALES - 1) as f32;
        let s = range / (15.0 + t);
        // The region's zeros form an interval (1 - t) s wide.
        let (zmin, zmax) = (hi - 15.5 * s, lo + 0.5 * s);
        let nz = ((ZEROS as f32 * (1.0 - t)).round() as usize).max(1);
        for j in 0..nz {
            try_pair(
                s,
                zmin + (zmax - zmin) * (j as f32 + 0.5) / nz as f32,
                &mut best,
            );
        }
    }
    for _ in 0..REFITS {
        if best == base {
            break;
        }
        let Some((s, z)) = refit(w, wt, best.0, best.1) else {
            break;
        };
        let before = best;
        try_pair(s.max(range / 16.0), z, &mut best);
        if best == before {
            break;
        }
    }
    if best != base && sse_affine_f64(w, best.0, best.1) >= sse_affine_f64(w, base.0, base.1) {
        return base;
    }
    best
}

/// Round-trips a (scale, zero) pair through fp16; `None` if either overflows.
#[inline]
fn round_f16(s: f32, z: f32) -> Option<(f32, f32)> {
    let (s, z) = (f16::from_f32(s), f16::from_f32(z));
    (s.is_finite() && z.is_finite()).then(|| (s.to_f32(), z.to_f32()))
}

/// An f32 (scale, zero) pair as the f32 header stores it; `None` if not finite.
#[inline]
fn round_f32(s: f32, z: f32) -> Option<(f32, f32)> {
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
    fn write_header_error_aware(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let (lo, hi) = min_max(w);
        let scale = step(lo, hi);
        if !scale.is_finite() {
            return Err((lo, hi));
        }
        let (scale, zero) = search_affine(w, lo, hi, (scale, lo), round_f32);
        write_f32(block, 0, scale);
        write_f32(block, 4, zero);
        Ok([(scale, zero); 2])
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
    fn write_header_error_aware(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let mut hdr = [(0.0, 0.0); 2];
        for (h, half) in w.chunks_exact(HALF).enumerate() {
            let (lo, hi) = min_max(half);
            let (s, z) = f16_pair(lo, hi).ok_or((lo, hi))?;
            let (s, z) = search_affine(half, lo, hi, (s.to_f32(), z.to_f32()), round_f16);
            // Exact: the search only returns pairs that round_f16 produced.
            write_f16(block, 4 * h, f16::from_f32(s));
            write_f16(block, 4 * h + 2, f16::from_f32(z));
            hdr[h] = (s, z);
        }
        Ok(hdr)
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
    fn write_header_error_aware(w: &[f32], block: &mut [u8]) -> Result<Header, (f32, f32)> {
        let (lo, hi) = min_max(w);
        let (s, z) = f16_pair(lo, hi).ok_or((lo, hi))?;
        let (s, z) = search_affine(w, lo, hi, (s.to_f32(), z.to_f32()), round_f16);
        write_f16(block, 0, f16::from_f32(s));
        write_f16(block, 2, f16::from_f32(z));
        block[4..PAYLOAD_OFFSET].fill(0);
        Ok([(s, z); 2])
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
    effort: EncoderEffort,
) -> Result<(), QuantError> {
    let fit = match effort {
        EncoderEffort::MinMax => L::write_header,
        EncoderEffort::ErrorAware => L::write_header_error_aware,
    };
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
            let hdr = fit(wb, block).map_err(|(lo, hi)| QuantError::ScaleOutOfRange {
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
                encode_rows_with::<$codec>(
                    format,
                    cols,
                    src,
                    weights,
                    scales,
                    EncoderEffort::MinMax,
                )
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
                encode_rows_with::<$codec>(format, cols, src, weights, scales, effort)
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
    fn float_codes_are_the_codes() {
        for k in -40..=700 {
            let v = k as f32 * 0.025 - 0.3;
            assert_eq!(code4f(v), code4(v) as f32, "{v}");
        }
        assert_eq!(code4f(7.5), 8.0);
        assert_eq!(code4f(8.5), 8.0);
    }

    #[test]
    fn search_keeps_the_base_when_nothing_is_better() {
        // Four levels exactly on the min/max grid: zero error, nothing can beat it.
        let w: Vec<f32> = (0..16).map(|k| (k % 16) as f32 * 0.5 - 1.0).collect();
        let base = (0.5, -1.0);
        assert_eq!(search_affine(&w, -1.0, 6.5, base, round_f16), base);
        // Degenerate inputs return the base untouched.
        assert_eq!(search_affine(&w, 1.0, 1.0, base, round_f16), base);
        assert_eq!(search_affine(&w[..12], -1.0, 6.5, base, round_f16), base);
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
