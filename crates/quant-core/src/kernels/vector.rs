//! The vector vocabulary the block kernels ([`super::ggml`], [`super::int8act`]) are written
//! in, so that each format's kernel is written once and instantiated per SIMD level.
//!
//! - [`FVec`]: f32 lanes plus the integer lanes they are decoded from (exact path). AVX-512
//!   has 16 lanes, AVX2 and the portable code 8. Every GGML sub-block is a multiple of 16
//!   weights, so one vector never straddles two scales.
//! - [`QVec`]: 32 bytes of 8-bit codes against 32 int8 activations, summed four products a
//!   lane into 8 i32 lanes (the int8-activation path). `vpdpbusd` does it in one
//!   instruction where AVX-512 VNNI is present (256-bit: on Zen 4 a 512-bit op runs as two
//!   256-bit halves, so the narrower form costs nothing); AVX2 (and AVX-512 without VNNI)
//!   uses `vpmaddubsw` + `vpmaddwd`; the portable code plain integer loops.
//!
//! The methods are `#[inline(always)]` and carry no target features of their own: they are
//! only called from kernel bodies that are themselves inlined into a `#[target_feature]`
//! function of the matching level, where the intrinsics inline too (the pattern the
//! `memchr` crate uses). Calling one anywhere else is the undefined behaviour their
//! `# Safety` sections rule out.

// Lane-indexed loops in the portable impls mirror the vector instructions they stand for.
#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// An fp16 bit pattern as f32, exactly (infinities and NaNs included), without F16C.
#[inline(always)]
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let m = u32::from(h & 0x7FFF);
    if m >= 0x7C00 {
        // Infinity or NaN: all-ones exponent, mantissa (payload) kept.
        return f32::from_bits(sign | 0x7F80_0000 | ((m & 0x3FF) << 13));
    }
    // The fields shifted into place read as the value times 2^-112 (subnormals included:
    // they land on f32 subnormals); the multiply by a power of two is exact.
    f32::from_bits(sign | (m << 13)) * f32::from_bits((127 + 112) << 23)
}

/// f32 vectors of `W` lanes and their integer twins.
///
/// # Safety (every method)
/// The CPU must support the level of the implementing type, and the caller must be code
/// inlined into a function compiled for that level; pointers must be valid for the reads
/// each method documents.
pub(crate) trait FVec {
    /// Lanes.
    const W: usize;
    type F: Copy;
    type I: Copy;
    unsafe fn zero() -> Self::F;
    unsafe fn splat(v: f32) -> Self::F;
    /// `W` floats from `p`.
    unsafe fn load(p: *const f32) -> Self::F;
    /// a * b + c.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn sum(a: Self::F) -> f32;
    /// `W` bytes from `p`, zero-extended to lanes.
    unsafe fn u8s(p: *const u8) -> Self::I;
    /// `W` bytes from `p`, sign-extended to lanes.
    unsafe fn i8s(p: *const u8) -> Self::I;
    unsafe fn isplat(v: i32) -> Self::I;
    /// Logical shift right by `n` (< 32).
    unsafe fn shr(a: Self::I, n: u32) -> Self::I;
    /// Shift left by `n` (< 32).
    unsafe fn shl(a: Self::I, n: u32) -> Self::I;
    unsafe fn and(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I;
    /// Lane l shifted right by `n[l]`.
    unsafe fn shrv(a: Self::I, n: Self::I) -> Self::I;
    /// Lane indices 0..W.
    unsafe fn iota() -> Self::I;
    unsafe fn cvt(a: Self::I) -> Self::F;
    /// The fp16 at `p` (2 bytes) as f32.
    unsafe fn f16(p: *const u8) -> f32;
    /// A 16-entry table held the way [`Self::lookup`] wants it.
    type T: Copy;
    unsafe fn table(t: &[f32; 16]) -> Self::T;
    /// `t[idx[l]]` per lane; `idx` lanes must be in 0..16.
    unsafe fn lookup(t: Self::T, idx: Self::I) -> Self::F;
}

/// 16 f32 lanes of AVX-512 F/BW/VL with F16C.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;
/// 8 f32 lanes of AVX2 with FMA and F16C.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;
/// 8 lanes of plain Rust.
pub(crate) struct Portable;

// SAFETY (every unsafe block in this impl): the trait's contract — the caller runs inside
// an AVX-512 F/BW/VL + F16C function on a CPU that has them, and each pointer is valid for
// the bytes or floats the method reads.
#[cfg(target_arch = "x86_64")]
impl FVec for Avx512 {
    const W: usize = 16;
    type F = __m512;
    type I = __m512i;
    type T = __m512;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: see the impl; 16 floats at p.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sum(a: __m512) -> f32 {
        // SAFETY: see the impl.
        unsafe { _mm512_reduce_add_ps(a) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m512i {
        // SAFETY: see the impl; 16 bytes at p.
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m512i {
        // SAFETY: see the impl; 16 bytes at p.
        unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn isplat(v: i32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn shr(a: __m512i, n: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srl_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    unsafe fn shl(a: __m512i, n: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sll_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    unsafe fn and(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_and_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn shrv(a: __m512i, n: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srlv_epi32(a, n) }
    }
    #[inline(always)]
    unsafe fn iota() -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) }
    }
    #[inline(always)]
    unsafe fn cvt(a: __m512i) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> f32 {
        // SAFETY: see the impl; 2 bytes at p.
        unsafe {
            let h = p.cast::<u16>().read_unaligned();
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
        }
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> __m512 {
        // SAFETY: see the impl; t is 16 floats.
        unsafe { _mm512_loadu_ps(t.as_ptr()) }
    }
    #[inline(always)]
    unsafe fn lookup(t: __m512, idx: __m512i) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_permutexvar_ps(idx, t) }
    }
}

// SAFETY (every unsafe block in this impl): the trait's contract — the caller runs inside
// an AVX2 + FMA + F16C function on a CPU that has them, and each pointer is valid for the
// bytes or floats the method reads.
#[cfg(target_arch = "x86_64")]
impl FVec for Avx2 {
    const W: usize = 8;
    type F = __m256;
    type I = __m256i;
    type T = (__m256, __m256);
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: see the impl; 8 floats at p.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sum(a: __m256) -> f32 {
        // SAFETY: see the impl.
        unsafe { super::simd::hsum256(a) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m256i {
        // SAFETY: see the impl; 8 bytes at p.
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())) }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m256i {
        // SAFETY: see the impl; 8 bytes at p.
        unsafe { _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast())) }
    }
    #[inline(always)]
    unsafe fn isplat(v: i32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn shr(a: __m256i, n: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srl_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    unsafe fn shl(a: __m256i, n: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_sll_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    unsafe fn and(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn shrv(a: __m256i, n: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srlv_epi32(a, n) }
    }
    #[inline(always)]
    unsafe fn iota() -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) }
    }
    #[inline(always)]
    unsafe fn cvt(a: __m256i) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> f32 {
        // SAFETY: see the impl; 2 bytes at p.
        unsafe {
            let h = p.cast::<u16>().read_unaligned();
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
        }
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> (__m256, __m256) {
        // SAFETY: see the impl; t is 16 floats.
        unsafe {
            (
                _mm256_loadu_ps(t.as_ptr()),
                _mm256_loadu_ps(t.as_ptr().add(8)),
            )
        }
    }
    #[inline(always)]
    unsafe fn lookup(t: (__m256, __m256), idx: __m256i) -> __m256 {
        // SAFETY: see the impl.
        unsafe {
            // vpermps reads the low 3 bits; bit 3 (moved to the sign bit) picks the half.
            let lo = _mm256_permutevar8x32_ps(t.0, idx);
            let hi = _mm256_permutevar8x32_ps(t.1, idx);
            _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx)))
        }
    }
}

// SAFETY (every unsafe block in this impl): plain Rust on raw pointers; the caller
// guarantees each pointer is valid for the bytes or floats the method reads.
impl FVec for Portable {
    const W: usize = 8;
    type F = [f32; 8];
    type I = [i32; 8];
    type T = [f32; 16];
    #[inline(always)]
    unsafe fn zero() -> [f32; 8] {
        [0.0; 8]
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> [f32; 8] {
        [v; 8]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 8] {
        // SAFETY: see the impl; 8 floats at p.
        unsafe { p.cast::<[f32; 8]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn fma(a: [f32; 8], b: [f32; 8], c: [f32; 8]) -> [f32; 8] {
        // Separate multiply and add: `mul_add` is a library call where FMA is not built in.
        std::array::from_fn(|l| a[l] * b[l] + c[l])
    }
    #[inline(always)]
    unsafe fn mul(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    unsafe fn add(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    unsafe fn sum(a: [f32; 8]) -> f32 {
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> [i32; 8] {
        // SAFETY: see the impl; 8 bytes at p.
        let b = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
        b.map(i32::from)
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> [i32; 8] {
        // SAFETY: see the impl; 8 bytes at p.
        let b = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
        b.map(|v| i32::from(v as i8))
    }
    #[inline(always)]
    unsafe fn isplat(v: i32) -> [i32; 8] {
        [v; 8]
    }
    #[inline(always)]
    unsafe fn shr(a: [i32; 8], n: u32) -> [i32; 8] {
        a.map(|v| ((v as u32) >> n) as i32)
    }
    #[inline(always)]
    unsafe fn shl(a: [i32; 8], n: u32) -> [i32; 8] {
        a.map(|v| ((v as u32) << n) as i32)
    }
    #[inline(always)]
    unsafe fn and(a: [i32; 8], b: [i32; 8]) -> [i32; 8] {
        std::array::from_fn(|l| a[l] & b[l])
    }
    #[inline(always)]
    unsafe fn or(a: [i32; 8], b: [i32; 8]) -> [i32; 8] {
        std::array::from_fn(|l| a[l] | b[l])
    }
    #[inline(always)]
    unsafe fn sub(a: [i32; 8], b: [i32; 8]) -> [i32; 8] {
        std::array::from_fn(|l| a[l].wrapping_sub(b[l]))
    }
    #[inline(always)]
    unsafe fn shrv(a: [i32; 8], n: [i32; 8]) -> [i32; 8] {
        std::array::from_fn(|l| (a[l] as u32).checked_shr(n[l] as u32).unwrap_or(0) as i32)
    }
    #[inline(always)]
    unsafe fn iota() -> [i32; 8] {
        [0, 1, 2, 3, 4, 5, 6, 7]
    }
    #[inline(always)]
    unsafe fn cvt(a: [i32; 8]) -> [f32; 8] {
        a.map(|v| v as f32)
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> f32 {
        // SAFETY: see the impl; 2 bytes at p.
        let h = unsafe { p.cast::<u16>().read_unaligned() };
        f16_bits_to_f32(u16::from_le(h))
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> [f32; 16] {
        *t
    }
    #[inline(always)]
    unsafe fn lookup(t: [f32; 16], idx: [i32; 8]) -> [f32; 8] {
        idx.map(|i| t[(i & 15) as usize])
    }
}

/// 32 byte codes against 32 int8 activations, four products a lane into 8 i32 lanes, and
/// the f32 lanes (8) those sums are scaled in.
///
/// # Safety (every method)
/// As [`FVec`]: the level's features present, called from code inlined into a function
/// compiled for them, pointers valid for what each method reads or writes.
pub(crate) trait QVec {
    /// 32 bytes.
    type B: Copy;
    /// 8 x i32.
    type I: Copy;
    /// 8 x f32.
    type F: Copy;
    /// 32 zero bytes.
    unsafe fn bzero() -> Self::B;
    /// `v` in every byte.
    unsafe fn bsplat(v: u8) -> Self::B;
    /// 32 bytes from `p`.
    unsafe fn load(p: *const u8) -> Self::B;
    /// 16 bytes from `p` as the low half and the same 16 from `p` shifted right by 4 bits
    /// as the high half, both masked to 4 bits: one 16-byte nibble block in weight order
    /// (GGML's low nibbles then high nibbles).
    unsafe fn nibbles16(p: *const u8) -> Self::B;
    /// Each byte & 0x0F.
    unsafe fn lo4(v: Self::B) -> Self::B;
    /// Each byte >> 4.
    unsafe fn hi4(v: Self::B) -> Self::B;
    /// Each byte & `m`.
    unsafe fn and8(v: Self::B, m: u8) -> Self::B;
    unsafe fn or8(a: Self::B, b: Self::B) -> Self::B;
    /// Each 16-bit pair shifted left by `n` < 8 (bits cross from a byte into the next
    /// one): only for results that are then masked to bits the shift cannot have crossed.
    unsafe fn shl16(v: Self::B, n: u32) -> Self::B;
    /// Each 16-bit pair shifted right by `n` < 8; as [`Self::shl16`].
    unsafe fn shr16(v: Self::B, n: u32) -> Self::B;
    /// `acc[l] + Σ_{j<4} u[4l+j] · s[4l+j]`, u unsigned, s signed. Exact when every pair
    /// `u[2m]·s[2m] + u[2m+1]·s[2m+1]` fits in i16 (the maddubs form saturates there): true
    /// for u <= 128 against s in [-127, 127].
    unsafe fn dot(acc: Self::I, u: Self::B, s: Self::B) -> Self::I;
    /// `dot(dot(acc, u1, s1), u2, s2)` for nibble codes (`u1`, `u2` <= 15): the two maddubs
    /// forms may then be summed in i16 before one widening (four products of at most
    /// 15 · 127 in magnitude), one multiply fewer where that is cheaper.
    #[inline(always)]
    unsafe fn dot_nib2(
        acc: Self::I,
        u1: Self::B,
        s1: Self::B,
        u2: Self::B,
        s2: Self::B,
    ) -> Self::I {
        // SAFETY: the caller's contract of `dot`.
        unsafe { Self::dot(Self::dot(acc, u1, s1), u2, s2) }
    }
    /// `acc[l] + Σ_{j<4} w[4l+j] · x[4l+j]`, both signed (x in [-127, 127]).
    unsafe fn dot_signed(acc: Self::I, w: Self::B, x: Self::B) -> Self::I;
    unsafe fn izero() -> Self::I;
    /// 8 i32 from `p`.
    unsafe fn iload(p: *const i32) -> Self::I;
    /// `-a` in every lane.
    unsafe fn ineg(a: Self::I) -> Self::I;
    unsafe fn iadd(a: Self::I, b: Self::I) -> Self::I;
    /// `vphaddd`: `[a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7]`.
    unsafe fn hadd(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn cvt(a: Self::I) -> Self::F;
    unsafe fn fzero() -> Self::F;
    /// 8 floats from `p`.
    unsafe fn fload(p: *const f32) -> Self::F;
    /// `*p` in every lane.
    unsafe fn fbroadcast(p: *const f32) -> Self::F;
    /// `p[0]` in lanes 0..4 and `p[1]` in lanes 4..8 (two floats read): the two 32-block
    /// steps of a [`super::int8act`] `Pairs` chunk spread to the lanes that hold each block.
    unsafe fn fpair(p: *const f32) -> Self::F;
    unsafe fn fsplat(v: f32) -> Self::F;
    /// `[p[0], p[1], p[2], p[3]]` twice (four floats read).
    unsafe fn fquad(p: *const f32) -> Self::F;
    /// The 4 fp16 at `p` (8 bytes) as f32 in lanes 0..4; lanes 4..8 zero.
    unsafe fn f16x4(p: *const u8) -> Self::F;
    /// The 2 f32 at `p` (8 bytes, any alignment) in lanes 0 and 1; the other lanes zero.
    unsafe fn f32x2(p: *const u8) -> Self::F;
    /// Lane `idx[l]` (< 8) of `v` in lane l.
    unsafe fn fperm(v: Self::F, idx: &[u32; 8]) -> Self::F;
    /// The 8 bytes of `v` (little-endian), zero-extended, as f32.
    unsafe fn bytes8(v: u64) -> Self::F;
    /// 8 bytes from `p`, sign-extended, as f32 in the order of bytes 0, 2, 4, 6, 1, 3, 5, 7.
    unsafe fn i8x8_even_odd(p: *const u8) -> Self::F;
    /// 8 fp16 bit patterns as f32.
    unsafe fn f16x8(h: &[u16; 8]) -> Self::F;
    /// Lanes 0..4 of `v` twice (`hi` false) or lanes 4..8 twice (`hi` true).
    unsafe fn fdup_half(v: Self::F, hi: bool) -> Self::F;
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn fmul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn fadd(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn fsum(a: Self::F) -> f32;
    /// The fp16 at `p` as f32.
    unsafe fn f16(p: *const u8) -> f32;
    /// One row's 256-weight quad against one activation row: the 128 nibble-code bytes at
    /// `w` against the 256 values at `x` in the [`super::int8act`] `Pairs` layout, one i32
    /// lane per 32-block in the order of `QActs::dh` (what the int4 and affine quads fold
    /// their scales into). A 256-bit chunk at a time ([`super::int8act::quad_dots_narrow`])
    /// unless a level does it wider.
    #[inline(always)]
    unsafe fn quad_dot(w: *const u8, x: *const u8) -> Self::I
    where
        Self: Sized,
    {
        // SAFETY: the caller's contract: 128 bytes at `w`, 256 values at `x`.
        unsafe { super::int8act::quad_dots_narrow::<Self, 1, 1>(&[w], 0, &[x])[0][0] }
    }
}

/// `vpdpbusd` (AVX-512 VNNI with VL) over AVX2 for everything else.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Vnni;
/// `vpmaddubsw` + `vpmaddwd` (AVX2); also what AVX-512 without VNNI runs.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Madd;
/// Plain Rust integer loops.
pub(crate) struct QPortable;

/// The AVX2 operations [`Vnni`] and [`Madd`] share; only `dot` / `dot_signed` differ.
#[cfg(target_arch = "x86_64")]
macro_rules! qvec_avx2_common {
    () => {
        type B = __m256i;
        type I = __m256i;
        type F = __m256;
        #[inline(always)]
        unsafe fn bzero() -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_setzero_si256() }
        }
        #[inline(always)]
        unsafe fn load(p: *const u8) -> __m256i {
            // SAFETY: see the impl; 32 bytes at p.
            unsafe { _mm256_loadu_si256(p.cast()) }
        }
        #[inline(always)]
        unsafe fn nibbles16(p: *const u8) -> __m256i {
            // SAFETY: see the impl; 16 bytes at p.
            unsafe {
                let v = _mm_loadu_si128(p.cast());
                let m = _mm_set1_epi8(0x0F);
                let lo = _mm_and_si128(v, m);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
                _mm256_set_m128i(hi, lo)
            }
        }
        #[inline(always)]
        unsafe fn lo4(v: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_and_si256(v, _mm256_set1_epi8(0x0F)) }
        }
        #[inline(always)]
        unsafe fn hi4(v: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_and_si256(_mm256_srli_epi16::<4>(v), _mm256_set1_epi8(0x0F)) }
        }
        #[inline(always)]
        unsafe fn and8(v: __m256i, m: u8) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_and_si256(v, _mm256_set1_epi8(m as i8)) }
        }
        #[inline(always)]
        unsafe fn or8(a: __m256i, b: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_or_si256(a, b) }
        }
        #[inline(always)]
        unsafe fn shl16(v: __m256i, n: u32) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_sll_epi16(v, _mm_cvtsi32_si128(n as i32)) }
        }
        #[inline(always)]
        unsafe fn shr16(v: __m256i, n: u32) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32)) }
        }
        #[inline(always)]
        unsafe fn izero() -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_setzero_si256() }
        }
        #[inline(always)]
        unsafe fn iload(p: *const i32) -> __m256i {
            // SAFETY: see the impl; 8 i32 at p.
            unsafe { _mm256_loadu_si256(p.cast()) }
        }
        #[inline(always)]
        unsafe fn iadd(a: __m256i, b: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_add_epi32(a, b) }
        }
        #[inline(always)]
        unsafe fn fquad(p: *const f32) -> __m256 {
            // SAFETY: see the impl; four floats at p, read unaligned.
            unsafe { _mm256_broadcast_ps(&_mm_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn f16x4(p: *const u8) -> __m256 {
            // SAFETY: see the impl; 8 bytes at p; `movq` zeroes the upper half.
            unsafe { _mm256_zextps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64(p.cast()))) }
        }
        #[inline(always)]
        unsafe fn f32x2(p: *const u8) -> __m256 {
            // SAFETY: see the impl; 8 bytes at p; `movq` zeroes the upper half.
            unsafe { _mm256_zextps128_ps256(_mm_castsi128_ps(_mm_loadl_epi64(p.cast()))) }
        }
        #[inline(always)]
        unsafe fn ineg(a: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_sub_epi32(_mm256_setzero_si256(), a) }
        }
        #[inline(always)]
        unsafe fn bsplat(v: u8) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_set1_epi8(v as i8) }
        }
        #[inline(always)]
        unsafe fn hadd(a: __m256i, b: __m256i) -> __m256i {
            // SAFETY: see the impl.
            unsafe { _mm256_hadd_epi32(a, b) }
        }
        #[inline(always)]
        unsafe fn i8x8_even_odd(p: *const u8) -> __m256 {
            // SAFETY: see the impl; 8 bytes at p.
            unsafe {
                let order = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                let b = _mm_shuffle_epi8(_mm_loadl_epi64(p.cast()), order);
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))
            }
        }
        #[inline(always)]
        unsafe fn f16x8(h: &[u16; 8]) -> __m256 {
            // SAFETY: see the impl; h is 16 bytes.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast())) }
        }
        #[inline(always)]
        unsafe fn fdup_half(v: __m256, hi: bool) -> __m256 {
            // SAFETY: see the impl.
            unsafe {
                if hi {
                    _mm256_permute2f128_ps::<0x11>(v, v)
                } else {
                    _mm256_permute2f128_ps::<0x00>(v, v)
                }
            }
        }
        #[inline(always)]
        unsafe fn cvt(a: __m256i) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_cvtepi32_ps(a) }
        }
        #[inline(always)]
        unsafe fn fzero() -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        unsafe fn fload(p: *const f32) -> __m256 {
            // SAFETY: see the impl; 8 floats at p.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn fbroadcast(p: *const f32) -> __m256 {
            // SAFETY: see the impl; one float at p.
            unsafe { _mm256_broadcast_ss(&*p) }
        }
        #[inline(always)]
        unsafe fn fpair(p: *const f32) -> __m256 {
            // SAFETY: see the impl; two floats (8 bytes) at p, read as one unaligned f64.
            unsafe {
                let ab = _mm256_castpd_ps(_mm256_set1_pd(p.cast::<f64>().read_unaligned()));
                _mm256_permutevar8x32_ps(ab, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1))
            }
        }
        #[inline(always)]
        unsafe fn fsplat(v: f32) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_set1_ps(v) }
        }
        #[inline(always)]
        unsafe fn fperm(v: __m256, idx: &[u32; 8]) -> __m256 {
            // SAFETY: see the impl; idx is 8 u32.
            unsafe { _mm256_permutevar8x32_ps(v, _mm256_loadu_si256(idx.as_ptr().cast())) }
        }
        #[inline(always)]
        unsafe fn bytes8(v: u64) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64))) }
        }
        #[inline(always)]
        unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn fmul(a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn fadd(a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn fsum(a: __m256) -> f32 {
            // SAFETY: see the impl.
            unsafe { super::simd::hsum256(a) }
        }
        #[inline(always)]
        unsafe fn f16(p: *const u8) -> f32 {
            // SAFETY: see the impl; 2 bytes at p.
            unsafe {
                let h = p.cast::<u16>().read_unaligned();
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
            }
        }
    };
}

// SAFETY (every unsafe block in this impl): the trait's contract — called inside a function
// compiled for AVX2 + FMA + F16C + AVX-512 F/BW/VL/VNNI on a CPU that has them; pointers
// valid for what each method reads or writes.
#[cfg(target_arch = "x86_64")]
impl QVec for Vnni {
    qvec_avx2_common!();
    /// Two 64-byte loads of codes (chunks 0-1 and 2-3), each meeting one 64-byte load of
    /// its two chunks' even values and one of their odd values (the `Pairs` layout keeps a
    /// chunk pair's halves side by side for this), then the 32 dot lanes folded to the 8
    /// blocks by two `vpermt2d` and two adds: 16 instructions where the 256-bit form
    /// takes 30 (in cache, one thread, a bare C copy of both bodies over [2048 x 4096]
    /// int4: 116.5 against 100.2 us, 2026-12-07).
    #[inline(always)]
    unsafe fn quad_dot(w: *const u8, x: *const u8) -> __m256i {
        // Written out, without closures: a closure is a function of its own, which does not
        // inherit the caller's target features, so if not inlined its intrinsics would be
        // calls (a closure in the int4 quad loop made it 40x slower).
        // SAFETY: see the impl; 128 bytes at w, 256 at x.
        unsafe {
            let m4 = _mm512_set1_epi8(0x0F);
            let (va, vb) = (
                _mm512_loadu_si512(w.cast()),
                _mm512_loadu_si512(w.add(64).cast()),
            );
            let a = _mm512_dpbusd_epi32(
                _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    _mm512_and_si512(va, m4),
                    _mm512_loadu_si512(x.cast()),
                ),
                _mm512_and_si512(_mm512_srli_epi16::<4>(va), m4),
                _mm512_loadu_si512(x.add(64).cast()),
            );
            let b = _mm512_dpbusd_epi32(
                _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    _mm512_and_si512(vb, m4),
                    _mm512_loadu_si512(x.add(128).cast()),
                ),
                _mm512_and_si512(_mm512_srli_epi16::<4>(vb), m4),
                _mm512_loadu_si512(x.add(192).cast()),
            );
            // Output lane k (the order of `QActs::dh`: chunk k's first 32-block for k < 4,
            // chunk k - 4's second after) sums the four lanes from [0, 8, 16, 24, 4, 12, 20,
            // 28][k] (chunk m's first block at lanes 8m..8m+4 of a ++ b, its second at
            // 8m+4..8m+8): lanes 0 + 1 land at k, 2 + 3 at 8 + k, and the halves are added.
            let s = _mm512_add_epi32(
                _mm512_permutex2var_epi32(
                    a,
                    _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 2, 10, 18, 26, 6, 14, 22, 30),
                    b,
                ),
                _mm512_permutex2var_epi32(
                    a,
                    _mm512_setr_epi32(1, 9, 17, 25, 5, 13, 21, 29, 3, 11, 19, 27, 7, 15, 23, 31),
                    b,
                ),
            );
            _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s))
        }
    }
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
    #[inline(always)]
    unsafe fn dot_signed(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: see the impl. |w| as the unsigned side (|-128| = 128 reads as u8 128), the
        // sign moved onto x (x in [-127, 127], so negating it is exact).
        unsafe { _mm256_dpbusd_epi32(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w)) }
    }
}

// SAFETY (every unsafe block in this impl): the trait's contract — called inside a function
// compiled for AVX2 + FMA + F16C on a CPU that has them; pointers valid for what each
// method reads or writes.
#[cfg(target_arch = "x86_64")]
impl QVec for Madd {
    qvec_avx2_common!();
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: see the impl. Pairs stay below i16 saturation by the trait's contract.
        unsafe {
            let p = _mm256_maddubs_epi16(u, s);
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
        }
    }
    #[inline(always)]
    unsafe fn dot_nib2(
        acc: __m256i,
        u1: __m256i,
        s1: __m256i,
        u2: __m256i,
        s2: __m256i,
    ) -> __m256i {
        // SAFETY: see the impl. Codes <= 15 against |s| <= 127: four products sum to at
        // most 7620 in magnitude, inside i16.
        unsafe {
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2));
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
        }
    }
    #[inline(always)]
    unsafe fn dot_signed(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: see the impl. A pair is at most 2 * 128 * 127 = 32512 < 32767.
        unsafe {
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
        }
    }
}

// SAFETY (every unsafe block in this impl): plain Rust on raw pointers; the caller
// guarantees each pointer is valid for what the method reads or writes.
impl QVec for QPortable {
    type B = [u8; 32];
    type I = [i32; 8];
    type F = [f32; 8];
    #[inline(always)]
    unsafe fn bzero() -> [u8; 32] {
        [0; 32]
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> [u8; 32] {
        // SAFETY: see the impl; 32 bytes at p.
        unsafe { p.cast::<[u8; 32]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn nibbles16(p: *const u8) -> [u8; 32] {
        // SAFETY: see the impl; 16 bytes at p.
        let v = unsafe { p.cast::<[u8; 16]>().read_unaligned() };
        std::array::from_fn(|i| if i < 16 { v[i] & 15 } else { v[i - 16] >> 4 })
    }
    #[inline(always)]
    unsafe fn lo4(v: [u8; 32]) -> [u8; 32] {
        v.map(|b| b & 15)
    }
    #[inline(always)]
    unsafe fn hi4(v: [u8; 32]) -> [u8; 32] {
        v.map(|b| b >> 4)
    }
    #[inline(always)]
    unsafe fn and8(v: [u8; 32], m: u8) -> [u8; 32] {
        v.map(|b| b & m)
    }
    #[inline(always)]
    unsafe fn or8(a: [u8; 32], b: [u8; 32]) -> [u8; 32] {
        std::array::from_fn(|i| a[i] | b[i])
    }
    #[inline(always)]
    unsafe fn shl16(v: [u8; 32], n: u32) -> [u8; 32] {
        let mut o = [0u8; 32];
        for i in 0..16 {
            let w = u16::from_le_bytes([v[2 * i], v[2 * i + 1]]) << n;
            [o[2 * i], o[2 * i + 1]] = w.to_le_bytes();
        }
        o
    }
    #[inline(always)]
    unsafe fn shr16(v: [u8; 32], n: u32) -> [u8; 32] {
        let mut o = [0u8; 32];
        for i in 0..16 {
            let w = u16::from_le_bytes([v[2 * i], v[2 * i + 1]]) >> n;
            [o[2 * i], o[2 * i + 1]] = w.to_le_bytes();
        }
        o
    }
    #[inline(always)]
    unsafe fn dot(acc: [i32; 8], u: [u8; 32], s: [u8; 32]) -> [i32; 8] {
        std::array::from_fn(|l| {
            let mut a = acc[l];
            for j in 4 * l..4 * l + 4 {
                a += i32::from(u[j]) * i32::from(s[j] as i8);
            }
            a
        })
    }
    #[inline(always)]
    unsafe fn dot_signed(acc: [i32; 8], w: [u8; 32], x: [u8; 32]) -> [i32; 8] {
        std::array::from_fn(|l| {
            let mut a = acc[l];
            for j in 4 * l..4 * l + 4 {
                a += i32::from(w[j] as i8) * i32::from(x[j] as i8);
            }
            a
        })
    }
    #[inline(always)]
    unsafe fn izero() -> [i32; 8] {
        [0; 8]
    }
    #[inline(always)]
    unsafe fn iload(p: *const i32) -> [i32; 8] {
        // SAFETY: see the impl; 8 i32 at p.
        unsafe { p.cast::<[i32; 8]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn iadd(a: [i32; 8], b: [i32; 8]) -> [i32; 8] {
        std::array::from_fn(|l| a[l].wrapping_add(b[l]))
    }
    #[inline(always)]
    unsafe fn fquad(p: *const f32) -> [f32; 8] {
        // SAFETY: see the impl; four floats at p.
        let q = unsafe { p.cast::<[f32; 4]>().read_unaligned() };
        [q[0], q[1], q[2], q[3], q[0], q[1], q[2], q[3]]
    }
    #[inline(always)]
    unsafe fn f16x4(p: *const u8) -> [f32; 8] {
        let mut v = [0f32; 8];
        for l in 0..4 {
            // SAFETY: see the impl; 8 bytes at p.
            v[l] = unsafe { Self::f16(p.add(2 * l)) };
        }
        v
    }
    #[inline(always)]
    unsafe fn f32x2(p: *const u8) -> [f32; 8] {
        // SAFETY: see the impl; 8 bytes at p.
        let b = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
        let f = |i: usize| f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        [f(0), f(4), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    unsafe fn ineg(a: [i32; 8]) -> [i32; 8] {
        a.map(i32::wrapping_neg)
    }
    #[inline(always)]
    unsafe fn bsplat(v: u8) -> [u8; 32] {
        [v; 32]
    }
    #[inline(always)]
    unsafe fn hadd(a: [i32; 8], b: [i32; 8]) -> [i32; 8] {
        let p = |v: [i32; 8], i: usize| v[i].wrapping_add(v[i + 1]);
        [
            p(a, 0),
            p(a, 2),
            p(b, 0),
            p(b, 2),
            p(a, 4),
            p(a, 6),
            p(b, 4),
            p(b, 6),
        ]
    }
    #[inline(always)]
    unsafe fn i8x8_even_odd(p: *const u8) -> [f32; 8] {
        // SAFETY: see the impl; 8 bytes at p.
        let b = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
        [0, 2, 4, 6, 1, 3, 5, 7].map(|i| f32::from(b[i] as i8))
    }
    #[inline(always)]
    unsafe fn f16x8(h: &[u16; 8]) -> [f32; 8] {
        h.map(f16_bits_to_f32)
    }
    #[inline(always)]
    unsafe fn fdup_half(v: [f32; 8], hi: bool) -> [f32; 8] {
        let o = if hi { 4 } else { 0 };
        [
            v[o],
            v[o + 1],
            v[o + 2],
            v[o + 3],
            v[o],
            v[o + 1],
            v[o + 2],
            v[o + 3],
        ]
    }
    #[inline(always)]
    unsafe fn cvt(a: [i32; 8]) -> [f32; 8] {
        a.map(|v| v as f32)
    }
    #[inline(always)]
    unsafe fn fzero() -> [f32; 8] {
        [0.0; 8]
    }
    #[inline(always)]
    unsafe fn fload(p: *const f32) -> [f32; 8] {
        // SAFETY: see the impl; 8 floats at p.
        unsafe { p.cast::<[f32; 8]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn fbroadcast(p: *const f32) -> [f32; 8] {
        // SAFETY: see the impl; one float at p.
        [unsafe { *p }; 8]
    }
    #[inline(always)]
    unsafe fn fpair(p: *const f32) -> [f32; 8] {
        // SAFETY: see the impl; two floats at p.
        let (a, b) = unsafe { (*p, *p.add(1)) };
        [a, a, a, a, b, b, b, b]
    }
    #[inline(always)]
    unsafe fn fsplat(v: f32) -> [f32; 8] {
        [v; 8]
    }
    #[inline(always)]
    unsafe fn fperm(v: [f32; 8], idx: &[u32; 8]) -> [f32; 8] {
        idx.map(|i| v[(i & 7) as usize])
    }
    #[inline(always)]
    unsafe fn bytes8(v: u64) -> [f32; 8] {
        let b = v.to_le_bytes();
        let mut f = [0f32; 8];
        for l in 0..8 {
            f[l] = f32::from(b[l]);
        }
        f
    }
    #[inline(always)]
    unsafe fn fma(a: [f32; 8], b: [f32; 8], c: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|l| a[l] * b[l] + c[l])
    }
    #[inline(always)]
    unsafe fn fmul(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    unsafe fn fadd(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    unsafe fn fsum(a: [f32; 8]) -> f32 {
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> f32 {
        // SAFETY: see the impl; 2 bytes at p.
        let h = unsafe { p.cast::<u16>().read_unaligned() };
        f16_bits_to_f32(u16::from_le(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_bits_decode_exactly() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{h:#06x}: {got} vs {want}"
            );
        }
    }
}
