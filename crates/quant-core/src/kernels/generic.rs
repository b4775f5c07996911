//! The decode-then-dot kernel: correct for every format, used where no fused kernel exists.
//!
//! It decodes a few rows at a time into an L1-sized scratch with the format's own f32
//! decode, then dots each decoded row with all S activation rows with the SIMD dot of the
//! chosen level, so S > 1 reuses each decoded row.

use super::simd::dot_f32_at;
use super::{Activations, Layout, RowKernel, SimdLevel};
use crate::codec::codec_for;
use crate::registry::Format;
use crate::tensor::QTensor;

/// Decodes up to `SCRATCH_FLOATS` / I rows at a time, then dots each decoded row with all
/// S activation rows.
pub struct DecodeThenDot;

/// Scratch size: 32 KiB of f32, about one L1 data cache.
const SCRATCH_FLOATS: usize = 8192;

impl RowKernel for DecodeThenDot {
    fn layout(&self) -> Layout {
        Layout::Raw
    }
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &Activations<'_>,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let cols = t.cols();
        let s = a.s;
        let codec = codec_for(t.format());
        let per = (SCRATCH_FLOATS / cols).max(1);
        let mut scratch = vec![0f32; per.min(n) * cols];
        let mut r = 0;
        while r < n {
            let m = per.min(n - r);
            let buf = &mut scratch[..m * cols];
            if t.format() == Format::F32 {
                // f32 rows are their own decode: a plain little-endian copy, which the
                // compiler turns into a vector copy (the codec's per-value read is not).
                let bytes = &t.weights()[(row0 + r) * cols * 4..(row0 + r + m) * cols * 4];
                for (d, b) in buf.iter_mut().zip(bytes.chunks_exact(4)) {
                    *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            } else {
                codec.decode_rows_f32(t, row0 + r, buf);
            }
            for (j, w) in buf.chunks_exact(cols).enumerate() {
                for k in 0..s {
                    out[(r + j) * s + k] = dot_f32_at(level, w, &a.row(k)[..cols]);
                }
            }
            r += m;
        }
    }
}
