//! gguf-mxfp4: llama.cpp's `block_mxfp4` (GGUF type 39), a documented twin of the `mxfp4`
//! row ([`super::mxfp4`]).
//!
//! Layout: 17 bytes per 32 weights: one E8M0 scale byte `e`, then `qs[16]`; weight j < 16
//! is the low nibble of `qs[j]` and weight j + 16 its high nibble (GGML's Q4_0 order).
//! Each nibble is an E2M1 code; the value is `kvalues_mxfp4[q] * 2^(e - 128)`, where
//! GGML's `kvalues_mxfp4` are the E2M1 values doubled (0, 1, 2, 3, 4, 6, 8, 12, and their
//! negatives) and `2^(e - 128)` is `GGML_E8M0_TO_FP32_HALF(e)`.
//!
//! Why a twin and not the `mxfp4` row: the values agree (E2M1 times 2^(e-127)) for every
//! scale byte but one, and the bytes do not. `mxfp4` keeps its scales in a sidecar and
//! pairs weights 2b, 2b+1 in byte b; a GGUF block interleaves the scale with the codes and
//! pairs weights j, j+16. Converting on import would make the imported tensor's bytes
//! differ from the file's, and issue 8 asks for blocks copied byte for byte; so the GGUF
//! layout is its own registry row. The value that differs: `e = 0xFF` is NaN in OCP's
//! UE8M0 (and in `mxfp4`), while GGML reads it as 2^127. This codec follows GGML, since
//! it decodes GGML's files.
//!
//! Encoder: a port of `quantize_row_mxfp4_ref`: `e = floor(log2(amax)) - 2 + 127` (0 for an
//! all-zero block, saturating below), then each weight takes the first code of least
//! absolute error `|kvalues[i] * d - x|`, `d = 2^(e - 128)`.

use super::ggml_common::{BlockCodec, GgmlBlock, int};
use crate::real::Real;

/// GGML's `kvalues_mxfp4`: E2M1 values times two.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

pub struct GgufMxfp4;

pub static GGUF_MXFP4_CODEC: BlockCodec<GgufMxfp4> = BlockCodec::new();

/// GGML's `GGML_E8M0_TO_FP32_HALF`: `2^(e - 128)`, exact for every byte (0 and 1 give
/// f32 subnormals).
#[inline(always)]
pub const fn e8m0_to_f32_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(((e - 1) as u32) << 23)
    }
}

impl GgmlBlock for GgufMxfp4 {
    const WEIGHTS: usize = 32;
    const BYTES: usize = 17;
    const HEADER: &'static str = "e8m0";
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let amax = x
            .iter()
            .fold(0f32, |a, v| if a < v.abs() { v.abs() } else { a });
        // `(uint8_t)(floorf(log2f(amax)) - 2 + 127)`; Rust's cast saturates where C's
        // conversion would be undefined (amax below 2^-125).
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        out[0] = e;
        let best = |v: f32| -> u8 {
            let mut best_index = 0u8;
            let mut best_err = (KVALUES_MXFP4[0] as f32 * d - v).abs();
            for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
                let err = (k as f32 * d - v).abs();
                if err < best_err {
                    best_index = i as u8;
                    best_err = err;
                }
            }
            best_index
        };
        for j in 0..16 {
            out[1 + j] = best(x[j]) | (best(x[16 + j]) << 4);
        }
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d = T::from_f32(e8m0_to_f32_half(b[0]));
        for j in 0..16 {
            let q = b[1 + j];
            out[j] = int::<T>(i32::from(KVALUES_MXFP4[(q & 0xF) as usize])) * d;
            out[j + 16] = int::<T>(i32::from(KVALUES_MXFP4[(q >> 4) as usize])) * d;
        }
    }
}
