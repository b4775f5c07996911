//! The error type of the Vulkan tier: every refusal says why, nothing panics.

use quant_core::capability::BackendError;
use quant_core::{Format, QuantError};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum VulkanError {
    /// No Vulkan loader, no ICD, or no device that fits: the tests skip, saying why.
    #[error("unavailable: {why}")]
    Unavailable { why: String },
    /// (format, S) is not a row of [`crate::caps::CAPABILITIES`], or the kernel table has no
    /// compiled kernel for it: the caller falls back (never a wrong answer).
    #[error("not implemented on Vulkan: gemv of {format} with S = {s} ({why})")]
    NotImplemented {
        format: Format,
        s: usize,
        why: String,
    },
    /// Caller buffers or dimensions that do not match the tensor, or a tensor beyond what
    /// the device can bind.
    #[error("{format}: {what}")]
    Shape { format: Format, what: String },
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// A Vulkan call failed.
    #[error("Vulkan error during {during}: {result}")]
    Vk {
        during: &'static str,
        result: String,
    },
    /// A generated SPIR-V module or the kernel table is inconsistent (a build problem, never
    /// an input problem: rerun `cargo xtask shaders`).
    #[error("shader problem: {what}")]
    Shader { what: String },
}

impl VulkanError {
    /// Wraps a failing `VkResult` with what was being done.
    pub(crate) fn vk(during: &'static str) -> impl FnOnce(ash::vk::Result) -> VulkanError {
        move |r| VulkanError::Vk {
            during,
            result: format!("{r:?}"),
        }
    }

    /// True for [`VulkanError::Unavailable`]: the machine has no usable Vulkan device.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, VulkanError::Unavailable { .. })
    }
}

impl From<VulkanError> for BackendError {
    fn from(e: VulkanError) -> BackendError {
        match e {
            VulkanError::Unavailable { why } => BackendError::Unavailable { why },
            VulkanError::NotImplemented { format, s, .. } => BackendError::NotImplemented {
                backend: "vulkan",
                op: "gemv",
                format,
                s,
            },
            VulkanError::Quant(q) => BackendError::Input(q),
            e @ (VulkanError::Shape { .. }
            | VulkanError::Vk { .. }
            | VulkanError::Shader { .. }) => BackendError::Device {
                backend: "vulkan",
                why: e.to_string(),
            },
        }
    }
}
