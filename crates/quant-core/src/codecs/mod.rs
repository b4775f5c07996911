//! One module a format family; each implements [`FormatCodec`](crate::codec::FormatCodec).
//! The byte layouts are documented in docs/FORMATS.md and in each module's header.

pub mod affine256;
pub mod e8;
pub mod float;
pub mod fp8;
pub(crate) mod ggml_common;
pub mod ggml_iq4;
pub mod ggml_kquants;
pub mod ggml_legacy;
pub mod ggml_mxfp4;
mod ggml_search;
pub mod int_group;
pub mod int_row;
pub mod kquant;
pub mod mxfp4;
pub(crate) mod util;
