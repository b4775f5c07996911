//! The decode-then-dot kernel: correct for every format, used where no fused kernel exists.

use super::RowKernel;
use super::simd::dot_f32;
use crate::codec::codec_for;
use crate::tensor::QTensor;

/// Decodes up to [`SCRATCH_ROWS`] rows at a time with the format's f32 decode, then dots each
/// decoded row with all S activation rows.
pub struct DecodeThenDot;

const SCRATCH_FLOATS: usize = 8192;

impl RowKernel for DecodeThenDot {
    fn dot_rows(&self, t: &QTensor<'_>, x: &[f32], s: usize, row0: usize, n: usize, out: &mut [f32]) {
        let cols = t.cols();
        let codec = codec_for(t.format());
        // Tile rows (fp8) must be decoded whole-row; any row count is valid for decode.
        let per = (SCRATCH_FLOATS / cols).max(1);
        let mut scratch = vec![0f32; per.min(n) * cols];
        let mut r = 0;
        while r < n {
            let m = per.min(n - r);
            let buf = &mut scratch[..m * cols];
            codec.decode_rows_f32(t, row0 + r, buf);
            for (j, w) in buf.chunks_exact(cols).enumerate() {
                for k in 0..s {
                    out[(r + j) * s + k] = dot_f32(w, &x[k * cols..(k + 1) * cols]);
                }
            }
            r += m;
        }
    }
}
