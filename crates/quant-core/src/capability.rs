//! The vocabulary every backend speaks: operations, capability rows, and the [`Backend`]
//! trait the conformance suite (and `cargo xtask test-matrix`) runs against.
//!
//! A backend declares what it runs natively as a static slice of [`Capability`] rows. The
//! engine's gates, its load-time notice, the test matrix and docs/BACKENDS.md all read that
//! one slice; a combination that is not a row is refused with [`BackendError::NotImplemented`]
//! before any work, so a wrong answer is never possible.

use crate::error::QuantError;
use crate::registry::Format;
use crate::tensor::QTensor;

/// An operation a backend may offer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// y[S, O] = x[S, I] · Wᵀ for a small batch S (decode).
    Gemv,
    /// The same product for a large batch S (prefill), typically on matrix units.
    Gemm,
}

impl Op {
    pub const fn name(self) -> &'static str {
        match self {
            Op::Gemv => "gemv",
            Op::Gemm => "gemm",
        }
    }
}

/// Shape constraints of a capability row beyond what the registry enforces.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Constraint {
    /// Smallest and largest activation batch S the row covers.
    pub s_min: usize,
    pub s_max: usize,
}

impl Constraint {
    pub const fn batch(s_min: usize, s_max: usize) -> Self {
        Constraint { s_min, s_max }
    }
    pub fn admits(&self, s: usize) -> bool {
        (self.s_min..=self.s_max).contains(&s)
    }
}

/// One row of a backend's capability table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capability {
    pub op: Op,
    pub format: Format,
    pub constraint: Constraint,
}

/// Finds the row covering (op, format, s), if any.
pub fn lookup(table: &[Capability], op: Op, format: Format, s: usize) -> Option<&Capability> {
    table
        .iter()
        .find(|c| c.op == op && c.format == format && c.constraint.admits(s))
}

/// Why a backend did not compute a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// The backend is not compiled in, or its device/driver is absent at run time.
    #[error("unavailable: {why}")]
    Unavailable { why: String },
    /// The backend runs, but (op, format, S) is not a row of its capability table.
    #[error("not implemented: {op} of {format} at S={s} on {backend}")]
    NotImplemented {
        backend: &'static str,
        op: &'static str,
        format: Format,
        s: usize,
    },
    /// The inputs were malformed (sizes), as quant-core defines them.
    #[error(transparent)]
    Input(#[from] QuantError),
    /// The device failed while running a supported combination.
    #[error("{backend} failed: {why}")]
    Device { backend: &'static str, why: String },
}

/// A compute backend as the conformance suite sees it.
pub trait Backend {
    /// Short stable name ("cpu", "cuda", "wgpu", "vulkan").
    fn name(&self) -> &'static str;
    /// Whether the backend can run here; `Err(Unavailable)` says why not.
    fn probe(&self) -> Result<(), BackendError>;
    /// The backend's capability table.
    fn capabilities(&self) -> &'static [Capability];
    /// The worst per-output error (`oracle::worst_error`) the conformance suite accepts:
    /// 1e-4 of the summed term magnitudes, the bound for GPU kernels; tighter where a
    /// backend can promise more (the CPU says 1e-5).
    fn tolerance(&self) -> f64 {
        1e-4
    }
    /// y[S, O] = x[S, I] · Wᵀ, x in the logical domain (the backend rotates it for rotated
    /// formats). Returns `NotImplemented` for combinations outside its table.
    fn gemv(&self, t: &QTensor<'_>, x: &[f32], s: usize, y: &mut [f32])
    -> Result<(), BackendError>;
}
