//! The capability table of the CUDA tier, as data: which (op, format, constraints) run
//! natively, and which kernel build serves each row.
//!
//! Every launch goes through [`lookup`]: a combination that is not a row here is refused
//! with [`CudaError::NotImplemented`] before any device work, so a caller falls back to
//! another backend instead of getting a wrong answer. A format whose kernel is not finished
//! is simply absent. The engine's gates and docs read this same slice.

use crate::error::CudaError;
use quant_core::Format;

/// An operation a backend may offer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// y[S, O] = x[S, I] . W^T for a small batch S.
    Gemv,
    /// The same product for a large batch S, on the tensor cores (gemv.cu `TS_GEMM`).
    Gemm,
}

/// Shape constraints of a row, beyond what the registry already enforces (e.g. the
/// 256-weight families' I % 256 == 0, which a `QTensor` cannot violate).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Constraint {
    /// Smallest and largest activation batch S.
    pub s_min: usize,
    pub s_max: usize,
}

/// Which build of `shaders/cuda/gemv.cu` serves a row: the `TS_FMT_*` id and, for the
/// grouped int4 formats, the `TS_GS` group size (0 otherwise).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId {
    pub fmt: u32,
    pub group: u32,
}

/// The tensor-core build of a row (gemv.cu `-DTS_MMA`): weights decoded exactly to f16
/// and fed to `mma.sync` against the split activation. `chunk_bytes` is what one lane loads
/// of a row per k-block (4, 8 or 16); a quad of lanes covers `4 * chunk_bytes` bytes, which
/// must never straddle a group, tile or half-block of the format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MmaKernel {
    pub chunk_bytes: u32,
}

/// One row of the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capability {
    pub op: Op,
    pub format: Format,
    pub constraint: Constraint,
    pub kernel: KernelId,
    /// The tensor-core kernel, where the format has one; used when
    /// [`Capability::mma_for`] accepts the tensor's row length.
    pub mma: Option<MmaKernel>,
    /// GEMV rows with a tensor-core kernel: the smallest S at which
    /// [`crate::KernelPath::Auto`] takes the split-K tile GEMV rather than the 16-row one
    /// (17: never). Measured on the H200 (docs/CUDA.md, 2026-11-30 session 3): the tile
    /// kernel wins at S = 16 for int4-row and the 136-byte affine blocks, the 16-row kernel
    /// for the others and everywhere at S = 1.
    pub tiles_from: usize,
}

impl Capability {
    /// The tensor-core kernel for rows of `row_bytes` stored bytes, if this row has one and
    /// the rows split into whole k-blocks (the kernel has no tail path; other lengths run
    /// the CUDA-core kernel).
    pub fn mma_for(&self, row_bytes: usize) -> Option<MmaKernel> {
        let m = self.mma?;
        let affine = matches!(
            self.kernel.fmt,
            fmt_id::HFQ4 | fmt_id::MQ4_V2 | fmt_id::MQ4C
        );
        // The 136-byte blocks are indexed as 2 k-blocks each (their two 64-byte payload
        // halves); the registry guarantees whole blocks. Flat formats need whole k-blocks (which also keeps every lane's load
        // aligned, since rows then start on a multiple of the k-block).
        let kblock = 4 * m.chunk_bytes as usize;
        (affine || (row_bytes > 0 && row_bytes.is_multiple_of(kblock))).then_some(m)
    }
}

/// The chunk the 16-row tensor-core GEMV (`gemv_mma_s<S>`) takes for `kernel` at batch
/// `s` on rows of `row_bytes`, given the row's tensor-core kernel `m`: 16 bytes for
/// int4-g32 / int4-g64 where the batch leaves the n8 columns for the group classes
/// (gemv.cu `MmaClasses`: a k-block of 2 or 4 groups, 2 S (128 / group) <= 8) and the row is
/// whole 64-byte k-blocks; otherwise `m` itself (the GEMM and the tile GEMV keep `m`).
pub fn rows_chunk(kernel: KernelId, m: MmaKernel, s: usize, row_bytes: usize) -> MmaKernel {
    const WIDE: u32 = 16;
    let classes = if kernel.fmt == fmt_id::INT4_G && matches!(kernel.group, 32 | 64) {
        (4 * WIDE * 2 / kernel.group) as usize
    } else {
        1
    };
    let fits = classes > 1
        && m.chunk_bytes < WIDE
        && 2 * s * classes <= 8
        && row_bytes > 0
        && row_bytes.is_multiple_of(4 * WIDE as usize);
    if fits {
        MmaKernel { chunk_bytes: WIDE }
    } else {
        m
    }
}

/// Whether a tensor-core kernel id stores two codes a byte (4-bit formats) rather than one:
/// it sets the columns of a k-block and the order of the GEMM's activation layout.
pub fn nibble_codes(fmt: u32) -> bool {
    matches!(
        fmt,
        fmt_id::INT4_ROW | fmt_id::INT4_G | fmt_id::HFQ4 | fmt_id::MQ4_V2 | fmt_id::MQ4C
    )
}

/// Whether a tensor-core kernel id scales whole rows (one scale a row, applied once after
/// the row's sum: gemv.cu's `MmaFmt::ROW_SCALE`) rather than each group or block.
pub fn row_scaled(fmt: u32) -> bool {
    matches!(fmt, fmt_id::INT4_ROW | fmt_id::INT8_ROW)
}

/// Whether a tensor-core kernel id's GEMM decodes its weights with their scales under
/// [`crate::GemmPrecision::F16Dequant`] (gemv.cu's `TS_DEQ`): the scaled formats whose scale
/// and offset round with a bound relative to the weight itself. hfq4's f32 scale and zero
/// would round apart where they cancel, and the row-scaled formats have no scale to apply
/// in the decode; both run their `F16` build, whose bound is tighter.
pub fn dequantizes(fmt: u32) -> bool {
    matches!(
        fmt,
        fmt_id::INT4_G | fmt_id::FP8_F32 | fmt_id::FP8_UE8M0 | fmt_id::MQ4_V2 | fmt_id::MQ4C
    )
}

/// The `TS_FMT_*` ids of gemv.cu (kept in step with its `#define`s; `tests/host_emulation.rs`
/// runs every row through the source itself, so a mismatch fails there).
pub mod fmt_id {
    pub const F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const BF16: u32 = 2;
    pub const INT8_ROW: u32 = 3;
    pub const INT4_ROW: u32 = 4;
    pub const INT2_ROW: u32 = 5;
    pub const INT4_G: u32 = 6;
    pub const INT3_G64: u32 = 7;
    pub const E8: u32 = 8;
    pub const FP8_F32: u32 = 9;
    pub const FP8_UE8M0: u32 = 10;
    pub const HFQ4: u32 = 11;
    pub const MQ4_V2: u32 = 12;
    pub const MQ4C: u32 = 13;
    pub const MQ4K: u32 = 14;
    pub const MXFP4: u32 = 15;
}

/// S = 1..=16: the GEMV kernels keep S partial sums per row in registers.
const GEMV_S: Constraint = Constraint {
    s_min: 1,
    s_max: 16,
};

/// S = 17 and up: the GEMM kernel keeps no per-S state, so its range is bounded only by the
/// launch grid (gridDim.y = ceil(2 S / 64) must stay far below 65535).
const GEMM_S: Constraint = Constraint {
    s_min: 17,
    s_max: 1 << 16,
};

const fn gemv(format: Format, fmt: u32, group: u32) -> Capability {
    Capability {
        op: Op::Gemv,
        format,
        constraint: GEMV_S,
        kernel: KernelId { fmt, group },
        mma: None,
        tiles_from: NO_TILES,
    }
}

/// [`Capability::tiles_from`] of rows that never take the tile GEMV.
const NO_TILES: usize = 17;
/// [`Capability::tiles_from`] of the formats whose S > 4 GEMV the tile kernel serves.
const TILES_ABOVE_4: usize = 5;

/// A row that also has a tensor-core kernel loading `chunk_bytes` a lane.
const fn gemv_mma(format: Format, fmt: u32, group: u32, chunk_bytes: u32) -> Capability {
    Capability {
        mma: Some(MmaKernel { chunk_bytes }),
        ..gemv(format, fmt, group)
    }
}

/// [`gemv_mma`] whose batches from [`TILES_ABOVE_4`] run the split-K tile GEMV.
const fn gemv_tiles(format: Format, fmt: u32, group: u32, chunk_bytes: u32) -> Capability {
    Capability {
        tiles_from: TILES_ABOVE_4,
        ..gemv_mma(format, fmt, group, chunk_bytes)
    }
}

/// A GEMM row: the tensor-core GEMM loading `chunk_bytes` a lane per k-block. Shapes whose
/// rows are not whole k-blocks ([`Capability::mma_for`]) run the CUDA-core GEMV kernel in
/// batches of 16 instead (correct, not fast).
const fn gemm(format: Format, fmt: u32, group: u32, chunk_bytes: u32) -> Capability {
    Capability {
        op: Op::Gemm,
        format,
        constraint: GEMM_S,
        kernel: KernelId { fmt, group },
        mma: Some(MmaKernel { chunk_bytes }),
        tiles_from: NO_TILES,
    }
}

/// The table. Order is irrelevant; (op, format) is unique (checked by a test).
pub static CAPABILITIES: &[Capability] = &[
    gemv(Format::F32, fmt_id::F32, 0),
    gemv(Format::F16, fmt_id::F16, 0),
    gemv(Format::Bf16, fmt_id::BF16, 0),
    gemv_mma(Format::Int8Row, fmt_id::INT8_ROW, 0, 16),
    gemv_tiles(Format::Int4Row, fmt_id::INT4_ROW, 0, 16),
    gemv(Format::Int2Row, fmt_id::INT2_ROW, 0),
    gemv(Format::Int4G16, fmt_id::INT4_G, 16),
    gemv_mma(Format::Int4G32, fmt_id::INT4_G, 32, 4),
    gemv(Format::Int4G48, fmt_id::INT4_G, 48),
    gemv_mma(Format::Int4G64, fmt_id::INT4_G, 64, 8),
    gemv_mma(Format::Int4G96, fmt_id::INT4_G, 96, 4),
    gemv_mma(Format::Int4G128, fmt_id::INT4_G, 128, 16),
    gemv_mma(Format::Int4G192, fmt_id::INT4_G, 192, 8),
    gemv_mma(Format::Int4G256, fmt_id::INT4_G, 256, 16),
    gemv(Format::Int3G64, fmt_id::INT3_G64, 0),
    gemv(Format::E8Lattice, fmt_id::E8, 0),
    gemv_mma(Format::Fp8E4m3B128, fmt_id::FP8_F32, 0, 16),
    gemv_mma(Format::Fp8E4m3B128Ue8m0, fmt_id::FP8_UE8M0, 0, 16),
    // hfq4-g256 and mq4-g256 share bytes; mq4's rotation is applied to the activation.
    gemv_tiles(Format::Hfq4G256, fmt_id::HFQ4, 0, 16),
    gemv_tiles(Format::Mq4G256, fmt_id::HFQ4, 0, 16),
    gemv_tiles(Format::Mq4G256V2, fmt_id::MQ4_V2, 0, 16),
    gemv_tiles(Format::Mq4cG256, fmt_id::MQ4C, 0, 16),
    gemv(Format::Mq4K, fmt_id::MQ4K, 0),
    gemv(Format::Mxfp4, fmt_id::MXFP4, 0),
    // GEMM: exactly the formats with a tensor-core GEMV, same chunks.
    gemm(Format::Int8Row, fmt_id::INT8_ROW, 0, 16),
    gemm(Format::Int4Row, fmt_id::INT4_ROW, 0, 16),
    gemm(Format::Int4G32, fmt_id::INT4_G, 32, 4),
    gemm(Format::Int4G64, fmt_id::INT4_G, 64, 8),
    gemm(Format::Int4G96, fmt_id::INT4_G, 96, 4),
    gemm(Format::Int4G128, fmt_id::INT4_G, 128, 16),
    gemm(Format::Int4G192, fmt_id::INT4_G, 192, 8),
    gemm(Format::Int4G256, fmt_id::INT4_G, 256, 16),
    gemm(Format::Fp8E4m3B128, fmt_id::FP8_F32, 0, 16),
    gemm(Format::Fp8E4m3B128Ue8m0, fmt_id::FP8_UE8M0, 0, 16),
    gemm(Format::Hfq4G256, fmt_id::HFQ4, 0, 16),
    gemm(Format::Mq4G256, fmt_id::HFQ4, 0, 16),
    gemm(Format::Mq4G256V2, fmt_id::MQ4_V2, 0, 16),
    gemm(Format::Mq4cG256, fmt_id::MQ4C, 0, 16),
];

/// The row that runs `op` on `format` at batch `s`, or why none does.
pub fn lookup(op: Op, format: Format, s: usize) -> Result<&'static Capability, CudaError> {
    let row = CAPABILITIES
        .iter()
        .find(|c| c.op == op && c.format == format)
        .ok_or_else(|| CudaError::NotImplemented {
            op,
            format,
            s,
            why: "no CUDA kernel for this format".to_string(),
        })?;
    let c = row.constraint;
    if s < c.s_min || s > c.s_max {
        return Err(CudaError::NotImplemented {
            op,
            format,
            s,
            why: format!("S must be in {}..={}", c.s_min, c.s_max),
        });
    }
    Ok(row)
}

/// Formats with a row for `op`, in registry order.
pub fn formats(op: Op) -> Vec<Format> {
    Format::all()
        .filter(|f| CAPABILITIES.iter().any(|c| c.op == op && c.format == *f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quant_core::ScaleLayout;

    #[test]
    fn rows_are_unique() {
        for (k, a) in CAPABILITIES.iter().enumerate() {
            for b in &CAPABILITIES[k + 1..] {
                assert!(
                    !(a.op == b.op && a.format == b.format),
                    "duplicate row for {}",
                    a.format
                );
            }
        }
    }

    #[test]
    fn outside_the_table_is_refused_not_guessed() {
        assert!(lookup(Op::Gemv, Format::Int4G64, 1).is_ok());
        assert!(lookup(Op::Gemv, Format::Int4G64, 16).is_ok());
        for s in [0, 17, 512] {
            assert!(matches!(
                lookup(Op::Gemv, Format::Int4G64, s),
                Err(CudaError::NotImplemented { s: got, .. }) if got == s
            ));
        }
    }

    #[test]
    fn gemm_rows_start_where_gemv_rows_end() {
        for g in CAPABILITIES.iter().filter(|c| c.op == Op::Gemm) {
            let v = CAPABILITIES
                .iter()
                .find(|c| c.op == Op::Gemv && c.format == g.format)
                .unwrap_or_else(|| panic!("{}: GEMM row without a GEMV row", g.format));
            assert_eq!(g.constraint.s_min, v.constraint.s_max + 1, "{}", g.format);
            assert_eq!(g.kernel, v.kernel, "{}", g.format);
            assert_eq!(
                g.mma, v.mma,
                "{}: GEMM and GEMV share the chunking",
                g.format
            );
        }
        assert!(lookup(Op::Gemm, Format::Int4G64, 16).is_err());
        assert!(lookup(Op::Gemm, Format::Int4G64, 17).is_ok());
        assert!(lookup(Op::Gemm, Format::Int4G64, 1 << 16).is_ok());
        assert!(lookup(Op::Gemm, Format::Int4G64, (1 << 16) + 1).is_err());
        assert!(lookup(Op::Gemm, Format::Mxfp4, 512).is_err());
    }

    /// The tile GEMV is chosen only where a tensor-core kernel exists, within the GEMV's S
    /// range, and never by a GEMM row.
    #[test]
    fn tile_thresholds_are_gemv_tensor_core_rows_only() {
        for c in CAPABILITIES {
            assert!((1..=NO_TILES).contains(&c.tiles_from), "{}", c.format);
            if c.op == Op::Gemm || c.mma.is_none() {
                assert_eq!(c.tiles_from, NO_TILES, "{} {:?}", c.format, c.op);
            }
        }
        let int4 = lookup(Op::Gemv, Format::Int4Row, 1).unwrap();
        assert_eq!(int4.tiles_from, TILES_ABOVE_4);
        assert_eq!(
            lookup(Op::Gemv, Format::Fp8E4m3B128, 1).unwrap().tiles_from,
            NO_TILES
        );
    }

    /// The group-class chunk: 16 bytes only for int4-g32 (S = 1) and int4-g64 (S <= 2) on
    /// rows of whole 64-byte k-blocks; every other case keeps the row's own chunk.
    #[test]
    fn rows_chunk_takes_group_classes_only_where_the_columns_allow() {
        let chunk = |f: Format, s: usize, rb: usize| {
            let c = lookup(Op::Gemv, f, s).unwrap();
            rows_chunk(c.kernel, c.mma.unwrap(), s, rb).chunk_bytes
        };
        assert_eq!(chunk(Format::Int4G64, 1, 2048), 16);
        assert_eq!(chunk(Format::Int4G64, 2, 2048), 16);
        assert_eq!(chunk(Format::Int4G64, 3, 2048), 8);
        assert_eq!(chunk(Format::Int4G64, 1, 2048 + 32), 8);
        assert_eq!(chunk(Format::Int4G32, 1, 2048), 16);
        assert_eq!(chunk(Format::Int4G32, 2, 2048), 4);
        for f in [
            Format::Int4G96,
            Format::Int4G128,
            Format::Int4G192,
            Format::Int4Row,
            Format::Fp8E4m3B128,
        ] {
            let own = lookup(Op::Gemv, f, 1).unwrap().mma.unwrap().chunk_bytes;
            assert_eq!(chunk(f, 1, 6144), own, "{f}");
        }
    }

    #[test]
    fn grouped_rows_carry_the_registry_group_size() {
        for c in CAPABILITIES
            .iter()
            .filter(|c| c.kernel.fmt == fmt_id::INT4_G)
        {
            match c.format.spec().scales {
                ScaleLayout::PerGroup { group, .. } => {
                    assert_eq!(group, c.kernel.group, "{}", c.format)
                }
                other => panic!("{}: int4-g kernel on {other:?}", c.format),
            }
            // The kernel relies on 8-weight words never straddling a group.
            assert_eq!(c.kernel.group % 16, 0, "{}", c.format);
            // The tensor-core k-block (4 lanes x chunk bytes, 2 weights a byte) sits in one group.
            if let Some(m) = c.mma {
                assert_eq!(c.kernel.group % (8 * m.chunk_bytes), 0, "{}", c.format);
            }
        }
    }
}
