//! The CUDA tier as a [`quant_core::capability::Backend`], so the one conformance suite and
//! `cargo xtask test-matrix` run it like any other backend.
//!
//! The capability rows it reports are [`crate::caps::CAPABILITIES`] in quant-core's
//! vocabulary (one table, two views; the kernel ids stay in `caps`). The trait has one entry
//! for the product: S <= 16 runs the GEMV, larger S the GEMM (its default `Split`
//! precision, which keeps the same 1e-4 tolerance). Without a GPU the value still exists and
//! `probe()` says why it cannot run.

use crate::caps;
use crate::device::{CudaBackend, GemmPrecision};
use crate::error::CudaError;
use quant_core::QTensor;
use quant_core::capability::Op as QOp;
use quant_core::capability::{Backend, BackendError, Capability, Constraint, Op};
use quant_core::conformance;
use std::sync::OnceLock;

/// The CUDA backend for the conformance suite: device 0, or why there is none.
pub struct CudaConformance {
    device: Result<CudaBackend, CudaError>,
}

impl CudaConformance {
    /// Opens device 0; never fails (the error is kept and reported by `probe`). With a
    /// device, first compiles every build the suite's batches can reach, on all cores: the
    /// suite calls one (format, S) at a time, and compiling each on first use would
    /// serialize a few hundred NVRTC runs. The PTX cache is per process, so later values
    /// find it warm; a build that fails here fails again, reported, at its launch.
    pub fn new() -> Self {
        let device = CudaBackend::new();
        if let Ok(d) = &device {
            let mut batches = conformance::batches(QOp::Gemv).to_vec();
            batches.extend_from_slice(conformance::batches(QOp::Gemm));
            let gemv: Vec<usize> = batches.iter().copied().filter(|&s| s <= 16).collect();
            let _ = d.prewarm(&caps::formats(caps::Op::Gemv), &gemv);
            // The GEMM rows' edge S = 17 too.
            batches.push(17);
            let _ = d.prewarm_gemm(
                &caps::formats(caps::Op::Gemm),
                &[GemmPrecision::Split],
                &batches,
            );
        }
        CudaConformance { device }
    }
}

impl Default for CudaConformance {
    fn default() -> Self {
        Self::new()
    }
}

fn op(o: caps::Op) -> Op {
    match o {
        caps::Op::Gemv => Op::Gemv,
        caps::Op::Gemm => Op::Gemm,
    }
}

/// `caps::CAPABILITIES` in quant-core's vocabulary.
pub fn capability_table() -> &'static [Capability] {
    static TABLE: OnceLock<Vec<Capability>> = OnceLock::new();
    TABLE.get_or_init(|| {
        caps::CAPABILITIES
            .iter()
            .map(|c| Capability {
                op: op(c.op),
                format: c.format,
                constraint: Constraint::batch(c.constraint.s_min, c.constraint.s_max),
            })
            .collect()
    })
}

fn backend_error(e: CudaError) -> BackendError {
    match e {
        CudaError::Unavailable { why } => BackendError::Unavailable { why },
        CudaError::NotImplemented {
            op: o, format, s, ..
        } => BackendError::NotImplemented {
            backend: "cuda",
            op: op(o).name(),
            format,
            s,
        },
        CudaError::Quant(q) => BackendError::Input(q),
        e @ (CudaError::Shape { .. }
        | CudaError::Input { .. }
        | CudaError::Driver { .. }
        | CudaError::Compile { .. }) => BackendError::Device {
            backend: "cuda",
            why: e.to_string(),
        },
    }
}

impl Backend for CudaConformance {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn probe(&self) -> Result<(), BackendError> {
        match &self.device {
            Ok(_) => Ok(()),
            Err(e) => Err(backend_error(e.clone())),
        }
    }

    fn capabilities(&self) -> &'static [Capability] {
        capability_table()
    }

    fn gemv(
        &self,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        let dev = self.device.as_ref().map_err(|e| backend_error(e.clone()))?;
        // The GEMV row serves small batches, the GEMM row large ones (17 and up); the
        // GEMM's error is reported when neither admits S.
        let gemm = caps::lookup(caps::Op::Gemv, t.format(), s).is_err();
        if gemm {
            caps::lookup(caps::Op::Gemm, t.format(), s).map_err(backend_error)?;
        }
        let w = dev.upload(t).map_err(backend_error)?;
        let out = if gemm {
            dev.gemm(&w, x, s)
        } else {
            dev.gemv(&w, x, s)
        }
        .map_err(backend_error)?;
        if out.len() != y.len() {
            return Err(BackendError::Input(quant_core::QuantError::OutputSize {
                format: t.format(),
                s,
                rows: t.rows(),
                got: y.len(),
            }));
        }
        y.copy_from_slice(&out);
        Ok(())
    }
}
