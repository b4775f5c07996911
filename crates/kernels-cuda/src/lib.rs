//! kernels-cuda: the CUDA tier of tessera.
//!
//! - [`caps`]: the capability table as data; every launch is looked up there first.
//! - [`backend`]: the tier as a `quant_core::capability::Backend` (conformance, test matrix).
//! - [`layout`]: host-side launch arguments and activation preparation (rotation, padding).
//! - [`compile`]: NVRTC builds of `shaders/cuda/gemv.cu`, cached per process.
//! - [`device`]: [`CudaBackend`] (device 0), tensors uploaded in their stored layout, GEMV,
//!   GEMM and the MoE grouped GEMV.
//! - [`presplit`]: activations split by the kernel that produces them, and the GEMV launch
//!   that reads them without a split of its own.
//! - [`resident`]: the engine's device-resident decode kernels (`shaders/cuda/decode_ops.cu`:
//!   RMSNorm, RoPE, attention over a device KV cache, SwiGLU, argmax) and the table of
//!   formats that path takes.
//!
//! GEMV runs S = 1..16 for every registry format; GEMM S >= 17 for the formats with a
//! tensor-core kernel; the MoE grouped GEMV any mix of formats (docs/CUDA.md). libcuda and libnvrtc are
//! loaded at run time, so the crate builds anywhere; where no GPU exists every entry returns
//! [`CudaError::Unavailable`] ("no CUDA device: ...") and nothing panics.

pub mod backend;
pub mod caps;
pub mod compile;
pub mod device;
pub mod error;
pub mod layout;
pub mod presplit;
pub mod resident;

pub use backend::CudaConformance;
pub use caps::{CAPABILITIES, Capability, Op};
#[cfg(feature = "mutation-test")]
pub use compile::Mutation;
pub use compile::Tuning;
/// The cudarc this crate is built against (the engine's resident path holds its buffers).
pub use cudarc;
pub use device::{
    CudaBackend, DeviceActivations, DeviceGemmActivations, DeviceTensor, GemmPrecision, KernelPath,
};
pub use error::CudaError;
pub use presplit::{SplitBuffers, SplitLayout};
