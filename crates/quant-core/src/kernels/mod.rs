//! CPU kernels: y[S, O] = x[S, I] · Wᵀ for every format, rayon across rows, SIMD per level.
//!
//! Each format has a [`RowKernel`]. Fused kernels ([`int8_row`], [`int4`], [`fp8`],
//! [`affine256`], and [`ggml`] for the GGML block formats) read the stored bytes straight into registers — nibbles, E4M3 bytes and
//! inline headers are decoded in-register and never written to a buffer — and apply every
//! group, tile or block scale per group (folded into the accumulation per group, or, for
//! the affine blocks, into a 16-entry table of decoded weights per block), never once at
//! the end. All accumulate exact f32 products of f32 activations. The other formats use
//! [`generic::DecodeThenDot`], which decodes a few rows into an L1-sized scratch and dots
//! them with every activation row using the SIMD dot of [`simd`].
//!
//! Activations are re-laid once per call ([`Activations`]): zero-padded to whole chunks, so
//! a row's last partial chunk runs through the same vector code as the others, and for the
//! nibble formats transposed within each 128-chunk so that one plain 64-byte load of packed
//! nibbles lines up, nibble position by nibble position, with contiguous activation vectors.
//!
//! The SIMD level is detected at run time ([`SimdLevel::detect`], cached); `*_at` entry
//! points run an explicit level, clamped to the hardware, so tests cover every level.

pub mod affine256;
pub mod fp8;
pub mod generic;
pub mod ggml;
pub mod int4;
pub mod int8_row;
pub mod int8act;
pub mod prefetch;
pub mod simd;
#[cfg(test)]
mod tests;
mod vector;

pub use int8act::{
    ACT_BLOCK, KernelPath, gemm_with, gemm_with_at, has_int8_activations, has_int8_activations_at,
    int8_activation_bound, int8_rounded_activations,
};
pub use simd::SimdLevel;

use crate::api::rotate_activations;
use crate::error::QuantError;
use crate::registry::Format;
use crate::tensor::QTensor;
use rayon::prelude::*;
use std::borrow::Cow;

/// How a kernel wants its activations laid out (built once per call by [`Activations`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The caller's rows as they are (stride = I).
    Raw,
    /// Each row zero-padded to a multiple of [`PLAIN_CHUNK`].
    Plain,
    /// Each row zero-padded to a multiple of [`NIBBLE_CHUNK`]; in every 128-chunk, vector j
    /// (16 floats, j in 0..8) holds `x[8l + j]` for lanes l in 0..16 — the order of the
    /// nibbles in the 16 little-endian u32 lanes of 64 packed bytes (see [`int4`]).
    Nibble,
}

/// Padding unit of [`Layout::Plain`]: one 64-byte load of int8 / fp8 weights.
pub const PLAIN_CHUNK: usize = 64;
/// Weights one [`Layout::Nibble`] chunk holds: the 128 nibbles of one 64-byte load.
pub const NIBBLE_CHUNK: usize = 128;

/// Activations [S, I] in the layout a kernel asked for.
pub struct Activations<'a> {
    pub s: usize,
    pub cols: usize,
    /// Floats from one activation row to the next in `x`.
    pub stride: usize,
    pub x: Cow<'a, [f32]>,
}

impl<'a> Activations<'a> {
    /// Lays out `x` ([s, cols] row-major) as `layout` asks.
    pub fn new(layout: Layout, x: &'a [f32], s: usize, cols: usize) -> Self {
        let (stride, data) = match layout {
            Layout::Raw => (cols, Cow::Borrowed(x)),
            Layout::Plain => {
                let stride = cols.div_ceil(PLAIN_CHUNK) * PLAIN_CHUNK;
                let mut v = vec![0f32; s * stride];
                for (dst, src) in v.chunks_exact_mut(stride).zip(x.chunks_exact(cols)) {
                    dst[..cols].copy_from_slice(src);
                }
                (stride, Cow::Owned(v))
            }
            Layout::Nibble => {
                let stride = cols.div_ceil(NIBBLE_CHUNK) * NIBBLE_CHUNK;
                let mut v = vec![0f32; s * stride];
                for (dst, src) in v.chunks_exact_mut(stride).zip(x.chunks_exact(cols)) {
                    for (i, &val) in src.iter().enumerate() {
                        // Weight 8l + j of a chunk sits in lane l of vector j.
                        let (c, w) = (i / NIBBLE_CHUNK, i % NIBBLE_CHUNK);
                        dst[c * NIBBLE_CHUNK + (w % 8) * 16 + w / 8] = val;
                    }
                }
                (stride, Cow::Owned(v))
            }
        };
        Activations {
            s,
            cols,
            stride,
            x: data,
        }
    }

    /// Activation row `k` in the chosen layout (`stride` floats).
    pub fn row(&self, k: usize) -> &[f32] {
        &self.x[k * self.stride..(k + 1) * self.stride]
    }
}

/// A format's row kernel, in the stored domain (activations already rotated).
pub trait RowKernel: Send + Sync {
    /// The activation layout `dot_rows` expects.
    fn layout(&self) -> Layout;
    /// For r in 0..n and k in 0..S: `out[r * S + k] = Σ_i W[row0 + r, i] · x[k, i]`, at
    /// `level` (already clamped to the hardware by the caller).
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &Activations<'_>,
        row0: usize,
        n: usize,
        out: &mut [f32],
    );
}

/// The kernel of a format. Exhaustive: a new format must say which kernel runs it.
pub fn kernel_for(format: Format) -> &'static dyn RowKernel {
    match format {
        Format::Int8Row => &int8_row::Int8RowKernel,
        Format::Int4Row
        | Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256 => &int4::Int4Kernel,
        Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0 => &fp8::Fp8Kernel,
        Format::Mq4G256V2 => &affine256::MQ4_V2,
        Format::Hfq4G256 | Format::Mq4G256 => &affine256::HFQ4,
        Format::Mq4cG256 => &affine256::MQ4C,
        Format::Q8_0 => &ggml::Q8_0,
        Format::Q4_0 => &ggml::Q4_0,
        Format::Q4_1 => &ggml::Q4_1,
        Format::Q5_0 => &ggml::Q5_0,
        Format::Q5_1 => &ggml::Q5_1,
        Format::Q2K => &ggml::Q2_K,
        Format::Q3K => &ggml::Q3_K,
        Format::Q4K | Format::Mq4K => &ggml::Q4_K,
        Format::Q5K => &ggml::Q5_K,
        Format::Q6K => &ggml::Q6_K,
        Format::Iq4Nl => &ggml::IQ4_NL,
        Format::Iq4Xs => &ggml::IQ4_XS,
        Format::F32
        | Format::F16
        | Format::Bf16
        | Format::Int2Row
        | Format::Int3G64
        | Format::E8Lattice
        | Format::Mxfp4
        | Format::GgufMxfp4 => &generic::DecodeThenDot,
    }
}

/// Rows one parallel task takes: about 256 KiB of stored weights, at least 8 rows, and a
/// multiple of 4 so the four-row micro-kernels rarely see a remainder. (One contiguous
/// share a thread instead measured no faster on the 2-core AMD VM: docs/PERF.md, session 28.)
fn task_rows(t: &QTensor<'_>) -> usize {
    (262_144 / t.row_bytes().max(1)).clamp(8, 4096) / 4 * 4
}

/// y[S, O] = x[S, I] · Wᵀ with x in the logical domain (rotated here for rotated formats).
pub fn gemm(t: &QTensor<'_>, x: &[f32], s: usize, y: &mut [f32]) -> Result<(), QuantError> {
    gemm_at(SimdLevel::detect(), t, x, s, y)
}

/// [`gemm`] at an explicit SIMD level (lowered to what the CPU supports).
pub fn gemm_at(
    level: SimdLevel,
    t: &QTensor<'_>,
    x: &[f32],
    s: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    check_sizes(t, x, s, y)?;
    match t.format().spec().rotation {
        crate::registry::Rotation::None => gemm_stored_at(level, t, x, s, y),
        crate::registry::Rotation::Fwht256 => {
            let mut xr = x.to_vec();
            rotate_activations(t, &mut xr);
            gemm_stored_at(level, t, &xr, s, y)
        }
    }
}

/// y[S, O] = x[S, I] · Wᵀ with x already in the stored (rotated) domain, so a caller that
/// feeds one activation to several tensors of the same seed rotates it once.
pub fn gemm_stored(t: &QTensor<'_>, x: &[f32], s: usize, y: &mut [f32]) -> Result<(), QuantError> {
    gemm_stored_at(SimdLevel::detect(), t, x, s, y)
}

/// [`gemm_stored`] at an explicit SIMD level (lowered to what the CPU supports).
pub fn gemm_stored_at(
    level: SimdLevel,
    t: &QTensor<'_>,
    x: &[f32],
    s: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    check_sizes(t, x, s, y)?;
    let level = level.clamp_to_hardware();
    let rows = t.rows();
    let kernel = kernel_for(t.format());
    let acts = Activations::new(kernel.layout(), x, s, t.cols());
    let step = task_rows(t);
    if s == 1 {
        // [O, 1] is already [1, O]: the tasks write y directly.
        y.par_chunks_mut(step).enumerate().for_each(|(k, out)| {
            kernel.dot_rows(level, t, &acts, k * step, out.len(), out);
        });
        return Ok(());
    }
    // Row-major [O, S] scratch so each task owns a contiguous slice; transposed at the end.
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
    Ok(())
}

fn check_sizes(t: &QTensor<'_>, x: &[f32], s: usize, y: &[f32]) -> Result<(), QuantError> {
    let format = t.format();
    if s == 0 || Some(x.len()) != s.checked_mul(t.cols()) {
        return Err(QuantError::ActivationSize {
            format,
            s,
            cols: t.cols(),
            got: x.len(),
        });
    }
    if Some(y.len()) != s.checked_mul(t.rows()) {
        return Err(QuantError::OutputSize {
            format,
            s,
            rows: t.rows(),
            got: y.len(),
        });
    }
    Ok(())
}

/// A fused kernel's register-blocked core, one method per level: rows `o..o+R` against
/// activation rows `t0..t0+T`, writing `out[r * S + t0 + k]` for r < R, k < T (`out` starts
/// at row `o`'s outputs). R×T independent accumulator chains hide the FMA latency.
pub(crate) trait Micro: Sync {
    /// # Safety
    /// The CPU must support [`SimdLevel::Avx512`]; rows `o..o+R` exist; `t0 + T <= S`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]);
    /// The AVX-512 VNNI level; kernels that do not use VNNI run their AVX-512 code.
    ///
    /// # Safety
    /// The CPU must support [`SimdLevel::Avx512Vnni`]; rows `o..o+R` exist; `t0 + T <= S`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512vnni<const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        // SAFETY: the VNNI level includes AVX-512; the rest of the contract is forwarded.
        unsafe { self.avx512::<R, T>(o, t0, out) }
    }
    /// # Safety
    /// The CPU must support [`SimdLevel::Avx2`]; rows `o..o+R` exist; `t0 + T <= S`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]);
    /// Rows `o..o+R` must exist and `t0 + T <= S` (checked indexing; panics otherwise).
    fn portable<const R: usize, const T: usize>(&self, o: usize, t0: usize, out: &mut [f32]);
    /// Whether [`drive`] should walk one row at a time (R = 1) instead of blocks of rows.
    /// Rows of a few KB, walked side by side, are each too short a stream for the hardware
    /// prefetcher, while one row at a time re-reads the activations for every row; which
    /// wins depends on the kernel and the row length, so each kernel says (measurements at
    /// its definition: [`ggml::ExactBlock::ONE_ROW`], `int8act::ONE_ROW_MAX_COLS`).
    fn one_row_at_a_time(&self) -> bool {
        false
    }
    /// Where rows are not walked one at a time, whether [`drive`] takes eight of them at a
    /// time at T = 1 instead of four (each activation load then serves eight rows); only at
    /// the AVX-512 levels, whose 32 vector registers hold eight rows' partial sums.
    fn eight_rows_at_a_time(&self) -> bool {
        false
    }
    /// Rows `o..o + n` (`n` a multiple of R) against activation rows `t0..t0 + T` at
    /// `level`, R rows at a time; `out` starts at row `o`'s outputs, S a row. By default one
    /// call of the level's method a tile; a kernel whose level methods are each a
    /// `#[target_feature]` function (never inlined into this loop) overrides it to loop
    /// inside one, so that a short row does not pay a call, its prologue and its spills.
    ///
    /// # Safety
    /// `level` is supported by the CPU; rows `o..o + n` exist; `t0 + T <= S`.
    unsafe fn tiles<const R: usize, const T: usize>(
        &self,
        level: SimdLevel,
        o: usize,
        n: usize,
        s: usize,
        t0: usize,
        out: &mut [f32],
    ) where
        Self: Sized,
    {
        let mut r = 0;
        while r < n {
            call::<Self, R, T>(level, self, o + r, t0, &mut out[r * s..]);
            r += R;
        }
    }
}

/// Runs `m` over rows `row0..row0+n` and all S activation rows: S is cut into tiles of 4,
/// 2 and 1, and rows into blocks of R (with single rows for the remainder).
pub(crate) fn drive<M: Micro>(
    level: SimdLevel,
    m: &M,
    row0: usize,
    n: usize,
    s: usize,
    out: &mut [f32],
) {
    let mut t0 = 0;
    if m.one_row_at_a_time() {
        while t0 < s {
            let left = s - t0;
            if left >= 4 {
                tile::<M, 1, 4>(level, m, row0, n, s, t0, out);
                t0 += 4;
            } else if left >= 2 {
                tile::<M, 1, 2>(level, m, row0, n, s, t0, out);
                t0 += 2;
            } else {
                tile::<M, 1, 1>(level, m, row0, n, s, t0, out);
                t0 += 1;
            }
        }
        return;
    }
    while t0 < s {
        let left = s - t0;
        let wide = level >= SimdLevel::Avx512;
        if left >= 4 {
            if wide {
                tile::<M, 2, 4>(level, m, row0, n, s, t0, out);
            } else {
                tile::<M, 1, 4>(level, m, row0, n, s, t0, out);
            }
            t0 += 4;
        } else if left >= 2 {
            tile::<M, 2, 2>(level, m, row0, n, s, t0, out);
            t0 += 2;
        } else if wide && m.eight_rows_at_a_time() {
            // Eight rows need the 32 vector registers of AVX-512: at AVX2 (16) the eight
            // rows' partial sums spill (measured in cache, one thread, [1024 x 16384],
            // 2026-12-01: four rows 361-481 us against eight 410-583 for int4-row,
            // mq4-g256-v2 448-460 against 488-498).
            tile::<M, 8, 1>(level, m, row0, n, s, t0, out);
            t0 += 1;
        } else {
            tile::<M, 4, 1>(level, m, row0, n, s, t0, out);
            t0 += 1;
        }
    }
}

/// One activation tile `t0..t0+T` over all rows: blocks of R rows, then single rows.
fn tile<M: Micro, const R: usize, const T: usize>(
    level: SimdLevel,
    m: &M,
    row0: usize,
    n: usize,
    s: usize,
    t0: usize,
    out: &mut [f32],
) {
    let whole = n / R * R;
    // SAFETY: `level` was clamped to the hardware by the entry points; the rows lie inside
    // the task's range and `t0 + T <= S` by construction in `drive`.
    unsafe {
        m.tiles::<R, T>(level, row0, whole, s, t0, out);
        m.tiles::<1, T>(level, row0 + whole, n - whole, s, t0, &mut out[whole * s..]);
    }
}

#[inline]
fn call<M: Micro, const R: usize, const T: usize>(
    level: SimdLevel,
    m: &M,
    o: usize,
    t0: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY: `level` was clamped to the hardware by `gemm_stored_at`; `tile` passes rows
        // inside the task's range and `t0 + T <= S` by construction in `drive`.
        SimdLevel::Avx512 => unsafe { m.avx512::<R, T>(o, t0, out) },
        // SAFETY: as above, for AVX-512 with VNNI.
        SimdLevel::Avx512Vnni => unsafe { m.avx512vnni::<R, T>(o, t0, out) },
        // SAFETY: as above, for AVX2.
        SimdLevel::Avx2 => unsafe { m.avx2::<R, T>(o, t0, out) },
        SimdLevel::Portable => m.portable::<R, T>(o, t0, out),
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        m.portable::<R, T>(o, t0, out)
    }
}

/// Copies the `len < chunk` bytes of a row's last partial chunk into a zeroed buffer, so
/// the vector code reads whole chunks and the missing weights meet zero activations.
#[inline]
pub(crate) fn tail_chunk<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut buf = [0u8; N];
    buf[..src.len()].copy_from_slice(src);
    buf
}
