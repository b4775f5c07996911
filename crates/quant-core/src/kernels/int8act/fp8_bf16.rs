//! The fp8-e4m3-b128 kernel of the opt-in fast path ([`super::KernelPath::Int8Activations`]):
//! activations rounded to bf16 instead of int8, weights decoded to bf16 (exact: an E4M3
//! value has 4 significant bits and an exponent inside bf16's range), and `vdpbf16ps`
//! (AVX-512 BF16) multiplying 32 weight pairs a step. E4M3 codes are not integers, so the
//! int8 dot products of the other formats do not apply; bf16 products of a 4-bit and an
//! 8-bit significand are exact in f32, so the only rounding the path adds is that of x.
//!
//! # Why the int8 path's declared bound holds
//!
//! bf16 keeps 8 significant bits, so round to nearest even leaves `|x - x̂| <= 2^-8 |x|`;
//! with `|x| <= max_b |x|` over its 32-block, `|x - x̂| <= max_b |x| / 256 < Δ_b / 2 =
//! max_b |x| / 254`: the rounding term `Σ |w_i| Δ_b / 2` of [`super`] covers it (and the
//! typical error is far smaller: every value is rounded relative to itself, not to its
//! block's largest). Two exceptions, both outside any
//! activation a model produces: values below 2^-126 are set to zero (`vdpbf16ps` reads
//! subnormals as zero), which the bound covers unless a whole block lies below 2^-118; and,
//! as on the int8 path, a block holding a non-finite value becomes all NaN.
//!
//! # The decode
//!
//! A 64-byte chunk of codes indexes two 128-byte tables (`vpermi2b`, AVX-512 VBMI) for the
//! high and low bytes of the bf16 of `|code|`; the sign bit is OR-ed into the high byte and
//! the two byte vectors interleaved (`vpunpck{l,h}bw`) into two vectors of 32 bf16. The
//! interleave works within 128-bit lanes, so the first vector holds weights 16j..16j+8 of
//! each lane j and the second 16j+8..16j+16: the activations are stored in that order
//! ([`order`]). The NaN codes 0x7F / 0xFF map to a bf16 NaN, which the products carry to
//! the row's output (what a NaN weight does to the f64 oracle). Each 128-weight tile's two
//! chunk sums are multiplied by the tile's scale (f32 or UE8M0) once.
//!
//! Only on CPUs with AVX-512 BF16 and VBMI at an AVX-512 level ([`runs_at`]); elsewhere
//! [`super::gemm_with_at`] runs the exact kernel and says so.
//!
//! Measured (2026-11-30, this 2-core AMD EPYC (Zen 4), one thread, in cache, [512 x 4096],
//! per-thread CPU time): this loop alone in a scratch crate 109 ns a row (37.5 GB/s), through
//! `gemm_with` (the activation rounding included) 123-125 ns (33 GB/s), against the exact
//! f32 kernel's 255-262 ns (16 GB/s) in the same runs.

use super::super::SimdLevel;
use super::super::fp8::{e4m3_decode, ue8m0_decode};
use super::super::prefetch;
use super::panels::{self, UNIT, in_panels};
use super::{Int8Kernel, QActs, QLayout};
use crate::codecs::util::read_f32;
use crate::registry::ScaleEncoding;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Weights (and rows) a scale tile spans.
const TILE: usize = 128;
/// Weights one 512-bit step covers.
const CHUNK: usize = 64;

/// The fp8 kernel (f32 and UE8M0 tile scales).
pub(crate) struct Fp8Bf16;
pub(crate) static FP8: Fp8Bf16 = Fp8Bf16;

/// Whether this CPU runs the kernel at `level` (already clamped to the hardware).
pub(crate) fn runs_at(level: SimdLevel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(level, SimdLevel::Avx512 | SimdLevel::Avx512Vnni)
            && std::arch::is_x86_feature_detected!("avx512bf16")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        false
    }
}

/// A quiet bf16 NaN.
pub(crate) const BF16_NAN: u16 = 0x7FC0;

/// bf16 (round to nearest even) of one activation, subnormals to zero, NaN quiet. Written
/// with selects, not branches, so the activation rounding vectorizes.
#[inline]
pub(crate) fn bf16_of(x: f32) -> u16 {
    let b = x.to_bits();
    let mag = b & 0x7FFF_FFFF;
    // Rounds the low 16 bits to nearest even; a carry into the exponent is the right
    // result (it may reach infinity, as any rounding of a value near f32::MAX does).
    let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    let zero = (b >> 16) as u16 & 0x8000;
    let v = if mag < 0x0080_0000 { zero } else { rounded };
    if mag > 0x7F80_0000 { BF16_NAN } else { v }
}

/// Where activation `i` of a chunk sits in the kernel's order: lane j's first 8 values go
/// to the first vector (position 8j + t), its last 8 to the second (32 + 8j + t).
pub(crate) const fn order(i: usize) -> usize {
    let (j, t) = (i / 16, i % 16);
    if t < 8 { 8 * j + t } else { 32 + 8 * j + t - 8 }
}

/// High and low bytes of the bf16 of each E4M3 magnitude code (0..128); 0x7F is NaN.
fn tables() -> [[u8; 128]; 2] {
    let mut t = [[0u8; 128]; 2];
    for c in 0..128u8 {
        let v = e4m3_decode(c);
        // Exact: an E4M3 value has at most 4 significant bits.
        let bits = if v.is_nan() {
            BF16_NAN
        } else {
            (v.to_bits() >> 16) as u16
        };
        t[0][c as usize] = (bits >> 8) as u8;
        t[1][c as usize] = bits as u8;
    }
    t
}

impl Int8Kernel for Fp8Bf16 {
    fn layout(&self) -> QLayout {
        QLayout::Bf16
    }
    fn runs_at(&self, level: SimdLevel) -> bool {
        runs_at(level)
    }
    /// Long rows at S = 1 always go in panels (the kernel has no other form for them).
    fn dot_rows_panels(
        &self,
        _panels: bool,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let ue8m0 = t.format().spec().scale_encoding() == Some(ScaleEncoding::Ue8m0);
        let tiles = t.cols().div_ceil(TILE);
        let scale = |o: usize, tile: usize| {
            let idx = (o / TILE) * tiles + tile;
            if ue8m0 {
                ue8m0_decode(t.scales()[idx])
            } else {
                read_f32(t.scales(), 4 * idx)
            }
        };
        #[cfg(target_arch = "x86_64")]
        if runs_at(level) {
            let tabs = tables();
            let nch = t.cols().div_ceil(CHUNK);
            // Rows `row0..row0 + n` over the chunks `walk` into `out`, each line asked for
            // `ahead`.
            let walk_rows =
                |walk: std::ops::Range<usize>, ahead: prefetch::Ahead, out: &mut [f32]| {
                    let mut sc = vec![0f32; tiles];
                    let mut band = usize::MAX;
                    for r in 0..n {
                        let o = row0 + r;
                        // Rows of one 128-row band share their tile scales.
                        if o / TILE != band {
                            band = o / TILE;
                            for (tile, v) in sc.iter_mut().enumerate() {
                                *v = scale(o, tile);
                            }
                        }
                        let mut k = 0;
                        while k < a.s {
                            let y = &mut out[r * a.s + k..];
                            let w = walk.clone();
                            // SAFETY: `runs_at` checked AVX-512 F/BW, BF16 and VBMI; the row
                            // holds `cols` bytes; every activation row is padded to a multiple
                            // of 256 values (`QActs::new`), which covers `cols.div_ceil(64)`
                            // chunks, where `walk` ends; `sc` holds one scale per tile; `y` has
                            // room for the `T` outputs.
                            unsafe {
                                match a.s - k {
                                    1 => fp8_row::<1>(t.row(o), &sc, a, k, &tabs, w, ahead, y),
                                    2 => fp8_row::<2>(t.row(o), &sc, a, k, &tabs, w, ahead, y),
                                    3 => fp8_row::<3>(t.row(o), &sc, a, k, &tabs, w, ahead, y),
                                    _ => fp8_row::<4>(t.row(o), &sc, a, k, &tabs, w, ahead, y),
                                }
                            }
                            k += 4;
                        }
                    }
                };
            // Long rows at S = 1 go in column panels ([`super::panels`]): a row's bf16
            // activations (2 bytes a weight) no longer fit L1 beside the stream past
            // ONE_ROW_MAX_COLS.
            let units = t.cols().div_ceil(UNIT);
            in_panels(true, units, a.s, &mut out[..n * a.s], |u0, u1, out| {
                let per = UNIT / CHUNK;
                let ahead = panels::ahead(u1 - u0, units, t.row_bytes(), prefetch::per_stream(1));
                walk_rows(per * u0..(per * u1).min(nch), ahead, out)
            });
            return;
        }
        // Not reached through `gemm_with_at` (which runs the exact kernel where `runs_at`
        // is false); a scalar twin so the trait is total (tested on its own).
        let _ = level;
        for r in 0..n {
            let o = row0 + r;
            let row = t.row(o);
            for k in 0..a.s {
                let x = a.xb(k);
                let mut tot = 0f32;
                for tile in 0..tiles {
                    let mut acc = 0f32;
                    for i in TILE * tile..(TILE * tile + TILE).min(t.cols()) {
                        let xi = f32::from_bits(
                            u32::from(x[CHUNK * (i / CHUNK) + order(i % CHUNK)]) << 16,
                        );
                        acc += e4m3_decode(row[i]) * xi;
                    }
                    tot += acc * scale(o, tile);
                }
                out[r * a.s + k] = tot;
            }
        }
    }
}

/// The two 128-entry byte tables of [`tables`] in registers, and the decode of 64 codes.
#[cfg(target_arch = "x86_64")]
struct Decoder {
    hi: [__m512i; 2],
    lo: [__m512i; 2],
    sign: __m512i,
}

#[cfg(target_arch = "x86_64")]
impl Decoder {
    /// # Safety
    /// AVX-512 F present.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn new(tabs: &[[u8; 128]; 2]) -> Decoder {
        // SAFETY: each table is 128 bytes: two 64-byte loads.
        unsafe {
            let half = |t: &[u8; 128], h: usize| _mm512_loadu_si512(t.as_ptr().add(64 * h).cast());
            Decoder {
                hi: [half(&tabs[0], 0), half(&tabs[0], 1)],
                lo: [half(&tabs[1], 0), half(&tabs[1], 1)],
                sign: _mm512_set1_epi8(0x80u8 as i8),
            }
        }
    }

    /// 64 codes as two vectors of 32 bf16, in [`order`].
    ///
    /// # Safety
    /// AVX-512 F/BW and VBMI present.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512bf16")]
    unsafe fn bf16(&self, v: __m512i) -> (__m512bh, __m512bh) {
        let hb = _mm512_permutex2var_epi8(self.hi[0], v, self.hi[1]);
        // hb | (v & sign): the code's sign into the high byte.
        let hb = _mm512_ternarylogic_epi32::<0xF8>(hb, v, self.sign);
        let lb = _mm512_permutex2var_epi8(self.lo[0], v, self.lo[1]);
        // SAFETY: __m512i and __m512bh are both 64 bytes of plain bits.
        unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_unpacklo_epi8(lb, hb)),
                std::mem::transmute::<__m512i, __m512bh>(_mm512_unpackhi_epi8(lb, hb)),
            )
        }
    }
}

/// The load mask of a row's last, partial chunk: its `cols % 64` codes. Past them a masked
/// load reads nothing (AVX-512 suppresses faults on masked-off bytes) and yields code 0
/// (+0.0), against zero activations. A mask, not a copy into a buffer: a copy inside the
/// loop is a call, across which the accumulators leave the registers (measured on an AMD
/// EPYC Zen 4, one thread, in cache, [256 x 16384]: 16.6 GB/s with the copy, 31 without).
#[cfg(target_arch = "x86_64")]
fn tail_mask(cols: usize) -> __mmask64 {
    (1u64 << (cols % CHUNK)).wrapping_sub(1)
}

/// `y[k] = Σ_tiles scale · Σ w x̂` over the 64-code chunks `walk` of one row (a column
/// panel's, whose ends are multiples of 4 chunks or the row's end, so no tile is split)
/// against activation rows `k0..k0+T`, each line asked for `ahead`.
///
/// # Safety
/// AVX-512 F/BW, BF16 and VBMI present; `row` holds the row's codes; the activation rows are
/// padded past `64 · row.len().div_ceil(64)` values, where `walk` ends at the latest; `sc`
/// holds one scale per 128 codes; `y` holds `T` outputs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn fp8_row<const T: usize>(
    row: &[u8],
    sc: &[f32],
    a: &QActs,
    k0: usize,
    tabs: &[[u8; 128]; 2],
    walk: std::ops::Range<usize>,
    ahead: prefetch::Ahead,
    y: &mut [f32],
) {
    // SAFETY: the caller's contract; the tables are 128 bytes each.
    unsafe {
        let dec = Decoder::new(tabs);
        let xs: [*const u16; T] = std::array::from_fn(|k| a.xb(k0 + k).as_ptr());
        let cols = row.len();
        let full = cols / CHUNK;
        let nch = cols.div_ceil(CHUNK);
        let mut total = [_mm512_setzero_ps(); T];
        let mut acc = [[_mm512_setzero_ps(); 2]; T];
        // Written as one flat loop (no closure: a closure's body does not take this
        // function's target features, and its intrinsics then do not inline).
        let tail = tail_mask(cols);
        for c in walk {
            prefetch::lines(row.as_ptr(), CHUNK * c, CHUNK, ahead);
            let v = _mm512_maskz_loadu_epi8(
                if c < full { !0 } else { tail },
                row.as_ptr().add(CHUNK * c).cast(),
            );
            let (wa, wb) = dec.bf16(v);
            for k in 0..T {
                let xa: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(xs[k].add(CHUNK * c).cast()));
                let xb: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(xs[k].add(CHUNK * c + 32).cast()));
                acc[k][0] = _mm512_dpbf16_ps(acc[k][0], wa, xa);
                acc[k][1] = _mm512_dpbf16_ps(acc[k][1], wb, xb);
            }
            // A tile is two chunks (the last one may be one): fold its scale once.
            if c % 2 == 1 || c + 1 == nch {
                let s = _mm512_set1_ps(sc[c / 2]);
                for k in 0..T {
                    total[k] = _mm512_fmadd_ps(_mm512_add_ps(acc[k][0], acc[k][1]), s, total[k]);
                    acc[k] = [_mm512_setzero_ps(); 2];
                }
            }
        }
        for k in 0..T {
            y[k] = _mm512_reduce_add_ps(total[k]);
        }
    }
}
