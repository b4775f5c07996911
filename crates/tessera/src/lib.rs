//! tessera: quantized LLM weights — the facade crate.
//!
//! Depend on this crate to get the format registry, codecs and CPU kernels (`quant_core`)
//! and the container reader/writer (`container_io`) under one name.

pub use container_io;
pub use quant_core;
pub use quant_core::{EncodedTensor, Format, QTensor, QuantError, decode, encode, gemm};
