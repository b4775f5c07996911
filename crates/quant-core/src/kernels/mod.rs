//! CPU kernels: y[S, O] = x[S, I] · Wᵀ for every format, rayon across rows.
//!
//! Each format has a [`RowKernel`]; formats without a fused SIMD kernel use
//! [`generic::DecodeThenDot`], which decodes a few rows into an L1-sized scratch with the
//! format's own f32 decode and dots them with every activation row, so S > 1 reuses each
//! decoded row. Fused kernels fold group scales into the accumulation per group.

pub mod generic;
pub mod simd;

use crate::api::rotate_activations;
use crate::error::QuantError;
use crate::registry::Format;
use crate::tensor::QTensor;
use rayon::prelude::*;

/// A format's row kernel, in the stored domain (activations already rotated).
pub trait RowKernel: Send + Sync {
    /// For r in 0..n and k in 0..s: `out[r * s + k] = Σ_i W[row0 + r, i] · x[k * I + i]`.
    fn dot_rows(&self, t: &QTensor<'_>, x: &[f32], s: usize, row0: usize, n: usize, out: &mut [f32]);
}

/// The kernel of a format. Exhaustive: a new format must say which kernel runs it.
pub fn kernel_for(format: Format) -> &'static dyn RowKernel {
    match format {
        Format::F32
        | Format::F16
        | Format::Bf16
        | Format::Int8Row
        | Format::Int4Row
        | Format::Int2Row
        | Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256
        | Format::Int3G64
        | Format::E8Lattice
        | Format::Fp8E4m3B128
        | Format::Fp8E4m3B128Ue8m0
        | Format::Hfq4G256
        | Format::Mq4G256
        | Format::Mq4G256V2
        | Format::Mq4cG256
        | Format::Mq4K
        | Format::Mxfp4 => &generic::DecodeThenDot,
    }
}

/// Rows one parallel task takes: about 256 KiB of stored weights, at least 8 rows.
fn task_rows(t: &QTensor<'_>) -> usize {
    (262_144 / t.row_bytes().max(1)).clamp(8, 4096)
}

/// y[S, O] = x[S, I] · Wᵀ with x in the logical domain (rotated here for rotated formats).
pub fn gemm(t: &QTensor<'_>, x: &[f32], s: usize, y: &mut [f32]) -> Result<(), QuantError> {
    check_sizes(t, x, s, y)?;
    match t.format().spec().rotation {
        crate::registry::Rotation::None => gemm_stored(t, x, s, y),
        crate::registry::Rotation::Fwht256 => {
            let mut xr = x.to_vec();
            rotate_activations(t, &mut xr);
            gemm_stored(t, &xr, s, y)
        }
    }
}

/// y[S, O] = x[S, I] · Wᵀ with x already in the stored (rotated) domain, so a caller that
/// feeds one activation to several tensors of the same seed rotates it once.
pub fn gemm_stored(t: &QTensor<'_>, x: &[f32], s: usize, y: &mut [f32]) -> Result<(), QuantError> {
    check_sizes(t, x, s, y)?;
    let rows = t.rows();
    let kernel = kernel_for(t.format());
    let step = task_rows(t);
    // Row-major [O, S] scratch so each task owns a contiguous slice; transposed at the end.
    let mut yt = vec![0f32; rows * s];
    yt.par_chunks_mut(step * s).enumerate().for_each(|(k, out)| {
        let row0 = k * step;
        kernel.dot_rows(t, x, s, row0, out.len() / s, out);
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
    if s == 0 || x.len() != s * t.cols() {
        return Err(QuantError::ActivationSize { format, s, cols: t.cols(), got: x.len() });
    }
    if y.len() != s * t.rows() {
        return Err(QuantError::OutputSize { format, s, rows: t.rows(), got: y.len() });
    }
    Ok(())
}
