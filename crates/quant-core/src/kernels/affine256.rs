//! Fused kernels of the 136-byte affine 4-bit family: mq4-g256-v2, hfq4-g256, mq4-g256 and
//! mq4c-g256 (stored domain; `gemm` rotates the activations of the rotated ones first).
//!
//! A row is I/256 blocks of 136 bytes: an 8-byte header, then 128 bytes of nibbles, weight
//! 2b the low nibble of payload byte b, q in [0, 15], `w = q * scale + zero`. Headers:
//! - mq4-g256-v2: two (fp16 scale low half, fp16 zero high half) u32 words, for weights
//!   0..128 and 128..256 of the block;
//! - hfq4-g256 / mq4-g256: f32 scale, f32 zero for all 256;
//! - mq4c-g256: fp16 scale, fp16 zero, 4 pad bytes.
//!
//! Per span sharing one (scale, zero), the 16 decoded weights `q·s + z` (q = 0..15) are
//! computed once into a register table (one FMA, so each is the exactly rounded f32 of the
//! weight, as a decode to f32 would give), and the nibbles index it with the int4 chunk code
//! (see [`super::int4`]): no scale is applied after the fact. A span is one 128-weight
//! chunk for mq4-g256-v2 and two for the 256-weight headers.
//!
//! Splitting the sum instead (`s·Σ q·x + z·Σ x`, the usual trick) cancels two large terms:
//! uncentred it measured 1.2e-5 of Σ|w·x| on outlier rows, centred on q = 8 up to 1.6e-5 on
//! one-sided blocks, against the 1e-5 bound; the table costs less and cancels nothing.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::NIBBLE_CHUNK;
use super::int4::{CHUNK_BYTES, nib_chunk_portable};
use super::{Activations, Layout, Micro, RowKernel, SimdLevel, drive, prefetch};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;
use half::f16;

#[cfg(target_arch = "x86_64")]
use super::int4::{nib_chunk_avx2, nib_chunk_avx512};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Bytes of one 256-weight block, header included.
const BLOCK_BYTES: usize = 136;
/// Bytes before the nibbles.
const HEADER_BYTES: usize = 8;
/// Nibble chunks in a block (a chunk is one v2 half).
const BLOCK_CHUNKS: usize = 256 / NIBBLE_CHUNK;

/// Each nibble code's value.
const CODES: [f32; 16] = [
    0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.,
];

/// The kernel of one header kind; [`kernel_for`](super::kernel_for) picks the static.
pub struct Affine256Kernel(Header);

/// mq4-g256-v2.
pub static MQ4_V2: Affine256Kernel = Affine256Kernel(Header::F16Halves);
/// hfq4-g256 and mq4-g256.
pub static HFQ4: Affine256Kernel = Affine256Kernel(Header::F32);
/// mq4c-g256.
pub static MQ4C: Affine256Kernel = Affine256Kernel(Header::F16);

/// How a block header stores its (scale, zero) pairs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Header {
    /// Two fp16 pairs, one per 128 weights (mq4-g256-v2).
    F16Halves,
    /// One f32 pair (hfq4-g256, mq4-g256).
    F32,
    /// One fp16 pair and 4 pad bytes (mq4c-g256).
    F16,
}

impl Header {
    /// Spans (scale/zero pairs) a block.
    const fn spans(self) -> usize {
        match self {
            Header::F16Halves => 2,
            Header::F32 | Header::F16 => 1,
        }
    }
    /// (scale, zero) of span `sp` from a block's 8 header bytes, in plain Rust.
    #[inline]
    fn read(self, h: &[u8], sp: usize) -> (f32, f32) {
        let f16_at = |at: usize| f16::from_le_bytes([h[at], h[at + 1]]).to_f32();
        match self {
            Header::F16Halves => (f16_at(4 * sp), f16_at(4 * sp + 2)),
            Header::F32 => (read_f32(h, 0), read_f32(h, 4)),
            Header::F16 => (f16_at(0), f16_at(2)),
        }
    }
}

impl RowKernel for Affine256Kernel {
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
        let m = AffineMicro {
            t,
            a,
            header: self.0,
            blocks: t.cols() / 256,
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

struct AffineMicro<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    header: Header,
    /// 256-weight blocks a row (I % 256 == 0 is checked by `QTensor::new`).
    blocks: usize,
}

impl Micro for AffineMicro<'_, '_> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX-512 (with F16C) present, rows and tile in range.
        unsafe { affine_avx512::<R, T>(self, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2 (with FMA, F16C) present, rows and tile in range.
        unsafe { affine_avx2::<R, T>(self, o, t0, out) }
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        let xs: [&[f32]; T] = std::array::from_fn(|k| self.a.row(t0 + k));
        let rows: [&[u8]; R] = std::array::from_fn(|r| self.t.row(o + r));
        let spans = self.header.spans();
        let cps = BLOCK_CHUNKS / spans;
        let mut acc = [[[0f32; 16]; T]; R];
        for j in 0..self.blocks {
            for sp in 0..spans {
                let tables: [[f32; 16]; R] = std::array::from_fn(|r| {
                    let (s, z) = self.header.read(&rows[r][j * BLOCK_BYTES..], sp);
                    CODES.map(|q| q.mul_add(s, z))
                });
                for c in sp * cps..(sp + 1) * cps {
                    let bytes: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| {
                        let at = j * BLOCK_BYTES + HEADER_BYTES + c * CHUNK_BYTES;
                        rows[r][at..at + CHUNK_BYTES]
                            .try_into()
                            .unwrap_or([0; CHUNK_BYTES])
                    });
                    nib_chunk_portable(&mut acc, &bytes, &xs, j * BLOCK_CHUNKS + c, &tables);
                }
            }
        }
        for r in 0..R {
            for k in 0..T {
                out[r * self.a.s + t0 + k] = acc[r][k].iter().sum();
            }
        }
    }
}

/// (scale, zero) of span `sp` from the 8 header bytes at `h`, with F16C for the fp16 ones.
///
/// # Safety
/// F16C present; 8 readable bytes at `h`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "f16c")]
unsafe fn header_x86(header: Header, h: *const u8, sp: usize) -> (f32, f32) {
    // SAFETY: 8 readable bytes at h.
    let word = unsafe { h.cast::<u64>().read_unaligned() };
    match header {
        Header::F16Halves | Header::F16 => {
            let v = _mm_cvtph_ps(_mm_cvtsi64_si128((word >> (32 * sp)) as i64));
            let s = _mm_cvtss_f32(v);
            let z = _mm_cvtss_f32(_mm_movehdup_ps(v));
            (s, z)
        }
        Header::F32 => (
            f32::from_bits(word as u32),
            f32::from_bits((word >> 32) as u32),
        ),
    }
}

/// # Safety
/// AVX-512 F/BW/VL and F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn affine_avx512<const R: usize, const T: usize>(
    m: &AffineMicro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: CODES is 16 f32.
    let codes = unsafe { _mm512_loadu_ps(CODES.as_ptr()) };
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let spans = m.header.spans();
    let cps = BLOCK_CHUNKS / spans;
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let ahead = prefetch::per_stream(R);
    for j in 0..m.blocks {
        prefetch::rows(&rows, j * BLOCK_BYTES, BLOCK_BYTES, ahead);
        // SAFETY: j < blocks: the block's 136 bytes lie inside each row.
        let blk = rows.map(|p| unsafe { p.add(j * BLOCK_BYTES) });
        for sp in 0..spans {
            let tables: [__m512; R] = std::array::from_fn(|r| {
                // SAFETY: the block's 8 header bytes are readable.
                let (s, z) = unsafe { header_x86(m.header, blk[r], sp) };
                _mm512_fmadd_ps(codes, _mm512_set1_ps(s), _mm512_set1_ps(z))
            });
            for c in sp * cps..(sp + 1) * cps {
                // SAFETY: header + 64(c + 1) <= 136 bytes of the block.
                let ptrs = blk.map(|p| unsafe { p.add(HEADER_BYTES + c * CHUNK_BYTES) });
                // SAFETY: 64 readable bytes at each pointer; activation rows hold I floats.
                unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, j * BLOCK_CHUNKS + c, tables) };
            }
        }
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = _mm512_reduce_add_ps(acc[r][k]);
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn affine_avx2<const R: usize, const T: usize>(
    m: &AffineMicro<'_, '_>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let spans = m.header.spans();
    let cps = BLOCK_CHUNKS / spans;
    let mut tot = [[[_mm256_setzero_ps(); 2]; T]; R];
    let ahead = prefetch::per_stream(R);
    for j in 0..m.blocks {
        prefetch::rows(&rows, j * BLOCK_BYTES, BLOCK_BYTES, ahead);
        // SAFETY: j < blocks: the block's 136 bytes lie inside each row.
        let blk = rows.map(|p| unsafe { p.add(j * BLOCK_BYTES) });
        for sp in 0..spans {
            // SAFETY: the block's 8 header bytes are readable.
            let hdr: [(f32, f32); R] =
                std::array::from_fn(|r| unsafe { header_x86(m.header, blk[r], sp) });
            // AVX2 has no 16-entry register table: each code is decoded as q·s + z by an FMA.
            let muls = hdr.map(|h| _mm256_set1_ps(h.0));
            let adds = hdr.map(|h| _mm256_set1_ps(h.1));
            for c in sp * cps..(sp + 1) * cps {
                // SAFETY: header + 64(c + 1) <= 136 bytes of the block.
                let ptrs = blk.map(|p| unsafe { p.add(HEADER_BYTES + c * CHUNK_BYTES) });
                // SAFETY: 64 readable bytes at each pointer; activation rows hold I floats.
                unsafe { nib_chunk_avx2(&mut tot, ptrs, xs, j * BLOCK_CHUNKS + c, muls, adds) };
            }
        }
    }
    for r in 0..R {
        for k in 0..T {
            let v = _mm256_add_ps(tot[r][k][0], tot[r][k][1]);
            out[r * m.a.s + t0 + k] = super::simd::hsum256(v);
        }
    }
}
