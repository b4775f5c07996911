//! kernels-rocm: the AMD tier of tessera, through raw Vulkan (ash). docs/VULKAN.md.
//!
//! It runs the WGSL kernels of `shaders/wgsl/` (the same files and the same format ->
//! kernel table, `kernels_metal::kernels`, as the wgpu tier), compiled to SPIR-V by naga at
//! build time (`build.rs`, one module per format constants and batch S).
//!
//! - [`device`]: loader, instance, adapter choice (`TESSERA_VK_ADAPTER`), subgroup (wave)
//!   size control, the shared layouts (4 storage buffers + 32 bytes of push constants),
//!   the pipeline cache, one pipeline per module created once.
//! - [`gemv`]: [`VulkanBackend`]: tensors uploaded once in their container layout, one
//!   descriptor set and recorded command buffer per (tensor, S), GEMV, timing.
//! - [`caps`]: the capability table as data ([`CAPABILITIES`]).
//! - [`pipeline_stats`]: the driver's statistics of each pipeline (registers and the like),
//!   on request (`TESSERA_VK_PIPELINE_STATS=1`).
//! - [`spirv`]: the embedded modules and which serves a (format, S).
//! - [`backend`]: [`VulkanConformance`], the tier as a `quant_core` `Backend` ("vulkan").
//!
//! The Vulkan loader is opened at run time: without it, or without an ICD, everything
//! returns [`VulkanError::Unavailable`] saying which, and the tests skip.

pub mod backend;
pub mod caps;
pub mod device;
pub mod error;
pub mod gemv;
pub mod pipeline_stats;
pub mod spirv;

pub use backend::VulkanConformance;
pub use caps::CAPABILITIES;
pub use device::{
    AdapterInfo, Context, Options, SubgroupPolicy, Wave, WavePolicy, WaveSource, instances_created,
};
pub use error::VulkanError;
#[cfg(feature = "mutation-test")]
pub use gemv::Mutation;
pub use gemv::{DeviceTensor, VulkanBackend, prepare_activations};
pub use pipeline_stats::PipelineStatistic;
