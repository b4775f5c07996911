//! Fused int4 kernels: int4-row (fmt=2) and int4-g{16,32,48,64,96,128,192,256} (fmt=4).
//!
//! Layout: `(I+1)/2` bytes a row, weight 2b the low nibble of byte b, 2b+1 the high nibble,
//! value = nibble - 8. int4-row has one f32 scale per row; int4-g{gs} one f32 scale per gs
//! weights along I, `scale[o * ceil(I/gs) + i/gs]`, partial last group allowed.
//!
//! A row is walked in chunks of 64 bytes (128 weights), one plain 512-bit load each. Lane l
//! of the load holds bytes 4l..4l+3, whose nibble j (bits 4j..4j+3) is weight 8l + j. Eight
//! `vpermps` against a 16-entry register table (it reads only the low 4 bits of a lane, so no
//! mask is needed) after shifts by 4j turn the chunk into eight vectors of 16 floats; the
//! activations are laid out to match ([`Layout::Nibble`]: vector j of a chunk holds
//! x[8l + j]). That costs one shuffle per 16 weights (plus seven cheap shifts per 128) —
//! Zen 4's two shuffle pipes are this loop's bottleneck, and a zero-extending load per 16
//! bytes would add half a shuffle more. Every product (q-8)·x is formed exactly; only the
//! f32 accumulation rounds.
//!
//! Group scales are folded per group, never once at the end: each lane holds 8 consecutive
//! weights, which always lie in one group (every gs is a multiple of 8), so a chunk's partial
//! sums are multiplied lane by lane by their groups' scales and added into the row total.
//! int4-row multiplies its one scale at the end.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::{
    Activations, Layout, Micro, NIBBLE_CHUNK, RowKernel, SimdLevel, drive, prefetch, tail_chunk,
};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Bytes one nibble chunk occupies.
pub(crate) const CHUNK_BYTES: usize = NIBBLE_CHUNK / 2;
/// Weights one lane of a chunk holds.
const LANE_WEIGHTS: usize = NIBBLE_CHUNK / 16;

/// Decoded value of each nibble for int4 (offset binary, q - 8).
pub(crate) const SIGNED_TABLE: [f32; 16] = [
    -8., -7., -6., -5., -4., -3., -2., -1., 0., 1., 2., 3., 4., 5., 6., 7.,
];

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
        let gs = t.format().spec().group_size().map(|g| g as usize);
        let g = gs.unwrap_or(0);
        // Chunk c starts (128c mod gs) into its first group, which repeats with this period.
        let period = if g == 0 { 1 } else { g / gcd(g, NIBBLE_CHUNK) };
        let lane_groups = std::array::from_fn(|p| {
            std::array::from_fn(|l| {
                let first = (p * NIBBLE_CHUNK).checked_rem(g).unwrap_or(0);
                (first + l * LANE_WEIGHTS).checked_div(g).unwrap_or(0) as u32
            })
        });
        let m = Int4Micro {
            t,
            a,
            gs: g,
            ng: gs.map_or(1, |g| cols.div_ceil(g)),
            nch: cols.div_ceil(NIBBLE_CHUNK),
            full: t.row_bytes() / CHUNK_BYTES,
            period,
            lane_groups,
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

struct Int4Micro<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    /// Weights a group scale covers; 0 for int4-row (one scale a row).
    gs: usize,
    /// Scales a row.
    ng: usize,
    /// Chunks a row, the partial one included.
    nch: usize,
    /// Whole 64-byte chunks a row.
    full: usize,
    /// Chunks after which the lane-to-group pattern repeats (at most [`MAX_PERIOD`]).
    period: usize,
    /// For chunk phase p = c mod period: lane l's group, counted from the chunk's first.
    lane_groups: [[u32; 16]; MAX_PERIOD],
}

/// The longest period of lane-to-group patterns over the group sizes (48, 96, 192 give 3).
const MAX_PERIOD: usize = 3;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Int4Micro<'_, '_> {
    #[inline]
    fn scale(&self, o: usize, g: usize) -> f32 {
        read_f32(self.t.scales(), 4 * (o * self.ng + g.min(self.ng - 1)))
    }
    /// The scale of each lane of chunk `c` of row `o` (lane l: weights 128c + 8l ..+8).
    #[inline]
    fn lane_scales(&self, o: usize, c: usize) -> [f32; 16] {
        std::array::from_fn(|l| self.scale(o, (c * NIBBLE_CHUNK + l * LANE_WEIGHTS) / self.gs))
    }
    /// Chunk `c` of row `o` as 64 bytes, zero-padded past the row's end.
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
        for c in 0..self.nch {
            let bytes: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| self.chunk(o + r, c));
            let mut acc = [[[0f32; 16]; T]; R];
            nib_chunk_portable(&mut acc, &bytes, &xs, c, &[SIGNED_TABLE; R]);
            for r in 0..R {
                let sc = if self.gs == 0 {
                    [1.0; 16]
                } else {
                    self.lane_scales(o + r, c)
                };
                for k in 0..T {
                    for l in 0..16 {
                        tot[r][k][l] += acc[r][k][l] * sc[l];
                    }
                }
            }
        }
        for r in 0..R {
            let d = if self.gs == 0 {
                self.scale(o + r, 0)
            } else {
                1.0
            };
            for k in 0..T {
                out[r * self.a.s + t0 + k] = tot[r][k].iter().sum::<f32>() * d;
            }
        }
    }
}

/// One nibble chunk (64 bytes = 128 weights) into 16-lane accumulators, lane l holding
/// weights 128c + 8l ..+8: `acc[r][k][l] += Σ_j tables[r][nibble j of lane l] * x[j][l]`
/// (the [`Layout::Nibble`] order).
#[inline]
pub(crate) fn nib_chunk_portable<const R: usize, const T: usize>(
    acc: &mut [[[f32; 16]; T]; R],
    bytes: &[[u8; CHUNK_BYTES]; R],
    xs: &[&[f32]; T],
    c: usize,
    tables: &[[f32; 16]; R],
) {
    for r in 0..R {
        let lanes: [u32; 16] = std::array::from_fn(|l| {
            u32::from_le_bytes([
                bytes[r][4 * l],
                bytes[r][4 * l + 1],
                bytes[r][4 * l + 2],
                bytes[r][4 * l + 3],
            ])
        });
        for j in 0..LANE_WEIGHTS {
            let q: [f32; 16] =
                std::array::from_fn(|l| tables[r][((lanes[l] >> (4 * j)) & 15) as usize]);
            for k in 0..T {
                let x = &xs[k][c * NIBBLE_CHUNK + 16 * j..c * NIBBLE_CHUNK + 16 * (j + 1)];
                for l in 0..16 {
                    acc[r][k][l] += q[l] * x[l];
                }
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
    let ahead = prefetch::per_stream(R);
    if m.gs == 0 {
        // One scale a row: accumulate straight into the totals.
        for c in 0..m.full {
            prefetch::rows(&rows, c * CHUNK_BYTES, CHUNK_BYTES, ahead);
            // SAFETY: c < full: 64 bytes from 64c lie inside each row.
            let ptrs = rows.map(|p| unsafe { p.add(c * CHUNK_BYTES) });
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { nib_chunk_avx512(&mut tot, ptrs, xs, c, [table; R]) };
        }
        if m.full < m.nch {
            let bufs: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| m.chunk(o + r, m.full));
            let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
            // SAFETY: local 64-byte buffers; the padded activation rows cover the chunk.
            unsafe { nib_chunk_avx512(&mut tot, ptrs, xs, m.full, [table; R]) };
        }
        for r in 0..R {
            let d = m.scale(o + r, 0);
            for k in 0..T {
                out[r * m.a.s + t0 + k] = _mm512_reduce_add_ps(tot[r][k]) * d;
            }
        }
        return;
    }
    let scales: [*const f32; R] = std::array::from_fn(|r| {
        // SAFETY: row o + r owns ng scales from (o + r) * ng; the pointer stays in bounds.
        unsafe { m.t.scales().as_ptr().add(4 * (o + r) * m.ng).cast::<f32>() }
    });
    // First group of the current chunk, offset of the chunk in it, phase of the pattern.
    let (mut g0, mut off, mut phase) = (0usize, 0usize, 0usize);
    for c in 0..m.nch {
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        if c < m.full {
            prefetch::rows(&rows, c * CHUNK_BYTES, CHUNK_BYTES, ahead);
            // SAFETY: c < full: 64 bytes from 64c lie inside each row.
            let ptrs = rows.map(|p| unsafe { p.add(c * CHUNK_BYTES) });
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, c, [table; R]) };
        } else {
            let bufs: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| m.chunk(o + r, c));
            let ptrs: [*const u8; R] = std::array::from_fn(|r| bufs[r].as_ptr());
            // SAFETY: local 64-byte buffers; the padded activation rows cover the chunk.
            unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, c, [table; R]) };
        }
        // The (up to 16) scales this chunk's lanes use, spread to their lanes. Lanes past the
        // row's last group read a masked-out zero; their activations are zero padding.
        // SAFETY: lane_groups rows are 16 u32.
        let idx = unsafe { _mm512_loadu_si512(m.lane_groups[phase].as_ptr().cast()) };
        let valid = (m.ng - g0).min(16);
        let mask = ((1u32 << valid) - 1) as __mmask16;
        for r in 0..R {
            // SAFETY: the masked load reads only the `valid` scales g0..g0+valid of row o + r.
            let got = unsafe { _mm512_maskz_loadu_ps(mask, scales[r].add(g0)) };
            let sc = _mm512_permutexvar_ps(idx, got);
            for k in 0..T {
                tot[r][k] = _mm512_fmadd_ps(acc[r][k], sc, tot[r][k]);
            }
        }
        off += NIBBLE_CHUNK;
        while off >= m.gs {
            off -= m.gs;
            g0 += 1;
        }
        phase = if phase + 1 == m.period { 0 } else { phase + 1 };
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = _mm512_reduce_add_ps(tot[r][k]);
        }
    }
}

/// One nibble chunk (64 bytes = 128 weights) of R rows against T activation rows:
/// `acc[r][k] += Σ_j tables[r][nibble j] * x[j]`.
///
/// # Safety
/// AVX-512 F present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `128 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn nib_chunk_avx512<const R: usize, const T: usize>(
    acc: &mut [[__m512; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
    tables: [__m512; R],
) {
    // SAFETY: 64 readable bytes at w[r].
    let mut v: [__m512i; R] = std::array::from_fn(|r| unsafe { _mm512_loadu_si512(w[r].cast()) });
    for j in 0..LANE_WEIGHTS {
        let mut q = [_mm512_setzero_ps(); R];
        for r in 0..R {
            q[r] = _mm512_permutexvar_ps(v[r], tables[r]);
            v[r] = _mm512_srli_epi32::<4>(v[r]);
        }
        for k in 0..T {
            // SAFETY: 128c + 16j + 16 <= 128(c + 1) floats readable at xs[k].
            let x = unsafe { _mm512_loadu_ps(xs[k].add(c * NIBBLE_CHUNK + 16 * j)) };
            for r in 0..R {
                acc[r][k] = _mm512_fmadd_ps(q[r], x, acc[r][k]);
            }
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
    let (one, off) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-8.0));
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let ahead = prefetch::per_stream(R);
    // Chunk c of every row: in place when whole, else zero-padded into `bufs`.
    let chunk = |c: usize, bufs: &mut [[u8; CHUNK_BYTES]; R]| -> [*const u8; R] {
        std::array::from_fn(|r| {
            if c < m.full {
                prefetch::lines(rows[r], c * CHUNK_BYTES, CHUNK_BYTES, ahead);
                // SAFETY: c < full: 64 bytes from 64c lie inside the row.
                unsafe { rows[r].add(c * CHUNK_BYTES) }
            } else {
                bufs[r] = m.chunk(o + r, c);
                bufs[r].as_ptr()
            }
        })
    };
    let mut bufs = [[0u8; CHUNK_BYTES]; R];
    let mut tot = [[[_mm256_setzero_ps(); 2]; T]; R];
    if m.gs == 0 {
        // One scale a row: accumulate straight into the totals.
        for c in 0..m.nch {
            let ptrs = chunk(c, &mut bufs);
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { nib_chunk_avx2(&mut tot, ptrs, xs, c, [one; R], [off; R]) };
        }
    } else {
        let scales: [*const f32; R] = std::array::from_fn(|r| {
            // SAFETY: row o + r owns ng scales from (o + r) * ng; the pointer stays in bounds.
            unsafe { m.t.scales().as_ptr().add(4 * (o + r) * m.ng).cast::<f32>() }
        });
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        // First group of the current chunk, offset of the chunk in it, phase of the pattern.
        let (mut g0, mut gin, mut phase) = (0usize, 0usize, 0usize);
        for c in 0..m.nch {
            let ptrs = chunk(c, &mut bufs);
            let mut acc = [[[_mm256_setzero_ps(); 2]; T]; R];
            // SAFETY: 64 readable bytes at each pointer; padded activation rows hold chunk c.
            unsafe { nib_chunk_avx2(&mut acc, ptrs, xs, c, [one; R], [off; R]) };
            // A chunk's 16 lanes lie in at most 8 groups (every gs >= 16), counted from g0:
            // load those scales once (lanes past the row's last group masked to zero; their
            // activations are zero padding) and spread them to each half's lanes.
            let valid = (m.ng - g0).min(8) as i32;
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), lane);
            // SAFETY: lane_groups rows are 16 u32: halves at 0 and 8.
            let idx: [__m256i; 2] = std::array::from_fn(|h| unsafe {
                _mm256_loadu_si256(m.lane_groups[phase].as_ptr().add(8 * h).cast())
            });
            for r in 0..R {
                // SAFETY: the masked load reads only the `valid` scales g0.. of row o + r.
                let got = unsafe { _mm256_maskload_ps(scales[r].add(g0), mask) };
                for h in 0..2 {
                    let s = _mm256_permutevar8x32_ps(got, idx[h]);
                    for k in 0..T {
                        tot[r][k][h] = _mm256_fmadd_ps(acc[r][k][h], s, tot[r][k][h]);
                    }
                }
            }
            gin += NIBBLE_CHUNK;
            while gin >= m.gs {
                gin -= m.gs;
                g0 += 1;
            }
            phase = if phase + 1 == m.period { 0 } else { phase + 1 };
        }
    }
    for r in 0..R {
        let d = if m.gs == 0 { m.scale(o + r, 0) } else { 1.0 };
        for k in 0..T {
            let v = _mm256_add_ps(tot[r][k][0], tot[r][k][1]);
            out[r * m.a.s + t0 + k] = super::simd::hsum256(v) * d;
        }
    }
}

/// One nibble chunk of R rows against T activation rows, as two halves of eight lanes
/// (lanes 8h..8h+8 in `acc[r][k][h]`): `acc += Σ_j (nibble j · muls[r] + adds[r]) * x[j]`,
/// the code decoded by one FMA (AVX2 has no 16-entry register table).
///
/// # Safety
/// AVX2 and FMA present; each `w[r]` points at 64 readable bytes; each `xs[k]` at
/// `128 * (c + 1)` readable floats.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn nib_chunk_avx2<const R: usize, const T: usize>(
    acc: &mut [[[__m256; 2]; T]; R],
    w: [*const u8; R],
    xs: [*const f32; T],
    c: usize,
    muls: [__m256; R],
    adds: [__m256; R],
) {
    let mask = _mm256_set1_epi32(15);
    for h in 0..2 {
        // SAFETY: 32h + 32 <= 64 readable bytes at w[r].
        let mut v: [__m256i; R] =
            std::array::from_fn(|r| unsafe { _mm256_loadu_si256(w[r].add(32 * h).cast()) });
        for j in 0..LANE_WEIGHTS {
            let mut q = [_mm256_setzero_ps(); R];
            for r in 0..R {
                let code = _mm256_cvtepi32_ps(_mm256_and_si256(v[r], mask));
                q[r] = _mm256_fmadd_ps(code, muls[r], adds[r]);
                v[r] = _mm256_srli_epi32::<4>(v[r]);
            }
            for k in 0..T {
                // SAFETY: 128c + 16j + 8h + 8 <= 128(c + 1) floats readable at xs[k].
                let x = unsafe { _mm256_loadu_ps(xs[k].add(c * NIBBLE_CHUNK + 16 * j + 8 * h)) };
                for r in 0..R {
                    acc[r][k][h] = _mm256_fmadd_ps(q[r], x, acc[r][k][h]);
                }
            }
        }
    }
}
