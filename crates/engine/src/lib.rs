//! engine: model graphs and decode for tessera.
//!
//! - [`config`]: config.json -> typed [`config::ModelConfig`] (Llama, Qwen3, DeepSeek-V3).
//! - [`weights`]: tensors through container-io (tessera containers or plain safetensors).
//! - [`llama`], [`deepseek`]: the graphs (GQA dense; MLA + shared/routed experts).
//! - [`kv_cache`]: per-layer caches (GQA keys/values; MLA latents + rope keys).
//! - [`backend`]: the engine's [`backend::Backend`] trait; the CPU always, CUDA, wgpu and
//!   raw Vulkan with the features `cuda`, `wgpu`, `vulkan`.
//! - [`fuse`]: row concatenation of same-input projections (q/k/v, gate/up), admitted
//!   from the registry only where it equals encoding the stacked matrix.
//! - [`gate`]: THE per-layer predicate (bitmask of tensor kinds whose format misses the
//!   backend's capability table) and the layer-path choice built on it.
//! - [`notice`]: the load-time notice, built from the same predicate.
//! - [`stats`]: per-op fallback counts and the end-of-run summary.
//! - [`model`]: loading, the forward pass, greedy generation.
//! - [`npy`]: the `.npy` files `--logits-out` writes.
//! - [`ops`], [`sampler`]: RMSNorm, SwiGLU, softmax, RoPE (default, llama3, yarn); greedy choice.
//!
//! - [`resident`] (feature `cuda`): the device-resident decode path for Llama / Qwen3 on
//!   CUDA: every layer enqueued on one stream, one read-back (the token id) per token.
//!
//! Elsewhere (the CPU, wgpu, Vulkan, DeepSeek graphs, layers the fused table misses) each
//! layer's attention core, RMSNorms, routing and MLA kv_b absorption run on the host in f32
//! and the backend runs the GEMVs op by op; the gate and the run summary say which.

pub mod backend;
pub mod config;
pub mod deepseek;
pub mod error;
pub mod fuse;
pub mod gate;
pub mod kv_cache;
pub mod llama;
pub mod model;
pub mod notice;
pub mod npy;
pub mod ops;
#[cfg(feature = "cuda")]
pub mod resident;
pub mod sampler;
pub mod stats;
pub mod weights;

pub use backend::{Backend, BackendChoice, CpuBackend};
pub use config::{Arch, ModelConfig};
pub use error::{EngineError, Result};
pub use model::{Generation, LoadOptions, Model, ModelSource};
