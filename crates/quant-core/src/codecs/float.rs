//! f32, f16 and bf16 weights: little-endian IEEE values, no scales.

use super::util::{read_f32, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::Format;
use crate::tensor::QTensor;
use half::{bf16, f16};

#[derive(Copy, Clone, Debug)]
pub enum FloatKind {
    F32,
    F16,
    Bf16,
}

/// The codec of one plain float format.
pub struct FloatCodec(pub FloatKind);

pub static F32: FloatCodec = FloatCodec(FloatKind::F32);
pub static F16: FloatCodec = FloatCodec(FloatKind::F16);
pub static BF16: FloatCodec = FloatCodec(FloatKind::Bf16);

impl FloatKind {
    #[inline(always)]
    fn read(self, b: &[u8], i: usize) -> f32 {
        match self {
            FloatKind::F32 => read_f32(b, 4 * i),
            FloatKind::F16 => f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32(),
            FloatKind::Bf16 => bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32(),
        }
    }
    #[inline(always)]
    fn write(self, b: &mut [u8], i: usize, v: f32) {
        match self {
            FloatKind::F32 => write_f32(b, 4 * i, v),
            FloatKind::F16 => b[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
            FloatKind::Bf16 => {
                b[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes())
            }
        }
    }
}

fn decode<T: Real>(kind: FloatKind, t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    for (r, dst) in out.chunks_exact_mut(t.cols()).enumerate() {
        let b = t.row(row0 + r);
        for (i, v) in dst.iter_mut().enumerate() {
            *v = T::from_f32(kind.read(b, i));
        }
    }
}

impl FormatCodec for FloatCodec {
    fn encode_rows(
        &self,
        _format: Format,
        _cols: usize,
        src: &[f32],
        weights: &mut [u8],
        _scales: &mut [u8],
    ) -> Result<(), QuantError> {
        for (i, &v) in src.iter().enumerate() {
            self.0.write(weights, i, v);
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
