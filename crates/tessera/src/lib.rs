//! tessera: quantized LLM weights — the facade crate.
//!
//! Depend on this crate to get the format registry, codecs and CPU kernels (`quant_core`)
//! the container reader/writer (`container_io`) and the CUDA tier (`kernels_cuda`, which
//! loads libcuda at run time and reports "unavailable: why" without a GPU) under one name.

pub use container_io;
pub use engine;
pub use kernels_cuda;
pub use quant_core;
pub use quant_core::{EncodedTensor, Format, QTensor, QuantError, decode, encode, gemm};
