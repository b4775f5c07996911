//! Host-side preparation shared by every GEMV launch: the kernel's scalar arguments, the
//! grid, and the activation buffer (rotated and zero-padded).
//!
//! Nothing here touches a device, so it is tested on machines without one, and
//! `tests/host_emulation.rs` drives the kernel source on the CPU with exactly these values.
//!
//! Activations: the kernels read `x` as [S, x_stride] f32 with `x_stride` = I rounded up to
//! [`X_STRIDE_ALIGN`] and zeros past I. The padding lets a lane read whole 16-byte chunks
//! (and whole 256-weight blocks) without bounds checks: whatever a partial block's padding
//! bits decode to, it meets a zero activation. Rotated formats (`Rotation::Fwht256`: mq4-*)
//! need the activation in the weights' rotated domain; the host rotates it once per call
//! with quant-core's own FWHT (the same transform `api::rotate_activations` applies), before
//! the upload, so the kernels never see a rotation.

use crate::caps::KernelId;
use crate::compile::Tuning;
use crate::error::CudaError;
use quant_core::{Format, Rotation};

/// Activation rows are padded to a multiple of this many floats: a multiple of every
/// kernel's weights-per-chunk (4 .. 64) and of the 256-weight blocks.
pub const X_STRIDE_ALIGN: usize = 1024;
/// Threads of one CUDA block (4 warps); gemv.cu declares `__launch_bounds__(128)`.
pub const BLOCK_THREADS: u32 = 128;
const WARPS_PER_BLOCK: usize = BLOCK_THREADS as usize / 32;

/// Warps of a tensor-core block (gemv.cu `TS_MMA_WARPS`); the block owns
/// [`MMA_TILE_ROWS`] rows and its warps split the row length among them.
pub const MMA_WARPS: u32 = 8;
/// Rows of one tensor-core block (one m16n8k16 tile).
pub const MMA_TILE_ROWS: usize = 16;
/// Columns of one segment of the split activation's sums (a k-block of the 4-bit affine
/// formats; gemv.cu `TS_SUM_SEG`).
pub const MMA_SUM_SEGMENT: usize = 128;

/// Warps of a GEMM block by default (gemv.cu `TS_GEMM_WARPS`, `Tuning::gemm_warps`); each
/// owns 32 rows.
pub const GEMM_WARPS: u32 = 8;
/// Pairs of a MoE work item (gemv.cu `TS_MOE`): tokens routed to one expert, computed
/// together so its weights are read once per item.
pub const MOE_PAIRS: usize = 4;

/// Rows one warp owns at batch `s`: gemv.cu's `RowsPerWarp<S>::R`, which must agree.
pub fn rows_per_warp(s: usize) -> usize {
    if s <= 4 { 2 } else { 4 }
}

/// The scalar arguments of a GEMV launch, as the kernel takes them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Stored bytes of one row (the registry's `row_bytes`).
    pub row_bytes: i64,
    pub rows: i32,
    pub cols: i32,
    /// Floats from one activation row to the next.
    pub x_stride: i32,
    /// Stored scales of one row (grouped formats) or of one 128-row tile band (fp8): the
    /// registry's `scale_count(1, I)`.
    pub sc_row: i32,
}

fn shape_err(format: Format, what: String) -> CudaError {
    CudaError::Shape { format, what }
}

/// The launch arguments of an [rows, cols] tensor of `format`.
pub fn launch_shape(format: Format, rows: usize, cols: usize) -> Result<LaunchShape, CudaError> {
    let spec = format.spec();
    spec.check_shape(rows, cols)?;
    let too_big = |what: &str| {
        shape_err(
            format,
            format!("{what} of [{rows}, {cols}] exceeds the kernel's 32-bit index"),
        )
    };
    let row_bytes = i64::try_from(spec.row_bytes(cols)?).map_err(|_| too_big("row bytes"))?;
    let x_stride = cols
        .checked_next_multiple_of(X_STRIDE_ALIGN)
        .ok_or_else(|| too_big("activation stride"))?;
    Ok(LaunchShape {
        row_bytes,
        rows: i32::try_from(rows).map_err(|_| too_big("O"))?,
        cols: i32::try_from(cols).map_err(|_| too_big("I"))?,
        x_stride: i32::try_from(x_stride).map_err(|_| too_big("activation stride"))?,
        sc_row: i32::try_from(spec.scale_count(1, cols)?).map_err(|_| too_big("scales a row"))?,
    })
}

/// CUDA blocks of a launch over `rows` rows at batch `s`.
pub fn grid_blocks(rows: usize, s: usize) -> Result<u32, CudaError> {
    let per_block = WARPS_PER_BLOCK * rows_per_warp(s);
    u32::try_from(rows.div_ceil(per_block)).map_err(|_| CudaError::Shape {
        format: Format::F32,
        what: format!("{rows} rows need more than 2^32 CUDA blocks"),
    })
}

/// CUDA blocks of a tensor-core launch over `rows` rows.
pub fn mma_grid_blocks(rows: usize) -> Result<u32, CudaError> {
    u32::try_from(rows.div_ceil(MMA_TILE_ROWS)).map_err(|_| CudaError::Shape {
        format: Format::F32,
        what: format!("{rows} rows need more than 2^32 CUDA blocks"),
    })
}

/// Columns one `tile_prep` block splits (gemv.cu `TS_PREP_COLS`): its grid is
/// (ceil(x_stride / PREP_COLS), padded S).
pub const PREP_COLS: usize = 2048;

/// Threads of a fused-norm split block (gemv.cu `TS_PREP_FUSED_THREADS`, `norm_prep`), 8
/// columns each: its grid is ceil(x_stride / (8 x this)) blocks, one row.
pub const PREP_FUSED_THREADS: usize = 128;

/// The 16-row GEMV's stage for `kernel` at batch `s` on a grid of `blocks` blocks on a
/// device of `sms` SMs (`Tuning::mma_stage`, gemv.cu `TS_MMA_STAGE`): `tuning` itself where
/// it names a stage or takes the format's own chunk (no group classes); else 16-byte stages
/// (one k-block a stage instead of two, the same ring depth: fewer registers) at S = 1 for
/// - int4-g64 (group classes: 16-byte chunks over two groups) on every grid (its 32-byte
///   build spills, session 6's ptxas count; the 16-byte build's registers were not read);
/// - int4-row, int4-g128 and int4-g256 on grids that are not one wave of 3 blocks a SM (at
///   most 2 blocks a SM, or more than 3): on a one-wave grid the lighter build lost (our
///   reading, not measured: more of its blocks fit an SM and the wave spreads unevenly;
///   capping it at 3 a SM recovered most, not all, of the loss);
/// - int8-row and fp8-e4m3-b128 on grids of more than 3 waves of 3 blocks a SM (2-3 waves
///   run the persistent grid instead, [`rows_persistent`], where 16-byte stages lost).
///
/// Every other format and group size kept 32 (lost, tied or mixed). The H200 figures behind
/// each case: docs/CUDA.md, "Measured, session 7".
pub fn rows_stage(
    tuning: &Tuning,
    kernel: KernelId,
    s: usize,
    blocks: u32,
    sms: usize,
) -> std::borrow::Cow<'_, Tuning> {
    use crate::caps::fmt_id;
    let one_wave = (blocks as usize) > 2 * sms && (blocks as usize) <= 3 * sms;
    let takes = match kernel.fmt {
        fmt_id::INT4_G => match kernel.group {
            64 => true,
            128 | 256 => !one_wave,
            _ => false,
        },
        fmt_id::INT4_ROW => !one_wave,
        fmt_id::INT8_ROW | fmt_id::FP8_F32 | fmt_id::FP8_UE8M0 => (blocks as usize) > 9 * sms,
        _ => false,
    };
    if tuning.mma_stage.is_none() && tuning.mma_classes && s == 1 && takes {
        std::borrow::Cow::Owned(Tuning {
            mma_stage: Some(16),
            ..tuning.clone()
        })
    } else {
        std::borrow::Cow::Borrowed(tuning)
    }
}

/// The tuning the 16-row GEMV of `blocks` blocks at batch `s` runs with on a device of
/// `sms` SMs: `tuning` itself, or, where it asks for it (`Tuning::mma_small_grid_warps`)
/// and the grid has at most two blocks a SM at S <= 4, that many warps a block with 2
/// blocks a SM. A one-wave grid of 8-warp blocks leaves such SMs with 16 warps or fewer in
/// flight; 12 won on such grids on the H200 and lost on the larger ones (figures:
/// docs/CUDA.md, session 5).
pub fn rows_tuning(
    tuning: &Tuning,
    blocks: u32,
    s: usize,
    sms: usize,
) -> std::borrow::Cow<'_, Tuning> {
    match tuning.mma_small_grid_warps {
        Some(w)
            if s <= 4
                && (blocks as usize) <= 2 * sms
                && tuning.mma_warps == MMA_WARPS
                && tuning.mma_min_blocks.is_none() =>
        {
            std::borrow::Cow::Owned(Tuning {
                mma_warps: w,
                mma_min_blocks: Some(2),
                ..tuning.clone()
            })
        }
        _ => std::borrow::Cow::Borrowed(tuning),
    }
}

/// Every tuning a non-persistent 16-row GEMV launch of `kernel` at batch `s` may run with on
/// a device of `sms` SMs, from `tuning`: what [`rows_stage`] and then [`rows_tuning`] make
/// of it on some grid (prewarm compiles each; a grid's own is [`rows_launch_tuning`]).
pub fn rows_tunings(tuning: &Tuning, kernel: KernelId, s: usize, sms: usize) -> Vec<Tuning> {
    // One grid of each kind the two rules tell apart today: small (at most 2 blocks a SM),
    // one wave of 3, more (1-3 waves take the one-wave tuning, or the persistent build);
    // `rows_tunings_cover_every_grid` checks that no grid size falls outside.
    let grids = [1, 3 * sms as u32, u32::MAX];
    let mut out: Vec<Tuning> = Vec::new();
    for blocks in grids {
        let t = rows_launch_tuning(tuning, kernel, s, blocks, sms);
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The tuning a non-persistent 16-row GEMV launch of `kernel` at batch `s` on a grid of
/// `blocks` blocks runs with: [`rows_stage`], then [`rows_tuning`].
pub fn rows_launch_tuning(
    tuning: &Tuning,
    kernel: KernelId,
    s: usize,
    blocks: u32,
    sms: usize,
) -> Tuning {
    let staged = rows_stage(tuning, kernel, s, blocks, sms);
    rows_tuning(&staged, blocks, s, sms).into_owned()
}

/// The persistent 16-row GEMV's plan of one launch (gemv.cu `TS_MMA_PERSIST`, whose
/// `persist_rounds` / `persist_lo` / `persist_block_of` these mirror): `rounds` units a
/// 16-row tile (one stage of every warp of a block over the row), `units` = tiles x
/// rounds, and `grid` blocks taking equal contiguous shares of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PersistPlan {
    pub rounds: usize,
    pub units: usize,
    pub grid: u32,
}

impl PersistPlan {
    /// The plan for `tiles` tiles of `kblocks` k-blocks, blocks of `warps` warps holding
    /// `stage_kblocks` k-blocks a stage, on a grid of at most `max_grid` blocks (at least 1).
    pub fn new(
        tiles: usize,
        kblocks: usize,
        warps: u32,
        stage_kblocks: usize,
        max_grid: u32,
    ) -> PersistPlan {
        let stride = (warps as usize * stage_kblocks).max(1);
        let rounds = kblocks.div_ceil(stride).max(1);
        let units = tiles.saturating_mul(rounds);
        let grid = (max_grid.max(1) as usize).min(units.max(1)) as u32;
        PersistPlan {
            rounds,
            units,
            grid,
        }
    }
    /// The first unit of block `b` (`persist_share`).
    pub fn lo(&self, b: usize) -> usize {
        (b as u128 * self.units as u128 / u128::from(self.grid.max(1))) as usize
    }
    /// The block whose share holds unit `v` (`persist_block_of`).
    pub fn block_of(&self, v: usize) -> usize {
        (((v as u128 + 1) * u128::from(self.grid) - 1) / self.units.max(1) as u128) as usize
    }
    /// Partial outputs a tile may need: every block holds at least one unit, so a tile of
    /// `rounds` units has at most `rounds` parts (the scratch is [rounds, S, O]).
    pub fn max_parts(&self) -> usize {
        self.rounds
    }
}

/// Whether a 16-row tensor-core GEMV launch at batch `s` of `tiles` 16-row tiles, of 4-bit
/// codes when `nibbles`, runs on the persistent grid ([`PersistPlan`]) on a device of `sms`
/// SMs: `Tuning::mma_persistent` when set (never at S > 4: the build serves S <= 4), else
/// the rule: S = 1, 8-bit codes (int8-row, fp8), the default block shape, and a grid of
/// more than two and at most three waves of the 3 blocks a SM the register cap leaves
/// (2.26 and 2.59 waves: [14336 x 4096], [16384 x 6144] on the H200). Measured there (two
/// calls, docs/CUDA.md "Measured, session 6"): int8-row 20.7 -> 19.0-19.1 us and 30.4 ->
/// 29.7-29.8, fp8 20.1-20.2 -> 19.1 and 30.4 -> 30.2 queued; everywhere else the persistent
/// grid tied or lost (the 4-bit formats by 1-8 us), so the rule stays this narrow.
pub fn rows_persistent(tuning: &Tuning, s: usize, tiles: usize, nibbles: bool, sms: usize) -> bool {
    if s > 4 {
        return false;
    }
    match tuning.mma_persistent {
        Some(on) => on,
        None => {
            let slots = 3 * sms.max(1);
            s == 1
                && !nibbles
                && tuning.mma_warps == MMA_WARPS
                && tuning.mma_min_blocks.is_none()
                && tiles > 2 * slots
                && tiles <= 3 * slots
        }
    }
}

/// Whether the 16-row GEMV of `blocks` blocks takes a programmatic dependent launch on a
/// device of `sms` SMs. Its early blocks fill the slots the previous kernel leaves free
/// (3 a SM at S <= 4); when that is half the grid or more while the grid is larger than
/// the device (SMs < blocks < 2.5 SMs: O = 4096 on the H200), they pile onto some SMs and
/// the launch ran longer (H200, 2026-11-30: [4096 x 14336] int4-row 15.0 -> 18.7 us
/// queued); smaller and larger grids gained 0.5-3 us (docs/CUDA.md). Re-timed on H100s in
/// session 28 with 12-warp blocks two a SM: alone those grids ran slightly faster with the
/// programmatic launch, inside the engine's step mostly slower, so the rule stands
/// ([`Tuning::pdl_every_grid`] overrides it).
pub fn pdl_pays(blocks: u32, sms: usize) -> bool {
    let b = blocks as usize;
    !(b > sms && 2 * b < 5 * sms)
}

/// Whether a 16-row GEMV launch of `blocks` blocks with `tuning` is programmatic:
/// [`Tuning::pdl`], and [`pdl_pays`] or [`Tuning::pdl_every_grid`].
pub fn pdl_launch(tuning: &Tuning, blocks: u32, sms: usize) -> bool {
    tuning.pdl && (tuning.pdl_every_grid || pdl_pays(blocks, sms))
}

/// The power of two p of one activation row or segment (max |x p| in [2^14, 2^15),
/// clamped so 1/p stays a normal f32). The exponent comes from max's bits, as split.cuh's
/// `ts_split_p` takes it, so host and device pick the same p.
fn split_p(row: &[f32]) -> f64 {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    // max in [2^e, 2^(e+1)) -> p = 2^(14 - e); a subnormal max reads e = -127, which the
    // clamp maps to the same 2^100 as its true exponent.
    if max > 0.0 && max.is_finite() {
        let e = ((max.to_bits() >> 23) & 0xFF) as i32 - 127;
        2f64.powi((14 - e).clamp(-100, 100))
    } else {
        1.0
    }
}

/// The f16 parts of `row` scaled by p: x_hi = f16(x p), x_lo = f16(x p - x_hi).
fn split_parts(row: &[f32], p: f64) -> impl Iterator<Item = (u16, u16)> + '_ {
    row.iter().map(move |&v| {
        let scaled = v as f64 * p;
        let hi = half::f16::from_f64(scaled);
        (
            hi.to_bits(),
            half::f16::from_f64(scaled - hi.to_f64()).to_bits(),
        )
    })
}

/// Where [`split_activations`] takes p from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SplitScale {
    /// One p a row, stored in every segment's slot: what the host, `tile_prep` and
    /// `norm_prep` write and the default 16-row GEMV applies once at the end.
    Row,
    /// One p a segment of [`MMA_SUM_SEGMENT`] columns (its own max |x| in [2^14, 2^15)):
    /// what a producer that writes only some segments of a row (an attention head, a block
    /// of SwiGLU: shaders/cuda/split.cuh) leaves for the GEMV built with
    /// `Tuning::mma_segment_p`, which folds each k-block with its segment's 1/p.
    Segment,
}

/// Prepared activations ([s, x_stride], from [`prepare_activations`]) split for the
/// tensor-core kernels, which multiply f16 operands exactly but cannot take f32.
///
/// Per activation row s (or per segment: [`SplitScale`]), p = 2^e puts max |x| in
/// [2^14, 2^15): far from the f16 overflow and from its subnormals. Then x_hi = f16(x p)
/// and x_lo = f16(x p - x_hi) (both exact roundings of values computed exactly in f64), so
/// x_hi + x_lo = x p to about 2^-22 relative, and the kernel's two MMA columns sum to y p.
///
/// Returns `halves`: [2 s, x_stride] f16 bits, row 2k = x_hi of activation k, row 2k + 1 =
/// x_lo; and `aux`: `[s, x_stride / MMA_SUM_SEGMENT]` 1/p of each segment of
/// [`MMA_SUM_SEGMENT`] columns ([`SplitScale`]: the row's p in every segment, or the
/// segment's own), then the same shape of sums of x p over the segments (for the affine
/// formats' zero term), rounded once from f64. With `nibbles` (4-bit formats, whose decoded
/// words pair columns j and j + 4), each aligned group of 8 columns is stored as 0, 4, 1, 5,
/// 2, 6, 3, 7, so the kernel's B fragments are words as loaded (gemv.cu `mma_b`).
pub fn split_activations(
    xp: &[f32],
    s: usize,
    x_stride: usize,
    nibbles: bool,
    scale: SplitScale,
) -> Result<(Vec<u16>, Vec<f32>), CudaError> {
    check_prepared(xp, s, x_stride)?;
    let segs = x_stride / MMA_SUM_SEGMENT;
    let mut halves = vec![0u16; 2 * s * x_stride];
    let mut aux = vec![0f32; 2 * s * segs];
    for (k, row) in xp.chunks_exact(x_stride).take(s).enumerate() {
        let (hi_row, lo_row) =
            halves[2 * k * x_stride..(2 * k + 2) * x_stride].split_at_mut(x_stride);
        let row_p = split_p(row);
        for (g, seg) in row.chunks_exact(MMA_SUM_SEGMENT).enumerate() {
            let p = match scale {
                SplitScale::Row => row_p,
                SplitScale::Segment => split_p(seg),
            };
            aux[k * segs + g] = (1.0 / p) as f32;
            aux[(s + k) * segs + g] = seg.iter().map(|&v| v as f64 * p).sum::<f64>() as f32;
            for (e, (hi, lo)) in split_parts(seg, p).enumerate() {
                let i = g * MMA_SUM_SEGMENT + e;
                let at = if nibbles { nibble_order(i) } else { i };
                hi_row[at] = hi;
                lo_row[at] = lo;
            }
        }
    }
    Ok((halves, aux))
}

/// Prepared activations must be whole padded rows ([`prepare_activations`]): the layouts
/// permute within aligned groups of 8 columns and sum whole segments.
fn check_prepared(xp: &[f32], s: usize, x_stride: usize) -> Result<(), CudaError> {
    let whole = s.checked_mul(x_stride).is_some_and(|n| n <= xp.len());
    if x_stride == 0 || !x_stride.is_multiple_of(X_STRIDE_ALIGN) || !whole {
        return Err(CudaError::Input {
            what: format!(
                "prepared activations: {} values for S = {s} rows of stride {x_stride} (a multiple of {X_STRIDE_ALIGN})",
                xp.len()
            ),
        });
    }
    Ok(())
}

/// Where column `i` is stored when each aligned group of 8 columns is laid out as
/// 0, 4, 1, 5, 2, 6, 3, 7 (the column pairs a decoded nibble word makes).
pub fn nibble_order(i: usize) -> usize {
    let e = i % 8;
    i - e + 2 * (e % 4) + e / 4
}

/// How the GEMM kernel of one tensor reads its activations: the tensor-core chunk
/// (`chunk_bytes`, and whether codes are nibbles: two columns a byte), the activation
/// parts P (2: hi + lo, 1: hi), the n8 tiles a block takes (`nt`), and whether each
/// tile's 16-byte slots are rearranged into the warpgroup MMA's core matrices
/// (`canonical`, [`crate::compile::wgmma_gemm`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GemmLayout {
    pub chunk_bytes: usize,
    pub nibbles: bool,
    pub parts: usize,
    pub nt: usize,
    pub canonical: bool,
}

impl GemmLayout {
    /// Refuses a layout no GEMM build has (chunk 4, 8 or 16 bytes; 1 or 2 parts; 1, 2, 4
    /// or 8 n8 tiles), whose arithmetic below would divide by zero or misplace columns.
    pub fn check(&self) -> Result<(), CudaError> {
        let ok = [4, 8, 16].contains(&self.chunk_bytes)
            && [1, 2].contains(&self.parts)
            && [1, 2, 4, 8].contains(&self.nt);
        if ok {
            Ok(())
        } else {
            Err(CudaError::Input {
                what: format!("no GEMM build has the layout {self:?}"),
            })
        }
    }

    fn cpb(&self) -> usize {
        if self.nibbles { 2 } else { 1 }
    }
    /// Columns of one stage (gemv.cu GemmShape::SC): 16 bytes of a row per lane.
    pub fn stage_cols(&self) -> usize {
        64 * self.cpb()
    }
    /// n8 tiles of B columns for `s` activations, padded to whole blocks.
    pub fn tiles(&self, s: usize) -> usize {
        (self.parts * s).div_ceil(8).next_multiple_of(self.nt)
    }
    /// Activations the padded tiles hold.
    pub fn padded(&self, s: usize) -> usize {
        8 * self.tiles(s) / self.parts
    }
    /// Bytes of dynamic shared memory of a block with `stages` stages.
    pub fn shared_bytes(&self, stages: usize) -> usize {
        stages * self.nt * self.stage_cols() * 8 * 2
    }
    /// Offset (in halves) of B column `n`, column `i` in the GEMM's activation buffer of
    /// `tiles` n8 tiles (gemv.cu's GEMM comment): per stage, per n8 tile, per (k-block, quad),
    /// per (g, t) 8 halves in fragment order. Canonical: the same halves of each (k-block,
    /// quad) regrouped by the k16 slice m they feed (words 2m and 2m + 1 of every lane's
    /// slot: the slice's k 0..7 and 8..15), then by that k half, then by column g, then by
    /// lane t: 16 core matrices of 8 columns x 16 bytes.
    pub fn offset(&self, n: usize, i: usize, tiles: usize) -> usize {
        let cpb = self.cpb();
        let sc = self.stage_cols();
        let lane_cols = self.chunk_bytes * cpb; // columns of one lane's chunk
        let kbc = 4 * lane_cols; // columns of a k-block
        let nq = lane_cols / 8;
        let (st, ii) = (i / sc, i % sc);
        let (kb, c) = (ii / kbc, ii % kbc);
        let (t, cw) = (c / lane_cols, c % lane_cols);
        let (q, e) = (cw / 8, cw % 8);
        // Nibble words pair columns (j, j + 4) of each quad (gemv.cu mma_decode).
        let pos = if self.nibbles { nibble_order(e) } else { e };
        let (nt, g) = (n / 8, n % 8);
        let slot = kb * nq + q;
        let within = if self.canonical {
            let (word, e) = (pos / 2, pos % 2);
            ((slot * 2 + word / 2) * 2 + word % 2) * 64 + g * 8 + t * 2 + e
        } else {
            ((slot * 8 + g) * 4 + t) * 8 + pos
        };
        (st * tiles + nt) * (sc * 8) + within
    }
}

/// Prepared activations ([s, x_stride]) laid out for the GEMM kernel (see [`GemmLayout`]):
/// `parts` f16 parts per activation (as [`split_activations`]), B column n = parts * s +
/// part, padded with zero columns to whole blocks. Returns the halves, and `aux`: `[sp]` 1/p
/// (1 for padding), then [sp, x_stride / MMA_SUM_SEGMENT] sums over segments, where sp =
/// `l.padded(s)`: of x p with two parts, of the rounded x_hi with one, so that the affine
/// formats' zero term sees the same activation as their MMA (with exact sums, a large zero
/// cancelling a large scale * q would expose the rounding of x_hi beyond 2^-11 of |w x|).
pub fn gemm_activations(
    xp: &[f32],
    s: usize,
    x_stride: usize,
    l: &GemmLayout,
) -> Result<(Vec<u16>, Vec<f32>), CudaError> {
    check_prepared(xp, s, x_stride)?;
    l.check()?;
    let tiles = l.tiles(s);
    let sp = l.padded(s);
    let segs = x_stride / MMA_SUM_SEGMENT;
    let mut halves = vec![0u16; tiles * 8 * x_stride];
    let mut aux = vec![0f32; sp + sp * segs];
    aux[..sp].fill(1.0);
    for (k, row) in xp.chunks_exact(x_stride).take(s).enumerate() {
        let p = split_p(row);
        let parts = split_parts(row, p);
        aux[k] = (1.0 / p) as f32;
        let mut seg_sum = vec![0f64; segs];
        for (i, (hi, lo)) in parts.enumerate() {
            halves[l.offset(l.parts * k, i, tiles)] = hi;
            if l.parts == 2 {
                halves[l.offset(2 * k + 1, i, tiles)] = lo;
                seg_sum[i / MMA_SUM_SEGMENT] += row[i] as f64 * p;
            } else {
                seg_sum[i / MMA_SUM_SEGMENT] += half::f16::from_bits(hi).to_f64();
            }
        }
        for (g, v) in seg_sum.into_iter().enumerate() {
            aux[sp + k * segs + g] = v as f32;
        }
    }
    Ok((halves, aux))
}

/// The GEMM layout of the split-K tile GEMV at batch `s` <= 16: two parts (hi + lo, the
/// 1e-4 split), and as many n8 tiles as 2 S columns need, rounded up to 1, 2 or 4, all in
/// one column block (so gridDim.y = 1 and the kernel's n-tile count is `nt`).
pub fn gemv_tiles(chunk_bytes: u32, nibbles: bool, s: usize) -> GemmLayout {
    GemmLayout {
        chunk_bytes: chunk_bytes as usize,
        nibbles,
        parts: 2,
        nt: (2 * s).div_ceil(8).next_power_of_two(),
        canonical: false,
    }
}

/// Stages of one row in the GEMM kernel (gemv.cu `GemmShape::U` k-blocks each, a k-block
/// being what `mma_kblocks` counts: 4 lanes x `chunk_bytes`, or half a 136-byte block).
pub fn tile_stages(fmt: u32, chunk_bytes: u32, row_bytes: usize) -> usize {
    let kblocks = mma_kblocks(fmt, chunk_bytes, row_bytes);
    let per_stage = (16 / chunk_bytes as usize).max(1);
    kblocks.div_ceil(per_stage)
}

/// k-blocks of a row of `row_bytes` in a tensor-core kernel of `chunk_bytes` chunks (gemv.cu
/// `mma_kblocks`): a 136-byte affine block is two, else 4 chunks (one quad's load) are one.
pub fn mma_kblocks(fmt: u32, chunk_bytes: u32, row_bytes: usize) -> usize {
    use crate::caps::fmt_id;
    if matches!(fmt, fmt_id::HFQ4 | fmt_id::MQ4_V2 | fmt_id::MQ4C) {
        (row_bytes / 136) * 2
    } else {
        row_bytes / (4 * chunk_bytes as usize)
    }
}

/// Splits of the row for a tile-GEMV launch of `row_blocks` blocks: enough to reach
/// `target_blocks` blocks, no split shorter than `min_stages` stages (unless the row
/// itself is), and never an empty split (gemv.cu gives split z the stages
/// [z sps, (z + 1) sps) with sps = ceil(stages / splits)).
pub fn tile_splits(
    row_blocks: usize,
    stages: usize,
    target_blocks: usize,
    min_stages: usize,
) -> usize {
    let most = (stages / min_stages.max(1)).max(1);
    let want = target_blocks.div_ceil(row_blocks.max(1)).clamp(1, most);
    whole_splits(stages, want)
}

/// At most `want` (at least 1) splits of `stages` k stages with none empty: as many as
/// ceil(stages / want) stages each need (10 stages wanted 6 ways is 5 splits of 2).
pub fn whole_splits(stages: usize, want: usize) -> usize {
    let stages = stages.max(1);
    stages.div_ceil(stages.div_ceil(want.clamp(1, stages)))
}

/// Stages each split of a GEMM's k range keeps at least (a split's partials cost one round
/// trip of S x 256 floats through the scratch, against the stages' MMAs).
pub const GEMM_MIN_SPLIT_STAGES: usize = 8;

/// Splits of a GEMM's k range (gridDim.z) for a grid of `blocks` (row blocks x activation
/// blocks) on `slots` blocks resident at once (SMs x blocks an SM) over `stages` k stages.
/// A launch runs in waves of `slots` blocks, so `blocks` a little over a whole number of
/// waves leaves most SMs idle in the last one (192 blocks on 132 SMs: 1.45 waves take as
/// long as 2). z splits make each block 1 / z of the work and the cost ceil(blocks z /
/// slots) / z waves of the unsplit block; the cheapest z in 1..=4 is taken if it saves a
/// tenth or more (the partials' trip through the scratch and the reduction cost the rest),
/// with at least [`GEMM_MIN_SPLIT_STAGES`] stages a split and no empty split.
pub fn gemm_splits(blocks: usize, slots: usize, stages: usize) -> usize {
    let (blocks, slots, stages) = (blocks.max(1), slots.max(1), stages.max(1));
    let waves = |z: usize| (blocks * z).div_ceil(slots);
    let most = (stages / GEMM_MIN_SPLIT_STAGES).clamp(1, 4);
    // cost(z) = waves(z) / z, compared as waves(a) * b < waves(b) * a.
    let mut best = 1;
    for z in 2..=most {
        if waves(z) * best < waves(best) * z {
            best = z;
        }
    }
    if best > 1 && 10 * waves(best) > 9 * best * waves(1) {
        best = 1;
    }
    whole_splits(stages, best)
}

/// CUDA blocks of a GEMM launch of `warps`-warp blocks: (row blocks, activation blocks).
pub fn gemm_grid(
    rows: usize,
    tiles: usize,
    nt: usize,
    warps: u32,
) -> Result<(u32, u32), CudaError> {
    let too_big = || CudaError::Shape {
        format: Format::F32,
        what: format!("a GEMM over {rows} rows and {tiles} column tiles exceeds the grid"),
    };
    let x = u32::try_from(rows.div_ceil(32 * warps.max(1) as usize)).map_err(|_| too_big())?;
    let y = tiles / nt;
    if y == 0 || y > 65535 {
        return Err(too_big());
    }
    Ok((x, y as u32))
}

/// Rotates `x` ([s, cols], logical domain) into `format`'s stored domain and lays it out as
/// the kernels read it: [s, x_stride], zero-padded.
pub fn prepare_activations(
    format: Format,
    cols: usize,
    rotation_seed: u64,
    x: &[f32],
    s: usize,
    x_stride: usize,
) -> Result<Vec<f32>, CudaError> {
    let expected = s.checked_mul(cols);
    if expected != Some(x.len()) {
        return Err(shape_err(
            format,
            format!(
                "activation has {} values, expected S={s} x I={cols}",
                x.len()
            ),
        ));
    }
    if x_stride < cols {
        return Err(shape_err(
            format,
            format!("activation stride {x_stride} < I = {cols}"),
        ));
    }
    let total = s
        .checked_mul(x_stride)
        .ok_or_else(|| shape_err(format, format!("S={s} x stride {x_stride} overflows")))?;
    let mut out = vec![0f32; total];
    for (dst, src) in out.chunks_exact_mut(x_stride).zip(x.chunks_exact(cols)) {
        dst[..cols].copy_from_slice(src);
        match format.spec().rotation {
            Rotation::None => {}
            // The registry guarantees cols % 256 == 0 for every rotated format.
            Rotation::Fwht256 => {
                quant_core::rotation::forward_rows(&mut dst[..cols], cols, rotation_seed)
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pdl_every_grid_overrides_the_rule_and_pdl_off_wins() {
        let sms = 132;
        // 256 blocks (O = 4096): the rule's exception, a plain launch by default.
        assert!(!pdl_launch(&Tuning::default(), 256, sms));
        assert!(pdl_launch(&Tuning::default(), 384, sms));
        let every = Tuning {
            pdl_every_grid: true,
            ..Tuning::default()
        };
        assert!(pdl_launch(&every, 256, sms));
        assert!(pdl_launch(&every, 384, sms));
        for blocks in [1, 256, 384] {
            for every_grid in [true, false] {
                let off = Tuning {
                    pdl: false,
                    pdl_every_grid: every_grid,
                    ..Tuning::default()
                };
                assert!(!pdl_launch(&off, blocks, sms), "{blocks} blocks");
            }
        }
    }

    #[test]
    fn pdl_skips_only_grids_between_one_and_two_and_a_half_waves_of_sms() {
        let sms = 132;
        for (rows, pdl) in [
            (16, true),
            (1024, true),
            (2112, true),
            (2128, false),
            (4096, false),
            (5264, false),
            (5280, true),
            (6144, true),
            (16384, true),
        ] {
            let blocks = mma_grid_blocks(rows).unwrap();
            assert_eq!(pdl_pays(blocks, sms), pdl, "O = {rows}");
        }
    }

    #[test]
    fn small_grids_at_small_s_take_wide_blocks() {
        let sms = 132;
        let d = Tuning::default();
        for (rows, s, wide) in [
            (16, 1, true),
            (4096, 1, true),
            (4224, 4, true),
            (4240, 1, false),
            (6144, 1, false),
            (4096, 5, false),
            (4096, 16, false),
        ] {
            let t = rows_tuning(&d, mma_grid_blocks(rows).unwrap(), s, sms);
            let want = if wide {
                (12, Some(2))
            } else {
                (MMA_WARPS, None)
            };
            assert_eq!((t.mma_warps, t.mma_min_blocks), want, "O = {rows}, S = {s}");
        }
        // Off, or other warps asked for: the tuning as it is.
        for t in [
            Tuning {
                mma_small_grid_warps: None,
                ..Tuning::default()
            },
            Tuning {
                mma_warps: 4,
                ..Tuning::default()
            },
        ] {
            assert_eq!(*rows_tuning(&t, 1, 1, sms), t);
        }
    }

    use super::*;
    use quant_core::testdata::{Rng, activations, weights};
    use quant_core::{EncodeOptions, encode};

    #[test]
    fn padding_and_stride() {
        let sh = launch_shape(Format::Int4G64, 3, 100).unwrap();
        assert_eq!(sh.row_bytes, 50);
        assert_eq!(sh.x_stride, 1024);
        assert_eq!(sh.sc_row, 2);
        let fp8 = launch_shape(Format::Fp8E4m3B128, 300, 300).unwrap();
        assert_eq!(fp8.sc_row, 3, "tiles per 128-row band");
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let p = prepare_activations(Format::F32, 3, 0, &x, 2, 1024).unwrap();
        assert_eq!(p.len(), 2048);
        assert_eq!(&p[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert_eq!(&p[1024..1027], &[4.0, 5.0, 6.0]);
        assert!(p[1027..].iter().all(|&v| v == 0.0));
        assert!(prepare_activations(Format::F32, 3, 0, &x[..5], 2, 1024).is_err());
    }

    #[test]
    fn grid_covers_every_row() {
        for s in 1..=16 {
            for rows in [1, 7, 8, 9, 4096, 14336] {
                let covered =
                    grid_blocks(rows, s).unwrap() as usize * WARPS_PER_BLOCK * rows_per_warp(s);
                assert!(covered >= rows && covered < rows + WARPS_PER_BLOCK * rows_per_warp(s));
            }
        }
    }

    #[test]
    fn split_activations_carry_22_bits() {
        let mut rng = Rng::new(3);
        let cols = 1024;
        let mut x = activations(&mut rng, 2, cols);
        x[5] = 1e-30; // far below max: must not be lost to f16 subnormals relative to max
        for v in &mut x[cols..] {
            *v *= 1e6; // beyond f16's range before scaling
        }
        // A segment of row 0 far below the rest keeps its own 22 bits (its own p).
        for v in &mut x[3 * MMA_SUM_SEGMENT..4 * MMA_SUM_SEGMENT] {
            *v *= 1e-20;
        }
        let segs = cols / MMA_SUM_SEGMENT;
        // One p a row: every segment carries the row's.
        let (hr, auxr) = split_activations(&x, 2, cols, false, SplitScale::Row).unwrap();
        assert_eq!(auxr.len(), 2 * 2 * segs);
        for k in 0..2 {
            let max = x[k * cols..(k + 1) * cols]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs())) as f64;
            for g in 0..segs {
                let inv_p = auxr[k * segs + g] as f64;
                assert!(
                    max / inv_p >= 16384.0 && max / inv_p < 32768.0,
                    "k={k} g={g}"
                );
            }
            for i in 0..cols {
                let hi = half::f16::from_bits(hr[2 * k * cols + i]).to_f64();
                let lo = half::f16::from_bits(hr[(2 * k + 1) * cols + i]).to_f64();
                let back = (hi + lo) * auxr[k * segs] as f64;
                let want = x[k * cols + i] as f64;
                assert!((back - want).abs() <= 2f64.powi(-21) * max, "k={k} i={i}");
            }
        }
        // One p a segment.
        let (h, aux) = split_activations(&x, 2, cols, false, SplitScale::Segment).unwrap();
        assert_eq!(h.len(), 2 * 2 * cols);
        assert_eq!(aux.len(), 2 * 2 * segs);
        for k in 0..2 {
            for g in 0..segs {
                let seg = &x[k * cols + g * MMA_SUM_SEGMENT..][..MMA_SUM_SEGMENT];
                let max = seg.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                let inv_p = aux[k * segs + g] as f64;
                // max |x p| in [2^14, 2^15)
                assert!(
                    max / inv_p >= 16384.0 && max / inv_p < 32768.0,
                    "k={k} g={g}"
                );
                let mut sum = 0f64;
                for (e, &v) in seg.iter().enumerate() {
                    let i = g * MMA_SUM_SEGMENT + e;
                    let hi = half::f16::from_bits(h[2 * k * cols + i]).to_f64();
                    let lo = half::f16::from_bits(h[(2 * k + 1) * cols + i]).to_f64();
                    let back = (hi + lo) * inv_p;
                    assert!(
                        (back - v as f64).abs() <= 2f64.powi(-21) * max,
                        "k={k} i={i}"
                    );
                    sum += v as f64 / inv_p;
                }
                let got = aux[(2 + k) * segs + g] as f64;
                assert!(
                    (got - sum).abs() <= 1e-6 * sum.abs().max(1.0),
                    "k={k} g={g}"
                );
            }
        }
    }

    /// The GEMM layout is a permutation: every (B column, column) of the padded buffer has
    /// its own slot, and the 8 columns of a lane's quad are 16 contiguous bytes.
    #[test]
    fn gemm_layout_is_a_permutation() {
        for (chunk_bytes, nibbles) in [(16, true), (8, true), (4, true), (16, false)] {
            for parts in [1, 2] {
                let l = GemmLayout {
                    chunk_bytes,
                    nibbles,
                    parts,
                    nt: 4,
                    canonical: false,
                };
                let (s, xs) = (9, 1024);
                let tiles = l.tiles(s);
                assert_eq!(tiles % 4, 0);
                assert!(l.padded(s) >= s);
                let mut seen = vec![false; tiles * 8 * xs];
                for n in 0..tiles * 8 {
                    for i in 0..xs {
                        let o = l.offset(n, i, tiles);
                        assert!(!seen[o], "{l:?} n={n} i={i}");
                        seen[o] = true;
                        // A quad's 8 columns share one 16-byte slot.
                        assert_eq!(o / 8, l.offset(n, i - i % 8, tiles) / 8, "{l:?}");
                    }
                }
            }
        }
    }

    /// The canonical layout holds the same halves in each n8 tile, and puts the two words a
    /// lane's fragment feeds to k16 slice m (words 2m, 2m + 1 of its 16-byte slot) where
    /// the warpgroup MMA reads B[k][g] of that slice: k = 2t + e in the first core matrix,
    /// 8 + 2t + e in the second (128 bytes on), row g 16 bytes a column.
    #[test]
    fn canonical_gemm_layout_regroups_each_tile_into_core_matrices() {
        for (chunk_bytes, nibbles) in [(16, true), (8, true), (4, true), (16, false)] {
            for parts in [1, 2] {
                let frag = GemmLayout {
                    chunk_bytes,
                    nibbles,
                    parts,
                    nt: 8,
                    canonical: false,
                };
                let canon = GemmLayout {
                    canonical: true,
                    ..frag
                };
                let (s, xs) = (40, 512);
                let tiles = frag.tiles(s);
                let tile = frag.stage_cols() * 8;
                let mut seen = vec![false; tiles * 8 * xs];
                for n in 0..tiles * 8 {
                    for i in 0..xs {
                        let (f, c) = (frag.offset(n, i, tiles), canon.offset(n, i, tiles));
                        assert_eq!(f / tile, c / tile, "{canon:?} n={n} i={i}: same tile");
                        assert!(!seen[c], "{canon:?} n={n} i={i}");
                        seen[c] = true;
                        // Fragment order: slot (f / 256 within the tile), g, t, word, e.
                        let (slot, g) = ((f % tile) / 256, n % 8);
                        let (t, word, e) = ((f % 256) / 8 % 4, (f % 8) / 2, f % 2);
                        assert_eq!((f % 256) / 32, g);
                        let (m, kc) = (word / 2, word % 2);
                        let k = 8 * kc + 2 * t + e;
                        let want =
                            (f / tile) * tile + (slot * 2 + m) * 128 + (k / 8) * 64 + g * 8 + k % 8;
                        assert_eq!(c, want, "{canon:?} n={n} i={i}");
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_activations_split_like_the_gemv() {
        let mut rng = Rng::new(5);
        let (s, xs) = (3, 1024);
        let segs = xs / MMA_SUM_SEGMENT;
        let x = activations(&mut rng, s, xs);
        let (h, aux) = split_activations(&x, s, xs, false, SplitScale::Row).unwrap();
        let l = GemmLayout {
            chunk_bytes: 8,
            nibbles: true,
            parts: 2,
            nt: 8,
            canonical: false,
        };
        let (g, gaux) = gemm_activations(&x, s, xs, &l).unwrap();
        let (tiles, sp) = (l.tiles(s), l.padded(s));
        assert_eq!(sp, 32);
        for k in 0..s {
            for i in 0..xs {
                assert_eq!(g[l.offset(2 * k, i, tiles)], h[2 * k * xs + i]);
                assert_eq!(g[l.offset(2 * k + 1, i, tiles)], h[(2 * k + 1) * xs + i]);
            }
            for seg in 0..segs {
                assert_eq!(gaux[k], aux[k * segs + seg]);
                assert_eq!(gaux[sp + k * segs + seg], aux[(s + k) * segs + seg]);
            }
        }
        assert!(gaux[s..sp].iter().all(|&v| v == 1.0));
        let one = GemmLayout { parts: 1, ..l };
        let (g1, _) = gemm_activations(&x, s, xs, &one).unwrap();
        assert!(gemm_activations(&x, s, 1000, &one).is_err());
        assert!(gemm_activations(&x, s, xs, &GemmLayout { nt: 0, ..one }).is_err());
        assert!(split_activations(&x, s + 1, xs, true, SplitScale::Row).is_err());
        assert_eq!(g1[one.offset(2, 5, one.tiles(s))], h[2 * 2 * xs + 5]);
    }

    #[test]
    fn the_16_byte_stage_rule() {
        let g64 = KernelId {
            fmt: crate::caps::fmt_id::INT4_G,
            group: 64,
        };
        let row = KernelId {
            fmt: crate::caps::fmt_id::INT4_ROW,
            group: 0,
        };
        let stage = |t: &Tuning, k, s, blocks| rows_stage(t, k, s, blocks, 132).mma_stage;
        let d = Tuning::default();
        // int4-g64 on every grid, S = 1 only; other groups keep 32.
        for blocks in [1, 256, 384, 896, 1792] {
            assert_eq!(stage(&d, g64, 1, blocks), Some(16), "{blocks}");
        }
        assert_eq!(stage(&d, g64, 2, 384), None);
        // int4-g128 / g256 as int4-row; int4-g32 keeps 32.
        for group in [128, 256] {
            let g = KernelId { group, ..g64 };
            assert_eq!(stage(&d, g, 1, 896), Some(16), "g{group}");
            assert_eq!(stage(&d, g, 1, 384), None, "g{group}");
        }
        assert_eq!(stage(&d, KernelId { group: 32, ..g64 }, 1, 896), None);
        // int4-row: not on one wave of 3 blocks a SM (265..=396 blocks on 132 SMs).
        for (blocks, want) in [(256, Some(16)), (264, Some(16)), (265, None), (384, None)] {
            assert_eq!(stage(&d, row, 1, blocks), want, "{blocks}");
        }
        for blocks in [396, 397, 896, 1792] {
            assert_eq!(
                stage(&d, row, 1, blocks),
                (blocks > 396).then_some(16),
                "{blocks}"
            );
        }
        let mq4 = KernelId {
            fmt: crate::caps::fmt_id::MQ4_V2,
            group: 0,
        };
        assert_eq!(stage(&d, mq4, 1, 896), None);
        // 8-bit codes: only past 3 waves (396 blocks on 132 SMs).
        for fmt in [
            crate::caps::fmt_id::INT8_ROW,
            crate::caps::fmt_id::FP8_F32,
            crate::caps::fmt_id::FP8_UE8M0,
        ] {
            let k = KernelId { fmt, group: 0 };
            for (blocks, want) in [(256, None), (384, None), (1024, None), (1188, None)] {
                assert_eq!(stage(&d, k, 1, blocks), want, "{fmt} {blocks}");
            }
            assert_eq!(stage(&d, k, 1, 1189), Some(16), "{fmt}");
            assert_eq!(stage(&d, k, 1, 1792), Some(16), "{fmt}");
            assert_eq!(stage(&d, k, 2, 1792), None, "{fmt}");
        }
        // A stage asked for, or the format's own chunk: as it is.
        let forced = Tuning {
            mma_stage: Some(32),
            ..Tuning::default()
        };
        assert_eq!(*rows_stage(&forced, g64, 1, 384, 132), forced);
        let own = Tuning {
            mma_classes: false,
            ..Tuning::default()
        };
        assert_eq!(*rows_stage(&own, g64, 1, 384, 132), own);
    }

    /// Prewarm's list holds the tuning of every grid size a launch can have.
    #[test]
    fn rows_tunings_cover_every_grid() {
        use crate::caps::fmt_id;
        let sms = 132;
        for (fmt, group) in [
            (fmt_id::INT4_G, 64),
            (fmt_id::INT4_G, 128),
            (fmt_id::INT4_G, 32),
            (fmt_id::INT4_ROW, 0),
            (fmt_id::INT8_ROW, 0),
            (fmt_id::FP8_F32, 0),
            (fmt_id::MQ4_V2, 0),
        ] {
            let k = KernelId { fmt, group };
            for s in [1, 2, 4, 16] {
                let d = Tuning::default();
                let list = rows_tunings(&d, k, s, sms);
                for blocks in (1..=3000)
                    .step_by(7)
                    .chain([264, 265, 396, 397, 1188, 1189])
                {
                    let t = rows_launch_tuning(&d, k, s, blocks, sms);
                    assert!(
                        list.contains(&t),
                        "fmt {fmt} g{group} S={s}: {blocks} blocks"
                    );
                }
            }
        }
    }

    /// The persistent plan's shares cover every unit once, in order, each block at least
    /// one unit; `block_of` inverts `lo`; a tile touches at most `max_parts` blocks.
    #[test]
    fn persist_plan_shares_cover_the_units() {
        for (tiles, kb, warps, u, cap) in [
            (384, 128, 8, 2, 396),
            (256, 112, 8, 2, 396),
            (1792, 32, 8, 2, 396),
            (3, 16, 2, 2, 5),
            (9, 6, 12, 1, 7),
            (1, 1, 8, 2, 396),
            (2, 8, 1, 1, 100_000),
        ] {
            let p = PersistPlan::new(tiles, kb, warps, u, cap);
            assert_eq!(p.rounds, kb.div_ceil(warps as usize * u).max(1));
            assert_eq!(p.units, tiles * p.rounds);
            assert!(p.grid as usize <= p.units && p.grid <= cap);
            assert_eq!(p.lo(0), 0);
            assert_eq!(p.lo(p.grid as usize), p.units);
            for b in 0..p.grid as usize {
                assert!(p.lo(b) < p.lo(b + 1), "{tiles} {kb} block {b} empty");
                for v in p.lo(b)..p.lo(b + 1) {
                    assert_eq!(p.block_of(v), b, "{tiles} {kb} {warps} {u} {cap}: unit {v}");
                }
            }
            for t in 0..tiles {
                let parts = p.block_of(t * p.rounds + p.rounds - 1) - p.block_of(t * p.rounds) + 1;
                assert!(parts <= p.max_parts());
            }
        }
        let t = |p| Tuning {
            mma_persistent: p,
            ..Tuning::default()
        };
        assert!(rows_persistent(&t(Some(true)), 1, 384, true, 132));
        assert!(rows_persistent(&t(Some(true)), 4, 384, true, 132));
        assert!(!rows_persistent(&t(Some(true)), 8, 384, false, 132));
        assert!(!rows_persistent(&t(Some(false)), 1, 896, false, 132));
        // The rule (the default): 8-bit codes at S = 1 on 2-3 waves of 396 slots only:
        // [14336 x 4096] (896 tiles) and [16384 x 6144] (1024), not [6144 x 16384] (384),
        // [28672 x 4096] (1792), 4-bit codes, S > 1 or another block shape.
        let auto = Tuning::default();
        assert_eq!(auto.mma_persistent, None);
        assert!(rows_persistent(&auto, 1, 896, false, 132));
        assert!(rows_persistent(&auto, 1, 1024, false, 132));
        assert!(rows_persistent(&auto, 1, 1188, false, 132));
        assert!(!rows_persistent(&auto, 1, 1189, false, 132));
        assert!(!rows_persistent(&auto, 1, 792, false, 132));
        assert!(!rows_persistent(&auto, 1, 384, false, 132));
        assert!(!rows_persistent(&auto, 1, 1792, false, 132));
        assert!(!rows_persistent(&auto, 1, 896, true, 132));
        assert!(!rows_persistent(&auto, 2, 896, false, 132));
        let wide = Tuning {
            mma_warps: 12,
            ..Tuning::default()
        };
        assert!(!rows_persistent(&wide, 1, 896, false, 132));
    }

    #[test]
    fn gemm_splits_round_the_grid_to_whole_waves() {
        // 24 x 8 blocks on 132 SMs: 1.45 waves cost 2; two splits, 2.9 waves of half the
        // work, cost 1.5.
        assert_eq!(gemm_splits(192, 132, 128), 2);
        // 56 x 8: 3.4 waves (4) against 6.8 halves (3.5): 12.5% saved.
        assert_eq!(gemm_splits(448, 132, 32), 2);
        // Whole or nearly whole waves stay unsplit.
        assert_eq!(gemm_splits(128, 132, 128), 1);
        assert_eq!(gemm_splits(512, 132, 48), 1);
        assert_eq!(gemm_splits(384, 132, 128), 1);
        // Too few stages to split.
        assert_eq!(gemm_splits(192, 132, 15), 1);
        // 7.6 waves (8) against three splits' 22.7 (23 / 3 = 7.67): 4% is not worth the
        // partials' trip.
        assert_eq!(gemm_splits(1000, 132, 128), 1);
        // No empty split: 10 stages wanted 6 ways are 5 splits of 2.
        assert_eq!(whole_splits(10, 6), 5);
        assert_eq!(whole_splits(0, 0), 1);
        // Two slots, three blocks: 2 waves against 3 halves... z = 2 costs 1.5 (25%).
        assert_eq!(gemm_splits(3, 2, 64), 2);
        for (blocks, slots, stages) in [(192, 132, 17), (7, 5, 9), (1, 1, 1), (0, 0, 0)] {
            let z = gemm_splits(blocks, slots, stages);
            let per = stages.max(1).div_ceil(z);
            assert!(
                (1..=4).contains(&z) && (z - 1) * per < stages.max(1),
                "{z} of {stages}"
            );
        }
    }

    #[test]
    fn tile_splits_fill_the_device_without_empty_splits() {
        for (gx, stages, target, min) in [
            (24, 128, 264, 4),
            (16, 32, 264, 4),
            (64, 32, 264, 4),
            (1, 1, 264, 4),
            (3, 7, 264, 1),
            (64, 1000, 8, 4),
            // 6 splits of ceil(10 / 6) = 2 stages would leave the sixth empty.
            (1, 10, 6, 1),
        ] {
            let z = tile_splits(gx, stages, target, min);
            assert!(z >= 1, "{gx} {stages}");
            let sps = stages.div_ceil(z);
            // Every split z has stages: z * sps < stages.
            assert!(
                (z - 1) * sps < stages,
                "{gx} {stages} {target} {min}: {z} splits of {sps}"
            );
            assert!(
                z == 1 || sps >= min,
                "{gx} {stages}: splits of {sps} stages"
            );
        }
        assert_eq!(tile_splits(24, 128, 264, 4), 11);
        assert_eq!(tile_splits(16, 32, 264, 4), 8);
        let nt: Vec<usize> = [1, 4, 5, 8, 9, 16]
            .iter()
            .map(|&s| gemv_tiles(16, true, s).nt)
            .collect();
        assert_eq!(nt, [1, 1, 2, 2, 4, 4]);
        for s in 1..=16 {
            let l = gemv_tiles(8, true, s);
            assert_eq!(l.tiles(s), l.nt, "one column block at S = {s}");
            assert!(l.padded(s) >= s);
        }
        assert_eq!(tile_stages(crate::caps::fmt_id::INT4_ROW, 16, 8192), 128);
        assert_eq!(tile_stages(crate::caps::fmt_id::INT4_G, 8, 8192), 128);
        assert_eq!(tile_stages(crate::caps::fmt_id::MQ4_V2, 16, 136 * 64), 128);
    }

    #[test]
    fn nibble_order_pairs_columns_j_and_j_plus_4() {
        let order: Vec<usize> = (0..16).map(nibble_order).collect();
        assert_eq!(
            order,
            [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]
        );
        let mut rng = Rng::new(9);
        let x = activations(&mut rng, 1, 1024);
        let (plain, a) = split_activations(&x, 1, 1024, false, SplitScale::Row).unwrap();
        let (perm, b) = split_activations(&x, 1, 1024, true, SplitScale::Row).unwrap();
        assert_eq!(a, b);
        for i in 0..1024 {
            assert_eq!(perm[nibble_order(i)], plain[i]);
            assert_eq!(perm[1024 + nibble_order(i)], plain[1024 + i]);
        }
    }

    /// The host-side rotation is the one the oracle applies: the stored-domain dot of the
    /// prepared activation equals the logical-domain reference.
    #[test]
    fn rotation_matches_the_oracle() {
        let mut rng = Rng::new(7);
        let (rows, cols) = (3, 512);
        let t = encode(
            Format::Mq4G256V2,
            rows,
            cols,
            &weights(&mut rng, rows, cols),
            &EncodeOptions::default(),
        )
        .unwrap();
        let x = activations(&mut rng, 1, cols);
        let xr = prepare_activations(t.format, cols, t.rotation_seed, &x, 1, 1024).unwrap();
        let mut stored = vec![0f64; cols];
        let reference = quant_core::oracle::reference_gemm(&t.view(), &x, 1);
        for o in 0..rows {
            quant_core::api::decode_rows_stored_f64(&t.view(), o, &mut stored);
            let y: f64 = stored.iter().zip(&xr).map(|(w, x)| w * *x as f64).sum();
            assert!(
                (y - reference.y[o]).abs() <= 1e-5 * reference.magnitude[o],
                "row {o}"
            );
        }
    }
}
