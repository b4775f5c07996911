//! quant-core: the foundation of tessera.
//!
//! - [`registry`]: every weight format as one row of data; the only place byte counts live.
//! - [`codec`] / [`codecs`]: encode f32 → format bytes and decode back, one module a family.
//! - [`api`]: whole-tensor and row-block (streaming) encode and decode, rayon across rows.
//! - [`rotation`]: the seeded FWHT-256 under the mq4 formats.
//! - [`kernels`]: CPU GEMV/GEMM for every format.
//! - [`oracle`]: the f64 reference and error metric every backend is tested against.
//! - [`quality`]: codec quality metrics (MSE, tail-1% MSE, max rel, error histogram).
//! - [`tables`]: the exact E4M3-FN, UE8M0 and E2M1 decode tables.
//! - [`capability`]: the op/capability vocabulary and the `Backend` trait every backend
//!   implements.
//! - [`cpu_backend`]: the CPU kernels as a [`capability::Backend`] (name "cpu").
//! - [`conformance`]: the one conformance suite every backend runs (`conformance_tests!`,
//!   `cargo xtask test-matrix`).

pub mod api;
pub mod capability;
pub mod codec;
pub mod codecs;
pub mod conformance;
pub mod cpu_backend;
pub mod error;
pub mod kernels;
pub mod memory;
pub mod oracle;
pub mod quality;
pub mod real;
pub mod registry;
pub mod rotation;
pub mod tables;
pub mod tensor;
pub mod testdata;

pub use api::{EncodeOptions, EncoderEffort, decode, decode_rows, encode, encode_rows};
pub use error::QuantError;
pub use kernels::{gemm, gemm_stored};
pub use registry::{FORMATS, Format, FormatSpec, Rotation, ScaleEncoding, ScaleLayout};
pub use tensor::{EncodedTensor, QTensor};
