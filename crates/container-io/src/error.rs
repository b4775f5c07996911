//! The error type of container-io: one variant per refusal, each naming the file, the tensor
//! (where there is one) and the condition, so a user can act on the message alone.

use quant_core::{Format, QuantError};
use thiserror::Error;

/// Formats a candidate list as `a, b, c` for messages.
pub fn names(fs: &[Format]) -> String {
    fs.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

#[derive(Debug, Error)]
pub enum ContainerError {
    // ---- the file itself ----
    #[error("{file}: cannot {op}: {source}")]
    Io {
        file: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("{file}: file is {len} bytes, shorter than the 8-byte header length prefix")]
    TooShort { file: String, len: u64 },
    #[error("{file}: header length {header_len} exceeds the {cap}-byte cap")]
    HeaderTooLarge {
        file: String,
        header_len: u64,
        cap: u64,
    },
    #[error("{file}: header length {header_len} runs past the end of the {file_len}-byte file")]
    HeaderPastEnd {
        file: String,
        header_len: u64,
        file_len: u64,
    },
    #[error("{file}: header is not valid JSON: {msg}")]
    HeaderJson { file: String, msg: String },
    #[error("{file}: tensor {tensor:?} appears twice in the header")]
    DuplicateTensor { file: String, tensor: String },
    #[error("{file}: tensor {tensor:?} has a malformed entry: {msg}")]
    BadEntry {
        file: String,
        tensor: String,
        msg: String,
    },
    #[error("{file}: tensor {tensor:?} has unknown dtype {dtype:?}")]
    UnknownDtype {
        file: String,
        tensor: String,
        dtype: String,
    },
    #[error("{file}: __metadata__ is malformed: {msg}")]
    BadMetadata { file: String, msg: String },
    #[error("{file}: tensor {tensor:?}: byte count of shape {shape:?} x {elem} bytes overflows")]
    ShapeOverflow {
        file: String,
        tensor: String,
        shape: Vec<u64>,
        elem: u64,
    },
    #[error("{file}: tensor {tensor:?}: data_offsets [{begin}, {end}] are reversed (begin > end)")]
    OffsetsReversed {
        file: String,
        tensor: String,
        begin: u64,
        end: u64,
    },
    #[error(
        "{file}: tensor {tensor:?}: data_offsets end {end} is past the {data_len}-byte data section (file truncated?)"
    )]
    OffsetOutOfRange {
        file: String,
        tensor: String,
        end: u64,
        data_len: u64,
    },
    #[error(
        "{file}: tensor {tensor:?}: {dtype} x {shape:?} is {expected} bytes but data_offsets span {span}"
    )]
    SizeMismatch {
        file: String,
        tensor: String,
        dtype: String,
        shape: Vec<u64>,
        expected: u64,
        span: u64,
    },
    #[error(
        "{file}: tensor {tensor:?} at [{begin}, {end}) overlaps tensor {other:?} ending at {other_end}"
    )]
    Overlap {
        file: String,
        tensor: String,
        begin: u64,
        end: u64,
        other: String,
        other_end: u64,
    },
    #[error(
        "{file}: tensor {tensor:?} starts at {begin}, leaving a gap of unclaimed bytes from {gap_start}"
    )]
    Gap {
        file: String,
        tensor: String,
        begin: u64,
        gap_start: u64,
    },
    #[error(
        "{file}: {trailing} trailing bytes after the last tensor {tensor:?} (data section is {data_len} bytes)"
    )]
    TrailingBytes {
        file: String,
        tensor: String,
        trailing: u64,
        data_len: u64,
    },

    // ---- sharded sets ----
    #[error("{file}: index is malformed: {msg}")]
    IndexJson { file: String, msg: String },
    #[error(
        "{file}: tensor {tensor:?}: shard name {shard:?} is not a plain file name in the index's folder"
    )]
    ShardPath {
        file: String,
        tensor: String,
        shard: String,
    },
    #[error(
        "{file}: tensor {tensor:?} is mapped to shard {shard:?} but that shard does not hold it"
    )]
    IndexTensorMissing {
        file: String,
        tensor: String,
        shard: String,
    },
    #[error("{file}: tensor {tensor:?} is held by both {shard_a:?} and {shard_b:?}")]
    DuplicateAcrossShards {
        file: String,
        tensor: String,
        shard_a: String,
        shard_b: String,
    },

    // ---- tensors and sidecars ----
    #[error("{file}: no tensor named {tensor:?}")]
    MissingTensor { file: String, tensor: String },
    #[error(
        "{file}: tensor {tensor:?} is {format}, which keeps {expected} scale bytes in sidecar {sidecar:?}, but the sidecar is missing"
    )]
    MissingSidecar {
        file: String,
        tensor: String,
        sidecar: String,
        format: Format,
        expected: u64,
    },
    #[error("{file}: tensor {tensor:?} is {format}, which has no sidecar, but {sidecar:?} exists")]
    UnexpectedSidecar {
        file: String,
        tensor: String,
        sidecar: String,
        format: Format,
    },
    #[error("{file}: tensor {tensor:?} is stored as {got}; {format} needs {expected}")]
    WrongDtype {
        file: String,
        tensor: String,
        format: Format,
        expected: &'static str,
        got: String,
    },
    #[error("{file}: tensor {tensor:?}: {source}")]
    Quant {
        file: String,
        tensor: String,
        source: QuantError,
    },

    // ---- stamps ----
    #[error("{file}: tensor {tensor:?}: stamp is malformed: {msg}")]
    StampJson {
        file: String,
        tensor: String,
        msg: String,
    },
    #[error("{file}: tensor {tensor:?}: stamp names unknown format {name:?}")]
    StampUnknownFormat {
        file: String,
        tensor: String,
        name: String,
    },
    #[error("{file}: tensor {tensor:?}: stamp says {field} = {stamp}, but {format} has {registry}")]
    StampInconsistent {
        file: String,
        tensor: String,
        format: Format,
        field: &'static str,
        stamp: String,
        registry: String,
    },
    #[error(
        "{file}: tensor {tensor:?}: stamp says {format} [{rows}, {cols}] = {want_w} weight + {want_s} scale bytes; the file holds {got_w} weight + {got_s} scale bytes; refusing"
    )]
    StampMismatch {
        file: String,
        tensor: String,
        format: Format,
        rows: usize,
        cols: usize,
        want_w: u64,
        want_s: u64,
        got_w: u64,
        got_s: u64,
    },
    #[error("{file}: stamp key {key:?} names tensor {tensor:?}, which is not in the file")]
    StampWithoutTensor {
        file: String,
        key: String,
        tensor: String,
    },

    // ---- the legacy (unstamped) resolver ----
    #[error(
        "{file}: tensor {tensor:?}: unstamped {dtype} tensor of shape {shape:?} has no logical [O, I]; pass a shape hint"
    )]
    NoShape {
        file: String,
        tensor: String,
        dtype: String,
        shape: Vec<u64>,
    },
    #[error(
        "{file}: tensor {tensor:?}: unstamped [{rows}, {cols}] with {weight_bytes} weight + {scale_bytes} scale bytes matches no legacy format"
    )]
    NoLegacyMatch {
        file: String,
        tensor: String,
        rows: usize,
        cols: usize,
        weight_bytes: u64,
        scale_bytes: u64,
    },
    #[error("{file}: tensor {tensor:?}: unstamped [{rows}, {cols}] with {weight_bytes} weight + {scale_bytes} scale bytes is ambiguous ({rule}); candidates: {}; refusing (write it stamped)", names(.candidates))]
    Ambiguous {
        file: String,
        tensor: String,
        rule: &'static str,
        rows: usize,
        cols: usize,
        weight_bytes: u64,
        scale_bytes: u64,
        candidates: Vec<Format>,
    },
    #[error(
        "{file}: tensor {tensor:?}: unstamped U8 tensor of shape {shape:?} fits several logical shapes: {candidates}; pass a shape hint"
    )]
    AmbiguousShape {
        file: String,
        tensor: String,
        shape: Vec<u64>,
        candidates: String,
    },

    // ---- the writer ----
    #[error(
        "{file}: tensor {tensor:?}: --legacy-unstamped refuses {format} [{rows}, {cols}]: {why}"
    )]
    LegacyWouldMisresolve {
        file: String,
        tensor: String,
        format: Format,
        rows: usize,
        cols: usize,
        why: String,
    },
    #[error("{file}: tensor {tensor:?}: {msg}")]
    Plan {
        file: String,
        tensor: String,
        msg: String,
    },
    #[error("{file}: tensor {tensor:?}: {msg}")]
    Input {
        file: String,
        tensor: String,
        msg: String,
    },
}

pub type Result<T, E = ContainerError> = std::result::Result<T, E>;

impl ContainerError {
    pub(crate) fn io(file: &str, op: &'static str, source: std::io::Error) -> Self {
        ContainerError::Io {
            file: file.to_string(),
            op,
            source,
        }
    }
}
