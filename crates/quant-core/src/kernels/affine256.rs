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
//! Per span sharing one (scale, zero), centred on the code midpoint:
//! `Σ (q·s + z)·x = s·Σ (q-8)·x + (z + 8s)·Σ x`. Σ (q-8)·x is exactly int4's nibble sum
//! (the same chunk code and table, see [`super::int4`]) in the vector accumulators; Σ x of every
//! 128-span is computed once per call ([`Layout::NibbleWithSums`]), so the zero costs one
//! scalar multiply-add per span and row. Centring matters: an uncentred `s·Σ q·x + z·Σ x`
//! cancels two terms of size |z|·Σ|x| for a block of small weights in a wide range (an
//! outlier row), which measured 1.2e-5 of Σ|w·x| against the 1e-5 bound; centred, both
//! terms are the size of the result, and the zero term is summed in f64.

use super::int4::{CHUNK_BYTES, SIGNED_TABLE, nib_chunk_portable};
use super::{Activations, Layout, Micro, RowKernel, SimdLevel, drive};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;
use half::f16;

#[cfg(target_arch = "x86_64")]
use super::int4::{nib_chunk_avx512, nib_half_avx2};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Bytes of one 256-weight block, header included.
const BLOCK_BYTES: usize = 136;
/// Bytes before the nibbles.
const HEADER_BYTES: usize = 8;
/// Nibble chunks (32 weights) in a block.
const BLOCK_CHUNKS: usize = 8;

/// The code midpoint the sums are centred on.
const MID: f64 = 8.0;

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

/// The zero point seen from the centred codes: `q·s + z = (q-8)·s + (z + 8s)`, in f64.
#[inline]
fn centred_zero(s: f32, z: f32) -> f64 {
    z as f64 + MID * s as f64
}

impl RowKernel for Affine256Kernel {
    fn layout(&self) -> Layout {
        Layout::NibbleWithSums
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
        let m = AffineMicro { t, a, header: self.0, blocks: t.cols() / 256 };
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

impl AffineMicro<'_, '_> {
    /// Σ x of activation row `k` over span `sp` of block `j`.
    #[inline]
    fn span_sum(&self, k: usize, j: usize, sp: usize) -> f32 {
        let sums = &self.a.sums128[k * self.a.spans128..];
        match self.header {
            Header::F16Halves => sums[2 * j + sp],
            Header::F32 | Header::F16 => sums[2 * j] + sums[2 * j + 1],
        }
    }
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
        let mut tot = [[[0f32; 16]; T]; R];
        let mut zsum = [[0f64; T]; R];
        for j in 0..self.blocks {
            for sp in 0..spans {
                let mut acc = [[[0f32; 16]; T]; R];
                for c in sp * cps..(sp + 1) * cps {
                    let bytes: [[u8; CHUNK_BYTES]; R] = std::array::from_fn(|r| {
                        let at = j * BLOCK_BYTES + HEADER_BYTES + c * CHUNK_BYTES;
                        rows[r][at..at + CHUNK_BYTES].try_into().unwrap_or([0; CHUNK_BYTES])
                    });
                    nib_chunk_portable(
                        &mut acc,
                        &bytes,
                        &xs,
                        j * BLOCK_CHUNKS + c,
                        &SIGNED_TABLE,
                    );
                }
                for r in 0..R {
                    let (sc, z) = self.header.read(&rows[r][j * BLOCK_BYTES..], sp);
                    for k in 0..T {
                        for l in 0..16 {
                            tot[r][k][l] += acc[r][k][l] * sc;
                        }
                        zsum[r][k] += centred_zero(sc, z) * self.span_sum(t0 + k, j, sp) as f64;
                    }
                }
            }
        }
        for r in 0..R {
            for k in 0..T {
                out[r * self.a.s + t0 + k] = (tot[r][k].iter().sum::<f32>() as f64 + zsum[r][k]) as f32;
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
        Header::F32 => (f32::from_bits(word as u32), f32::from_bits((word >> 32) as u32)),
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
    // SAFETY: SIGNED_TABLE is 16 f32.
    let table = unsafe { _mm512_loadu_ps(SIGNED_TABLE.as_ptr()) };
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let spans = m.header.spans();
    let cps = BLOCK_CHUNKS / spans;
    let mut tot = [[_mm512_setzero_ps(); T]; R];
    let mut zsum = [[0f64; T]; R];
    for j in 0..m.blocks {
        // SAFETY: j < blocks: the block's 136 bytes lie inside each row.
        let blk = rows.map(|p| unsafe { p.add(j * BLOCK_BYTES) });
        for sp in 0..spans {
            let mut acc = [[_mm512_setzero_ps(); T]; R];
            for c in sp * cps..(sp + 1) * cps {
                // SAFETY: header + 16(c + 1) <= 136 bytes of the block.
                let ptrs = blk.map(|p| unsafe { p.add(HEADER_BYTES + c * CHUNK_BYTES) });
                // SAFETY: 16 readable bytes at each pointer; activation rows hold I floats.
                unsafe { nib_chunk_avx512(&mut acc, ptrs, xs, j * BLOCK_CHUNKS + c, table) };
            }
            for r in 0..R {
                // SAFETY: the block's 8 header bytes are readable.
                let (s, z) = unsafe { header_x86(m.header, blk[r], sp) };
                let sc = _mm512_set1_ps(s);
                for k in 0..T {
                    tot[r][k] = _mm512_fmadd_ps(acc[r][k], sc, tot[r][k]);
                    zsum[r][k] += centred_zero(s, z) * m.span_sum(t0 + k, j, sp) as f64;
                }
            }
        }
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = (_mm512_reduce_add_ps(tot[r][k]) as f64 + zsum[r][k]) as f32;
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
    let off = _mm256_set1_ps(-8.0);
    let xs: [*const f32; T] = std::array::from_fn(|k| m.a.row(t0 + k).as_ptr());
    let rows: [*const u8; R] = std::array::from_fn(|r| m.t.row(o + r).as_ptr());
    let spans = m.header.spans();
    let cps = BLOCK_CHUNKS / spans;
    let mut tot = [[_mm256_setzero_ps(); T]; R];
    let mut zsum = [[0f64; T]; R];
    for j in 0..m.blocks {
        // SAFETY: j < blocks: the block's 136 bytes lie inside each row.
        let blk = rows.map(|p| unsafe { p.add(j * BLOCK_BYTES) });
        for sp in 0..spans {
            let mut acc = [[_mm256_setzero_ps(); T]; R];
            for c in sp * cps..(sp + 1) * cps {
                // SAFETY: header + 16(c + 1) <= 136 bytes of the block.
                let ptrs = blk.map(|p| unsafe { p.add(HEADER_BYTES + c * CHUNK_BYTES) });
                for h in 0..2 {
                    // SAFETY: 16 readable bytes at each pointer; activation rows hold I floats.
                    unsafe { nib_half_avx2(&mut acc, ptrs, xs, j * BLOCK_CHUNKS + c, h, off) };
                }
            }
            for r in 0..R {
                // SAFETY: the block's 8 header bytes are readable.
                let (s, z) = unsafe { header_x86(m.header, blk[r], sp) };
                let sc = _mm256_set1_ps(s);
                for k in 0..T {
                    tot[r][k] = _mm256_fmadd_ps(acc[r][k], sc, tot[r][k]);
                    zsum[r][k] += centred_zero(s, z) * m.span_sum(t0 + k, j, sp) as f64;
                }
            }
        }
    }
    for r in 0..R {
        for k in 0..T {
            out[r * m.a.s + t0 + k] = (super::simd::hsum256(tot[r][k]) as f64 + zsum[r][k]) as f32;
        }
    }
}
