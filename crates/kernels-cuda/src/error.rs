//! The error type of the CUDA tier: every refusal says why, nothing panics.

use crate::caps::Op;
use quant_core::{Format, QuantError};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum CudaError {
    /// No usable CUDA device or driver library on this machine; `why` starts with
    /// "no CUDA device:" and names the reason.
    #[error("unavailable: {why}")]
    Unavailable { why: String },
    /// The combination is not a row of the capability table ([`crate::caps::CAPABILITIES`]),
    /// so no kernel runs it; the caller falls back (never a wrong answer).
    #[error("not implemented on CUDA: {op:?} of {format} with S = {s} ({why})")]
    NotImplemented {
        op: Op,
        format: Format,
        s: usize,
        why: String,
    },
    /// Caller buffers or dimensions that do not match the tensor.
    #[error("{format}: {what}")]
    Shape { format: Format, what: String },
    /// Caller input that names no single tensor (e.g. a MoE call's expert list).
    #[error("{what}")]
    Input { what: String },
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// A CUDA driver call failed.
    #[error("CUDA driver error during {during}: {detail}")]
    Driver {
        during: &'static str,
        detail: String,
    },
    /// NVRTC refused a kernel source (a bug in shaders/cuda/, never an input problem).
    #[error("NVRTC could not compile {module}: {log}")]
    Compile { module: String, log: String },
}

impl CudaError {
    pub(crate) fn driver(
        during: &'static str,
    ) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
        move |e| CudaError::Driver {
            during,
            detail: format!("{e:?}"),
        }
    }

    /// True for [`CudaError::Unavailable`]: the machine has no GPU, the tests skip.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CudaError::Unavailable { .. })
    }
}
