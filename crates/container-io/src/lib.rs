//! container-io: stamped safetensors containers, the legacy resolver and the pipelines.
//!
//! - [`header`]: the safetensors header parser, total over bytes (every offset checked
//!   before any slice is taken).
//! - [`container`]: opening files and sharded sets (memory-mapped), resolving tensors.
//! - [`stamp`]: the per-tensor format stamp in `__metadata__`.
//! - [`legacy`]: inferring the format of unstamped tensors, and seed 004's collision policy.
//! - [`writer`]: planned, positional (parallel, streaming) writing; stamps every tensor.
//! - [`roles`]: the tensor-role classifier for DeepSeek-V3 / GLM / Qwen / Llama / gpt-oss names.
//! - [`census`]: shape families of a model that the legacy resolver cannot tell apart.
//! - [`pipeline`]: quantize, repack-fp8, dequantize, verify.
//! - [`gguf`]: llama.cpp's GGUF files: a safe parser, dequantize, and import block for block.

pub mod census;
pub mod container;
pub mod error;
pub mod gguf;
pub mod header;
pub mod legacy;
pub mod pipeline;
pub mod roles;
pub mod stamp;
pub mod writer;

pub use container::{Container, How, Item, Resolved, ShapeHints};
pub use error::{ContainerError, Result};
pub use header::Dtype;
pub use stamp::Stamp;
pub use writer::{Plan, Writer};
