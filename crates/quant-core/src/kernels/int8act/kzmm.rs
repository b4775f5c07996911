//! A 512-bit single-activation-row (S = 1) int8-activation kernel of q4_k (and mq4-k), run
//! at [`SimdLevel::Avx512Vnni`] in place of the generic 256-bit [`super::ggml`] body; every
//! other level and S > 1 go to that body. Rows longer than [`ONE_ROW_MAX_COLS`] go in column
//! panels ([`super::panels`]) or, where those are off, to that body's four-row tiles.
//!
//! The 256-bit body folds the eight 32-block dots of a 256-block with six `vphaddd`. Here
//! one 64-byte load of codes covers two 32-blocks, each `vpdpbusd` leaves two blocks' sums
//! in its 16 i32 lanes, and instead of folding the lanes each lane is converted and
//! multiplied by its own factor `d·sc·Δ` (block scale × sub-block scale × activation step,
//! spread over the lanes with `vpermps`), accumulated in four independent f32 vectors and
//! reduced once per row. The integer sums are the 256-bit body's and the min term is
//! applied in f32 the same way, so the declared bound of [`super`] holds unchanged.
//!
//! Measured (this session, 2-core EPYC, busy machine, same process as candle's q4k):
//! in cache (64 x 4096, one thread) 9.1 us a call against 10.1 us for the 256-bit body;
//! streaming [4096 x 4096] and [14336 x 4096] from memory the two bodies were within the
//! run-to-run noise of each other (0.92-1.04x of candle's speed, both). A q6_k body built
//! the same way was not faster in cache (12.8 us against 10.9 us) nor streaming, so
//! q6_k stays on the 256-bit body.
//!
//! What did not pay, measured the same way: two adjacent rows side by side (sharing each
//! unit's activation loads) streamed 2-6x slower at 4096 columns, as the four-row tiles
//! did for the 256-bit bodies (`ONE_ROW_MAX_COLS`); at 16384 columns this one-row body
//! streamed at 0.85x of candle where the four-row 256-bit body measured 1.36x, so longer
//! rows keep that body where panels are off; a `prefetcht0` 768 or 2048 bytes ahead of the
//! weight stream made it slower (q6_k [4096 x 4096]: 3.2 ms and 1.0 ms a call against 0.76 ms without).

use super::super::SimdLevel;
use super::super::prefetch;
use super::panels::{self, in_panels};
use super::{Int8Kernel, ONE_ROW_MAX_COLS, QActs, QLayout};
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Which 256-block format a [`ZmmOneRow`] runs (q4_k only: see the module docs).
#[derive(Copy, Clone)]
enum Kind {
    Q4k,
}

/// The q4_k int8-activation kernel: the 512-bit one-row body at S = 1 on AVX-512 VNNI,
/// `fallback` otherwise.
pub(crate) struct ZmmOneRow {
    kind: Kind,
    fallback: &'static dyn Int8Kernel,
}

pub(crate) static Q4_K: ZmmOneRow = ZmmOneRow {
    kind: Kind::Q4k,
    fallback: &super::ggml::Q4_K,
};

/// Bytes of one q4_k storage block (256 weights).
const Q4K_BB: usize = 144;

impl Int8Kernel for ZmmOneRow {
    fn layout(&self) -> QLayout {
        QLayout::Natural
    }
    fn dot_rows_panels(
        &self,
        panels: bool,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if a.s == 1
            && level == SimdLevel::Avx512Vnni
            && (panels || t.cols() <= ONE_ROW_MAX_COLS)
            && n <= out.len()
        {
            let blocks = t.cols() / 256;
            let bb = match self.kind {
                Kind::Q4k => Q4K_BB,
            };
            // `QTensor::new` checked the row length against the registry; rows that are
            // not `blocks` whole blocks would be a registry bug, so take the generic body
            // rather than read past them.
            if blocks.checked_mul(bb) != Some(t.row_bytes()) {
                return self
                    .fallback
                    .dot_rows_panels(panels, level, t, a, row0, n, out);
            }
            in_panels(panels, blocks, 1, &mut out[..n], |b0, b1, out| {
                let ahead = panels::ahead(b1 - b0, blocks, t.row_bytes(), prefetch::per_stream(1));
                for (r, y) in out.iter_mut().enumerate() {
                    let row = [t.row(row0 + r).as_ptr()];
                    // SAFETY: the level was clamped to the hardware by `gemm_with_at`, so
                    // AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C are present; the row holds
                    // `blocks` whole blocks (checked above), and `b0..b1` lies in them; the
                    // activation row is padded to a multiple of 256 values with
                    // `padded / 32` steps and sums (`QActs::new`), which covers `blocks`
                    // units.
                    *y = unsafe {
                        match self.kind {
                            Kind::Q4k => q4k_rows(&row, b0..b1, a, ahead)[0],
                        }
                    };
                }
            });
            return;
        }
        self.fallback
            .dot_rows_panels(panels, level, t, a, row0, n, out)
    }
}

/// Lane indices spreading 8 per-block factors over the 16 i32 lanes of one 512-bit dot:
/// lanes 0..8 take factor `lo`, lanes 8..16 factor `hi`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves(lo: i32, hi: i32) -> __m512i {
    // SAFETY: AVX-512 F present (the callers' target features).
    unsafe {
        _mm512_setr_epi32(
            lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi,
        )
    }
}

/// Two 32-byte activation blocks `p` and `p + 64` as one 512-bit vector.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn x_pair(p: *const u8) -> __m512i {
    // SAFETY: the caller's contract: 96 bytes at p.
    unsafe {
        let lo = _mm256_loadu_si256(p.cast());
        let hi = _mm256_loadu_si256(p.add(64).cast());
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }
}

/// R q4_k rows against activation row 0, each `Σ_s d·sc_s·Δ_s·Σ u·q - Σ_s dmin·m_s·(Δ_s Σ q)`;
/// the activations of a unit are loaded once for the R rows.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `b[r]` points at whole 144-byte
/// blocks, `walk.end` of them at least; `a` holds at least `256 · walk.end` values (row 0).
/// Blocks `walk` only (a column panel's, or all), each line asked for `ahead`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_rows<const R: usize>(
    b: &[*const u8; R],
    walk: std::ops::Range<usize>,
    a: &QActs,
    ahead: prefetch::Ahead,
) -> [f32; R] {
    // SAFETY: the contract above; every offset read lies in block j's 144 bytes or in unit
    // j's 256 activations, 8 steps and 8 sums.
    unsafe {
        let (q, dx, xs) = (a.q(0), a.d(0), a.xs(0));
        let m4 = _mm512_set1_epi8(0x0F);
        // Code vector k: (lo/hi nibbles, 64-byte half p): sub-blocks (4p, 4p + 2) for the low
        // nibbles, (4p + 1, 4p + 3) for the high ones.
        let idx = [halves(0, 2), halves(1, 3), halves(4, 6), halves(5, 7)];
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let mut neg = [_mm256_setzero_ps(); R];
        let (low6, low4, top2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
        for j in walk {
            prefetch::rows(b, j * Q4K_BB, Q4K_BB, ahead);
            let xq = q.add(256 * j);
            // Sub-blocks 4p and 4p + 2 sit at activations 128p and 128p + 64.
            let x = [
                x_pair(xq),
                x_pair(xq.add(32)),
                x_pair(xq.add(128)),
                x_pair(xq.add(160)),
            ];
            let steps = _mm256_loadu_ps(dx.add(8 * j));
            let sums = _mm256_loadu_ps(xs.add(8 * j));
            for r in 0..R {
                let blk = b[r].add(j * Q4K_BB);
                // d and dmin in lanes 0 and 1.
                let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(blk.cast::<i32>().read_unaligned()));
                let d = _mm256_broadcastss_ps(dd);
                let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
                let w = blk.add(4).cast::<[u32; 3]>().read_unaligned();
                let (a0, a1, a2) = (u32::from_le(w[0]), u32::from_le(w[1]), u32::from_le(w[2]));
                // GGML's get_scale_min_k4 on the 12 bytes as three words (see
                // ggml::k4_scales).
                let sc_lo = u64::from(a0 & low6);
                let sc_hi = u64::from((a2 & low4) | (((a0 >> 6) & top2) << 4));
                let mn_hi = (a2 >> 4) & low4 | (((a1 >> 6) & top2) << 4);
                let mn = u64::from(a1 & low6) | (u64::from(mn_hi) << 32);
                let bytes =
                    |v: u64| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)));
                let sc = bytes(sc_lo | (sc_hi << 32));
                let m = _mm256_mul_ps(bytes(mn), dmin);
                // Per-sub-block factor d·sc_s·Δ_s.
                let f = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_mul_ps(sc, d), steps));
                neg[r] = _mm256_fmadd_ps(m, sums, neg[r]);
                for p in 0..2 {
                    let v = _mm512_loadu_si512(blk.add(16 + 64 * p).cast());
                    let lo = _mm512_and_si512(v, m4);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                    for (k, u) in [(2 * p, lo), (2 * p + 1, hi)] {
                        let i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x[k]);
                        let fk = _mm512_permutexvar_ps(idx[k], f);
                        acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), fk, acc[r][k]);
                    }
                }
            }
        }
        let mut out = [0f32; R];
        for r in 0..R {
            let c = &acc[r];
            let s = _mm512_add_ps(_mm512_add_ps(c[0], c[1]), _mm512_add_ps(c[2], c[3]));
            out[r] = _mm512_reduce_add_ps(s) - super::super::simd::hsum256(neg[r]);
        }
        out
    }
}
