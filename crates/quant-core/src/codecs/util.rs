//! Small byte helpers shared by the codecs.

use crate::real::Real;
use half::f16;

#[inline(always)]
pub fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub fn write_f32(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline(always)]
pub fn read_f16(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline(always)]
pub fn write_f16(b: &mut [u8], at: usize, v: f16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// The value of largest magnitude in `v` (with its sign); 0 for an empty slice.
pub fn signed_absmax(v: &[f32]) -> f32 {
    let mut m = 0f32;
    for &x in v {
        if x.abs() > m.abs() {
            m = x;
        }
    }
    m
}

/// Symmetric signed-max quantizer (GGML's Q4_0 rule): `d = m / -lo` where m is the signed
/// value of largest magnitude, so that value lands exactly on the code `-lo` and the full
/// code range [-lo, lo-1] is used. Returns d (0 for an all-zero input).
pub fn signed_max_scale(v: &[f32], lo: i32) -> f32 {
    signed_absmax(v) / -(lo as f32)
}

/// `round(w / d)` clamped to [min, max]; 0 when d == 0.
#[inline(always)]
pub fn quantize(w: f32, d: f32, min: i32, max: i32) -> i32 {
    if d == 0.0 {
        return 0;
    }
    ((w / d).round() as i32).clamp(min, max)
}

/// `q as T * scale` — the decode step every scaled format shares.
#[inline(always)]
pub fn scaled<T: Real>(q: i32, scale: T) -> T {
    T::from_f32(q as f32) * scale
}
