//! The f64 oracle every kernel on every backend is checked against, and the error metric.
//!
//! The reference decodes the format's own bytes in f64 (the codec's generic decode
//! instantiated at f64), rotates the activations in f64 where the format is rotated, and
//! accumulates in f64. The error of one output is `|y - y_ref| / Σ_i |w_i x_i|` (seed 000):
//! cancellation cannot make it blow up, and a wrong scale or group index still shows as an
//! O(1) error.

use crate::api::{decode_rows_stored_f64, rotate_activations};
use crate::tensor::QTensor;

/// Reference outputs and magnitudes, both [S, O] row-major.
pub struct Reference {
    pub y: Vec<f64>,
    /// Σ_i |w_i x_i| of each output.
    pub magnitude: Vec<f64>,
}

/// The f64 reference of y[S, O] = x[S, I] · Wᵀ (x in the logical domain).
pub fn reference_gemm(t: &QTensor<'_>, x: &[f32], s: usize) -> Reference {
    let (rows, cols) = (t.rows(), t.cols());
    let mut xr: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    rotate_activations(t, &mut xr);
    let mut y = vec![0f64; s * rows];
    let mut magnitude = vec![0f64; s * rows];
    let mut w = vec![0f64; cols];
    for o in 0..rows {
        decode_rows_stored_f64(t, o, &mut w);
        for k in 0..s {
            let xs = &xr[k * cols..(k + 1) * cols];
            let (mut acc, mut mag) = (0f64, 0f64);
            for (a, b) in w.iter().zip(xs) {
                acc += a * b;
                mag += (a * b).abs();
            }
            y[k * rows + o] = acc;
            magnitude[k * rows + o] = mag;
        }
    }
    Reference { y, magnitude }
}

/// The worst per-output error of `y` against the reference, and where it is.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WorstError {
    pub error: f64,
    /// Flat index into [S, O].
    pub index: usize,
}

/// Per-output magnitude-relative error. A NaN reference demands a NaN output (fp8 NaN
/// weights poison their row); a NaN or infinite output where the reference is finite is an
/// infinite error, so poisoned outputs left unwritten are always caught.
pub fn worst_error(y: &[f32], r: &Reference) -> WorstError {
    let mut worst = WorstError {
        error: 0.0,
        index: 0,
    };
    for (i, (&got, (&want, &mag))) in y.iter().zip(r.y.iter().zip(&r.magnitude)).enumerate() {
        let e = if want.is_nan() {
            if got.is_nan() { 0.0 } else { f64::INFINITY }
        } else if !got.is_finite() {
            f64::INFINITY
        } else {
            let d = (got as f64 - want).abs();
            if mag > 0.0 { d / mag } else { d }
        };
        if e > worst.error || (e.is_nan() && !worst.error.is_nan()) {
            worst = WorstError { error: e, index: i };
        }
    }
    worst
}

/// A value no kernel produces by accident; outputs are filled with it before each run.
pub const POISON: f32 = f32::from_bits(0x7FC0_DEAD);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_error_reports_the_first_of_equal_errors() {
        let r = Reference {
            y: vec![1.0; 3],
            magnitude: vec![1.0; 3],
        };
        assert_eq!(
            worst_error(&[1.5, 1.5, 1.0], &r),
            WorstError {
                error: 0.5,
                index: 0
            }
        );
    }

    #[test]
    fn a_nan_error_is_never_hidden_by_a_finite_one() {
        // An infinite reference makes the error NaN (inf / inf): it must be reported as the
        // worst, whether it comes before or after a finite error.
        let inf = f64::INFINITY;
        let r = Reference {
            y: vec![1.0, inf, 1.0],
            magnitude: vec![1.0, inf, 1.0],
        };
        let w = worst_error(&[1.5, 1.0, 1.0], &r);
        assert!(w.error.is_nan() && w.index == 1, "{w:?}");
        let r = Reference {
            y: vec![inf, 1.0],
            magnitude: vec![inf, 1.0],
        };
        let w = worst_error(&[1.0, 3.0], &r);
        assert!(w.error.is_nan() && w.index == 0, "{w:?}");
    }

    #[test]
    fn unwritten_or_non_finite_outputs_are_infinitely_wrong() {
        let r = Reference {
            y: vec![1.0, f64::NAN],
            magnitude: vec![1.0, 1.0],
        };
        assert_eq!(worst_error(&[POISON, f32::NAN], &r).error, f64::INFINITY);
        assert_eq!(
            worst_error(&[1.0, 0.0], &r),
            WorstError {
                error: f64::INFINITY,
                index: 1
            }
        );
        assert_eq!(worst_error(&[1.0, f32::NAN], &r).error, 0.0);
    }
}
