//! GGUF: llama.cpp's model files, read natively and block for block.
//!
//! - [`mod@parse`]: the parser (versions 2 and 3, little-endian): header, every metadata value
//!   type including nested arrays, tensor infos, `general.alignment`, the data section. It
//!   borrows from the memory-mapped file and copies nothing.
//! - [`types`]: every GGML tensor type with its block geometry (gguf-py's tables).
//! - [`names`]: llama.cpp tensor names (`blk.N.attn_q.weight`, ...) to Hugging Face names
//!   and roles, and the `config.json` written from the metadata (llama, qwen3, deepseek2).
//! - [`import`]: `dequantize` (GGUF to a plain f32/f16/bf16 safetensors file) and
//!   `import-gguf` (GGUF to a stamped tessera container, blocks copied byte for byte).
//!
//! A GGUF tensor of `ggml_type` T is a registry format ([`quant_core::Format::from_ggml`]):
//! F32/F16/BF16 are the `f32`/`f16`/`bf16` rows, the block types (Q4_0 ... Q6_K, IQ4_NL,
//! IQ4_XS, MXFP4) are rows of their own whose bytes are GGML's `block_*` structs, so a
//! tensor is served without a second quantization. Its logical shape is
//! [rows, row_length] = [ne\[1\] * ne\[2\] * ne\[3\], ne\[0\]].
//!
//! # Safety against malformed files
//!
//! The parser is total over bytes: every malformed file gives one [`GgufError`] variant
//! naming the file, the key or tensor and the condition, and never a panic, an
//! out-of-bounds read, or an allocation larger than a small multiple of the file. Each check
//! runs before the value it guards is used, and each closes a class of bug that llama.cpp's
//! own GGUF reader has shipped (the advisories below are the classes, described by the
//! condition each exploited):
//!
//! | check (error variant) | advisory class |
//! | --- | --- |
//! | `n_kv` and `n_tensors` capped by the bytes left, 13 / 24 bytes an entry ([`GgufError::TooManyKv`], [`GgufError::TooManyTensors`]) | CVE-2024-21802, CVE-2024-23605: counts from the header drive allocations and reads |
//! | string lengths and array counts capped by the bytes left ([`GgufError::StringPastEnd`], [`GgufError::ArrayPastEnd`]); nesting capped at [`parse::MAX_DEPTH`] ([`GgufError::NestingTooDeep`]); unknown value types refused ([`GgufError::UnknownValueType`]) | CVE-2024-21802, CVE-2024-23605: lengths and element types trusted while reading metadata |
//! | `n_dims <= 4` ([`GgufError::TooManyDims`]); the `ne` product checked in 64-bit signed range ([`GgufError::ElementOverflow`]); `ne[0]` whole blocks ([`GgufError::PartialBlock`]); blocks x type size checked ([`GgufError::ByteSizeOverflow`]) | CVE-2025-53630, CVE-2026-27940, CVE-2026-33298: tensor size arithmetic that wraps, so a small buffer stands for a huge tensor |
//! | offsets aligned ([`GgufError::MisalignedOffset`]), `offset + size` inside the data section with checked addition ([`GgufError::TensorPastEnd`]), no two tensors overlapping ([`GgufError::TensorOverlap`]) | CVE-2025-53630, CVE-2026-27940, CVE-2026-33298: offsets and sizes that reach outside the mapped data |
//! | unknown type ids ([`GgufError::UnknownTensorType`]); `general.alignment` a `u32` power of two up to 64 KiB ([`GgufError::BadAlignmentType`], [`GgufError::BadAlignment`]); duplicate keys and tensor names ([`GgufError::DuplicateKey`], [`GgufError::DuplicateTensor`]) | table lookups indexed by file-supplied ids; ambiguous files that two readers would read differently |
//!
//! Every variant has a byte-level test in `tests/gguf_errors.rs`, the `gguf_parse` cargo-fuzz
//! target runs the parser and every tensor's decode on arbitrary bytes, and the CLI turns
//! every error into exit status 2.

pub mod error;
pub mod import;
pub mod names;
pub mod parse;
pub mod types;

pub use error::{GgufError, Result};
pub use parse::{Array, Gguf, Kv, TensorInfo, Value, ValueType, parse};
pub use types::GgmlType;

use crate::container::Bytes;
use memmap2::Mmap;
use quant_core::registry::DEFAULT_ROTATION_SEED;
use quant_core::{Format, QTensor};
use std::io::Read;
use std::path::Path;

/// An opened GGUF file: its bytes, memory-mapped (or owned, for tests and fuzzing).
pub struct GgufFile {
    /// The name used in messages (the path as given).
    pub file: String,
    bytes: Bytes,
}

/// True when the file at `path` starts with the GGUF magic (false if it cannot be read).
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map(|()| magic == parse::MAGIC)
        .unwrap_or(false)
}

impl GgufFile {
    /// Maps a file read-only. Nothing is read until [`GgufFile::parse`].
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = path.display().to_string();
        let io = |op, source| GgufError::Io {
            file: file.clone(),
            op,
            source,
        };
        let f = std::fs::File::open(path).map_err(|e| io("open", e))?;
        let len = f.metadata().map_err(|e| io("stat", e))?.len();
        let bytes = if len == 0 {
            // Mapping an empty file fails on some platforms; the parser names the problem.
            Bytes::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this process. Another process
            // that truncates or rewrites the file while it is mapped can change the bytes
            // under us (or fault the reads); that is memmap2's documented contract and that
            // of every mmap-based model reader. The parser checks every offset against the
            // mapped length before slicing, so a concurrent change can corrupt values, never
            // index out of bounds in safe code.
            Bytes::Mapped(unsafe { Mmap::map(&f) }.map_err(|e| io("mmap", e))?)
        };
        Ok(GgufFile { file, bytes })
    }

    /// Wraps bytes already in memory.
    pub fn from_bytes(file: &str, bytes: Vec<u8>) -> GgufFile {
        GgufFile {
            file: file.to_string(),
            bytes: Bytes::Owned(bytes),
        }
    }

    /// Parses and validates the file.
    pub fn parse(&self) -> Result<Gguf<'_>> {
        parse::parse(&self.file, &self.bytes)
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The registry format of a tensor, or why tessera cannot hold it.
pub fn format_of(g: &Gguf<'_>, t: &TensorInfo<'_>) -> Result<Format> {
    t.ty.format().ok_or_else(|| GgufError::UnsupportedType {
        file: g.file.clone(),
        tensor: t.name.to_string(),
        ty: t.ty.name,
    })
}

/// A tensor as a [`QTensor`] over the file's bytes: format, logical [rows, row_length].
pub fn qtensor<'a>(g: &Gguf<'a>, t: &TensorInfo<'_>) -> Result<QTensor<'a>> {
    let format = format_of(g, t)?;
    let (rows, cols) = t.logical_shape();
    let q = |source| GgufError::Quant {
        file: g.file.clone(),
        tensor: t.name.to_string(),
        source,
    };
    let of = |_| {
        q(quant_core::QuantError::SizeOverflow {
            format,
            rows: usize::MAX,
            cols: usize::MAX,
        })
    };
    let rows = usize::try_from(rows).map_err(of)?;
    let cols = usize::try_from(cols).map_err(of)?;
    QTensor::new(
        format,
        rows,
        cols,
        g.tensor_data(t),
        &[],
        DEFAULT_ROTATION_SEED,
    )
    .map_err(q)
}
