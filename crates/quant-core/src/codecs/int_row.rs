//! Per-row symmetric integer formats: int8-row (fmt=1), int4-row (fmt=2), int2-row (fmt=3).
//!
//! Each row has one f32 scale `d` in the sidecar; weight i decodes to `q_i * d`.
//! - int8-row: one signed byte per weight, q in [-127, 127], d = max|w| / 127.
//! - int4-row: `(I+1)/2` bytes a row; weight 2b is the low nibble of byte b, weight 2b+1 the
//!   high nibble; the nibble stores q + 8 (offset binary), q in [-8, 7].
//! - int2-row: `ceil(I/4)` bytes a row; weight 4b+j sits in bits 2j..2j+1 of byte b and stores
//!   q + 2, q in [-2, 1].
//!
//! The 4- and 2-bit encoders use the signed-max rule (GGML Q4_0's): d = m / -qmin where m is
//! the signed weight of largest magnitude, so that weight is exact and the asymmetric code
//! range is fully used. Unused bits of a row's last byte are zero.

use super::util::{quantize, read_f32, scaled, signed_max_scale, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;

/// Codes per byte and the code offset of a packed per-row format.
#[derive(Copy, Clone, Debug)]
pub struct Packing {
    /// Bits per code (8, 4 or 2).
    pub bits: u32,
}

impl Packing {
    const fn per_byte(self) -> usize {
        (8 / self.bits) as usize
    }
    /// Offset added to the signed code before storing (0 for int8, which stores two's complement).
    const fn offset(self) -> i32 {
        if self.bits == 8 {
            0
        } else {
            1 << (self.bits - 1)
        }
    }
    const fn mask(self) -> u32 {
        (1u32 << self.bits) - 1
    }
    /// The signed code of weight i in a row.
    #[inline(always)]
    pub fn code(self, row: &[u8], i: usize) -> i32 {
        if self.bits == 8 {
            return row[i] as i8 as i32;
        }
        let byte = row[i / self.per_byte()] as u32;
        let shift = (i % self.per_byte()) as u32 * self.bits;
        ((byte >> shift) & self.mask()) as i32 - self.offset()
    }
}

pub struct IntRowCodec(pub Packing);

pub static INT8_ROW: IntRowCodec = IntRowCodec(Packing { bits: 8 });
pub static INT4_ROW: IntRowCodec = IntRowCodec(Packing { bits: 4 });
pub static INT2_ROW: IntRowCodec = IntRowCodec(Packing { bits: 2 });

fn decode<T: Real>(p: Packing, t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let scales = t.scales();
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let o = row0 + r;
        let row = t.row(o);
        let d = T::from_f32(read_f32(scales, 4 * o));
        for (i, v) in dst.iter_mut().enumerate() {
            *v = scaled(p.code(row, i), d);
        }
    }
}

impl FormatCodec for IntRowCodec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let p = self.0;
        let rb = usize::try_from(format.spec().row_bytes(cols)?).map_err(|_| {
            QuantError::SizeOverflow {
                format,
                rows: 1,
                cols,
            }
        })?;
        for (r, w) in src.chunks_exact(cols).enumerate() {
            let (lo, hi) = if p.bits == 8 {
                (-127, 127)
            } else {
                (-p.offset(), p.offset() - 1)
            };
            let d = if p.bits == 8 {
                w.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0
            } else {
                signed_max_scale(w, p.offset())
            };
            write_f32(scales, 4 * r, d);
            let row = &mut weights[r * rb..(r + 1) * rb];
            row.fill(0);
            for (i, &v) in w.iter().enumerate() {
                let q = quantize(v, d, lo, hi);
                if p.bits == 8 {
                    row[i] = q as i8 as u8;
                } else {
                    let shift = (i % p.per_byte()) as u32 * p.bits;
                    row[i / p.per_byte()] |= (((q + p.offset()) as u32 & p.mask()) << shift) as u8;
                }
            }
        }
        Ok(())
    }
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode(self.0, t, row0, out)
    }
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode(self.0, t, row0, out)
    }
}

#[cfg(test)]
mod tests {
    use crate::{EncodeOptions, Format, decode, encode};

    /// The worked example of docs/FORMATS.md, byte for byte.
    #[test]
    fn formats_md_int4_row_example() {
        let t = encode(
            Format::Int4Row,
            1,
            3,
            &[0.7, -0.35, 0.1],
            &EncodeOptions::default(),
        )
        .unwrap();
        assert_eq!(t.weights, [0xc0, 0x07]);
        assert_eq!(t.scales, (0.7f32 / -8.0).to_le_bytes());
        assert_eq!(decode(&t.view()).unwrap(), [0.7, -0.35, -(0.7f32 / -8.0)]);
    }

    #[test]
    fn int2_row_packs_lowest_bits_first() {
        // d = 1.0 / -2 = -0.5: codes q = w/d = [-2, 1, 0, -1, -2] stored as q+2 = [0, 3, 2, 1, 0].
        let t = encode(
            Format::Int2Row,
            1,
            5,
            &[1.0, -0.5, 0.0, 0.5, 1.0],
            &EncodeOptions::default(),
        )
        .unwrap();
        assert_eq!(t.weights, [0b01_10_11_00, 0b00]);
        assert_eq!(decode(&t.view()).unwrap(), [1.0, -0.5, 0.0, 0.5, 1.0]);
    }

    #[test]
    fn int8_row_uses_max_over_127() {
        let t = encode(
            Format::Int8Row,
            2,
            2,
            &[1.27, -0.5, 0.0, 0.0],
            &EncodeOptions::default(),
        )
        .unwrap();
        assert_eq!(t.weights, [127, (-50i8) as u8, 0, 0]);
        assert_eq!(&t.scales[..4], &(1.27f32 / 127.0).to_le_bytes());
        assert_eq!(&t.scales[4..], &0f32.to_le_bytes());
    }
}
