//! The format registry: every quantized weight format tessera knows, as one row of data.
//!
//! This is the only place in the workspace that knows a format's geometry. Every byte count
//! (weight bytes, scale bytes, the byte range of a row block) is computed here from the row,
//! with checked arithmetic; codecs, kernels, containers and backends ask, they never compute.
//! Seed 004's `qt_scale_bytes` story (a size helper with no callers while two sites kept
//! computing `O*4`) is why.
//!
//! The registry is append-only: a retired format keeps its row as a tombstone and its name is
//! never reused, because names are the identity written into container stamps.

use crate::error::QuantError;
use std::fmt;
use std::str::FromStr;

/// Every weight format. Adding a variant makes every exhaustive `match` in the workspace
/// (codecs, kernels, capability tables) fail to compile until it learns the new format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    F32,
    F16,
    Bf16,
    Int8Row,
    Int4Row,
    Int2Row,
    Int4G16,
    Int4G32,
    Int4G48,
    Int4G64,
    Int4G96,
    Int4G128,
    Int4G192,
    Int4G256,
    Int3G64,
    E8Lattice,
    Fp8E4m3B128,
    Fp8E4m3B128Ue8m0,
    Hfq4G256,
    Mq4G256,
    Mq4G256V2,
    Mq4cG256,
    Mq4K,
    Mxfp4,
    // GGML's block types (GGUF tensor types), byte-identical to llama.cpp's blocks.
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Iq4Nl,
    Iq4Xs,
    GgufMxfp4,
}

/// How a per-scale value is stored.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScaleEncoding {
    /// IEEE-754 binary32, little-endian.
    F32,
    /// IEEE-754 binary16, little-endian.
    F16,
    /// One byte, unsigned power of two: value = 2^(e - 127); 0xFF is NaN (OCP MX spec).
    Ue8m0,
}

impl ScaleEncoding {
    /// Bytes one stored scale occupies.
    pub const fn bytes(self) -> u64 {
        match self {
            ScaleEncoding::F32 => 4,
            ScaleEncoding::F16 => 2,
            ScaleEncoding::Ue8m0 => 1,
        }
    }

    /// Stable name used in stamps and docs.
    pub const fn name(self) -> &'static str {
        match self {
            ScaleEncoding::F32 => "f32",
            ScaleEncoding::F16 => "f16",
            ScaleEncoding::Ue8m0 => "ue8m0",
        }
    }
}

/// Where a format keeps its scales. `Inline` formats carry them inside each weight block,
/// so their sidecar (`<name>.qs`) is empty.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScaleLayout {
    /// No scales at all (plain floats).
    None,
    /// Scales live inside the weight blocks (hfq4/mq4 family, mq4-k, e8 block scales).
    Inline,
    /// One scale per output row: `scale[o]`.
    PerRow(ScaleEncoding),
    /// One scale per `group` weights along I: `scale[o * ceil(I/group) + i/group]`.
    PerGroup { group: u32, encoding: ScaleEncoding },
    /// One scale per `rows x cols` tile of [O, I], tiles row-major:
    /// `scale[(o/rows) * ceil(I/cols) + i/cols]`.
    PerTile {
        rows: u32,
        cols: u32,
        encoding: ScaleEncoding,
    },
    /// One scale for the whole tensor (plus whatever the blocks carry inline).
    PerTensor(ScaleEncoding),
}

/// Rotation applied to the weights before encoding; the activation must be rotated the same
/// way at run time (`y = (R w) . (R x)` for an orthonormal R).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rotation {
    None,
    /// Orthonormal signed Walsh-Hadamard over each 256-weight block along I, signs drawn
    /// from the tensor's rotation seed (see `crate::rotation`).
    Fwht256,
}

impl Rotation {
    pub const fn name(self) -> &'static str {
        match self {
            Rotation::None => "none",
            Rotation::Fwht256 => "fwht256",
        }
    }
}

/// Ids under which older files and engines knew a format (seeds 000-004): the C engine's
/// `fmt=` ordinal and the Rust engine's `qt=` ordinal, and the `ggml_type` id a GGUF file
/// gives the format's blocks. Aliases only; names are the identity.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LegacyIds {
    pub fmt: Option<u8>,
    pub qt: Option<u8>,
    /// llama.cpp's `ggml_type` (GGUF tensor type id) with exactly these block bytes.
    pub ggml: Option<u8>,
}

/// One row of the registry.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FormatSpec {
    pub format: Format,
    /// Stable name, written into stamps; never reused.
    pub name: &'static str,
    pub legacy: LegacyIds,
    /// Weights along I covered by one storage block of a row.
    pub block_weights: u32,
    /// Bytes of one storage block. A row holds `ceil(I / block_weights)` blocks.
    pub block_bytes: u32,
    /// True when I must be a whole number of blocks (the 256-weight families): encoders
    /// refuse other shapes by name instead of inventing padding.
    pub whole_blocks_only: bool,
    pub scales: ScaleLayout,
    pub rotation: Rotation,
    /// One-line human description (docs, `tessera formats`).
    pub summary: &'static str,
}

// One argument per registry column keeps the table below readable as a table.
#[allow(clippy::too_many_arguments)]
const fn row(
    format: Format,
    name: &'static str,
    fmt: Option<u8>,
    qt: Option<u8>,
    block_weights: u32,
    block_bytes: u32,
    whole_blocks_only: bool,
    scales: ScaleLayout,
    rotation: Rotation,
    summary: &'static str,
) -> FormatSpec {
    FormatSpec {
        format,
        name,
        legacy: LegacyIds {
            fmt,
            qt,
            ggml: None,
        },
        block_weights,
        block_bytes,
        whole_blocks_only,
        scales,
        rotation,
        summary,
    }
}

impl FormatSpec {
    /// The same row, known to GGUF files as `ggml_type` `id`.
    const fn with_ggml(mut self, id: u8) -> FormatSpec {
        self.legacy.ggml = Some(id);
        self
    }
}

/// A GGML block type: inline headers, whole blocks only (GGML requires
/// `ne[0] % block == 0`), no rotation, known to GGUF as `ggml_type` `id`.
const fn ggml_row(
    format: Format,
    name: &'static str,
    id: u8,
    block_weights: u32,
    block_bytes: u32,
    summary: &'static str,
) -> FormatSpec {
    row(
        format,
        name,
        None,
        None,
        block_weights,
        block_bytes,
        true,
        ScaleLayout::Inline,
        NoRot,
        summary,
    )
    .with_ggml(id)
}

const fn per_group(group: u32) -> ScaleLayout {
    ScaleLayout::PerGroup {
        group,
        encoding: ScaleEncoding::F32,
    }
}

use Format as F;
use Rotation::{Fwht256, None as NoRot};

/// The registry. Order is the order of `Format`; `spec()` relies on it and a test checks it.
pub static FORMATS: &[FormatSpec] = &[
    // GGUF's F32 / F16 / BF16 tensors are these bytes: one row each, not a GGUF twin.
    row(
        F::F32,
        "f32",
        None,
        None,
        1,
        4,
        false,
        ScaleLayout::None,
        NoRot,
        "IEEE binary32 weights",
    )
    .with_ggml(0),
    row(
        F::F16,
        "f16",
        None,
        None,
        1,
        2,
        false,
        ScaleLayout::None,
        NoRot,
        "IEEE binary16 weights",
    )
    .with_ggml(1),
    row(
        F::Bf16,
        "bf16",
        None,
        None,
        1,
        2,
        false,
        ScaleLayout::None,
        NoRot,
        "bfloat16 weights",
    )
    .with_ggml(30),
    row(
        F::Int8Row,
        "int8-row",
        Some(1),
        None,
        1,
        1,
        false,
        ScaleLayout::PerRow(ScaleEncoding::F32),
        NoRot,
        "symmetric int8, one f32 scale per row",
    ),
    row(
        F::Int4Row,
        "int4-row",
        Some(2),
        None,
        2,
        1,
        false,
        ScaleLayout::PerRow(ScaleEncoding::F32),
        NoRot,
        "offset-binary nibbles (q-8), low nibble first, one f32 scale per row",
    ),
    row(
        F::Int2Row,
        "int2-row",
        Some(3),
        None,
        4,
        1,
        false,
        ScaleLayout::PerRow(ScaleEncoding::F32),
        NoRot,
        "offset-binary 2-bit codes (q-2), lowest bits first, one f32 scale per row",
    ),
    row(
        F::Int4G16,
        "int4-g16",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(16),
        NoRot,
        "int4-row nibbles, one f32 scale per 16 along I",
    ),
    row(
        F::Int4G32,
        "int4-g32",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(32),
        NoRot,
        "int4-row nibbles, one f32 scale per 32 along I",
    ),
    row(
        F::Int4G48,
        "int4-g48",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(48),
        NoRot,
        "int4-row nibbles, one f32 scale per 48 along I",
    ),
    row(
        F::Int4G64,
        "int4-g64",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(64),
        NoRot,
        "int4-row nibbles, one f32 scale per 64 along I",
    ),
    row(
        F::Int4G96,
        "int4-g96",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(96),
        NoRot,
        "int4-row nibbles, one f32 scale per 96 along I",
    ),
    row(
        F::Int4G128,
        "int4-g128",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(128),
        NoRot,
        "int4-row nibbles, one f32 scale per 128 along I",
    ),
    row(
        F::Int4G192,
        "int4-g192",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(192),
        NoRot,
        "int4-row nibbles, one f32 scale per 192 along I",
    ),
    row(
        F::Int4G256,
        "int4-g256",
        Some(4),
        None,
        2,
        1,
        false,
        per_group(256),
        NoRot,
        "int4-row nibbles, one f32 scale per 256 along I",
    ),
    row(
        F::Int3G64,
        "int3-g64",
        Some(5),
        None,
        8,
        3,
        false,
        per_group(64),
        NoRot,
        "offset-binary 3-bit codes (q-4), 8 per 3 bytes, one f32 scale per 64 along I",
    ),
    row(
        F::E8Lattice,
        "e8-lattice",
        Some(6),
        None,
        256,
        98,
        false,
        ScaleLayout::PerTensor(ScaleEncoding::F32),
        NoRot,
        "E8 lattice: per 256, fp16 scale + 32 x 24-bit E8 codes; one f32 tensor scale",
    ),
    row(
        F::Fp8E4m3B128,
        "fp8-e4m3-b128",
        Some(7),
        None,
        1,
        1,
        false,
        ScaleLayout::PerTile {
            rows: 128,
            cols: 128,
            encoding: ScaleEncoding::F32,
        },
        NoRot,
        "OCP E4M3-FN bytes, one f32 scale per 128x128 tile",
    ),
    row(
        F::Fp8E4m3B128Ue8m0,
        "fp8-e4m3-b128-ue8m0",
        Some(7),
        None,
        1,
        1,
        false,
        ScaleLayout::PerTile {
            rows: 128,
            cols: 128,
            encoding: ScaleEncoding::Ue8m0,
        },
        NoRot,
        "OCP E4M3-FN bytes, one UE8M0 scale per 128x128 tile",
    ),
    row(
        F::Hfq4G256,
        "hfq4-g256",
        None,
        Some(6),
        256,
        136,
        true,
        ScaleLayout::Inline,
        NoRot,
        "affine 4-bit per 256: f32 scale, f32 zero, 128 B nibbles",
    ),
    row(
        F::Mq4G256,
        "mq4-g256",
        None,
        Some(13),
        256,
        136,
        true,
        ScaleLayout::Inline,
        Fwht256,
        "hfq4-g256 bytes over FWHT-256-rotated weights",
    ),
    row(
        F::Mq4G256V2,
        "mq4-g256-v2",
        None,
        Some(44),
        256,
        136,
        true,
        ScaleLayout::Inline,
        Fwht256,
        "affine 4-bit per 128 (two fp16 scale/zero pairs) in hfq4's 136 B stride, FWHT-rotated",
    ),
    row(
        F::Mq4cG256,
        "mq4c-g256",
        None,
        Some(45),
        256,
        136,
        true,
        ScaleLayout::Inline,
        Fwht256,
        "affine 4-bit per 256: fp16 scale, fp16 zero, 4 pad bytes, 128 B nibbles, FWHT-rotated",
    ),
    row(
        F::Mq4K,
        "mq4-k",
        None,
        None,
        256,
        144,
        true,
        ScaleLayout::Inline,
        Fwht256,
        "GGML Q4_K block layout (6-bit sub-scales/mins per 32 under fp16 d/dmin) over FWHT-rotated weights",
    ),
    row(
        F::Mxfp4,
        "mxfp4",
        None,
        None,
        32,
        16,
        false,
        ScaleLayout::PerGroup {
            group: 32,
            encoding: ScaleEncoding::Ue8m0,
        },
        NoRot,
        "OCP MXFP4: E2M1 nibbles (low nibble first), one UE8M0 scale per 32 in the sidecar",
    ),
    // GGML block types, byte-identical to llama.cpp's `block_*` structs (codecs/ggml_*.rs).
    ggml_row(
        F::Q8_0,
        "q8_0",
        8,
        32,
        34,
        "GGML Q8_0: fp16 d + 32 int8, w = q*d",
    ),
    ggml_row(
        F::Q4_0,
        "q4_0",
        2,
        32,
        18,
        "GGML Q4_0: fp16 d + 16 B nibbles (j, j+16), w = (q-8)*d",
    ),
    ggml_row(
        F::Q4_1,
        "q4_1",
        3,
        32,
        20,
        "GGML Q4_1: fp16 d, fp16 m + 16 B nibbles, w = q*d + m",
    ),
    ggml_row(
        F::Q5_0,
        "q5_0",
        6,
        32,
        22,
        "GGML Q5_0: fp16 d, 32 high bits, 16 B nibbles, w = (q-16)*d",
    ),
    ggml_row(
        F::Q5_1,
        "q5_1",
        7,
        32,
        24,
        "GGML Q5_1: fp16 d, fp16 m, 32 high bits, 16 B nibbles, w = q*d + m",
    ),
    ggml_row(
        F::Q2K,
        "q2_k",
        10,
        256,
        84,
        "GGML Q2_K: 16 x 16 with 4-bit scale/min under fp16 d/dmin, 2-bit codes",
    ),
    ggml_row(
        F::Q3K,
        "q3_k",
        11,
        256,
        110,
        "GGML Q3_K: 16 x 16 with 6-bit scales under fp16 d, 3-bit codes (hmask + 2 bits)",
    ),
    ggml_row(
        F::Q4K,
        "q4_k",
        12,
        256,
        144,
        "GGML Q4_K: 8 x 32 with 6-bit scale/min under fp16 d/dmin, 4-bit codes (mq4-k's block, unrotated)",
    ),
    ggml_row(
        F::Q5K,
        "q5_k",
        13,
        256,
        176,
        "GGML Q5_K: Q4_K's header, 4-bit codes + a fifth bit plane",
    ),
    ggml_row(
        F::Q6K,
        "q6_k",
        14,
        256,
        210,
        "GGML Q6_K: 16 x 16 with int8 scales under fp16 d, 6-bit codes",
    ),
    ggml_row(
        F::Iq4Nl,
        "iq4_nl",
        20,
        32,
        18,
        "GGML IQ4_NL: fp16 d + 16 B nibbles indexing a 16-value non-linear table",
    ),
    ggml_row(
        F::Iq4Xs,
        "iq4_xs",
        23,
        256,
        136,
        "GGML IQ4_XS: IQ4_NL's table, 6-bit scales per 32 under fp16 d",
    ),
    ggml_row(
        F::GgufMxfp4,
        "gguf-mxfp4",
        39,
        32,
        17,
        "GGML MXFP4 (twin of mxfp4): E8M0 byte + 16 B E2M1 nibbles (j, j+16) inline",
    ),
];

/// The rotation seed written when the caller gives none (seed 001's engine used 42).
pub const DEFAULT_ROTATION_SEED: u64 = 42;

impl Format {
    /// Every format, in registry order.
    pub fn all() -> impl Iterator<Item = Format> {
        FORMATS.iter().map(|s| s.format)
    }

    /// This format's registry row.
    pub fn spec(self) -> &'static FormatSpec {
        // FORMATS is in enum order (checked by `registry_is_in_enum_order`).
        &FORMATS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Formats a legacy `fmt=` ordinal may denote (fmt=4 covers every int4 group size and
    /// fmt=7 both scale encodings; the byte counts disambiguate).
    pub fn from_legacy_fmt(fmt: u8) -> Vec<Format> {
        FORMATS
            .iter()
            .filter(|s| s.legacy.fmt == Some(fmt))
            .map(|s| s.format)
            .collect()
    }

    /// The format whose blocks are GGUF `ggml_type` `id` (F32, F16, BF16 and the GGML
    /// block types); `None` for types the registry does not hold.
    pub fn from_ggml(id: u32) -> Option<Format> {
        FORMATS
            .iter()
            .find(|s| s.legacy.ggml.map(u32::from) == Some(id))
            .map(|s| s.format)
    }

    /// The format a legacy `qt=` ordinal denotes.
    pub fn from_legacy_qt(qt: u8) -> Option<Format> {
        FORMATS
            .iter()
            .find(|s| s.legacy.qt == Some(qt))
            .map(|s| s.format)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = QuantError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FORMATS
            .iter()
            .find(|r| r.name == s)
            .map(|r| r.format)
            .ok_or_else(|| QuantError::UnknownFormat {
                name: s.to_string(),
            })
    }
}

fn ceil_div(a: u64, b: u64) -> u64 {
    // b is a registry constant (never zero) or a checked dimension.
    a.div_ceil(b)
}

impl FormatSpec {
    /// Group size along I for grouped formats (int4-g*, int3-g64, mxfp4); `None` otherwise.
    pub fn group_size(&self) -> Option<u32> {
        match self.scales {
            ScaleLayout::PerGroup { group, .. } => Some(group),
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerRow(_)
            | ScaleLayout::PerTile { .. }
            | ScaleLayout::PerTensor(_) => None,
        }
    }

    /// The encoding of the sidecar scales, if the format has a sidecar.
    pub fn scale_encoding(&self) -> Option<ScaleEncoding> {
        match self.scales {
            ScaleLayout::None | ScaleLayout::Inline => None,
            ScaleLayout::PerRow(e) | ScaleLayout::PerTensor(e) => Some(e),
            ScaleLayout::PerGroup { encoding, .. } | ScaleLayout::PerTile { encoding, .. } => {
                Some(encoding)
            }
        }
    }

    /// Rows that must be encoded together because they share scales (128 for the fp8 tiles,
    /// 1 otherwise). Row-streaming pipelines work in multiples of this.
    pub fn row_block(&self) -> usize {
        match self.scales {
            ScaleLayout::PerTile { rows, .. } => rows as usize,
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerRow(_)
            | ScaleLayout::PerGroup { .. }
            | ScaleLayout::PerTensor(_) => 1,
        }
    }

    /// Rows of about `values` weights a streaming or parallel task takes at once, rounded up
    /// to a multiple of `row_block()` so no task splits rows that share scales.
    pub fn stream_rows(&self, cols: usize, values: usize) -> usize {
        let rb = self.row_block().max(1);
        (values / cols.max(1)).max(1).div_ceil(rb) * rb
    }

    /// The [row tiles, column tiles] grid of a tile-scaled format's sidecar at [O, I]
    /// (`None` for every other scale layout).
    pub fn tile_grid(&self, rows: usize, cols: usize) -> Option<[u64; 2]> {
        match self.scales {
            ScaleLayout::PerTile {
                rows: tr, cols: tc, ..
            } => Some([
                ceil_div(rows as u64, tr as u64),
                ceil_div(cols as u64, tc as u64),
            ]),
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerRow(_)
            | ScaleLayout::PerGroup { .. }
            | ScaleLayout::PerTensor(_) => None,
        }
    }

    /// Checks that [O, I] is a shape this format can hold.
    pub fn check_shape(&self, rows: usize, cols: usize) -> Result<(), QuantError> {
        if rows == 0 || cols == 0 {
            return Err(QuantError::EmptyShape {
                format: self.format,
                rows,
                cols,
            });
        }
        if self.whole_blocks_only && !cols.is_multiple_of(self.block_weights as usize) {
            return Err(QuantError::PartialBlock {
                format: self.format,
                cols,
                block: self.block_weights as usize,
            });
        }
        Ok(())
    }

    /// Storage blocks in one row of I weights.
    pub fn blocks_per_row(&self, cols: usize) -> u64 {
        ceil_div(cols as u64, self.block_weights as u64)
    }

    /// Bytes of one stored row of I weights.
    pub fn row_bytes(&self, cols: usize) -> Result<u64, QuantError> {
        self.blocks_per_row(cols)
            .checked_mul(self.block_bytes as u64)
            .ok_or(QuantError::SizeOverflow {
                format: self.format,
                rows: 1,
                cols,
            })
    }

    /// Weight bytes of an [O, I] tensor.
    pub fn weight_bytes(&self, rows: usize, cols: usize) -> Result<u64, QuantError> {
        self.row_bytes(cols)?
            .checked_mul(rows as u64)
            .ok_or(QuantError::SizeOverflow {
                format: self.format,
                rows,
                cols,
            })
    }

    /// Stored scales of one row (row-local layouts) — 0 for inline, tile and tensor scales.
    fn scales_per_row(&self, cols: usize) -> u64 {
        match self.scales {
            ScaleLayout::PerRow(_) => 1,
            ScaleLayout::PerGroup { group, .. } => ceil_div(cols as u64, group as u64),
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerTile { .. }
            | ScaleLayout::PerTensor(_) => 0,
        }
    }

    /// Number of stored sidecar scales of an [O, I] tensor.
    pub fn scale_count(&self, rows: usize, cols: usize) -> Result<u64, QuantError> {
        let overflow = QuantError::SizeOverflow {
            format: self.format,
            rows,
            cols,
        };
        match self.scales {
            ScaleLayout::None | ScaleLayout::Inline => Ok(0),
            ScaleLayout::PerTensor(_) => Ok(1),
            ScaleLayout::PerRow(_) | ScaleLayout::PerGroup { .. } => self
                .scales_per_row(cols)
                .checked_mul(rows as u64)
                .ok_or(overflow),
            ScaleLayout::PerTile {
                rows: tr, cols: tc, ..
            } => ceil_div(rows as u64, tr as u64)
                .checked_mul(ceil_div(cols as u64, tc as u64))
                .ok_or(overflow),
        }
    }

    /// Sidecar scale bytes of an [O, I] tensor.
    pub fn scale_bytes(&self, rows: usize, cols: usize) -> Result<u64, QuantError> {
        let per = self.scale_encoding().map_or(0, ScaleEncoding::bytes);
        self.scale_count(rows, cols)?
            .checked_mul(per)
            .ok_or(QuantError::SizeOverflow {
                format: self.format,
                rows,
                cols,
            })
    }

    /// Byte range of rows `[row0, row0 + n)` within the weight buffer.
    pub fn weight_range(
        &self,
        row0: usize,
        n: usize,
        cols: usize,
    ) -> Result<std::ops::Range<usize>, QuantError> {
        let rb = self.row_bytes(cols)?;
        let of = QuantError::SizeOverflow {
            format: self.format,
            rows: row0 + n,
            cols,
        };
        let start = rb.checked_mul(row0 as u64).ok_or(of.clone())?;
        let end = rb
            .checked_mul((row0 as u64).checked_add(n as u64).ok_or(of.clone())?)
            .ok_or(of.clone())?;
        Ok(
            usize::try_from(start).map_err(|_| of.clone())?
                ..usize::try_from(end).map_err(|_| of)?,
        )
    }

    /// Byte range of the sidecar scales that rows `[row0, row0 + n)` own, for row-local and
    /// tile layouts (`row0` and, unless it reaches `rows`, `n` must be multiples of
    /// `row_block()`). A tensor-wide scale belongs to the block that starts at row 0.
    pub fn scale_range(
        &self,
        row0: usize,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<std::ops::Range<usize>, QuantError> {
        let per = self.scale_encoding().map_or(0, ScaleEncoding::bytes);
        let of = QuantError::SizeOverflow {
            format: self.format,
            rows,
            cols,
        };
        let end_row = row0.checked_add(n).ok_or(of.clone())?;
        if end_row > rows {
            return Err(QuantError::RowRange {
                format: self.format,
                row0,
                n,
                rows,
            });
        }
        let (first, last) = match self.scales {
            ScaleLayout::None | ScaleLayout::Inline => (0, 0),
            ScaleLayout::PerTensor(_) => (u64::from(row0 != 0), 1),
            ScaleLayout::PerRow(_) | ScaleLayout::PerGroup { .. } => {
                let per_row = self.scales_per_row(cols);
                (per_row * row0 as u64, per_row * end_row as u64)
            }
            ScaleLayout::PerTile {
                rows: tr, cols: tc, ..
            } => {
                let tr = tr as usize;
                if !row0.is_multiple_of(tr) || (!end_row.is_multiple_of(tr) && end_row != rows) {
                    return Err(QuantError::RowRange {
                        format: self.format,
                        row0,
                        n,
                        rows,
                    });
                }
                let per_band = ceil_div(cols as u64, tc as u64);
                (
                    per_band * (row0 / tr) as u64,
                    per_band * ceil_div(end_row as u64, tr as u64),
                )
            }
        };
        let s = first.checked_mul(per).ok_or(of.clone())?;
        let e = last.checked_mul(per).ok_or(of.clone())?;
        Ok(usize::try_from(s).map_err(|_| of.clone())?..usize::try_from(e).map_err(|_| of)?)
    }

    /// Bits per weight as I and O grow without bound: row and tensor scales amortise to
    /// zero, group and tile scales keep their share, inline headers are part of the block.
    pub fn bits_per_weight(&self) -> f64 {
        let payload = self.block_bytes as f64 * 8.0 / self.block_weights as f64;
        let scale_bits = match self.scales {
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerRow(_)
            | ScaleLayout::PerTensor(_) => 0.0,
            ScaleLayout::PerGroup { group, encoding } => {
                encoding.bytes() as f64 * 8.0 / group as f64
            }
            ScaleLayout::PerTile {
                rows,
                cols,
                encoding,
            } => encoding.bytes() as f64 * 8.0 / (rows as f64 * cols as f64),
        };
        payload + scale_bits
    }

    /// Exact bits per weight of an [O, I] tensor: all stored bytes over O*I.
    pub fn bits_per_weight_at(&self, rows: usize, cols: usize) -> Result<f64, QuantError> {
        let total = self.weight_bytes(rows, cols)? + self.scale_bytes(rows, cols)?;
        Ok(total as f64 * 8.0 / (rows as f64 * cols as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_in_enum_order() {
        for (k, s) in FORMATS.iter().enumerate() {
            assert_eq!(s.format as usize, k, "row {} ({}) out of order", k, s.name);
        }
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for f in Format::all() {
            assert!(seen.insert(f.name()), "duplicate name {}", f.name());
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
            assert_eq!(f.to_string(), f.name());
        }
        assert!(matches!(
            "int4-g65".parse::<Format>(),
            Err(QuantError::UnknownFormat { .. })
        ));
    }

    #[test]
    fn seed_byte_counts() {
        // int4-row: (I+1)/2 bytes a row, one f32 per row.
        let s = Format::Int4Row.spec();
        assert_eq!(s.weight_bytes(3, 201).unwrap(), 3 * 101);
        assert_eq!(s.scale_bytes(3, 201).unwrap(), 12);
        // int4-g64: O*ceil(I/64) f32 scales.
        let g = Format::Int4G64.spec();
        assert_eq!(g.scale_bytes(5, 200).unwrap(), 5 * 4 * 4);
        // e8: ceil(I/256)*98 bytes a row, one 4-byte tensor scale (the legacy "tag").
        let e = Format::E8Lattice.spec();
        assert_eq!(e.weight_bytes(2, 257).unwrap(), 2 * 2 * 98);
        assert_eq!(e.scale_bytes(2, 257).unwrap(), 4);
        // fp8: O*I bytes; ceil(O/128)*ceil(I/128) scales, f32 or one byte each.
        let f = Format::Fp8E4m3B128.spec();
        assert_eq!(f.weight_bytes(6144, 16384).unwrap(), 6144 * 16384);
        assert_eq!(f.scale_bytes(6144, 16384).unwrap(), 48 * 128 * 4);
        assert_eq!(
            Format::Fp8E4m3B128Ue8m0
                .spec()
                .scale_bytes(130, 130)
                .unwrap(),
            4
        );
        // 136 B per 256 for the hfq4/mq4 family, 144 for mq4-k.
        assert_eq!(
            Format::Mq4G256V2.spec().weight_bytes(2, 512).unwrap(),
            2 * 2 * 136
        );
        assert_eq!(Format::Mq4K.spec().weight_bytes(1, 256).unwrap(), 144);
        assert_eq!(Format::Mxfp4.spec().scale_bytes(2, 64).unwrap(), 4);
    }

    #[test]
    fn bits_per_weight_nominal() {
        let bpw = |f: Format| f.spec().bits_per_weight();
        assert_eq!(bpw(Format::Int8Row), 8.0);
        assert_eq!(bpw(Format::Int4G64), 4.5);
        assert_eq!(bpw(Format::Int3G64), 3.5);
        assert!((bpw(Format::E8Lattice) - 3.0625).abs() < 1e-12);
        assert_eq!(bpw(Format::Mq4G256V2), 4.25);
        assert_eq!(bpw(Format::Mq4K), 4.5);
        assert_eq!(bpw(Format::Mxfp4), 4.25);
    }

    #[test]
    fn whole_block_formats_refuse_partial_rows() {
        assert!(matches!(
            Format::Mq4G256V2.spec().check_shape(4, 300),
            Err(QuantError::PartialBlock { .. })
        ));
        assert!(Format::Int4G64.spec().check_shape(1, 1).is_ok());
    }

    #[test]
    fn tile_scale_ranges_are_band_aligned() {
        let f = Format::Fp8E4m3B128.spec();
        assert_eq!(f.scale_range(128, 128, 300, 300).unwrap(), 3 * 4..6 * 4);
        assert_eq!(f.scale_range(256, 44, 300, 300).unwrap(), 6 * 4..9 * 4);
        assert!(f.scale_range(1, 128, 300, 300).is_err());
        assert!(f.scale_range(256, 45, 300, 300).is_err());
    }

    #[test]
    fn tile_grid_and_stream_rows() {
        assert_eq!(Format::Fp8E4m3B128.spec().tile_grid(130, 300), Some([2, 3]));
        assert_eq!(Format::Int8Row.spec().tile_grid(130, 300), None);
        // fp8 tasks never split a 128-row tile band; row-local formats take any row count.
        assert_eq!(
            Format::Fp8E4m3B128.spec().stream_rows(4096, 4096 * 130),
            256
        );
        assert_eq!(Format::Int8Row.spec().stream_rows(4096, 4096 * 130), 130);
        assert_eq!(Format::Int8Row.spec().stream_rows(1 << 20, 16), 1);
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let f = Format::F32.spec();
        assert!(matches!(
            f.weight_bytes(usize::MAX, usize::MAX),
            Err(QuantError::SizeOverflow { .. })
        ));
    }

    #[test]
    fn legacy_ids() {
        assert_eq!(Format::from_legacy_qt(44), Some(Format::Mq4G256V2));
        assert_eq!(Format::from_legacy_fmt(4).len(), 8);
        assert_eq!(Format::from_legacy_fmt(7).len(), 2);
        assert_eq!(Format::from_legacy_fmt(1), vec![Format::Int8Row]);
        assert_eq!(Format::from_ggml(12), Some(Format::Q4K));
        assert_eq!(Format::from_ggml(30), Some(Format::Bf16));
        assert_eq!(Format::from_ggml(39), Some(Format::GgufMxfp4));
        assert_eq!(Format::from_ggml(16), None);
    }

    #[test]
    fn ggml_block_sizes() {
        // gguf-py's GGML_QUANT_SIZES: (block weights, type size).
        let want: [(Format, u32, u32); 16] = [
            (Format::F32, 1, 4),
            (Format::F16, 1, 2),
            (Format::Bf16, 1, 2),
            (Format::Q4_0, 32, 2 + 16),
            (Format::Q4_1, 32, 2 + 2 + 16),
            (Format::Q5_0, 32, 2 + 4 + 16),
            (Format::Q5_1, 32, 2 + 2 + 4 + 16),
            (Format::Q8_0, 32, 2 + 32),
            (Format::Q2K, 256, 2 + 2 + 256 / 16 + 256 / 4),
            (Format::Q3K, 256, 2 + 256 / 4 + 256 / 8 + 12),
            (Format::Q4K, 256, 2 + 2 + 256 / 2 + 12),
            (Format::Q5K, 256, 2 + 2 + 256 / 2 + 256 / 8 + 12),
            (Format::Q6K, 256, 2 + 256 / 2 + 256 / 4 + 256 / 16),
            (Format::Iq4Nl, 32, 2 + 16),
            (Format::Iq4Xs, 256, 2 + 2 + 256 / 2 + 256 / 64),
            (Format::GgufMxfp4, 32, 1 + 16),
        ];
        for (f, bw, bb) in want {
            let s = f.spec();
            assert_eq!((s.block_weights, s.block_bytes), (bw, bb), "{f}");
            assert!(s.legacy.ggml.is_some(), "{f}");
        }
    }
}
