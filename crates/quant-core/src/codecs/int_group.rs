//! Grouped symmetric integer formats: int4-g{16..256} (fmt=4) and int3-g64 (fmt=5).
//!
//! Both keep one f32 scale `d` per `gs` weights along I in the sidecar, at
//! `scale[o * ng + i / gs]` with `ng = ceil(I / gs)`; weight i of row o decodes to `q_i * d`
//! of its own group. The last group of a row may be partial.
//! - int4-g{gs}: int4-row's nibbles exactly (`(I+1)/2` bytes a row, weight 2b in the low nibble
//!   of byte b, weight 2b+1 in the high nibble, each storing q + 8, q in [-8, 7]); decode goes
//!   through int4-row's own [`Packing`], so the two layouts cannot drift apart. gs is even, so
//!   a byte never straddles two groups.
//! - int3-g64: 8 codes per 3 bytes. Weights 8k..8k+7 form the little-endian 24-bit word in
//!   bytes 3k..3k+2, weight 8k+j in bits 3j..3j+2, storing q + 4, q in [-4, 3]; a row is
//!   `ceil(I/8) * 3` bytes. A 64-weight group is exactly 8 such words (24 bytes).
//!
//! Encoders use the signed-max rule per group (`util::signed_max_scale`): d = m / -qmin with m
//! the group's signed weight of largest magnitude, so m is exact and the whole asymmetric code
//! range is used (d is negative when m is positive). Unused bits of a row's tail are zero.
//! Layouts and worked examples: docs/FORMATS.md.

use super::int_row::Packing;
use super::util::{quantize, read_f32, scaled, signed_max_scale, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;

/// int4-row's nibble packing, shared so the grouped decode reads int4-row's bytes.
const NIBBLES: Packing = Packing { bits: 4 };
/// Signed code range of the int4 nibbles and the int3 codes (offset = -min).
const INT4_MIN: i32 = -8;
const INT4_MAX: i32 = 7;
const INT3_MIN: i32 = -4;
const INT3_MAX: i32 = 3;
/// int3 geometry: codes a word, bytes a word, bits a code (the registry's block 8 / 3 bytes).
const INT3_WORD_CODES: usize = 8;
const INT3_WORD_BYTES: usize = 3;
const INT3_BITS: u32 = 3;

/// The int4-g{gs} formats; the group size comes from the registry row of the format.
pub struct Int4GroupCodec;

/// int3-g64.
pub struct Int3GroupCodec;

/// Row geometry of an encode, taken from the registry and checked against the buffers, so a
/// direct caller handing over wrong-sized buffers gets an error instead of a panic.
struct Geometry {
    group: usize,
    row_bytes: usize,
    scale_row_bytes: usize,
}

fn geometry(
    format: Format,
    cols: usize,
    src: &[f32],
    weights: &[u8],
    scales: &[u8],
) -> Result<Geometry, QuantError> {
    let spec = format.spec();
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
    let overflow = || QuantError::SizeOverflow { format, rows, cols };
    // codec.rs dispatches only PerGroup rows here; anything else is refused by name.
    let group = spec.group_size().ok_or_else(|| QuantError::UnknownFormat {
        name: format!("{format} (not a grouped format) given to the grouped integer codec"),
    })? as usize;
    let row_bytes = usize::try_from(spec.row_bytes(cols)?).map_err(|_| overflow())?;
    let scale_row_bytes = usize::try_from(spec.scale_bytes(1, cols)?).map_err(|_| overflow())?;
    let check = |what, per_row: usize, got: usize| {
        let expected = per_row.checked_mul(rows).ok_or_else(overflow)?;
        if expected == got {
            Ok(())
        } else {
            Err(QuantError::BufferSize {
                format,
                what,
                rows,
                cols,
                expected: expected as u64,
                got,
            })
        }
    };
    check("weight", row_bytes, weights.len())?;
    check("scale", scale_row_bytes, scales.len())?;
    Ok(Geometry {
        group,
        row_bytes,
        scale_row_bytes,
    })
}

/// Group size and per-row sidecar stride of a (registry-validated) tensor view.
fn view_geometry(t: &QTensor<'_>) -> (usize, usize) {
    // The view's sidecar length was checked against the registry, so this is ng * 4.
    let scale_row_bytes = t.scales().len() / t.rows();
    // Only grouped formats reach this codec; a whole row as one group is the safe reading.
    let group = t
        .format()
        .spec()
        .group_size()
        .map_or(t.cols(), |g| g as usize);
    (group, scale_row_bytes)
}

fn decode_int4<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let (group, srow) = view_geometry(t);
    let scales = t.scales();
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let o = row0 + r;
        let row = t.row(o);
        for (g, dst) in dst.chunks_mut(group).enumerate() {
            let d = T::from_f32(read_f32(scales, o * srow + 4 * g));
            let first = g * group;
            for (j, v) in dst.iter_mut().enumerate() {
                *v = scaled(NIBBLES.code(row, first + j), d);
            }
        }
    }
}

/// The signed code of weight `8k + j` of an int3 row, `word` being word k.
#[inline(always)]
fn int3_code(word: u32, j: usize) -> i32 {
    ((word >> (INT3_BITS * j as u32)) & 0x7) as i32 + INT3_MIN
}

#[inline(always)]
fn int3_word(b: &[u8]) -> u32 {
    b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16
}

fn decode_int3<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let (group, srow) = view_geometry(t);
    let scales = t.scales();
    // A group is a whole number of words (64 = 8 * 8), so words never straddle groups.
    let words_per_group = group / INT3_WORD_CODES;
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let o = row0 + r;
        let row = t.row(o);
        for (g, dst) in dst.chunks_mut(group).enumerate() {
            let d = T::from_f32(read_f32(scales, o * srow + 4 * g));
            let words = row[g * words_per_group * INT3_WORD_BYTES..].chunks_exact(INT3_WORD_BYTES);
            for (dst, wb) in dst.chunks_mut(INT3_WORD_CODES).zip(words) {
                let word = int3_word(wb);
                for (j, v) in dst.iter_mut().enumerate() {
                    *v = scaled(int3_code(word, j), d);
                }
            }
        }
    }
}

impl FormatCodec for Int4GroupCodec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let geo = geometry(format, cols, src, weights, scales)?;
        if !geo.group.is_multiple_of(2) {
            // A byte holds two weights; an odd group would split bytes across scales.
            return Err(QuantError::PartialBlock {
                format,
                cols,
                block: geo.group,
            });
        }
        let rows = src.chunks_exact(cols);
        let outs = weights.chunks_exact_mut(geo.row_bytes);
        let souts = scales.chunks_exact_mut(geo.scale_row_bytes);
        for ((w, row), srow) in rows.zip(outs).zip(souts) {
            let groups = w.chunks(geo.group).zip(row.chunks_mut(geo.group / 2));
            for (g, (wg, bytes)) in groups.enumerate() {
                let d = signed_max_scale(wg, -INT4_MIN);
                write_f32(srow, 4 * g, d);
                for (pair, b) in wg.chunks(2).zip(bytes.iter_mut()) {
                    let lo = quantize(pair[0], d, INT4_MIN, INT4_MAX) - INT4_MIN;
                    // An odd row's last high nibble stays zero, as int4-row has it.
                    let hi = pair
                        .get(1)
                        .map_or(0, |&v| quantize(v, d, INT4_MIN, INT4_MAX) - INT4_MIN);
                    *b = (lo | hi << 4) as u8;
                }
            }
        }
        Ok(())
    }
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode_int4(t, row0, out)
    }
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode_int4(t, row0, out)
    }
}

impl FormatCodec for Int3GroupCodec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let geo = geometry(format, cols, src, weights, scales)?;
        if !geo.group.is_multiple_of(INT3_WORD_CODES) {
            return Err(QuantError::PartialBlock {
                format,
                cols,
                block: geo.group,
            });
        }
        let word_group_bytes = geo.group / INT3_WORD_CODES * INT3_WORD_BYTES;
        let rows = src.chunks_exact(cols);
        let outs = weights.chunks_exact_mut(geo.row_bytes);
        let souts = scales.chunks_exact_mut(geo.scale_row_bytes);
        for ((w, row), srow) in rows.zip(outs).zip(souts) {
            let groups = w.chunks(geo.group).zip(row.chunks_mut(word_group_bytes));
            for (g, (wg, bytes)) in groups.enumerate() {
                let d = signed_max_scale(wg, -INT3_MIN);
                write_f32(srow, 4 * g, d);
                for (eight, wb) in wg.chunks(INT3_WORD_CODES).zip(bytes.chunks_exact_mut(3)) {
                    let mut word = 0u32;
                    for (j, &v) in eight.iter().enumerate() {
                        let u = (quantize(v, d, INT3_MIN, INT3_MAX) - INT3_MIN) as u32;
                        word |= u << (INT3_BITS * j as u32);
                    }
                    wb.copy_from_slice(&word.to_le_bytes()[..INT3_WORD_BYTES]);
                }
            }
        }
        Ok(())
    }
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode_int3(t, row0, out)
    }
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode_int3(t, row0, out)
    }
}
