//! Fused fp8-e4m3-b128 kernels (f32 or UE8M0 tile scales): E4M3-FN bytes decoded in-register.
//!
//! Layout: O*I OCP E4M3-FN bytes; one scale per 128x128 tile,
//! `scale[(o/128) * ceil(I/128) + i/128]`, f32 or UE8M0 (2^(e-127)); `w = e4m3(b) * scale`.
//!
//! Decode, exact for all 254 finite codes: the byte, sign-extended to 16 bits, shifted left
//! by 7 and masked with 0xBF80 is an IEEE half whose sign is the E4M3 sign, exponent field
//! the E4M3 exponent and top mantissa bits the E4M3 mantissa — the half equals the E4M3
//! value times 2^-8 (half bias 15 vs E4M3 bias 7), subnormals included (E4M3 subnormals
//! land on half subnormals, which `vcvtph2ps` widens exactly). The 2^8 is put back, exactly,
//! on each tile's partial sum before its scale. The portable twin builds the f32 directly
//! (byte << 20 into the exponent/mantissa fields, times 2^120). The two NaN codes (0x7F,
//! 0xFF) are not decoded:
//! each 64-byte load is tested for them once, and a row that holds one gets NaN for all its
//! outputs, exactly what a NaN weight does to an f64 dot product. E4M3-FN has no infinities.
//!
//! Tile scales are folded once per 128 weights of a row: `total += acc_tile * scale_tile`.
//!
//! Tried and not kept (2026-11-30, this 2-core AMD EPYC with AVX512_BF16 and VBMI): decoding
//! 64 bytes at once into bf16 with two `vpermi2b` table look-ups and multiplying with
//! `vdpbf16ps` against x split into three bf16 terms (three, so the split loses nothing
//! against f32). Single thread, in cache, [512 x 4096]: 0.258 us a row against this
//! kernel's 0.250, plus 12 us a call for the split; it passed the oracle and was dropped.
//! With a single bf16 term that decode is the opt-in fast path's fp8 kernel
//! (`int8act/fp8_bf16.rs`, [`super::KernelPath::Int8Activations`]): 2.3x this kernel in
//! cache, at the int8 path's declared tolerance instead of this path's 1e-5.
//!
//! No software prefetch ([`super::prefetch`]), unlike the other fused kernels: this kernel
//! is bound by its arithmetic (11.6 GB/s a thread in L2 on the Intel VM of 2026-12-06, where
//! two threads read 26-31 GB/s), and the prefetch requests took issue slots from it: `read-pair`
//! with 4096 bytes ahead against none, alternated twice, 49-51% of the read against 55-61%
//! on the 4096-column shapes, 61-63% against 64% on [6144 x 16384].

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::{Activations, Layout, Micro, PLAIN_CHUNK, RowKernel, SimdLevel, drive, tail_chunk};
use crate::codecs::util::read_f32;
use crate::registry::ScaleEncoding;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Weights (and rows) a scale tile spans.
const TILE: usize = 128;
/// 2^120: moves an E4M3 exponent field (bias 7) to f32's bias 127.
const REBIAS: f32 = f32::from_bits((127 + 120) << 23);
/// The bits of the sign-extended byte << 20 that carry sign, exponent and mantissa.
const FIELD_MASK: u32 = 0x87F0_0000;
/// The bits of the 16-bit sign-extended byte << 7 that carry sign, exponent and mantissa
/// as an IEEE half.
#[cfg(target_arch = "x86_64")]
const HALF_MASK: i16 = 0xBF80u16 as i16;
/// What the half decode leaves out: the E4M3 value is the half times 2^8.
#[cfg(target_arch = "x86_64")]
const HALF_UNBIAS: f32 = 256.0;

pub struct Fp8Kernel;

impl RowKernel for Fp8Kernel {
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
        let ue8m0 = t.format().spec().scale_encoding() == Some(ScaleEncoding::Ue8m0);
        let m = Fp8Micro {
            t,
            a,
            ue8m0,
            tiles: t.cols().div_ceil(TILE),
            full: t.cols() / PLAIN_CHUNK,
            nch: t.cols().div_ceil(PLAIN_CHUNK),
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

/// The E4M3-FN value of a byte, computed the way the vector kernels do (a scalar twin for
/// the portable level and for tests); NaN for 0x7F and 0xFF.
#[inline]
pub fn e4m3_decode(b: u8) -> f32 {
    if crate::tables::e4m3_is_nan(b) {
        return f32::NAN;
    }
    f32::from_bits(((b as i8 as i32 as u32) << 20) & FIELD_MASK) * REBIAS
}

/// A UE8M0 scale byte: 2^(e-127), NaN for 0xFF.
#[inline]
pub fn ue8m0_decode(e: u8) -> f32 {
    match e {
        0xFF => f32::NAN,
        // 2^-127 is an f32 subnormal: only the mantissa's top bit.
        0 => f32::from_bits(0x0040_0000),
        e => f32::from_bits((e as u32) << 23),
    }
}

struct Fp8Micro<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    ue8m0: bool,
    /// Tiles along I: ceil(I/128).
    tiles: usize,
    /// Whole 64-byte chunks a row.
    full: usize,
    /// Chunks a row, the partial one included.
    nch: usize,
}

impl Fp8Micro<'_, '_> {
    #[inline]
    fn scale(&self, o: usize, tile: usize) -> f32 {
        let idx = (o / TILE) * self.tiles + tile;
        if self.ue8m0 {
            ue8m0_decode(self.t.scales()[idx])
        } else {
            read_f32(self.t.scales(), 4 * idx)
        }
    }
    fn chunk(&self, o: usize, c: usize) -> [u8; PLAIN_CHUNK] {
        let row = self.t.row(o);
        tail_chunk(&row[c * PLAIN_CHUNK..row.len().min((c + 1) * PLAIN_CHUNK)])
    }
    fn write(&self, out: &mut [f32], r: usize, t0: usize, k: usize, v: f32, nan: bool) {
        out[r * self.a.s + t0 + k] = if nan { f32::NAN } else { v };
    }
}

impl Micro for Fp8Micro<'_, '_> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX-512 present, rows and tile in range.
        unsafe { fp8_avx512::<R, T>(self, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2 present, rows and tile in range.
        unsafe { fp8_avx2::<R, T>(self, o, t0, out) }
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        let mut tot = [[[0f32; 16]; T]; R];
        let mut nan = [false; R];
        for tile in 0..self.tiles {
            let mut acc = [[[0f32; 16]; T]; R];
            for c in 2 * tile..(2 * tile + 2).min(self.nch) {
                for r in 0..R {
                    let b = self.chunk(o + r, c);
                    nan[r] |= b.iter().any(|&v| crate::tables::e4m3_is_nan(v));
                    let w: [f32; PLAIN_CHUNK] = std::array::from_fn(|i| {
                        f32::from_bits(((b[i] as i8 as i32 as u32) << 20) & FIELD_MASK) * REBIAS
                    });
                    for k in 0..T {
                        let x = &self.a.row(t0 + k)[c * PLAIN_CHUNK..(c + 1) * PLAIN_CHUNK];
                        for (wq, xq) in w.chunks_exact(16).zip(x.chunks_exact(16)) {
                            for l in 0..16 {
                                acc[r][k][l] += wq[l] * xq[l];
                            }
                        }
                    }
                }
            }
            for r in 0..R {
                let sc = self.scale(o + r, tile);
                for k in 0..T {
                    for l in 0..16 {
                        tot[r][k][l] += acc[r][k][l] * sc;
                    }
                }
            }
        }
        for r in 0..R {
            for k in 0..T {
                self.write(out, r, t0, k, tot[r][k].iter().sum(), nan[r]);
            }
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn fp8_avx512<const R: usize, const T: usize>(
    m: &Fp8Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let mut tot = [[_mm512_setzero_ps(); T]; R];
    let mut nan: [__mmask64; R] = [0; R];
    for tile in 0..m.tiles {
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let (c0, c1) = (2 * tile, (2 * tile + 2).min(m.nch));
        for c in c0..c1.min(m.full) {
            // SAFETY: c < full: 64 bytes from 64c lie inside each row.
            let ptrs = rows.map(|p| unsafe { p.add(c * PLAIN_CHUNK) });
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { chunk_avx512(&mut acc, &mut nan, ptrs, xs, c) };
        }
        if c1 > m.full {
            let bufs: [[u8; PLAIN_CHUNK]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
            let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
            // SAFETY: local 64-byte buffers; padded activation rows cover the chunk.
            unsafe { chunk_avx512(&mut acc, &mut nan, ptrs, xs, m.full) };
        }
        let unbias = _mm512_set1_ps(HALF_UNBIAS);
        for r in 0..R {
            let sc = _mm512_set1_ps(m.scale(o + r, tile));
            for k in 0..T {
                tot[r][k] = _mm512_fmadd_ps(_mm512_mul_ps(acc[r][k], unbias), sc, tot[r][k]);
            }
        }
    }
    for r in 0..R {
        for k in 0..T {
            m.write(out, r, t0, k, _mm512_reduce_add_ps(tot[r][k]), nan[r] != 0);
        }
    }
}

/// One 64-byte chunk of R rows against T activation rows, noting NaN codes in `nan[r]`.
///
/// # Safety
/// AVX-512 F/BW present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `64 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn chunk_avx512<const R: usize, const T: usize>(
    acc: &mut [[__m512; T]; R],
    nan: &mut [__mmask64; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
) {
    let low7 = _mm512_set1_epi8(0x7F);
    let field = _mm256_set1_epi16(HALF_MASK);
    for r in 0..R {
        // SAFETY: 64 readable bytes at w[r].
        let v = unsafe { _mm512_loadu_si512(w[r].cast()) };
        nan[r] |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(v, low7), low7);
    }
    for q in 0..4 {
        let mut wf = [_mm512_setzero_ps(); R];
        for r in 0..R {
            // SAFETY: 16q + 16 <= 64 readable bytes at w[r].
            let b = unsafe { _mm_loadu_si128(w[r].add(16 * q).cast()) };
            let half = _mm256_and_si256(_mm256_slli_epi16::<7>(_mm256_cvtepi8_epi16(b)), field);
            wf[r] = _mm512_cvtph_ps(half);
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
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fp8_avx2<const R: usize, const T: usize>(
    m: &Fp8Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let mut tot = [[_mm256_setzero_ps(); T]; R];
    let mut nan = [_mm256_setzero_si256(); R];
    for tile in 0..m.tiles {
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        let (c0, c1) = (2 * tile, (2 * tile + 2).min(m.nch));
        for c in c0..c1.min(m.full) {
            // SAFETY: c < full: 64 bytes from 64c lie inside each row.
            let ptrs = rows.map(|p| unsafe { p.add(c * PLAIN_CHUNK) });
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { chunk_avx2(&mut acc, &mut nan, ptrs, xs, c) };
        }
        if c1 > m.full {
            let bufs: [[u8; PLAIN_CHUNK]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
            let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
            // SAFETY: local 64-byte buffers; padded activation rows cover the chunk.
            unsafe { chunk_avx2(&mut acc, &mut nan, ptrs, xs, m.full) };
        }
        let unbias = _mm256_set1_ps(HALF_UNBIAS);
        for r in 0..R {
            let sc = _mm256_set1_ps(m.scale(o + r, tile));
            for k in 0..T {
                tot[r][k] = _mm256_fmadd_ps(_mm256_mul_ps(acc[r][k], unbias), sc, tot[r][k]);
            }
        }
    }
    for r in 0..R {
        let has_nan = _mm256_movemask_epi8(nan[r]) != 0;
        for k in 0..T {
            m.write(out, r, t0, k, super::simd::hsum256(tot[r][k]), has_nan);
        }
    }
}

/// One 64-byte chunk of R rows against T activation rows, eight lanes at a time; NaN codes
/// set bytes of `nan[r]`.
///
/// # Safety
/// AVX2 and FMA present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `64 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn chunk_avx2<const R: usize, const T: usize>(
    acc: &mut [[__m256; T]; R],
    nan: &mut [__m256i; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
) {
    let low7 = _mm256_set1_epi8(0x7F);
    let field = _mm_set1_epi16(HALF_MASK);
    for r in 0..R {
        for h in 0..2 {
            // SAFETY: 32h + 32 <= 64 readable bytes at w[r].
            let v = unsafe { _mm256_loadu_si256(w[r].add(32 * h).cast()) };
            let hit = _mm256_cmpeq_epi8(_mm256_and_si256(v, low7), low7);
            nan[r] = _mm256_or_si256(nan[r], hit);
        }
    }
    for q in 0..8 {
        let mut wf = [_mm256_setzero_ps(); R];
        for r in 0..R {
            // SAFETY: 8q + 8 <= 64 readable bytes at w[r].
            let b = unsafe { _mm_loadl_epi64(w[r].add(8 * q).cast()) };
            let half = _mm_and_si128(_mm_slli_epi16::<7>(_mm_cvtepi8_epi16(b)), field);
            wf[r] = _mm256_cvtph_ps(half);
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
