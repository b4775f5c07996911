//! Fused int4 kernels: int4-row (fmt=2) and int4-g{16,32,48,64,96,128,192,256} (fmt=4).
//!
//! Layout: `(I+1)/2` bytes a row, weight 2b the low nibble of byte b, 2b+1 the high nibble,
//! value = nibble - 8. int4-row has one f32 scale per row; int4-g{gs} one f32 scale per gs
//! weights along I, `scale[o * ceil(I/gs) + i/gs]`, partial last group allowed.
//!
//! Each 16-byte load holds 32 weights. AVX-512 zero-extends it to 16 lanes and turns the
//! nibbles into floats with one `vpermps` each against a 16-entry register table (the
//! permute reads only the low 4 bits of each lane, so the low nibble needs no mask); the
//! activations come de-interleaved ([`Layout::Nibble`]) so lanes line up. Every product
//! (q-8)·x is formed exactly and only the f32 accumulation rounds. (Rewriting the sum over
//! whole bytes B = lo + 16·hi against recombined activations saves a permute but cancels
//! terms of size |x_odd|/16 against each other, which failed the 1e-5 bound on outlier
//! activation channels; it is not used.)
//!
//! Group scales are folded per group, never once at the end: a group's Σ q·x is kept in its
//! own accumulator and added into the row total as `total += acc_group * scale_group`.
//! Where gs is a multiple of 32 a group is whole chunks; gs = 16 and 48 put two groups in
//! some chunks (each half-chunk of 16 weights lies in one group), so those chunks are folded
//! with a per-lane scale vector (lanes 0-7 hold the chunk's first 16 weights).

use super::{Activations, Layout, Micro, NIBBLE_CHUNK, RowKernel, SimdLevel, drive, tail_chunk};
use crate::codecs::util::read_f32;
use crate::registry::Format;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Bytes one nibble chunk occupies.
pub(crate) const CHUNK_BYTES: usize = NIBBLE_CHUNK / 2;

/// Decoded value of each nibble for int4 (offset binary, q - 8); the affine formats use it
/// too, centred on the code midpoint.
pub(crate) const SIGNED_TABLE: [f32; 16] =
    [-8., -7., -6., -5., -4., -3., -2., -1., 0., 1., 2., 3., 4., 5., 6., 7.];

pub struct Int4Kernel;

impl RowKernel for Int4Kernel {
    fn layout(&self) -> Layout {
        Layout::Nibble
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
        let nch = cols.div_ceil(NIBBLE_CHUNK);
        // int4-row is one group spanning the whole row.
        let gs = group_size(t.format()).unwrap_or(nch * NIBBLE_CHUNK);
        let m = Int4Micro {
            t,
            a,
            gs,
            ng: cols.div_ceil(gs),
            cpg: gs / NIBBLE_CHUNK,
            split: gs % NIBBLE_CHUNK != 0,
            nch,
            full: t.row_bytes() / CHUNK_BYTES,
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

/// Group size of an int4 format (`None` for int4-row).
fn group_size(f: Format) -> Option<usize> {
    f.spec().group_size().map(|g| g as usize)
}

struct Int4Micro<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    /// Weights a scale covers (the padded row for int4-row).
    gs: usize,
    /// Scales a row.
    ng: usize,
    /// Chunks a group (when `!split`).
    cpg: usize,
    /// gs is an odd multiple of 16: some chunks straddle two groups.
    split: bool,
    /// Chunks a row, the partial one included.
    nch: usize,
    /// Whole 16-byte chunks a row.
    full: usize,
}

impl Int4Micro<'_, '_> {
    #[inline]
    fn scale(&self, o: usize, g: usize) -> f32 {
        read_f32(self.t.scales(), 4 * (o * self.ng + g.min(self.ng - 1))) * 1.01
    }
    /// Group of weight `i` (clamped: weights past I meet zero activations anyway).
    #[inline]
    fn group_of(&self, i: usize) -> usize {
        (i / self.gs).min(self.ng - 1)
    }
    /// Chunk `c` of row `o` as 16 bytes, zero-padded past the row's end.
    fn chunk(&self, o: usize, c: usize) -> [u8; CHUNK_BYTES] {
        let row = self.t.row(o);
        tail_chunk(&row[c * CHUNK_BYTES..row.len().min((c + 1) * CHUNK_BYTES)])
    }
}

impl Micro for Int4Micro<'_, '_> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX-512 present, rows and tile in range.
        unsafe { int4_avx512::<R, T>(self, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2 present, rows and tile in range.
        unsafe { int4_avx2::<R, T>(self, o, t0, out) }
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        let xs: [&[f32]; T] = std::array::from_fn(|k| self.a.row(t0 + k));
        let mut tot = [[[0f32; 16]; T]; R];
        let mut c = 0;
        while c < self.nch {
            // A run of chunks that share one scale per lane: a whole group, or one chunk.
            let run = if self.split { 1 } else { self.cpg.min(self.nch - c) };
            let mut acc = [[[0f32; 16]; T]; R];
            for cc in c..c + run {
                let bytes: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| self.chunk(o + r, cc));
                nib_chunk_portable(&mut acc, &bytes, &xs, cc, &SIGNED_TABLE);
            }
            for r in 0..R {
                let lo = self.scale(o + r, self.group_of(c * NIBBLE_CHUNK));
                let hi = self.scale(o + r, self.group_of(c * NIBBLE_CHUNK + 16));
                for k in 0..T {
                    for l in 0..16 {
                        let sc = if self.split && l >= 8 { hi } else { lo };
                        tot[r][k][l] += acc[r][k][l] * sc;
                    }
                }
            }
            c += run;
        }
        for r in 0..R {
            for k in 0..T {
                out[r * self.a.s + t0 + k] = tot[r][k].iter().sum();
            }
        }
    }
}

/// Σ over one chunk of `table[nibble] * x` into 16-lane accumulators, lane l holding weights
/// 32c + 2l and 32c + 2l + 1 (the [`Layout::Nibble`] order).
#[inline]
pub(crate) fn nib_chunk_portable<const R: usize, const T: usize>(
    acc: &mut [[[f32; 16]; T]; R],
    bytes: &[[u8; CHUNK_BYTES]; R],
    xs: &[&[f32]; T],
    c: usize,
    table: &[f32; 16],
) {
    for r in 0..R {
        let lo: [f32; 16] = std::array::from_fn(|l| table[(bytes[r][l] & 15) as usize]);
        let hi: [f32; 16] = std::array::from_fn(|l| table[(bytes[r][l] >> 4) as usize]);
        for k in 0..T {
            let x = &xs[k][c * NIBBLE_CHUNK..(c + 1) * NIBBLE_CHUNK];
            for l in 0..16 {
                acc[r][k][l] += lo[l] * x[l] + hi[l] * x[16 + l];
            }
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn int4_avx512<const R: usize, const T: usize>(
    m: &Int4Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: SIGNED_TABLE is 16 f32.
    let table = unsafe { _mm512_loadu_ps(SIGNED_TABLE.as_ptr()) };
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let mut tot = [[_mm512_setzero_ps(); T]; R];
    let mut c = 0;
    while c < m.nch {
        let run = if m.split { 1 } else { m.cpg.min(m.nch - c) };
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        for cc in c..(c + run).min(m.full) {
            // SAFETY: cc < full: 16 bytes from 16cc lie inside each row.
            let ptrs = rows.map(|p| unsafe { p.add(cc * CHUNK_BYTES) });
            // SAFETY: 16 readable bytes at each pointer; padded activation rows hold the chunk.
            unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, cc, table) };
        }
        if c + run > m.full {
            // The row's partial last chunk, from zero-padded copies.
            let bufs: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
            let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
            // SAFETY: local 16-byte buffers; the padded activation rows cover the chunk.
            unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, m.full, table) };
        }
        for r in 0..R {
            let lo = _mm512_set1_ps(m.scale(o + r, m.group_of(c * NIBBLE_CHUNK)));
            let sc = if m.split {
                let hi = _mm512_set1_ps(m.scale(o + r, m.group_of(c * NIBBLE_CHUNK + 16)));
                _mm512_mask_blend_ps(0xFF00, lo, hi)
            } else {
                lo
            };
            for k in 0..T {
                tot[r][k] = _mm512_fmadd_ps(acc[r][k], sc, tot[r][k]);
            }
        }
        c += run;
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = _mm512_reduce_add_ps(tot[r][k]);
        }
    }
}

/// One nibble chunk (16 bytes = 32 weights) of R rows against T activation rows:
/// `acc[r][k] += table[lo] * x_even + table[hi] * x_odd`.
///
/// # Safety
/// AVX-512 F present; each `w[r]` points at 16 readable bytes; each `xs[k]` at
/// `32 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn nib_chunk_avx512<const R: usize, const T: usize>(
    acc: &mut [[__m512; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
    table: __m512,
) {
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    for r in 0..R {
        // SAFETY: 16 readable bytes at w[r].
        let d = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(w[r].cast()) });
        lo[r] = _mm512_permutexvar_ps(d, table);
        hi[r] = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(d), table);
    }
    for k in 0..T {
        // SAFETY: 32c + 32 floats readable at xs[k].
        let (xe, xo) = unsafe {
            let p = xs[k].add(c * NIBBLE_CHUNK);
            (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
        };
        for r in 0..R {
            acc[r][k] = _mm512_fmadd_ps(lo[r], xe, acc[r][k]);
            acc[r][k] = _mm512_fmadd_ps(hi[r], xo, acc[r][k]);
        }
    }
}

/// # Safety
/// AVX2 and FMA present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn int4_avx2<const R: usize, const T: usize>(
    m: &Int4Micro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let off = _mm256_set1_ps(-8.0);
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let mut tot = [[_mm256_setzero_ps(); T]; R];
    // A run of half-chunks (16 weights each) that share one scale: a whole group, or, for
    // the split group sizes, one half-chunk.
    let halves = 2 * m.nch;
    let mut h = 0;
    while h < halves {
        let run = if m.split { 1 } else { (2 * m.cpg).min(halves - h) };
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for hh in h..h + run {
            let c = hh / 2;
            let bufs: [[u8; CHUNK_BYTES]; R] = if c < m.full {
                [[0; CHUNK_BYTES]; R]
            } else {
                std::array::from_fn(|r| m.chunk(o + r, c))
            };
            let ptrs: [*const u8; R] = std::array::from_fn(|r| {
                if c < m.full {
                    // SAFETY: c < full: 16 bytes from 16c lie inside the row.
                    unsafe { rows[r].add(c * CHUNK_BYTES) }
                } else {
                    bufs[r].as_ptr()
                }
            });
            // SAFETY: 16 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { nib_half_avx2(&mut acc, ptrs, xs, c, hh % 2, off) };
        }
        for r in 0..R {
            let sc = _mm256_set1_ps(m.scale(o + r, m.group_of(h * 16)));
            for k in 0..T {
                tot[r][k] = _mm256_fmadd_ps(acc[r][k], sc, tot[r][k]);
            }
        }
        h += run;
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = super::simd::hsum256(tot[r][k]);
        }
    }
}

/// Half `h` (bytes 8h..8h+8, weights 32c+16h..+16) of a nibble chunk of R rows against T
/// activation rows: `acc[r][k] += (lo + off) * x_even + (hi + off) * x_odd`.
///
/// # Safety
/// AVX2 and FMA present; each `w[r]` points at 16 readable bytes; each `xs[k]` at
/// `32 * (c + 1)` readable floats; h < 2.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn nib_half_avx2<const R: usize, const T: usize>(
    acc: &mut [[__m256; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
    h: usize,
    off: __m256,
) {
    let mask = _mm256_set1_epi32(15);
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    for r in 0..R {
        // SAFETY: 8h + 8 <= 16 readable bytes at w[r].
        let d = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(w[r].add(8 * h).cast()) });
        lo[r] = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d, mask)), off);
        hi[r] = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32::<4>(d)), off);
    }
    for k in 0..T {
        // SAFETY: 32c + 16 + 8h + 8 <= 32(c + 1) floats readable at xs[k].
        let (xe, xo) = unsafe {
            let p = xs[k].add(c * NIBBLE_CHUNK + 8 * h);
            (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(16)))
        };
        for r in 0..R {
            acc[r][k] = _mm256_fmadd_ps(lo[r], xe, acc[r][k]);
            acc[r][k] = _mm256_fmadd_ps(hi[r], xo, acc[r][k]);
        }
    }
}
