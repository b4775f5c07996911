//! kernels-metal: the Apple tier of tessera, through wgpu (Metal on macOS, Vulkan or DX12
//! elsewhere, so the same WGSL is tested on lavapipe and on NVIDIA Vulkan).
//!
//! - [`kernels`]: the format -> WGSL kernel table and the shader sources; builds without
//!   wgpu (kernels-rocm reads it with `default-features = false`).
//!
//! With the default `wgpu` feature (docs/WGPU.md):
//! - `caps`: the capability table as data ([`CAPABILITIES`]).
//! - `device`: [`WgpuBackend`]: adapter and device, pipeline cache, buffer pools,
//!   [`GpuTensor`] uploads and asynchronous GEMV.
//! - `backend`: [`WgpuConformance`], the tier as a `quant_core::capability::Backend`.

pub mod kernels;

#[cfg(feature = "wgpu")]
pub mod backend;
#[cfg(feature = "wgpu")]
pub mod caps;
#[cfg(feature = "wgpu")]
pub mod device;

#[cfg(feature = "wgpu")]
pub use backend::WgpuConformance;
#[cfg(feature = "wgpu")]
pub use caps::CAPABILITIES;
#[cfg(feature = "mutation-test")]
pub use device::Mutation;
#[cfg(feature = "wgpu")]
pub use device::{
    GpuTensor, Options, PendingGemv, SHADER_CHECKS_DEFAULT, ShaderChecks, Subgroups, WgpuBackend,
};
