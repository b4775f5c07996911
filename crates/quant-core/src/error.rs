//! The error type of quant-core: one variant per failure, each naming what it refused.

use crate::registry::Format;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum QuantError {
    #[error("unknown format name {name:?} (see `tessera formats` or docs/FORMATS.md)")]
    UnknownFormat { name: String },
    #[error("{format}: empty shape [{rows}, {cols}]")]
    EmptyShape {
        format: Format,
        rows: usize,
        cols: usize,
    },
    #[error(
        "{format}: I = {cols} is not a multiple of the {block}-weight block; this format has no partial blocks"
    )]
    PartialBlock {
        format: Format,
        cols: usize,
        block: usize,
    },
    #[error("{format}: byte count of [{rows}, {cols}] overflows")]
    SizeOverflow {
        format: Format,
        rows: usize,
        cols: usize,
    },
    #[error("{format}: {what} buffer is {got} bytes, expected {expected} for [{rows}, {cols}]")]
    BufferSize {
        format: Format,
        what: &'static str,
        rows: usize,
        cols: usize,
        expected: u64,
        got: usize,
    },
    #[error("{format}: input has {got} values, expected {expected} for [{rows}, {cols}]")]
    InputSize {
        format: Format,
        rows: usize,
        cols: usize,
        expected: u64,
        got: usize,
    },
    #[error("{format}: rows {row0}..{row0}+{n} are not a valid row block of a {rows}-row tensor")]
    RowRange {
        format: Format,
        row0: usize,
        n: usize,
        rows: usize,
    },
    #[error("{format}: activation has {got} values, expected S={s} x I={cols}")]
    ActivationSize {
        format: Format,
        s: usize,
        cols: usize,
        got: usize,
    },
    #[error("{format}: output has {got} values, expected S={s} x O={rows}")]
    OutputSize {
        format: Format,
        s: usize,
        rows: usize,
        got: usize,
    },
    #[error("{format}: non-finite input value at row {row}, column {col}; refusing to encode")]
    NonFiniteInput {
        format: Format,
        row: usize,
        col: usize,
    },
    /// A block's values span a range whose scale or offset the format's header encoding
    /// (fp16 or f32) cannot hold; `col` is the block's first column, `lo`/`hi` are in the
    /// stored (for rotated formats: rotated) domain.
    #[error(
        "{format}: the block at column {col} spans [{lo}, {hi}], beyond what its {header} header can hold; refusing to encode"
    )]
    ScaleOutOfRange {
        format: Format,
        col: usize,
        lo: f32,
        hi: f32,
        header: &'static str,
    },
}
