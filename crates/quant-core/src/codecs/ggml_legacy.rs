//! GGML's original 32-weight block formats, byte-identical to llama.cpp's `block_q4_0`,
//! `block_q4_1`, `block_q5_0`, `block_q5_1` and `block_q8_0` (GGUF type ids 2, 3, 6, 7, 8).
//!
//! Layouts (little-endian; `d`, `m` fp16; weight j of the block):
//!
//! | format | bytes | fields | value |
//! | --- | --- | --- | --- |
//! | q4_0 | 18 | d, `qs[16]` | `(q - 8) * d` |
//! | q4_1 | 20 | d, m, `qs[16]` | `q * d + m` |
//! | q5_0 | 22 | d, `qh[4]`, `qs[16]` | `(q - 16) * d` |
//! | q5_1 | 24 | d, m, `qh[4]`, `qs[16]` | `q * d + m` |
//! | q8_0 | 34 | d, `qs[32]` (int8) | `q * d` |
//!
//! The 4-bit part of weight j < 16 is the low nibble of `qs[j]`, that of weight j + 16 the
//! high nibble of `qs[j]` (GGML's order: the first half of the block, then the second,
//! not the low-nibble-first pairs of `int4-row`). For q5, bit j of the little-endian u32
//! `qh` is bit 4 of weight j.
//!
//! Encoders are ports of `quantize_row_q{4_0,4_1,5_0,5_1,8_0}_ref`: symmetric formats take
//! `d = max / -8` (resp. -16; `max` the signed value of largest magnitude) and truncate
//! `x / d + 8.5`; affine formats take `d = (max - min) / 15` (resp. 31), `m = min`; q8_0
//! takes `d = amax / 127` and rounds half away from zero. Codes are computed against the
//! unrounded f32 `d`, as GGML does.

// The ports keep GGML's index loops so they can be read side by side with ggml-quants.c.
#![allow(clippy::needless_range_loop)]
use super::ggml_common::{BlockCodec, GgmlBlock, get_fp16, int, put_fp16, signed_amax};
use crate::real::Real;

pub struct Q4_0;
pub struct Q4_1;
pub struct Q5_0;
pub struct Q5_1;
pub struct Q8_0;

pub static Q4_0_CODEC: BlockCodec<Q4_0> = BlockCodec::new();
pub static Q4_1_CODEC: BlockCodec<Q4_1> = BlockCodec::new();
pub static Q5_0_CODEC: BlockCodec<Q5_0> = BlockCodec::new();
pub static Q5_1_CODEC: BlockCodec<Q5_1> = BlockCodec::new();
pub static Q8_0_CODEC: BlockCodec<Q8_0> = BlockCodec::new();

const QK: usize = 32;

/// (min, max) exactly as GGML's loops find them (`FLT_MAX` / `-FLT_MAX` starts).
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inv(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// The 5-bit codes of a q5 block into `qh` (u32, bit j = bit 4 of weight j) and `qs`.
fn pack5(codes: &[u8; QK], qh_qs: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (a, b) = (codes[j], codes[j + QK / 2]);
        qh_qs[4 + j] = (a & 0x0F) | ((b & 0x0F) << 4);
        qh |= u32::from((a & 0x10) >> 4) << j;
        qh |= u32::from((b & 0x10) >> 4) << (j + QK / 2);
    }
    qh_qs[..4].copy_from_slice(&qh.to_le_bytes());
}

/// The 5-bit code of weight j of a q5 block from `qh` and `qs`.
#[inline(always)]
fn code5(qh: u32, qs: &[u8], j: usize) -> i32 {
    let lo = if j < QK / 2 {
        qs[j] & 0x0F
    } else {
        qs[j - QK / 2] >> 4
    };
    i32::from(lo) | ((((qh >> j) & 1) as i32) << 4)
}

impl GgmlBlock for Q4_0 {
    const WEIGHTS: usize = QK;
    const BYTES: usize = 18;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let (max, _) = signed_amax(x);
        let d = max / -8.0;
        let id = inv(d);
        put_fp16(out, 0, d)?;
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let q0 = ((x0 + 8.5) as i8).min(15) as u8;
            let q1 = ((x1 + 8.5) as i8).min(15) as u8;
            out[2 + j] = q0 | (q1 << 4);
        }
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        for j in 0..QK / 2 {
            let q = b[2 + j];
            out[j] = int::<T>(i32::from(q & 0x0F) - 8) * d;
            out[j + QK / 2] = int::<T>(i32::from(q >> 4) - 8) * d;
        }
    }
}

impl GgmlBlock for Q4_1 {
    const WEIGHTS: usize = QK;
    const BYTES: usize = 20;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        put_fp16(out, 0, d)?;
        put_fp16(out, 2, min)?;
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let q0 = ((x0 + 0.5) as i8).min(15) as u8;
            let q1 = ((x1 + 0.5) as i8).min(15) as u8;
            out[4 + j] = q0 | (q1 << 4);
        }
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        let m: T = get_fp16(b, 2);
        for j in 0..QK / 2 {
            let q = b[4 + j];
            out[j] = int::<T>(i32::from(q & 0x0F)) * d + m;
            out[j + QK / 2] = int::<T>(i32::from(q >> 4)) * d + m;
        }
    }
}

impl GgmlBlock for Q5_0 {
    const WEIGHTS: usize = QK;
    const BYTES: usize = 22;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let (max, _) = signed_amax(x);
        let d = max / -16.0;
        let id = inv(d);
        put_fp16(out, 0, d)?;
        let mut codes = [0u8; QK];
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = ((v * id + 16.5) as i8).min(31) as u8;
        }
        pack5(&codes, &mut out[2..]);
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..];
        for (j, o) in out.iter_mut().enumerate().take(QK) {
            *o = int::<T>(code5(qh, qs, j) - 16) * d;
        }
    }
}

impl GgmlBlock for Q5_1 {
    const WEIGHTS: usize = QK;
    const BYTES: usize = 24;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        put_fp16(out, 0, d)?;
        put_fp16(out, 2, min)?;
        let mut codes = [0u8; QK];
        for (c, &v) in codes.iter_mut().zip(x) {
            // GGML's reference has no clamp here: (x - min) / d + 0.5 never reaches 32 for
            // finite input; the min keeps a rounding accident from wrapping the code.
            *c = (((v - min) * id + 0.5) as u8).min(31);
        }
        pack5(&codes, &mut out[4..]);
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        let m: T = get_fp16(b, 2);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..];
        for (j, o) in out.iter_mut().enumerate().take(QK) {
            *o = int::<T>(code5(qh, qs, j)) * d + m;
        }
    }
}

impl GgmlBlock for Q8_0 {
    const WEIGHTS: usize = QK;
    const BYTES: usize = 34;
    fn encode(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        put_fp16(out, 0, d)?;
        for (o, &v) in out[2..].iter_mut().zip(x) {
            // roundf: half away from zero, as f32::round.
            *o = ((v * id).round() as i8) as u8;
        }
        Ok(())
    }
    fn decode<T: Real>(b: &[u8], out: &mut [T]) {
        let d: T = get_fp16(b, 0);
        for (o, &q) in out.iter_mut().zip(&b[2..2 + QK]) {
            *o = int::<T>(i32::from(q as i8)) * d;
        }
    }
}
