//! The error type of the GGUF reader and its pipelines: one variant per refusal, each naming
//! the file, the key or tensor where there is one, and the condition.

use crate::error::ContainerError;
use quant_core::QuantError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GgufError {
    #[error("{file}: cannot {op}: {source}")]
    Io {
        file: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("{file}: not a GGUF file: starts with {found:?}, not \"GGUF\"")]
    NotGguf { file: String, found: Vec<u8> },
    #[error(
        "{file}: file ends inside {what}: {need} bytes needed at offset {at}, the file is {len} bytes"
    )]
    Truncated {
        file: String,
        what: String,
        at: u64,
        need: u64,
        len: u64,
    },
    #[error(
        "{file}: version field reads {raw:#010x} little-endian; this is a big-endian GGUF (version {version}), which tessera does not read"
    )]
    BigEndian {
        file: String,
        raw: u32,
        version: u32,
    },
    #[error("{file}: GGUF version {version} is not supported (this reader takes versions 2 and 3)")]
    UnsupportedVersion { file: String, version: u32 },
    #[error(
        "{file}: header declares {n_kv} metadata entries, but the {left} bytes left can hold at most {max} (13 bytes each at least)"
    )]
    TooManyKv {
        file: String,
        n_kv: u64,
        left: u64,
        max: u64,
    },
    #[error(
        "{file}: header declares {n_tensors} tensors, but the {left} bytes left can hold at most {max} tensor infos (24 bytes each at least)"
    )]
    TooManyTensors {
        file: String,
        n_tensors: u64,
        left: u64,
        max: u64,
    },
    #[error(
        "{file}: {what} declares a {len}-byte string, but only {left} bytes are left in the file"
    )]
    StringPastEnd {
        file: String,
        what: String,
        len: u64,
        left: u64,
    },
    #[error("{file}: metadata key at offset {at} is not valid: {why}")]
    BadKey { file: String, at: u64, why: String },
    #[error("{file}: metadata key {key:?} appears twice")]
    DuplicateKey { file: String, key: String },
    #[error("{file}: metadata key {key:?} has unknown value type {type_id}")]
    UnknownValueType {
        file: String,
        key: String,
        type_id: u32,
    },
    #[error("{file}: metadata key {key:?}: bool byte is {byte:#04x}, not 0 or 1")]
    BadBool { file: String, key: String, byte: u8 },
    #[error(
        "{file}: metadata key {key:?}: array of {count} {elem} elements needs at least {need} bytes, but only {left} are left in the file"
    )]
    ArrayPastEnd {
        file: String,
        key: String,
        elem: &'static str,
        count: u64,
        need: u128,
        left: u64,
    },
    #[error("{file}: metadata key {key:?}: arrays nested deeper than {max} levels")]
    NestingTooDeep {
        file: String,
        key: String,
        max: usize,
    },
    #[error("{file}: general.alignment is a {found}, not a uint32")]
    BadAlignmentType { file: String, found: &'static str },
    #[error("{file}: general.alignment = {alignment} is not a power of two between 1 and {max}")]
    BadAlignment {
        file: String,
        alignment: u64,
        max: u64,
    },
    #[error("{file}: tensor name at offset {at} is {len} bytes, longer than the {max}-byte limit")]
    TensorNameTooLong {
        file: String,
        at: u64,
        len: u64,
        max: u64,
    },
    #[error("{file}: {what} at offset {at} is not valid UTF-8")]
    NotUtf8 {
        file: String,
        what: &'static str,
        at: u64,
    },
    #[error("{file}: tensor {tensor:?} appears twice")]
    DuplicateTensor { file: String, tensor: String },
    #[error("{file}: tensor {tensor:?} has {n_dims} dimensions; GGUF allows at most {max}")]
    TooManyDims {
        file: String,
        tensor: String,
        n_dims: u32,
        max: u32,
    },
    #[error(
        "{file}: tensor {tensor:?}: element count of dimensions {dims:?} overflows a signed 64-bit integer"
    )]
    ElementOverflow {
        file: String,
        tensor: String,
        dims: Vec<u64>,
    },
    #[error("{file}: tensor {tensor:?} has unknown or retired GGML type id {type_id}")]
    UnknownTensorType {
        file: String,
        tensor: String,
        type_id: u32,
    },
    #[error(
        "{file}: tensor {tensor:?}: row length ne[0] = {ne0} is not a multiple of {ty}'s {block}-weight block"
    )]
    PartialBlock {
        file: String,
        tensor: String,
        ty: &'static str,
        ne0: u64,
        block: u32,
    },
    #[error(
        "{file}: tensor {tensor:?}: {blocks} blocks x {type_size} bytes of {ty} overflows a 64-bit byte count"
    )]
    ByteSizeOverflow {
        file: String,
        tensor: String,
        ty: &'static str,
        blocks: u64,
        type_size: u32,
    },
    #[error(
        "{file}: tensor {tensor:?}: offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedOffset {
        file: String,
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "{file}: tensor {tensor:?}: bytes [{offset}, {offset} + {nbytes}) run past the {data_len}-byte data section (file truncated?)"
    )]
    TensorPastEnd {
        file: String,
        tensor: String,
        offset: u64,
        nbytes: u64,
        data_len: u64,
    },
    #[error(
        "{file}: tensor {tensor:?} at [{begin}, {end}) overlaps tensor {other:?}, which ends at {other_end}"
    )]
    TensorOverlap {
        file: String,
        tensor: String,
        begin: u64,
        end: u64,
        other: String,
        other_end: u64,
    },

    // ---- using the file (pipelines) ----
    #[error(
        "{file}: tensor {tensor:?} is GGML type {ty}, which tessera has no format for (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4)"
    )]
    UnsupportedType {
        file: String,
        tensor: String,
        ty: &'static str,
    },
    #[error("{file}: metadata: {msg}")]
    Metadata { file: String, msg: String },
    #[error("{file}: tensor {tensor:?}: {source}")]
    Quant {
        file: String,
        tensor: String,
        source: QuantError,
    },
    /// Writing the output container failed (boxed: a container error is large).
    #[error(transparent)]
    Container(Box<ContainerError>),
}

impl From<ContainerError> for GgufError {
    fn from(e: ContainerError) -> Self {
        GgufError::Container(Box::new(e))
    }
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
