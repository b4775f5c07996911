//! The opt-in int8-activation path: activations rounded to int8 in blocks of 32 (GGML's
//! q8_0 activation blocks: one f32 step per 32 values), then integer dot products of the
//! stored codes with those int8 values — `vpdpbusd` with AVX-512 VNNI, `vpmaddubsw` +
//! `vpmaddwd` with AVX2 (and AVX-512 without VNNI), plain integer loops on the portable
//! level — with every weight scale, sub-block scale, min and offset applied in f32 per
//! block. It is how candle's and ggml's quantized matvecs get their speed. It is never the
//! default: [`super::gemm`] is exact, and this path runs only when asked for by
//! [`gemm_with`] / [`gemm_with_at`] with [`KernelPath::Int8Activations`].
//!
//! # Tolerance (declared, and tested against the f64 oracle of the exact product)
//!
//! Activation row k is cut into 32-blocks along I (in the stored domain: after the FWHT
//! for rotated formats); block b has step `Δ_b = max_{i∈b} |x_i| / 127` and each value is
//! replaced by `x̂_i = Δ_b · round(x_i / Δ_b)`, so `|x_i - x̂_i| <= Δ_b / 2` (plus f32
//! rounding of a few ulps of `Δ_b`). The kernels then compute `Σ_i w_i x̂_i` with exact
//! integer dot products and f32 scaling and accumulation of the block sums, so
//!
//! ```text
//! |y - Σ_i w_i x_i|  <=  Σ_i |w_i| · Δ_b(i) / 2  +  1e-5 · M
//! M = Σ_i |w_i x̂_i|                                 (+ 2 Σ_i W_i |x̂_i| for affine formats)
//! ```
//!
//! The first term is the worst case of the activation rounding (every rounding error at its
//! maximum and aligned with its weight's sign); the second the f32 arithmetic, the exact
//! kernels' 1e-5 against the magnitude of what is summed. Formats whose weights are affine
//! in their codes (q4_k, q5_k, mq4-k: `d·sc·q - dmin·m`; hfq4-g256, mq4-g256, mq4-g256-v2,
//! mq4c-g256: `s·q + z`) add their min / zero term in f32 next to a code term that can be
//! as large, so their M also counts the offsets, bounded by `W_i`, the largest |weight| of
//! i's storage block. (Code offsets that are not part of the format — q4_0's `q - 8`,
//! q6_k's `q - 32`, int4's `q - 8` — are taken in the integer sums, exactly.)
//!
//! Relative to the oracle's metric `Σ_i |w_i x_i|` the rounding term is
//! `ρ = Σ|w_i| Δ_b / (2 Σ|w_i x_i|)`; for Gaussian activations (E max|x| over 32 ≈ 2.4σ,
//! E|x| ≈ 0.8σ) ρ ≈ 2.4 / (2 · 127 · 0.8) ≈ 1.2e-2. The error actually made is far below
//! that worst case, since the rounding errors are independent and mostly cancel (typically
//! ρ/√I). Measured at a bench shape ([4096 x 4096], `testdata::weights`, seed 99, one
//! activation row; `cargo test -p quant-core --release --test int8_activations_vs_oracle --
//! --ignored --nocapture`), as `|y - y_ref| / Σ|w x|` over the 4096 outputs:
//!
//! | activations | formats | median | 99th pct | largest | ρ median | largest error / bound |
//! | --- | --- | ---: | ---: | ---: | ---: | ---: |
//! | N(0, 1) | all but int4-row | 0.9-1.0e-4 | 0.35-1.4e-3 | 1.1e-3 - 1.1e-2 | 1.2e-2 | 0.09-0.73 |
//! | N(0, 1) | int4-row | 1.1e-4 | 3.6e-3 | 7.3e-2 | 1.2e-2 | 0.92 |
//! | N(0, 1), one channel 50 | all but int4-row | 0.8-2.1e-4 | 0.33-2.5e-3 | 0.6-6.5e-3 | 1.0-1.3e-2 | 0.06-0.48 |
//! | N(0, 1), one channel 50 | int4-row | 2.2e-4 | 6.4e-3 | 2.8e-2 | 1.3e-2 | 0.94 |
//!
//! The largest errors sit on the outlier rows of `testdata::weights` (20x spikes), whose
//! int4-row codes are mostly zero: a handful of terms, so the rounding errors do not average
//! out and come close to their worst case. Against `Σ w x̂` (the arithmetic alone) the
//! largest error was 2e-7 of M. The rotated formats (mq4-*) see smaller errors: the FWHT
//! spreads the outlier activation over every block.
//!
//! [`int8_activation_bound`] computes the rounding term per output and
//! [`int8_rounded_activations`] the `x̂` the kernels use. The tests hold every output to
//! both halves separately: to the whole bound against the f64 oracle of the exact product,
//! and to `1e-5 · M` against `Σ_i w_i x̂_i` in f64 — the rounding term alone is loose
//! enough to hide, say, a weight scale 1% wrong; the second check is not.
//!
//! A non-finite activation makes its whole 32-block NaN (so NaN propagates to every output
//! it touches, as in the exact path; an infinity becomes NaN rather than ±inf).
//!
//! Formats with an int8-activation kernel: see [`has_int8_activations`]; for any other
//! format [`gemm_with`] runs the exact kernel (which also meets the bound above) and
//! returns [`KernelPath::Exact`] so the caller can tell.

mod fp8_bf16;
mod ggml;
mod kzmm;
mod lines;
mod panels;
mod tessera;
pub(crate) use tessera::quad_dots_narrow;
#[cfg(test)]
mod tests;
mod zmm_int8_row;

use super::vector::QVec;
use super::{Micro, SimdLevel, drive};
use crate::api::{decode_rows_stored_f64, rotate_activations};
use crate::error::QuantError;
use crate::registry::{Format, Rotation};
use crate::tensor::QTensor;
use lines::Lines;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use super::vector::{Madd, Vnni};

/// Which arithmetic a CPU GEMV/GEMM uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// f32 activations, every product that of the decoded weight, f32 accumulation: each
    /// output within 1e-5 of `Σ|w_i x_i|` of the exact product. What [`super::gemm`] runs.
    Exact,
    /// Opt-in: activations rounded to int8 per 32-block and integer dot products; each
    /// output within `Σ|w_i| Δ_b / 2 + 1e-5 M` of the exact product (the module docs
    /// define M; for Gaussian activations the first term is about 1.2e-2 of `Σ|w_i x_i|`).
    Int8Activations,
}

impl KernelPath {
    /// Stable lower-case name (bench ids, tables).
    pub const fn name(self) -> &'static str {
        match self {
            KernelPath::Exact => "exact",
            KernelPath::Int8Activations => "int8-act",
        }
    }
}

/// Values a block of activations shares one int8 step over.
pub const ACT_BLOCK: usize = 32;
/// Rows of quantized activations are padded (with zeros) to a multiple of this.
const PAD: usize = 256;

/// How a kernel wants the int8 activations ordered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum QLayout {
    /// Weight order.
    Natural,
    /// For the interleaved nibble formats (weight 2b the low nibble of byte b): each
    /// 64-chunk's 32 even-indexed values (`xe`) and 32 odd-indexed ones (`xo`), so that the
    /// low nibbles of 32 packed bytes meet `xe` and the high nibbles `xo`; 8 i32 lanes of a
    /// dot then hold weights 8l..8l+8 of the chunk. Two chunks c, c + 1 (c even) share 128
    /// bytes as `[xe_c, xe_c+1, xo_c, xo_c+1]` ([`pairs_at`]), so that one 64-byte load of
    /// two chunks' codes meets one 64-byte load of their `xe`
    /// ([`super::vector::QVec::quad_dot`]). Beside the values, per 32-block its step, and
    /// (in the order of two `vphaddd` levels over four chunk dots, [`QActs::dh`]) its step,
    /// value sum and int4 offset again: a kernel reads 1.25 bytes a weight (the per-lane
    /// layout before it, 2.06).
    Pairs,
    /// Not int8 at all: each value rounded to bf16 ([`fp8_bf16`], whose docs show that the
    /// int8 rounding bound still holds), stored per 64-chunk in [`fp8_bf16::order`].
    Bf16,
}

/// [`QLayout::Pairs`]: where 64-chunk `c`'s even-indexed and odd-indexed 32 values start in
/// a row of activations. Rows are padded to a multiple of 256 values, so every chunk has
/// its pair partner.
#[inline(always)]
pub(crate) const fn pairs_at(c: usize) -> (usize, usize) {
    let even = 128 * (c / 2) + 32 * (c % 2);
    (even, even + 64)
}

/// Activations [S, I] rounded to int8 per 32-block, with the per-block numbers the
/// kernels fold in. Built once per call and shared read-only by every task.
pub(crate) struct QActs {
    pub(crate) s: usize,
    /// Values a row is padded to (a multiple of [`PAD`]).
    pub(crate) padded: usize,
    /// int8 values, `padded` a row, in the kernel's [`QLayout`].
    q: Lines<i8>,
    /// Step of each 32-block (`padded / 32` a row; [`QLayout::Natural`] and
    /// [`QLayout::Pairs`]).
    d: Lines<f32>,
    /// `d_b · Σ q` of each 32-block: the block's sum of rounded activations.
    xs: Lines<f32>,
    /// For each 128 values (four 32-blocks a..d): the steps `[a, b, c, d, a, b, c, d]`, the
    /// lane order of two levels of `vphaddd` over four 32-block dots (see `ggml`).
    d2: Lines<f32>,
    /// [`QLayout::Natural`]: for each 32-block, `-8 · Σ q` of each dot lane's 4 values (the
    /// offset of q4_0's `u - 8` codes, folded into the integer sum).
    off8n: Lines<i32>,
    /// [`QLayout::Natural`]: the same with 32 (q6_k's `u - 32` codes).
    off32: Lines<i32>,
    /// [`QLayout::Pairs`]: for each 256 values (chunks m = 0..4, each two 32-blocks 2m and
    /// 2m + 1), the blocks' steps in the order `[0, 2, 4, 6, 1, 3, 5, 7]`: lane m of
    /// `hadd(hadd(i0, i1), hadd(i2, i3))` over the four chunks' dots holds block 2m, lane
    /// 4 + m block 2m + 1.
    dh: Lines<f32>,
    /// [`QLayout::Pairs`]: each block's `d · Σ q` (its sum of rounded values), as [`Self::dh`].
    xh: Lines<f32>,
    /// [`QLayout::Pairs`]: each block's `-8 · Σ q` (int4's `q - 8` offset), as [`Self::dh`].
    oh: Lines<i32>,
    /// [`QLayout::Bf16`]: the bf16 values, `padded` a row.
    xb: Lines<u16>,
}

impl QActs {
    /// Rounds `x` ([s, cols], stored domain) to int8 per 32-block, laid out as `layout`.
    /// Only the per-block numbers the layout's kernels read are filled in.
    pub(crate) fn new(layout: QLayout, x: &[f32], s: usize, cols: usize) -> QActs {
        let padded = cols.div_ceil(PAD).max(1) * PAD;
        if layout == QLayout::Bf16 {
            return QActs::bf16(x, s, cols, padded);
        }
        let (nb, n16) = (padded / 32, padded / 16);
        let natural = layout == QLayout::Natural;
        let per_row = |n: usize| if natural { s * n } else { 0 };
        let per_pair = |n: usize| if natural { 0 } else { s * n };
        let mut a = QActs {
            s,
            padded,
            q: Lines::zeroed(s * padded),
            d: Lines::zeroed(s * nb),
            xs: Lines::zeroed(per_row(nb)),
            d2: Lines::zeroed(per_row(n16)),
            off8n: Lines::zeroed(per_row(nb * 8)),
            off32: Lines::zeroed(per_row(nb * 8)),
            dh: Lines::zeroed(per_pair(nb)),
            xh: Lines::zeroed(per_pair(nb)),
            oh: Lines::zeroed(per_pair(nb)),
            xb: Lines::zeroed(0),
        };
        let mut qn = [0i8; 64];
        let mut xb = [0f32; 32];
        for k in 0..s {
            let row = &x[k * cols..(k + 1) * cols];
            let dst = &mut a.q[k * padded..(k + 1) * padded];
            // Two 32-blocks (one 64-chunk) at a time; past `cols` the values are zero.
            for c in 0..cols.div_ceil(64) {
                let mut steps = [0f32; 2];
                let mut sums = [0i32; 4];
                let (qa, qb) = qn.split_at_mut(32);
                for (h, qh) in [qa, qb].into_iter().enumerate() {
                    let lo = (64 * c + 32 * h).min(cols);
                    let hi = (lo + 32).min(cols);
                    let (Some(qh), whole) =
                        (qh.first_chunk_mut::<32>(), row[lo..].first_chunk::<32>())
                    else {
                        continue;
                    };
                    let (step, s2) = match whole {
                        Some(xw) => quantize_block(xw, qh),
                        None => {
                            xb.fill(0.0);
                            xb[..hi - lo].copy_from_slice(&row[lo..hi]);
                            quantize_block(&xb, qh)
                        }
                    };
                    steps[h] = step;
                    sums[2 * h..2 * h + 2].copy_from_slice(&s2);
                }
                if natural {
                    dst[64 * c..64 * c + 64].copy_from_slice(&qn);
                    // 64-chunk c is 32-blocks 2c, 2c+1: positions 2(c%2), 2(c%2)+1 of its
                    // 128-chunk c/2.
                    let base = k * n16 + 8 * (c / 2);
                    for h in 0..2 {
                        let b = k * nb + 2 * c + h;
                        let p = 2 * (c % 2) + h;
                        a.d[b] = steps[h];
                        a.xs[b] = steps[h] * (sums[2 * h] + sums[2 * h + 1]) as f32;
                        a.d2[base + p] = steps[h];
                        a.d2[base + 4 + p] = steps[h];
                        for l in 0..8 {
                            let lane = &qn[32 * h + 4 * l..32 * h + 4 * l + 4];
                            let sum: i32 = lane.iter().map(|&v| i32::from(v)).sum();
                            a.off8n[8 * b + l] = -8 * sum;
                            a.off32[8 * b + l] = -32 * sum;
                        }
                    }
                } else {
                    // Even values to the first half, odd to the second: as the low and high
                    // bytes of 32 little-endian u16 words, which vectorizes (a byte loop
                    // did not, and was most of this function's time at S = 1).
                    let mut words = [0u16; 32];
                    for (w, p) in words.iter_mut().zip(qn.chunks_exact(2)) {
                        *w = u16::from_le_bytes([p[0] as u8, p[1] as u8]);
                    }
                    let (mut even, mut odd) = ([0i8; 32], [0i8; 32]);
                    for ((e, o), w) in even.iter_mut().zip(odd.iter_mut()).zip(words) {
                        *e = w as u8 as i8;
                        *o = (w >> 8) as u8 as i8;
                    }
                    let (e, o) = pairs_at(c);
                    dst[e..e + 32].copy_from_slice(&even);
                    dst[o..o + 32].copy_from_slice(&odd);
                    a.d[k * nb + 2 * c..k * nb + 2 * c + 2].copy_from_slice(&steps);
                    for h in 0..2 {
                        let at = k * nb + 8 * (c / 4) + 4 * h + c % 4;
                        let sum = sums[2 * h] + sums[2 * h + 1];
                        a.dh[at] = steps[h];
                        a.xh[at] = steps[h] * sum as f32;
                        a.oh[at] = -8 * sum;
                    }
                }
            }
        }
        a
    }
    /// [`QLayout::Bf16`]: each value's bf16 ([`fp8_bf16::bf16_of`]), a 32-block holding a
    /// non-finite value all NaN (as the int8 rounding does), in the kernel's order.
    fn bf16(x: &[f32], s: usize, cols: usize, padded: usize) -> QActs {
        let mut xb = Lines::<u16>::zeroed(s * padded);
        let mut natural = [0u16; 64];
        for (row, dst) in x.chunks_exact(cols).zip(xb.chunks_exact_mut(padded)) {
            for (c, chunk) in row.chunks(64).enumerate() {
                natural.fill(0);
                for (b, block) in chunk.chunks(ACT_BLOCK).enumerate() {
                    let finite = block.iter().all(|v| v.is_finite());
                    let out = &mut natural[ACT_BLOCK * b..ACT_BLOCK * b + block.len()];
                    for (o, &v) in out.iter_mut().zip(block) {
                        *o = if finite {
                            fp8_bf16::bf16_of(v)
                        } else {
                            fp8_bf16::BF16_NAN
                        };
                    }
                }
                // The kernel's order moves runs of 8 ([`fp8_bf16::order`]).
                let d = &mut dst[64 * c..64 * c + 64];
                for run in 0..8 {
                    let at = fp8_bf16::order(8 * run);
                    d[at..at + 8].copy_from_slice(&natural[8 * run..8 * run + 8]);
                }
            }
        }
        QActs {
            s,
            padded,
            q: Lines::zeroed(0),
            d: Lines::zeroed(0),
            xs: Lines::zeroed(0),
            d2: Lines::zeroed(0),
            off8n: Lines::zeroed(0),
            off32: Lines::zeroed(0),
            dh: Lines::zeroed(0),
            xh: Lines::zeroed(0),
            oh: Lines::zeroed(0),
            xb,
        }
    }
    /// [`QLayout::Bf16`]: row k's bf16 values (`padded` of them).
    #[inline]
    pub(crate) fn xb(&self, k: usize) -> &[u16] {
        &self.xb[k * self.padded..(k + 1) * self.padded]
    }
    /// Row k's int8 values (as bytes).
    #[inline]
    pub(crate) fn q(&self, k: usize) -> *const u8 {
        self.q[k * self.padded..].as_ptr().cast()
    }
    #[inline]
    pub(crate) fn d(&self, k: usize) -> *const f32 {
        self.d[k * self.padded / 32..].as_ptr()
    }
    #[inline]
    pub(crate) fn xs(&self, k: usize) -> *const f32 {
        self.xs[k * self.padded / 32..].as_ptr()
    }
    #[inline]
    pub(crate) fn d2(&self, k: usize) -> *const f32 {
        self.d2[k * self.padded / 16..].as_ptr()
    }
    #[inline]
    pub(crate) fn off8n(&self, k: usize) -> *const i32 {
        self.off8n[k * self.padded / 4..].as_ptr()
    }
    #[inline]
    pub(crate) fn off32(&self, k: usize) -> *const i32 {
        self.off32[k * self.padded / 4..].as_ptr()
    }
    #[inline]
    pub(crate) fn dh(&self, k: usize) -> *const f32 {
        self.dh[k * self.padded / 32..].as_ptr()
    }
    #[inline]
    pub(crate) fn xh(&self, k: usize) -> *const f32 {
        self.xh[k * self.padded / 32..].as_ptr()
    }
    #[inline]
    pub(crate) fn oh(&self, k: usize) -> *const i32 {
        self.oh[k * self.padded / 32..].as_ptr()
    }
}

/// Rounds a block of 32 values to int8 against the step `max|x| / 127`; returns the step
/// (0 for an all-zero block, NaN if any value is not finite) and the integer sums of the
/// two 16-runs. Written on fixed-size arrays with integer rounding so that it vectorizes
/// on any target.
#[inline(always)]
fn quantize_block(x: &[f32; 32], q: &mut [i8; 32]) -> (f32, [i32; 2]) {
    // The largest magnitude as an integer maximum of the sign-cleared bit patterns (their
    // integer order is the float order, NaN patterns above infinity): a float maximum with
    // NaN semantics would not vectorize.
    let mut bits = 0u32;
    for &v in x {
        bits = bits.max(v.to_bits() & 0x7FFF_FFFF);
    }
    if bits >= 0x7F80_0000 {
        q.fill(0);
        return (f32::NAN, [0; 2]);
    }
    if bits == 0 {
        q.fill(0);
        return (0.0, [0; 2]);
    }
    let amax = f32::from_bits(bits);
    let id = 127.0 / amax;
    let mut sums = [0i32; 2];
    for (h, sum) in sums.iter_mut().enumerate() {
        let mut t = 0i32;
        for i in 16 * h..16 * h + 16 {
            // Round to nearest even by adding 1.5 * 2^23: |x * id| <= 127 (plus an ulp), far
            // inside the range where the sum's low mantissa bits are the rounded integer.
            let v = (x[i] * id + 12_582_912.0).to_bits() as i32 - 0x4B40_0000;
            q[i] = v as i8;
            t += v;
        }
        *sum = t;
    }
    (amax / 127.0, sums)
}

/// A format's int8-activation kernel.
pub(crate) trait Int8Kernel: Sync {
    fn layout(&self) -> QLayout;
    /// Whether the kernel runs at `level` (clamped to the hardware) on this CPU; where it
    /// does not, [`gemm_with_at`] runs the exact kernel instead and says so.
    fn runs_at(&self, level: SimdLevel) -> bool {
        let _ = level;
        true
    }
    /// For r in 0..n and k in 0..S: `out[r * S + k] = Σ_i W[row0 + r, i] · x̂[k, i]`, long
    /// rows at S = 1 in column panels where [`panels::enabled`] says.
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        self.dot_rows_panels(panels::enabled(), level, t, a, row0, n, out)
    }
    /// [`Self::dot_rows`] with long rows at S = 1 walked in column panels (`panels`) or not
    /// ([`panels`]). Kernels with one form for long rows ignore `panels`.
    #[allow(clippy::too_many_arguments)]
    fn dot_rows_panels(
        &self,
        panels: bool,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    );
}

/// The int8-activation kernel of a format, where it has one. Exhaustive, like
/// [`super::kernel_for`].
pub(crate) fn int8_kernel_for(format: Format) -> Option<&'static dyn Int8Kernel> {
    match format {
        Format::Int8Row => Some(&zmm_int8_row::INT8_ROW),
        Format::Int4Row
        | Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256 => Some(&tessera::INT4),
        Format::Mq4G256V2 => Some(&tessera::MQ4_V2),
        Format::Hfq4G256 | Format::Mq4G256 => Some(&tessera::HFQ4),
        Format::Mq4cG256 => Some(&tessera::MQ4C),
        Format::Q8_0 => Some(&ggml::Q8_0),
        Format::Q4_0 => Some(&ggml::Q4_0),
        Format::Q4K | Format::Mq4K => Some(&kzmm::Q4_K),
        Format::Q5K => Some(&ggml::Q5_K),
        Format::Q6K => Some(&ggml::Q6_K),
        Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0 => Some(&fp8_bf16::FP8),
        Format::F32
        | Format::F16
        | Format::Bf16
        | Format::Int2Row
        | Format::Int3G64
        | Format::E8Lattice
        | Format::Mxfp4
        | Format::Q4_1
        | Format::Q5_0
        | Format::Q5_1
        | Format::Q2K
        | Format::Q3K
        | Format::Iq4Nl
        | Format::Iq4Xs
        | Format::GgufMxfp4 => None,
    }
}

/// Whether `format` has an int8-activation kernel that runs on this CPU at its best level
/// (otherwise [`KernelPath::Int8Activations`] runs the exact one).
pub fn has_int8_activations(format: Format) -> bool {
    has_int8_activations_at(format, SimdLevel::detect())
}

/// [`has_int8_activations`] at an explicit SIMD level (lowered to what the CPU supports).
pub fn has_int8_activations_at(format: Format, level: SimdLevel) -> bool {
    int8_kernel_for(format).is_some_and(|k| k.runs_at(level.clamp_to_hardware()))
}

/// y[S, O] = x[S, I] · Wᵀ on the chosen path (x in the logical domain). Returns the path
/// that ran: [`KernelPath::Exact`] when `path` is `Int8Activations` but the format has no
/// such kernel.
pub fn gemm_with(
    path: KernelPath,
    t: &QTensor<'_>,
    x: &[f32],
    s: usize,
    y: &mut [f32],
) -> Result<KernelPath, QuantError> {
    gemm_with_at(path, SimdLevel::detect(), t, x, s, y)
}

/// [`gemm_with`] at an explicit SIMD level (lowered to what the CPU supports).
pub fn gemm_with_at(
    path: KernelPath,
    level: SimdLevel,
    t: &QTensor<'_>,
    x: &[f32],
    s: usize,
    y: &mut [f32],
) -> Result<KernelPath, QuantError> {
    let level = level.clamp_to_hardware();
    let kernel = match (path, int8_kernel_for(t.format())) {
        (KernelPath::Int8Activations, Some(k)) if k.runs_at(level) => k,
        (KernelPath::Exact, _) | (KernelPath::Int8Activations, _) => {
            super::gemm_at(level, t, x, s, y)?;
            return Ok(KernelPath::Exact);
        }
    };
    super::check_sizes(t, x, s, y)?;
    let acts = match t.format().spec().rotation {
        Rotation::None => QActs::new(kernel.layout(), x, s, t.cols()),
        Rotation::Fwht256 => {
            let mut xr = x.to_vec();
            rotate_activations(t, &mut xr);
            QActs::new(kernel.layout(), &xr, s, t.cols())
        }
    };
    let rows = t.rows();
    let step = super::task_rows(t);
    if s == 1 {
        y.par_chunks_mut(step).enumerate().for_each(|(k, out)| {
            kernel.dot_rows(level, t, &acts, k * step, out.len(), out);
        });
        return Ok(KernelPath::Int8Activations);
    }
    let mut yt = vec![0f32; rows * s];
    yt.par_chunks_mut(step * s)
        .enumerate()
        .for_each(|(k, out)| {
            kernel.dot_rows(level, t, &acts, k * step, out.len() / s, out);
        });
    for (o, ys) in yt.chunks_exact(s).enumerate() {
        for (k, v) in ys.iter().enumerate() {
            y[k * rows + o] = *v;
        }
    }
    Ok(KernelPath::Int8Activations)
}

/// The activations as the int8-activation path sees them: `x` ([s, cols], logical domain)
/// rotated into the stored domain for rotated formats, then each 32-block rounded to its
/// int8 step, `x̂_i = Δ_b · q_i`, in f64 (exact: the f32 step times a 7-bit integer); for
/// the formats whose kernel rounds to bf16 instead (`QLayout::Bf16`: fp8), each value's
/// bf16. `Σ_i w_i x̂_i` is what the kernels compute, up to f32 accumulation.
pub fn int8_rounded_activations(t: &QTensor<'_>, x: &[f32], s: usize) -> Vec<f64> {
    let cols = t.cols();
    let mut xr = x.to_vec();
    rotate_activations(t, &mut xr);
    if int8_kernel_for(t.format()).is_some_and(|k| k.layout() == QLayout::Bf16) {
        let acts = QActs::new(QLayout::Bf16, &xr, s, cols);
        return (0..s)
            .flat_map(|k| {
                let xb = acts.xb(k);
                (0..cols).map(move |i| {
                    let v = xb[64 * (i / 64) + fp8_bf16::order(i % 64)];
                    f64::from(f32::from_bits(u32::from(v) << 16))
                })
            })
            .collect();
    }
    let mut out = Vec::with_capacity(xr.len());
    let (mut xb, mut q) = ([0f32; 32], [0i8; 32]);
    for row in xr.chunks_exact(cols).take(s) {
        for block in row.chunks(ACT_BLOCK) {
            xb.fill(0.0);
            xb[..block.len()].copy_from_slice(block);
            let (step, _) = quantize_block(&xb, &mut q);
            out.extend(
                q[..block.len()]
                    .iter()
                    .map(|&v| f64::from(step) * f64::from(v)),
            );
        }
    }
    out
}

/// The rounding term of the int8-activation path's declared bound for each output ([S, O]
/// row-major): `Σ_i |w_i| · Δ_b(i) / 2` in f64, with `w` the format's f64 decode and `Δ_b`
/// the step of the 32-block of the (rotated, for rotated formats) activation that value i
/// sits in. The full bound adds the arithmetic term `1e-5 · M` (module docs).
pub fn int8_activation_bound(t: &QTensor<'_>, x: &[f32], s: usize) -> Vec<f64> {
    let (rows, cols) = (t.rows(), t.cols());
    let mut xr = x.to_vec();
    rotate_activations(t, &mut xr);
    let half_steps: Vec<f64> = xr
        .chunks_exact(cols)
        .flat_map(|row| {
            row.chunks(ACT_BLOCK).flat_map(|b| {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                std::iter::repeat_n(f64::from(amax) / 127.0 / 2.0, b.len())
            })
        })
        .collect();
    let mut bound = vec![0f64; s * rows];
    let mut w = vec![0f64; cols];
    for o in 0..rows {
        decode_rows_stored_f64(t, o, &mut w);
        for k in 0..s {
            let h = &half_steps[k * cols..(k + 1) * cols];
            bound[k * rows + o] = w.iter().zip(h).map(|(a, b)| a.abs() * b).sum();
        }
    }
    bound
}

/// An int8-activation kernel body, written once over [`QVec`] for R rows against T
/// activation rows (see [`Micro`]).
pub(crate) trait QBody: Sync {
    /// # Safety
    /// `Q`'s level is present and this runs inlined into a function compiled for it; rows
    /// `o..o+R` exist; `t0 + T <= S`.
    unsafe fn run<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    );
    /// Whether long rows at S = 1 go eight at a time ([`Micro::eight_rows_at_a_time`]).
    fn eight_rows(&self) -> bool {
        false
    }
    /// Rows of at most this many columns go one at a time, and at S = 1 longer ones in
    /// column panels of at most this many ([`panels`]).
    fn one_row_max_cols(&self) -> usize {
        ONE_ROW_MAX_COLS
    }
    /// Rows of the tensor (for the portable level's range check).
    fn rows(&self) -> usize;
    /// I.
    fn cols(&self) -> usize;
    /// S.
    fn batch(&self) -> usize;
}

/// Rows of at most this many weights are walked one at a time, longer ones four or eight
/// at a time ([`Micro::one_row_at_a_time`]) or, at S = 1, as column panels of at most this
/// many weights, each walked one row at a time ([`panels`]). Measured against candle in the
/// same process (per-call CPU time): on 4096 columns one row at a time streamed about twice as fast
/// (int4-row 17.2 vs 8.1 GB/s, q6_k 22.2 vs 6.8), on 16384 columns four rows did (int4-row
/// 16.0 vs 8.3, q6_k 13.2 vs 7.9): a row's activation-side numbers (2 to 2.3 bytes a
/// weight) are re-read for every tile, and past L1 that costs more than the short
/// prefetch streams of interleaved rows. 8192 is a midpoint, not a measured optimum. Not
/// the L1 footprint alone: with the `Pairs` layout's 1.25 bytes a weight (20 KB for 16384
/// columns) one row at a time still streamed [6144 x 16384] int4 at 2.0-2.6 ms against
/// 1.8-2.1 ms four at a time (read-pair, alternated, 2026-11-30 12:32 UTC).
pub(crate) const ONE_ROW_MAX_COLS: usize = 8192;

/// [`ONE_ROW_MAX_COLS`] for the int4 bodies that walk 256-weight quads (int4-row and the
/// groups that are a multiple of 64: [`QBody::one_row_max_cols`]): their `Pairs`
/// activations take 1.25 bytes a weight, 20 KB for 16384 columns, and since the quad body
/// prefetches its row (session 28) a whole 16384-column row one at a time streams faster
/// than its 8192-column panels. Measured on the 2-core AMD EPYC (Zen 4) VM, `read-pair`
/// [6144 x 16384], the two alternated (2026-12-07 21:41-21:50 UTC, docs/PERF.md session
/// 30), mean share of the read in calls where it ran below 40 / at 48+ GB/s: int4-row
/// 89.2 / 70.1% in panels against 92.5 / 85.2% whole, int4-g64 90.3 / 70.5% against 93.8 /
/// 88.9% (eight rounds); int4-g128 87.5% against 88.8%, int4-g256 84.8% against 93.4% (six
/// rounds, slow calls). The same change for int8-row (2.1 bytes a weight) and mq4-g256-v2
/// lost 28 / 33 and 18 / 32 points.
pub(crate) const INT4_QUADS_ONE_ROW_MAX_COLS: usize = 16384;

/// Runs a [`QBody`] through [`drive`]: VNNI at [`SimdLevel::Avx512Vnni`], the AVX2 maddubs
/// form at [`SimdLevel::Avx512`] and [`SimdLevel::Avx2`] (on Zen 4 the 256-bit form streams
/// as fast as a 512-bit one would), plain Rust at [`SimdLevel::Portable`].
pub(crate) struct QDriver<M>(pub(crate) M);

impl<M: QBody> QDriver<M> {
    pub(crate) fn run(&self, level: SimdLevel, row0: usize, n: usize, out: &mut [f32]) {
        drive(level, self, row0, n, self.0.batch(), out);
    }
}

impl<M: QBody> Micro for QDriver<M> {
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract; AVX-512 implies AVX2, FMA and F16C (SimdLevel).
        unsafe { run_madd::<M, R, T>(&self.0, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512vnni<const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        // SAFETY: forwarded contract: VNNI and AVX-512 F/BW/VL present.
        unsafe { run_vnni::<M, R, T>(&self.0, o, t0, out) }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        // SAFETY: forwarded contract: AVX2, FMA, F16C present.
        unsafe { run_madd::<M, R, T>(&self.0, o, t0, out) }
    }
    fn one_row_at_a_time(&self) -> bool {
        self.0.cols() <= self.0.one_row_max_cols()
    }
    fn eight_rows_at_a_time(&self) -> bool {
        self.0.eight_rows()
    }
    unsafe fn tiles<const R: usize, const T: usize>(
        &self,
        level: SimdLevel,
        o: usize,
        n: usize,
        s: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        match level {
            SimdLevel::Avx512Vnni => {
                // SAFETY: forwarded contract: the level's features are present.
                return unsafe { tiles_vnni::<M, R, T>(&self.0, o, n, s, t0, out) };
            }
            SimdLevel::Avx512 | SimdLevel::Avx2 => {
                // SAFETY: as above; AVX-512 implies AVX2, FMA and F16C.
                return unsafe { tiles_madd::<M, R, T>(&self.0, o, n, s, t0, out) };
            }
            SimdLevel::Portable => {}
        }
        let _ = level;
        let mut r = 0;
        while r < n {
            self.portable::<R, T>(o + r, t0, &mut out[r * s..]);
            r += R;
        }
    }
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]) {
        assert!(
            o + R <= self.0.rows() && t0 + T <= self.0.batch(),
            "tile out of range"
        );
        // SAFETY: the portable level needs no CPU feature; rows and tile checked above.
        unsafe { self.0.run::<super::vector::QPortable, R, T>(o, t0, out) }
    }
}

/// # Safety
/// AVX-512 F/BW/VL + VNNI, AVX2, FMA, F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn run_vnni<M: QBody, const R: usize, const T: usize>(
    m: &M,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: forwarded contract; this function carries Vnni's features.
    unsafe { m.run::<Vnni, R, T>(o, t0, out) }
}

/// [`run_vnni`] over rows `o..o + n`, R at a time, inside one function.
///
/// # Safety
/// As [`run_vnni`] for every tile; `n` a multiple of R; `out` holds S outputs a row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles_vnni<M: QBody, const R: usize, const T: usize>(
    m: &M,
    o: usize,
    n: usize,
    s: usize,
    t0: usize,
    out: &mut [f32],
) {
    let mut r = 0;
    while r < n {
        // SAFETY: forwarded contract; this function carries Vnni's features.
        unsafe { m.run::<Vnni, R, T>(o + r, t0, &mut out[r * s..]) };
        r += R;
    }
}

/// [`run_madd`] over rows `o..o + n`, R at a time, inside one function.
///
/// # Safety
/// As [`run_madd`] for every tile; `n` a multiple of R; `out` holds S outputs a row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiles_madd<M: QBody, const R: usize, const T: usize>(
    m: &M,
    o: usize,
    n: usize,
    s: usize,
    t0: usize,
    out: &mut [f32],
) {
    let mut r = 0;
    while r < n {
        // SAFETY: forwarded contract; this function carries Madd's features.
        unsafe { m.run::<Madd, R, T>(o + r, t0, &mut out[r * s..]) };
        r += R;
    }
}

/// # Safety
/// AVX2, FMA, F16C present; rows `o..o+R` exist; `t0 + T <= S`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_madd<M: QBody, const R: usize, const T: usize>(
    m: &M,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    // SAFETY: forwarded contract; this function carries Madd's features.
    unsafe { m.run::<Madd, R, T>(o, t0, out) }
}
