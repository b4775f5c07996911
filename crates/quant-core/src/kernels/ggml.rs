//! Fused exact kernels of the GGML block formats: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k,
//! q3_k, q4_k (and mq4-k, the same block over rotated weights), q5_k, q6_k, iq4_nl, iq4_xs.
//!
//! Each format is an `ExactBlock`: a per-block header (its fp16 scales and sub-block
//! scales turned into f32 once per block and row, as the codec's decode computes them) and
//! a decode of `W` consecutive weights from the block's bytes into one f32 vector — codes
//! widened, shifted and masked in integer lanes, converted, and scaled by the sub-block's
//! (scale, min), or looked up in the 16-entry iq4 table. The weights never leave registers:
//! they are multiplied straight into f32 accumulators with the f32 activations, so every
//! product is that of the decoded weight (up to one rounding where the decode rounds twice,
//! e.g. `d·sc·q - dmin·m` computed with one fused multiply-add) and only the f32
//! accumulation rounds, which is what keeps these kernels within the 1e-5 bound.
//!
//! Bit layouts are the codecs' (codecs/ggml_legacy.rs, ggml_kquants.rs, ggml_iq4.rs). Every
//! GGML sub-block is 16 or 32 consecutive weights, a multiple of every level's `W` (16 on
//! AVX-512, 8 on AVX2 and portable), so one vector always has one scale. The bodies are
//! written once over `FVec` and instantiated per level; activations are read as given
//! ([`Layout::Raw`]: GGML rows are whole blocks, so no padding is needed).

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::vector::{FVec, Portable};
use super::{Activations, Layout, Micro, RowKernel, SimdLevel, drive};
use crate::codecs::ggml_iq4::KVALUES_IQ4NL;
use crate::tensor::QTensor;
use std::marker::PhantomData;

#[cfg(target_arch = "x86_64")]
use super::vector::{Avx2, Avx512};

/// One GGML block type as the exact kernel decodes it.
pub(crate) trait ExactBlock: Sync + 'static {
    /// Weights a block.
    const BW: usize;
    /// Bytes a block.
    const BB: usize;
    /// Whether the kernel walks one row at a time ([`Micro::one_row_at_a_time`]). Measured
    /// with the bench shapes against candle in the same process: the k-quants stream faster
    /// one row at a time (q4_k 5.7 vs 5.0 GB/s, q6_k 5.3 vs 4.0 on 6144x16384), q8_0 in
    /// blocks of four rows (12.8 vs 8.1 GB/s on 6144x16384, 9.8 vs 9.3 on 4096x4096).
    const ONE_ROW: bool = true;
    /// The block's scales, decoded once per block and row.
    type Hdr: Copy + Default;
    /// # Safety
    /// `V`'s level is present and this runs inlined into a function compiled for it; `b`
    /// points at a whole block (`BB` bytes).
    unsafe fn header<V: FVec>(b: *const u8) -> Self::Hdr;
    /// Weights `i..i + V::W` of the block (`i` a multiple of `V::W`, below `BW`); `kv` is
    /// the iq4 value table (ignored by the other formats).
    ///
    /// # Safety
    /// As [`Self::header`].
    unsafe fn weights<V: FVec>(b: *const u8, h: &Self::Hdr, i: usize, kv: V::T) -> V::F;
}

/// GGML's iq4 values as f32 (exact: small integers).
const KV_F32: [f32; 16] = {
    let mut t = [0f32; 16];
    let mut k = 0;
    while k < 16 {
        t[k] = KVALUES_IQ4NL[k] as f32;
        k += 1;
    }
    t
};

/// The kernel of one GGML block type; [`super::kernel_for`] picks the static.
pub struct GgmlKernel<B>(PhantomData<fn() -> B>);

pub static Q8_0: GgmlKernel<Q80> = GgmlKernel(PhantomData);
pub static Q4_0: GgmlKernel<Q40> = GgmlKernel(PhantomData);
pub static Q4_1: GgmlKernel<Q41> = GgmlKernel(PhantomData);
pub static Q5_0: GgmlKernel<Q50> = GgmlKernel(PhantomData);
pub static Q5_1: GgmlKernel<Q51> = GgmlKernel(PhantomData);
pub static Q2_K: GgmlKernel<Q2k> = GgmlKernel(PhantomData);
pub static Q3_K: GgmlKernel<Q3k> = GgmlKernel(PhantomData);
/// q4_k and mq4-k.
pub static Q4_K: GgmlKernel<Q4k> = GgmlKernel(PhantomData);
pub static Q5_K: GgmlKernel<Q5k> = GgmlKernel(PhantomData);
pub static Q6_K: GgmlKernel<Q6k> = GgmlKernel(PhantomData);
pub static IQ4_NL: GgmlKernel<Iq4nl> = GgmlKernel(PhantomData);
pub static IQ4_XS: GgmlKernel<Iq4xs> = GgmlKernel(PhantomData);

impl<B: ExactBlock> RowKernel for GgmlKernel<B> {
    fn layout(&self) -> Layout {
        Layout::Raw
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
        let m = GgmlMicro::<B> {
            t,
            a,
            blocks: t.cols() / B::BW,
            _b: PhantomData,
        };
        drive(level, &m, row0, n, a.s, out);
    }
}

struct GgmlMicro<'a, 'b, B> {
    t: &'a QTensor<'b>,
    a: &'a Activations<'a>,
    /// Blocks a row (I % BW == 0 is checked by `QTensor::new`).
    blocks: usize,
    _b: PhantomData<fn() -> B>,
}

impl<B: ExactBlock> Micro for GgmlMicro<'_, '_, B> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX-512 (with F16C) present, rows and tile in range.
        unsafe { exact_avx512::<B, R, T>(self, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2 (with FMA, F16C) present, rows and tile in range.
        unsafe { exact_avx2::<B, R, T>(self, o, t0, out) }
    }
    fn one_row_at_a_time(&self) -> bool {
        B::ONE_ROW
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        assert!(
            o + R <= self.t.rows() && t0 + T <= self.a.s,
            "tile out of range"
        );
        // SAFETY: the portable level needs no CPU feature; rows and tile checked above.
        unsafe { exact_body::<Portable, B, R, T>(self, o, t0, out) }
    }
}

/// # Safety
/// AVX-512 F/BW/VL, FMA and F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn exact_avx512<B: ExactBlock, const R: usize, const T: usize>(
    m: &GgmlMicro<'_, '_, B>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: forwarded contract; this function carries Avx512's features.
    unsafe { exact_body::<Avx512, B, R, T>(m, o, t0, out) }
}

/// # Safety
/// AVX2, FMA and F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn exact_avx2<B: ExactBlock, const R: usize, const T: usize>(
    m: &GgmlMicro<'_, '_, B>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: forwarded contract; this function carries Avx2's features.
    unsafe { exact_body::<Avx2, B, R, T>(m, o, t0, out) }
}

/// Rows `o..o+R` against activation rows `t0..t0+T`, block by block: each row's block
/// header, then `2W` weights at a time decoded for every row and multiplied into two sets
/// of R×T accumulators (one per W, to halve the FMA dependency chains). Every array of
/// vectors is indexed only by loop counters of constant trip count, so it stays in
/// registers once the loops are unrolled.
///
/// # Safety
/// `V`'s level is present and this is inlined into a function compiled for it; rows
/// `o..o+R` exist; `t0 + T <= S`.
#[inline(always)]
unsafe fn exact_body<V: FVec, B: ExactBlock, const R: usize, const T: usize>(
    m: &GgmlMicro<'_, '_, B>,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    let mut xs = [std::ptr::null::<f32>(); T];
    for k in 0..T {
        xs[k] = m.a.row(t0 + k).as_ptr();
    }
    let mut rows = [std::ptr::null::<u8>(); R];
    for r in 0..R {
        rows[r] = m.t.row(o + r).as_ptr();
    }
    // SAFETY: the caller's level contract; block j < blocks lies inside
    // each row (BB bytes from j * BB), and the activation rows hold blocks * BW floats.
    let kv = unsafe { V::table(&KV_F32) };
    // SAFETY: see above.
    let zero = unsafe { V::zero() };
    let (mut acc0, mut acc1) = ([[zero; T]; R], [[zero; T]; R]);
    // Plain loops fill the per-row arrays: `array::from_fn` closures are not inlined into
    // target-feature functions, and a call per vector costs more than the vector.
    let mut blk = [std::ptr::null::<u8>(); R];
    let mut hdr = [B::Hdr::default(); R];
    let (mut x0, mut x1) = ([zero; T], [zero; T]);
    for j in 0..m.blocks {
        for r in 0..R {
            // SAFETY: see above; `hdr[r]` is a valid, aligned local.
            unsafe {
                blk[r] = rows[r].add(j * B::BB);
                // A volatile store per row: otherwise the compiler vectorizes the R header
                // decodes across rows into gathers and scatters, which cost more than the
                // decodes (microcoded on Zen 4).
                std::ptr::write_volatile(&mut hdr[r], B::header::<V>(blk[r]));
            }
        }
        let mut i = 0;
        while i < B::BW {
            for k in 0..T {
                // SAFETY: see above; j * BW + i + 2W <= blocks * BW (BW is a multiple of 2W).
                unsafe {
                    x0[k] = V::load(xs[k].add(j * B::BW + i));
                    x1[k] = V::load(xs[k].add(j * B::BW + i + V::W));
                }
            }
            for r in 0..R {
                // SAFETY: see above; i + W < BW, both multiples of W.
                let (w0, w1) = unsafe {
                    (
                        B::weights::<V>(blk[r], &hdr[r], i, kv),
                        B::weights::<V>(blk[r], &hdr[r], i + V::W, kv),
                    )
                };
                for k in 0..T {
                    // SAFETY: see above.
                    unsafe {
                        acc0[r][k] = V::fma(w0, x0[k], acc0[r][k]);
                        acc1[r][k] = V::fma(w1, x1[k], acc1[r][k]);
                    }
                }
            }
            i += 2 * V::W;
        }
    }
    for r in 0..R {
        for k in 0..T {
            // SAFETY: see above.
            out[r * m.a.s + t0 + k] = unsafe { V::sum(V::add(acc0[r][k], acc1[r][k])) };
        }
    }
}

/// The little-endian u32 at `p`.
///
/// # Safety
/// 4 readable bytes at `p`.
#[inline(always)]
unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: caller's contract.
    u32::from_le(unsafe { p.cast::<u32>().read_unaligned() })
}

/// The byte at `p + at`.
///
/// # Safety
/// `p + at` readable.
#[inline(always)]
unsafe fn byte(p: *const u8, at: usize) -> u8 {
    // SAFETY: caller's contract.
    unsafe { *p.add(at) }
}

/// Lanes of the 4-bit code of a "low nibbles, then high nibbles" run: weight `i` (first
/// lane) of a run of 2n weights stored in n bytes at `p`.
///
/// # Safety
/// As [`ExactBlock::weights`]; `p + (i mod n) + W` readable.
#[inline(always)]
unsafe fn nibbles<V: FVec>(p: *const u8, n: usize, i: usize) -> V::I {
    // SAFETY: caller's contract.
    unsafe {
        let q = V::u8s(p.add(i % n));
        let q = if i >= n { V::shr(q, 4) } else { q };
        V::and(q, V::isplat(15))
    }
}

/// q8_0: fp16 d, 32 int8; `w = q * d`.
pub struct Q80;
impl ExactBlock for Q80 {
    const BW: usize = 32;
    const BB: usize = 34;
    const ONE_ROW: bool = false;
    type Hdr = f32;
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> f32 {
        // SAFETY: caller's contract.
        unsafe { V::f16(b) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, d: &f32, i: usize, _: V::T) -> V::F {
        // SAFETY: caller's contract; bytes 2 + i .. 2 + i + W lie in the block.
        unsafe { V::mul(V::cvt(V::i8s(b.add(2 + i))), V::splat(*d)) }
    }
}

/// q4_0: fp16 d, 16 nibble bytes (weights j, j + 16); `w = (q - 8) * d`.
pub struct Q40;
impl ExactBlock for Q40 {
    const BW: usize = 32;
    const BB: usize = 18;
    type Hdr = f32;
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> f32 {
        // SAFETY: caller's contract.
        unsafe { V::f16(b) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, d: &f32, i: usize, _: V::T) -> V::F {
        // SAFETY: caller's contract.
        unsafe {
            let q = V::sub(nibbles::<V>(b.add(2), 16, i), V::isplat(8));
            V::mul(V::cvt(q), V::splat(*d))
        }
    }
}

/// q4_1: fp16 d, fp16 m, 16 nibble bytes; `w = q * d + m`.
pub struct Q41;
impl ExactBlock for Q41 {
    const BW: usize = 32;
    const BB: usize = 20;
    type Hdr = (f32, f32);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> (f32, f32) {
        // SAFETY: caller's contract.
        unsafe { (V::f16(b), V::f16(b.add(2))) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &(f32, f32), i: usize, _: V::T) -> V::F {
        // SAFETY: caller's contract.
        unsafe {
            let q = nibbles::<V>(b.add(4), 16, i);
            V::fma(V::cvt(q), V::splat(h.0), V::splat(h.1))
        }
    }
}

/// The fifth bits of q5_0 / q5_1 (bit j of the u32 `qh` is bit 4 of weight j), shifted to
/// bit 4 of lanes `i..i+W`.
///
/// # Safety
/// As [`ExactBlock::weights`].
#[inline(always)]
unsafe fn q5_high<V: FVec>(qh: u32, i: usize) -> V::I {
    // SAFETY: caller's contract.
    unsafe {
        // i is a multiple of W and lanes are below W, so `or` adds them.
        let at = V::or(V::iota(), V::isplat(i as i32));
        V::shl(V::and(V::shrv(V::isplat(qh as i32), at), V::isplat(1)), 4)
    }
}

/// q5_0: fp16 d, u32 qh, 16 nibble bytes; `w = (q - 16) * d`.
pub struct Q50;
impl ExactBlock for Q50 {
    const BW: usize = 32;
    const BB: usize = 22;
    type Hdr = (f32, u32);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> (f32, u32) {
        // SAFETY: caller's contract.
        unsafe { (V::f16(b), read_u32(b.add(2))) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &(f32, u32), i: usize, _: V::T) -> V::F {
        // SAFETY: caller's contract.
        unsafe {
            let q = V::or(nibbles::<V>(b.add(6), 16, i), q5_high::<V>(h.1, i));
            V::mul(V::cvt(V::sub(q, V::isplat(16))), V::splat(h.0))
        }
    }
}

/// q5_1: fp16 d, fp16 m, u32 qh, 16 nibble bytes; `w = q * d + m`.
pub struct Q51;
impl ExactBlock for Q51 {
    const BW: usize = 32;
    const BB: usize = 24;
    type Hdr = (f32, f32, u32);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> (f32, f32, u32) {
        // SAFETY: caller's contract.
        unsafe { (V::f16(b), V::f16(b.add(2)), read_u32(b.add(4))) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &(f32, f32, u32), i: usize, _: V::T) -> V::F {
        // SAFETY: caller's contract.
        unsafe {
            let q = V::or(nibbles::<V>(b.add(8), 16, i), q5_high::<V>(h.2, i));
            V::fma(V::cvt(q), V::splat(h.0), V::splat(h.1))
        }
    }
}

/// The (h, s, k, l) position of weight `i` of a q2_k / q3_k / q6_k block: weight
/// `128h + 32s + 16k + l`.
#[inline(always)]
fn hskl(i: usize) -> (usize, usize, usize, usize) {
    (i / 128, (i % 128) / 32, (i % 32) / 16, i % 16)
}

/// q2_k: `scales[16]` (4-bit scale low, 4-bit min high), `qs[64]`, fp16 d, fp16 dmin;
/// `w = d*sc*q - dmin*m`.
pub struct Q2k;
impl ExactBlock for Q2k {
    const BW: usize = 256;
    const BB: usize = 84;
    /// Per 16 weights: (d * sc, dmin * m).
    type Hdr = ([f32; 16], [f32; 16]);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> Self::Hdr {
        // SAFETY: caller's contract.
        unsafe {
            let (d, dmin) = (V::f16(b.add(80)), V::f16(b.add(82)));
            let sc = b.cast::<[u8; 16]>().read_unaligned();
            let (mut s, mut m) = ([0f32; 16], [0f32; 16]);
            for g in 0..16 {
                s[g] = d * f32::from(sc[g] & 0xF);
                m[g] = dmin * f32::from(sc[g] >> 4);
            }
            (s, m)
        }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &Self::Hdr, i: usize, _: V::T) -> V::F {
        let (hh, s, k, l) = hskl(i);
        let g = 8 * hh + 2 * s + k;
        // SAFETY: caller's contract; qs[32h + 16k + l .. + W] lies in the block.
        unsafe {
            let q = V::u8s(b.add(16 + 32 * hh + 16 * k + l));
            let q = V::and(V::shr(q, 2 * s as u32), V::isplat(3));
            V::fma(V::cvt(q), V::splat(h.0[g]), V::splat(-h.1[g]))
        }
    }
}

/// q3_k: `hmask[32]`, `qs[64]`, `scales[12]` (16 6-bit), fp16 d; `w = d*(s-32) * (q - 4*!h)`.
pub struct Q3k;
impl ExactBlock for Q3k {
    const BW: usize = 256;
    const BB: usize = 110;
    /// Per 16 weights: d * (s - 32).
    type Hdr = [f32; 16];
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> [f32; 16] {
        // SAFETY: caller's contract.
        unsafe {
            let d = V::f16(b.add(108));
            // GGML's unpacking of the 12 bytes as three u32 words into 16 bytes: low
            // nibbles of bytes 0..8 then their high nibbles, each with two bits of bytes
            // 8..12 on top.
            let w = b.add(96).cast::<[u32; 3]>().read_unaligned();
            let (a0, a1, t) = (u32::from_le(w[0]), u32::from_le(w[1]), u32::from_le(w[2]));
            let (m4, m2) = (0x0F0F_0F0Fu32, 0x0303_0303u32);
            let words = [
                (a0 & m4) | ((t & m2) << 4),
                (a1 & m4) | (((t >> 2) & m2) << 4),
                ((a0 >> 4) & m4) | (((t >> 4) & m2) << 4),
                ((a1 >> 4) & m4) | (((t >> 6) & m2) << 4),
            ];
            let mut s = [0f32; 16];
            for g in 0..16 {
                let v = (words[g / 4] >> (8 * (g % 4))) & 0x3F;
                s[g] = d * (v as i32 - 32) as f32;
            }
            s
        }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, s16: &[f32; 16], i: usize, _: V::T) -> V::F {
        let (hh, s, k, l) = hskl(i);
        // SAFETY: caller's contract; qs and hmask bytes at these offsets lie in the block.
        unsafe {
            let q = V::u8s(b.add(32 + 32 * hh + 16 * k + l));
            let q = V::and(V::shr(q, 2 * s as u32), V::isplat(3));
            let hb = V::and(
                V::shr(V::u8s(b.add(16 * k + l)), (4 * hh + s) as u32),
                V::isplat(1),
            );
            // q - 4 + 4h: the 2-bit code is below 4, so `or` adds 4h.
            let q = V::sub(V::or(q, V::shl(hb, 2)), V::isplat(4));
            V::mul(V::cvt(q), V::splat(s16[8 * hh + 2 * s + k]))
        }
    }
}

/// Eight (d * sc, dmin * m) pairs of a q4_k / q5_k header (GGML's `get_scale_min_k4`).
///
/// # Safety
/// As [`ExactBlock::header`].
#[inline(always)]
unsafe fn k4_header<V: FVec>(b: *const u8) -> ([f32; 8], [f32; 8]) {
    // SAFETY: caller's contract; the 16 header bytes lie in the block.
    unsafe {
        let (d, dmin) = (V::f16(b), V::f16(b.add(2)));
        // GGML's `get_scale_min_k4` on the 12 bytes as three u32 words: scales 0..4 are
        // the low 6 bits of bytes 0..4, scales 4..8 the low nibbles of bytes 8..12 with the
        // top 2 bits of bytes 0..4 above them; mins likewise from bytes 4..8 and the high
        // nibbles of bytes 8..12.
        let w = b.add(4).cast::<[u32; 3]>().read_unaligned();
        let (a0, a1, a2) = (u32::from_le(w[0]), u32::from_le(w[1]), u32::from_le(w[2]));
        let (low6, low4, top2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
        let sc = [a0 & low6, (a2 & low4) | (((a0 >> 6) & top2) << 4)];
        let mn = [a1 & low6, ((a2 >> 4) & low4) | (((a1 >> 6) & top2) << 4)];
        let (mut s, mut m) = ([0f32; 8], [0f32; 8]);
        for j in 0..8 {
            let shift = 8 * (j % 4);
            s[j] = d * ((sc[j / 4] >> shift) & 0xFF) as f32;
            m[j] = dmin * ((mn[j / 4] >> shift) & 0xFF) as f32;
        }
        (s, m)
    }
}

/// q4_k (and mq4-k): fp16 d, fp16 dmin, 12 scale bytes, `qs[128]`; weight 64c + l is the low
/// nibble of qs[32c + l], 64c + 32 + l the high one; `w = d*sc*q - dmin*m` per 32.
pub struct Q4k;
impl ExactBlock for Q4k {
    const BW: usize = 256;
    const BB: usize = 144;
    type Hdr = ([f32; 8], [f32; 8]);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> Self::Hdr {
        // SAFETY: caller's contract.
        unsafe { k4_header::<V>(b) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &Self::Hdr, i: usize, _: V::T) -> V::F {
        let (c, sub) = (i / 64, i / 32);
        // SAFETY: caller's contract; qs[32c .. 32c + 32] lies in the block.
        unsafe {
            let q = nibbles::<V>(b.add(16 + 32 * c), 32, i % 64);
            V::fma(V::cvt(q), V::splat(h.0[sub]), V::splat(-h.1[sub]))
        }
    }
}

/// q5_k: q4_k's header, `qh[32]`, `qs[128]`; the fifth bit of weight 64c + 32t + l is bit
/// 2c + t of `qh[l]`.
pub struct Q5k;
impl ExactBlock for Q5k {
    const BW: usize = 256;
    const BB: usize = 176;
    type Hdr = ([f32; 8], [f32; 8]);
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> Self::Hdr {
        // SAFETY: caller's contract.
        unsafe { k4_header::<V>(b) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, h: &Self::Hdr, i: usize, _: V::T) -> V::F {
        let (c, sub, l) = (i / 64, i / 32, i % 32);
        // SAFETY: caller's contract; qs[32c..+32] and qh[0..32] lie in the block.
        unsafe {
            let q = nibbles::<V>(b.add(48 + 32 * c), 32, i % 64);
            let hb = V::and(V::shr(V::u8s(b.add(16 + l)), sub as u32), V::isplat(1));
            let q = V::or(q, V::shl(hb, 4));
            V::fma(V::cvt(q), V::splat(h.0[sub]), V::splat(-h.1[sub]))
        }
    }
}

/// q6_k: `ql[128]`, `qh[64]`, `scales[16]` (int8), fp16 d; weight 128h + 32s + l has low 4 bits
/// from ql[64h + 32(s%2) + l] (nibble s/2) and top 2 from bits 2s of qh[32h + l];
/// `w = d*sc * (q - 32)` per 16.
pub struct Q6k;
impl ExactBlock for Q6k {
    const BW: usize = 256;
    const BB: usize = 210;
    /// Per 16 weights: d * sc.
    type Hdr = [f32; 16];
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> [f32; 16] {
        // SAFETY: caller's contract.
        unsafe {
            let d = V::f16(b.add(208));
            let sc = b.add(192).cast::<[u8; 16]>().read_unaligned();
            let mut s = [0f32; 16];
            for g in 0..16 {
                s[g] = d * f32::from(sc[g] as i8);
            }
            s
        }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, s16: &[f32; 16], i: usize, _: V::T) -> V::F {
        let (hh, s, l) = (i / 128, (i % 128) / 32, i % 32);
        // SAFETY: caller's contract; the ql and qh bytes at these offsets lie in the block.
        unsafe {
            let lo = V::u8s(b.add(64 * hh + 32 * (s % 2) + l));
            let lo = V::and(V::shr(lo, 4 * (s / 2) as u32), V::isplat(15));
            let hi = V::u8s(b.add(128 + 32 * hh + l));
            let hi = V::and(V::shr(hi, 2 * s as u32), V::isplat(3));
            let q = V::sub(V::or(lo, V::shl(hi, 4)), V::isplat(32));
            V::mul(V::cvt(q), V::splat(s16[8 * hh + 2 * s + l / 16]))
        }
    }
}

/// iq4_nl: fp16 d, 16 nibble bytes indexing GGML's table; `w = d * table[q]`.
pub struct Iq4nl;
impl ExactBlock for Iq4nl {
    const BW: usize = 32;
    const BB: usize = 18;
    type Hdr = f32;
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> f32 {
        // SAFETY: caller's contract.
        unsafe { V::f16(b) }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, d: &f32, i: usize, kv: V::T) -> V::F {
        // SAFETY: caller's contract.
        unsafe { V::mul(V::lookup(kv, nibbles::<V>(b.add(2), 16, i)), V::splat(*d)) }
    }
}

/// iq4_xs: fp16 d, u16 scales_h, `scales_l[4]`, `qs[128]`; sub-block ib (32 weights, 16 qs
/// bytes, low nibbles then high) scaled by `d * (ls - 32)`.
pub struct Iq4xs;
impl ExactBlock for Iq4xs {
    const BW: usize = 256;
    const BB: usize = 136;
    type Hdr = [f32; 8];
    #[inline(always)]
    unsafe fn header<V: FVec>(b: *const u8) -> [f32; 8] {
        // SAFETY: caller's contract.
        unsafe {
            let d = V::f16(b);
            let sh = u32::from(u16::from_le_bytes([byte(b, 2), byte(b, 3)]));
            // scales_l[ib/2] >> 4(ib%2) is bits 4ib.. of the 4 bytes as a u32.
            let sl = read_u32(b.add(4));
            let mut s = [0f32; 8];
            for ib in 0..8 {
                let ls = ((sl >> (4 * ib)) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                s[ib] = d * (ls as i32 - 32) as f32;
            }
            s
        }
    }
    #[inline(always)]
    unsafe fn weights<V: FVec>(b: *const u8, dl: &[f32; 8], i: usize, kv: V::T) -> V::F {
        let ib = i / 32;
        // SAFETY: caller's contract; qs[16ib .. 16ib + 16] lies in the block.
        unsafe {
            let q = nibbles::<V>(b.add(8 + 16 * ib), 16, i % 32);
            V::mul(V::lookup(kv, q), V::splat(dl[ib]))
        }
    }
}
