//! Fused int8-row kernel: signed bytes widened and converted in-register, one f32 row scale
//! applied to the finished row sum.
//!
//! Layout (codecs/int_row.rs): O*I i8, `w[o, i] = q[o, i] * scale[o]`. Rows are walked in
//! 64-byte chunks against [`Layout::Plain`] activations; the last partial chunk is copied to
//! a zeroed buffer.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::{
    Activations, Layout, Micro, PLAIN_CHUNK, RowKernel, SimdLevel, drive, prefetch, tail_chunk,
};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

pub struct Int8RowKernel;

impl RowKernel for Int8RowKernel {
    fn layout(&self) -> Layout {
        Layout::Plain
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
        let m = Int8Micro {
            t,
            a,
            full: t.cols() / PLAIN_CHUNK,
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

struct Int8Micro<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    /// Whole 64-byte chunks in a row; a partial one follows when I % 64 != 0.
    full: usize,
}

impl Int8Micro<'_, '_> {
    fn scale(&self, o: usize) -> f32 {
        read_f32(self.t.scales(), 4 * o)
    }
    /// Chunks of a row, the partial one included.
    fn chunks(&self) -> usize {
        self.t.cols().div_ceil(PLAIN_CHUNK)
    }
    /// The bytes of chunk `c` of row `o`, padded with zeros past I.
    fn chunk(&self, o: usize, c: usize) -> [u8; PLAIN_CHUNK] {
        let row = self.t.row(o);
        tail_chunk(&row[c * PLAIN_CHUNK..row.len().min((c + 1) * PLAIN_CHUNK)])
    }
}

impl Micro for Int8Micro<'_, '_> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX-512 present, rows and tile in range.
        unsafe { int8_avx512::<R, T>(self, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2 present, rows and tile in range.
        unsafe { int8_avx2::<R, T>(self, o, t0, out) }
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        let s = self.a.s;
        let mut acc = [[[0f32; 16]; T]; R];
        for c in 0..self.chunks() {
            for r in 0..R {
                let b = self.chunk(o + r, c);
                for k in 0..T {
                    let x = &self.a.row(t0 + k)[c * PLAIN_CHUNK..(c + 1) * PLAIN_CHUNK];
                    for (q, xq) in b.chunks_exact(16).zip(x.chunks_exact(16)) {
                        for l in 0..16 {
                            acc[r][k][l] += q[l] as i8 as f32 * xq[l];
                        }
                    }
                }
            }
        }
        for r in 0..R {
            let d = self.scale(o + r);
            for k in 0..T {
                out[r * s + t0 + k] = acc[r][k].iter().sum::<f32>() * d;
            }
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn int8_avx512<const R: usize, const T: usize>(
    m: &Int8Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let s = m.a.s;
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let ahead = prefetch::per_stream(R);
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    for c in 0..m.full {
        prefetch::rows(&rows, c * PLAIN_CHUNK, PLAIN_CHUNK, ahead);
        // SAFETY: c < full, so the 64 bytes from 64c lie inside each row.
        let ptrs = rows.map(|p| unsafe { p.add(c * PLAIN_CHUNK) });
        // SAFETY: 64 readable bytes at each pointer; padded activation rows hold 64(c+1).
        unsafe { chunk_avx512(&mut acc, ptrs, xs, c) };
    }
    if m.full < m.chunks() {
        let bufs: [[u8; PLAIN_CHUNK]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
        let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
        // SAFETY: local 64-byte buffers; the padded activation rows cover the last chunk.
        unsafe { chunk_avx512(&mut acc, ptrs, xs, m.full) };
    }
    for r in 0..R {
        let d = m.scale(o + r);
        for k in 0..T {
            out[r * s + t0 + k] = _mm512_reduce_add_ps(acc[r][k]) * d;
        }
    }
}

/// One 64-weight chunk of R rows against T activation rows.
///
/// # Safety
/// AVX-512 F present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `64 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn chunk_avx512<const R: usize, const T: usize>(
    acc: &mut [[__m512; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
) {
    for q in 0..4 {
        let mut wf = [_mm512_setzero_ps(); R];
        for r in 0..R {
            // SAFETY: 16q + 16 <= 64 bytes at w[r].
            let v = unsafe { _mm_loadu_si128(w[r].add(16 * q).cast()) };
            wf[r] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
        }
        for k in 0..T {
            // SAFETY: 64c + 16q + 16 <= 64(c + 1) floats at xs[k].
            let x = unsafe { _mm512_loadu_ps(xs[k].add(c * PLAIN_CHUNK + 16 * q)) };
            for r in 0..R {
                acc[r][k] = _mm512_fmadd_ps(wf[r], x, acc[r][k]);
            }
        }
    }
}

/// # Safety
/// AVX2 and FMA present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn int8_avx2<const R: usize, const T: usize>(
    m: &Int8Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let s = m.a.s;
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let ahead = prefetch::per_stream(R);
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    for c in 0..m.full {
        prefetch::rows(&rows, c * PLAIN_CHUNK, PLAIN_CHUNK, ahead);
        // SAFETY: c < full, so the 64 bytes from 64c lie inside each row.
        let ptrs = rows.map(|p| unsafe { p.add(c * PLAIN_CHUNK) });
        // SAFETY: 64 readable bytes at each pointer; padded activation rows hold 64(c+1).
        unsafe { chunk_avx2(&mut acc, ptrs, xs, c) };
    }
    if m.full < m.chunks() {
        let bufs: [[u8; PLAIN_CHUNK]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
        let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
        // SAFETY: local 64-byte buffers; the padded activation rows cover the last chunk.
        unsafe { chunk_avx2(&mut acc, ptrs, xs, m.full) };
    }
    for r in 0..R {
        let d = m.scale(o + r);
        for k in 0..T {
            out[r * s + t0 + k] = super::simd::hsum256(acc[r][k]) * d;
        }
    }
}

/// One 64-weight chunk of R rows against T activation rows, eight lanes at a time.
///
/// # Safety
/// AVX2 and FMA present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `64 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunk_avx2<const R: usize, const T: usize>(
    acc: &mut [[__m256; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
) {
    for q in 0..8 {
        let mut wf = [_mm256_setzero_ps(); R];
        for r in 0..R {
            // SAFETY: 8q + 8 <= 64 bytes at w[r].
            let v = unsafe { _mm_loadl_epi64(w[r].add(8 * q).cast()) };
            wf[r] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        }
        for k in 0..T {
            // SAFETY: 64c + 8q + 8 <= 64(c + 1) floats at xs[k].
            let x = unsafe { _mm256_loadu_ps(xs[k].add(c * PLAIN_CHUNK + 8 * q)) };
            for r in 0..R {
                acc[r][k] = _mm256_fmadd_ps(wf[r], x, acc[r][k]);
            }
        }
    }
}
