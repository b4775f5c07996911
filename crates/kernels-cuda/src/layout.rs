//! Host-side preparation shared by every GEMV launch: the kernel's scalar arguments, the
//! grid, and the activation buffer (rotated and zero-padded).
//!
//! Nothing here touches a device, so it is tested on machines without one, and
//! `tests/host_emulation.rs` drives the kernel source on the CPU with exactly these values.
//!
//! Activations: the kernels read `x` as [S, x_stride] f32 with `x_stride` = I rounded up to
//! [`X_STRIDE_ALIGN`] and zeros past I. The padding lets a lane read whole 16-byte chunks
//! (and whole 256-weight blocks) without bounds checks: whatever a partial block's padding
//! bits decode to, it meets a zero activation. Rotated formats (`Rotation::Fwht256`: mq4-*)
//! need the activation in the weights' rotated domain; the host rotates it once per call
//! with quant-core's own FWHT (the same transform `api::rotate_activations` applies), before
//! the upload, so the kernels never see a rotation.

use crate::error::CudaError;
use quant_core::{Format, Rotation};

/// Activation rows are padded to a multiple of this many floats: a multiple of every
/// kernel's weights-per-chunk (4 .. 64) and of the 256-weight blocks.
pub const X_STRIDE_ALIGN: usize = 1024;
/// Threads of one CUDA block (4 warps); gemv.cu declares `__launch_bounds__(128)`.
pub const BLOCK_THREADS: u32 = 128;
const WARPS_PER_BLOCK: usize = BLOCK_THREADS as usize / 32;

/// Warps of a tensor-core block (gemv.cu `TS_MMA_WARPS`); the block owns
/// [`MMA_TILE_ROWS`] rows and its warps split the row length among them.
pub const MMA_WARPS: u32 = 8;
/// Rows of one tensor-core block (one m16n8k16 tile).
pub const MMA_TILE_ROWS: usize = 16;
/// Columns of one segment of the split activation's sums (a k-block of the 4-bit affine
/// formats).
pub const MMA_SUM_SEGMENT: usize = 64;

/// Rows one warp owns at batch `s`: gemv.cu's `RowsPerWarp<S>::R`, which must agree.
pub fn rows_per_warp(s: usize) -> usize {
    if s <= 4 { 2 } else { 4 }
}

/// The scalar arguments of a GEMV launch, as the kernel takes them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Stored bytes of one row (the registry's `row_bytes`).
    pub row_bytes: i64,
    pub rows: i32,
    pub cols: i32,
    /// Floats from one activation row to the next.
    pub x_stride: i32,
    /// Stored scales of one row (grouped formats) or of one 128-row tile band (fp8): the
    /// registry's `scale_count(1, I)`.
    pub sc_row: i32,
}

fn shape_err(format: Format, what: String) -> CudaError {
    CudaError::Shape { format, what }
}

/// The launch arguments of an [rows, cols] tensor of `format`.
pub fn launch_shape(format: Format, rows: usize, cols: usize) -> Result<LaunchShape, CudaError> {
    let spec = format.spec();
    spec.check_shape(rows, cols)?;
    let too_big = |what: &str| {
        shape_err(
            format,
            format!("{what} of [{rows}, {cols}] exceeds the kernel's 32-bit index"),
        )
    };
    let row_bytes = i64::try_from(spec.row_bytes(cols)?).map_err(|_| too_big("row bytes"))?;
    let x_stride = cols
        .checked_next_multiple_of(X_STRIDE_ALIGN)
        .ok_or_else(|| too_big("activation stride"))?;
    Ok(LaunchShape {
        row_bytes,
        rows: i32::try_from(rows).map_err(|_| too_big("O"))?,
        cols: i32::try_from(cols).map_err(|_| too_big("I"))?,
        x_stride: i32::try_from(x_stride).map_err(|_| too_big("activation stride"))?,
        sc_row: i32::try_from(spec.scale_count(1, cols)?).map_err(|_| too_big("scales a row"))?,
    })
}

/// CUDA blocks of a launch over `rows` rows at batch `s`.
pub fn grid_blocks(rows: usize, s: usize) -> Result<u32, CudaError> {
    let per_block = WARPS_PER_BLOCK * rows_per_warp(s);
    u32::try_from(rows.div_ceil(per_block)).map_err(|_| CudaError::Shape {
        format: Format::F32,
        what: format!("{rows} rows need more than 2^32 CUDA blocks"),
    })
}

/// CUDA blocks of a tensor-core launch over `rows` rows.
pub fn mma_grid_blocks(rows: usize) -> Result<u32, CudaError> {
    u32::try_from(rows.div_ceil(MMA_TILE_ROWS)).map_err(|_| CudaError::Shape {
        format: Format::F32,
        what: format!("{rows} rows need more than 2^32 CUDA blocks"),
    })
}

/// Prepared activations ([s, x_stride], from [`prepare_activations`]) split for the
/// tensor-core kernels, which multiply f16 operands exactly but cannot take f32.
///
/// Per activation row s, p = 2^e puts max |x| in [2^14, 2^15): far from the f16 overflow
/// and from its subnormals. Then x_hi = f16(x p) and x_lo = f16(x p - x_hi) (both exact
/// roundings of values computed exactly in f64), so x_hi + x_lo = x p to about 2^-22
/// relative, and the kernel's two MMA columns sum to y p.
///
/// Returns `halves`: [2 s, x_stride] f16 bits, row 2k = x_hi of activation k, row 2k + 1 =
/// x_lo; and `aux`: [s] 1/p, then [s, x_stride / 64] sums of x p over 64-column segments
/// (for the affine formats' zero term), rounded once from f64.
pub fn split_activations(xp: &[f32], s: usize, x_stride: usize) -> (Vec<u16>, Vec<f32>) {
    let segs = x_stride / MMA_SUM_SEGMENT;
    let mut halves = vec![0u16; 2 * s * x_stride];
    let mut aux = vec![0f32; s + s * segs];
    for (k, row) in xp.chunks_exact(x_stride).take(s).enumerate() {
        let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        // max in [2^e, 2^(e+1)) -> p = 2^(14 - e); clamped so 1/p stays a normal f32.
        let p = if max > 0.0 && max.is_finite() {
            let e = max.log2().floor() as i32;
            2f64.powi((14 - e).clamp(-100, 100))
        } else {
            1.0
        };
        aux[k] = (1.0 / p) as f32;
        let (hi_row, lo_row) =
            halves[2 * k * x_stride..(2 * k + 2) * x_stride].split_at_mut(x_stride);
        for (i, &v) in row.iter().enumerate() {
            let scaled = v as f64 * p;
            let hi = half::f16::from_f64(scaled);
            hi_row[i] = hi.to_bits();
            lo_row[i] = half::f16::from_f64(scaled - hi.to_f64()).to_bits();
        }
        for (g, seg) in row.chunks_exact(MMA_SUM_SEGMENT).enumerate() {
            aux[s + k * segs + g] = seg.iter().map(|&v| v as f64 * p).sum::<f64>() as f32;
        }
    }
    (halves, aux)
}

/// Rotates `x` ([s, cols], logical domain) into `format`'s stored domain and lays it out as
/// the kernels read it: [s, x_stride], zero-padded.
pub fn prepare_activations(
    format: Format,
    cols: usize,
    rotation_seed: u64,
    x: &[f32],
    s: usize,
    x_stride: usize,
) -> Result<Vec<f32>, CudaError> {
    let expected = s.checked_mul(cols);
    if expected != Some(x.len()) {
        return Err(shape_err(
            format,
            format!(
                "activation has {} values, expected S={s} x I={cols}",
                x.len()
            ),
        ));
    }
    if x_stride < cols {
        return Err(shape_err(
            format,
            format!("activation stride {x_stride} < I = {cols}"),
        ));
    }
    let total = s
        .checked_mul(x_stride)
        .ok_or_else(|| shape_err(format, format!("S={s} x stride {x_stride} overflows")))?;
    let mut out = vec![0f32; total];
    for (dst, src) in out.chunks_exact_mut(x_stride).zip(x.chunks_exact(cols)) {
        dst[..cols].copy_from_slice(src);
        match format.spec().rotation {
            Rotation::None => {}
            // The registry guarantees cols % 256 == 0 for every rotated format.
            Rotation::Fwht256 => {
                quant_core::rotation::forward_rows(&mut dst[..cols], cols, rotation_seed)
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quant_core::testdata::{Rng, activations, weights};
    use quant_core::{EncodeOptions, encode};

    #[test]
    fn padding_and_stride() {
        let sh = launch_shape(Format::Int4G64, 3, 100).unwrap();
        assert_eq!(sh.row_bytes, 50);
        assert_eq!(sh.x_stride, 1024);
        assert_eq!(sh.sc_row, 2);
        let fp8 = launch_shape(Format::Fp8E4m3B128, 300, 300).unwrap();
        assert_eq!(fp8.sc_row, 3, "tiles per 128-row band");
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let p = prepare_activations(Format::F32, 3, 0, &x, 2, 1024).unwrap();
        assert_eq!(p.len(), 2048);
        assert_eq!(&p[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert_eq!(&p[1024..1027], &[4.0, 5.0, 6.0]);
        assert!(p[1027..].iter().all(|&v| v == 0.0));
        assert!(prepare_activations(Format::F32, 3, 0, &x[..5], 2, 1024).is_err());
    }

    #[test]
    fn grid_covers_every_row() {
        for s in 1..=16 {
            for rows in [1, 7, 8, 9, 4096, 14336] {
                let covered =
                    grid_blocks(rows, s).unwrap() as usize * WARPS_PER_BLOCK * rows_per_warp(s);
                assert!(covered >= rows && covered < rows + WARPS_PER_BLOCK * rows_per_warp(s));
            }
        }
    }

    #[test]
    fn split_activations_carry_22_bits() {
        let mut rng = Rng::new(3);
        let cols = 1024;
        let mut x = activations(&mut rng, 2, cols);
        x[5] = 1e-30; // far below max: must not be lost to f16 subnormals relative to max
        for v in &mut x[cols..] {
            *v *= 1e6; // beyond f16's range before scaling
        }
        let (h, aux) = split_activations(&x, 2, cols);
        assert_eq!(h.len(), 2 * 2 * cols);
        assert_eq!(aux.len(), 2 + 2 * cols / MMA_SUM_SEGMENT);
        for k in 0..2 {
            let max = x[k * cols..(k + 1) * cols]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            let inv_p = aux[k] as f64;
            let mut seg0 = 0f64;
            for i in 0..cols {
                let hi = half::f16::from_bits(h[2 * k * cols + i]).to_f64();
                let lo = half::f16::from_bits(h[(2 * k + 1) * cols + i]).to_f64();
                let back = (hi + lo) * inv_p;
                let want = x[k * cols + i] as f64;
                assert!(
                    (back - want).abs() <= 2f64.powi(-21) * max as f64,
                    "k={k} i={i}"
                );
                if i < MMA_SUM_SEGMENT {
                    seg0 += want / inv_p;
                }
            }
            let got = aux[2 + k * (cols / MMA_SUM_SEGMENT)] as f64;
            assert!((got - seg0).abs() <= 1e-6 * seg0.abs().max(1.0), "k={k}");
        }
    }

    /// The host-side rotation is the one the oracle applies: the stored-domain dot of the
    /// prepared activation equals the logical-domain reference.
    #[test]
    fn rotation_matches_the_oracle() {
        let mut rng = Rng::new(7);
        let (rows, cols) = (3, 512);
        let t = encode(
            Format::Mq4G256V2,
            rows,
            cols,
            &weights(&mut rng, rows, cols),
            &EncodeOptions::default(),
        )
        .unwrap();
        let x = activations(&mut rng, 1, cols);
        let xr = prepare_activations(t.format, cols, t.rotation_seed, &x, 1, 1024).unwrap();
        let mut stored = vec![0f64; cols];
        let reference = quant_core::oracle::reference_gemm(&t.view(), &x, 1);
        for o in 0..rows {
            quant_core::api::decode_rows_stored_f64(&t.view(), o, &mut stored);
            let y: f64 = stored.iter().zip(&xr).map(|(w, x)| w * *x as f64).sum();
            assert!(
                (y - reference.y[o]).abs() <= 1e-5 * reference.magnitude[o],
                "row {o}"
            );
        }
    }
}
