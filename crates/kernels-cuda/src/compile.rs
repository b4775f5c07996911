//! NVRTC compilation of `shaders/cuda/gemv.cu`, cached per process.
//!
//! A module is one build: a GEMV (format kernel, S; CUDA cores or tensor cores), a GEMM
//! (format kernel, activation parts) or a MoE grouped GEMV (the set of format kernels its
//! experts need), for one GPU architecture, mutation and [`Tuning`]. The source is compiled
//! on first use with `-D` options naming the build and `--gpu-architecture=sm_XY` from the
//! device's compute capability, and the PTX is kept in a process-wide map, so every later
//! launch of the same build is a hash lookup.

use crate::caps::{KernelId, MmaKernel};
use crate::error::CudaError;
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The GEMV kernel source, embedded at build time.
pub const GEMV_SOURCE: &str = include_str!("../../../shaders/cuda/gemv.cu");

/// What NVRTC compiles for every GEMV build: the segment split's device code
/// (shaders/cuda/split.cuh, shared with decode_ops.cu), then [`GEMV_SOURCE`]. The host
/// emulation compiles gemv.cu alone: none of its host-compiled code uses the split.
pub const GEMV_NVRTC_SOURCE: &str = concat!(
    include_str!("../../../shaders/cuda/split.cuh"),
    include_str!("../../../shaders/cuda/gemv.cu")
);

/// A deliberate defect compiled into the kernels, to show that the conformance test bites
/// (issue 4 §3). Only this crate's tests enable the `mutation-test` feature.
#[cfg(feature = "mutation-test")]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Low and high nibbles of every byte swapped.
    SwapNibbles,
    /// Every group / tile / block scale read from the next group.
    GroupOffByOne,
    /// Every scale multiplied by 1.01.
    Scale1Pct,
    /// The GEMM's split-K reduction leaves out split 1's partial.
    SplitSum,
}

#[cfg(feature = "mutation-test")]
impl Mutation {
    /// Parses the `TESSERA_CUDA_MUTATE` spelling: swap-nibbles, group-off-by-one, scale-1pct,
    /// split-sum.
    pub fn parse(name: &str) -> Option<Mutation> {
        match name {
            "swap-nibbles" => Some(Mutation::SwapNibbles),
            "group-off-by-one" => Some(Mutation::GroupOffByOne),
            "scale-1pct" => Some(Mutation::Scale1Pct),
            "split-sum" => Some(Mutation::SplitSum),
            _ => None,
        }
    }

    /// The preprocessor symbol gemv.cu tests for.
    pub fn define(self) -> &'static str {
        match self {
            Mutation::SwapNibbles => "TS_MUTATE_SWAP_NIBBLES",
            Mutation::GroupOffByOne => "TS_MUTATE_GROUP_OFF_BY_ONE",
            Mutation::Scale1Pct => "TS_MUTATE_SCALE_1PCT",
            Mutation::SplitSum => "TS_MUTATE_SPLIT_SUM",
        }
    }
}

/// Kernel-shape knobs that are compile-time constants of the source and launch parameters
/// of the host at once, so they travel together. `Default` is what the library runs;
/// benchmarks build backends with others ([`crate::CudaBackend::with_tuning`]) to compare.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Warps of a tensor-core GEMV block (`TS_MMA_WARPS`); they split a 16-row tile's row.
    pub mma_warps: u32,
    /// Stages a tensor-core GEMV warp keeps in flight (`TS_MMA_DEPTH`); `None`: the
    /// source's default per S.
    pub mma_depth: Option<u32>,
    /// Minimum resident blocks per SM of the tensor-core GEMV (`TS_MMA_MIN_BLOCKS`, the
    /// register cap); `None`: the source's default per S.
    pub mma_min_blocks: Option<u32>,
    /// Independent accumulator chains of the tensor-core GEMV's k-block
    /// (`TS_MMA_CHAINS`, 1 or 2); `None`: the source's default per S.
    pub mma_chains: Option<u32>,
    /// Bytes of a row in one pipeline stage of a tensor-core GEMV lane (`TS_MMA_STAGE`,
    /// 16, 32 or 64); `None`: the 16-row GEMV's rule ([`crate::layout::rows_stage`]: 16
    /// for some 4-bit formats at S = 1), else the source's default (32).
    pub mma_stage: Option<u32>,
    /// Each warp of a tensor-core GEMV block takes one contiguous range of the row's
    /// k-blocks (`TS_MMA_CONTIG`) instead of every `mma_warps`-th one.
    pub mma_contig: bool,
    /// L2 prefetch-size hint of the 16-row tensor-core GEMV's weight loads in bytes
    /// (`TS_L2PF`: 128 or 256); 0: none (session 4's kernel). Default 128: faster on the
    /// H200 for fp8 / int8-row at S = 1 (figures: docs/CUDA.md, "Measured, session 5").
    pub mma_l2_prefetch: u32,
    /// Warps per block of the 16-row tensor-core GEMV at S <= 4 on grids of at most two
    /// blocks a SM (O <= 32 SMs), with 2 blocks a SM (the same register cap); `None`:
    /// `mma_warps` everywhere (session 4). Applies only while `mma_warps` and
    /// `mma_min_blocks` are at their defaults ([`crate::layout::rows_tuning`]).
    pub mma_small_grid_warps: Option<u32>,
    /// Diagnostic tensor-core GEMV builds (`TS_DIAG`): 0 (the default) is the real kernel;
    /// 1 replaces the weight decode by the raw word, 2 only streams the weights and scales.
    /// Both give wrong results on purpose: benchmarks use them to split where time goes.
    pub diag: u32,
    /// n8 tiles of B columns per GEMM block (`TS_GEMM_NT`), for 2-part (`Split`)
    /// activations, and for 1-part ones (8 since session 19: at S = 512 on the H100 and the
    /// H200 it ran 0-35% faster than 4 on every format and shape timed, docs/CUDA.md).
    pub gemm_nt_split: u32,
    pub gemm_nt_f16: u32,
    /// cp.async stages of the GEMM's activation tiles (`TS_GEMM_STAGES`).
    pub gemm_stages: u32,
    /// Minimum resident GEMM blocks per SM (`TS_GEMM_MINB` of [`Build::Gemm`], the
    /// register cap: 255 registers a thread at 1, 128 at 2).
    pub gemm_min_blocks: u32,
    /// Weight stages a GEMM warp holds in registers (`TS_GEMM_WDEPTH` of [`Build::Gemm`]).
    pub gemm_depth: u32,
    /// Warps of a GEMM block (`TS_GEMM_WARPS` of [`Build::Gemm`]; 32 rows each).
    pub gemm_warps: u32,
    /// Splits of the GEMM's k range (gridDim.z, reduced by each row block's last split in
    /// one launch): `None` (the default) by [`crate::layout::gemm_splits`]' rule (a grid
    /// just past whole waves of resident blocks), `Some(n)` n splits (at most the stages
    /// allow; 1: never). The rule on an H100 (session 20): F16 at S = 512 on
    /// [6144 x 16384] 5-10% faster for int4-g64, int8-row, fp8 and mq4-g256-v2, int4-row
    /// and the shapes it leaves unsplit unchanged (docs/CUDA.md).
    pub gemm_split_k: Option<u32>,
    /// The tensor-core GEMM on the warpgroup MMA (`-DTS_WGMMA`, `wgmma.mma_async`
    /// m64n64k16, compiled for `sm_90a`) instead of `mma.sync`, where [`wgmma_gemm`] admits
    /// it: an sm_90 device, 8 n8 tiles a block, blocks of whole warpgroups and at least 3
    /// activation stages. On by default since session 24, its first run on a GPU (an H100,
    /// 2026-12-07, docs/CUDA.md): int4-row and int8-row matched the oracle, and F16 at
    /// S = 512 ran 1.09-1.36x as fast as `mma.sync` on five shapes (int4-row
    /// [6144 x 16384] 341.9 -> 261.3 us). Since session 25 the scaled formats can take it
    /// too, each k-block multiplied into a second accumulator and folded with its scales,
    /// where [`Tuning::gemm_wgmma_scaled`] says. `TESSERA_CUDA_WGMMA=0` turns it off.
    pub gemm_wgmma: bool,
    /// With [`Tuning::gemm_wgmma`], the scaled formats (int4-g{gs}, fp8, the affine ones) on
    /// the warpgroup MMA too (`TESSERA_CUDA_WGMMA_SCALED=1` / `0`). On by default since its
    /// first GPU run (session 25, an H100, docs/CUDA.md): every scaled format matched the
    /// oracle (split-K included), and F16 at S = 512 ran 0-16% faster than `mma.sync`
    /// (fp8-e4m3-b128 [6144 x 16384] 498.1 -> 433.6 us queued, 27.8 -> 31.9% of cuBLAS
    /// bf16's 138.3 us in the same call), never slower beyond 1%.
    pub gemm_wgmma_scaled: bool,
    /// The share of each SM's unified L1 / shared memory that the GEMM and the tile GEMV
    /// ask to be shared memory (`CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`,
    /// percent); `None` leaves the driver's choice.
    pub shared_carveout: Option<u32>,
    /// The 16-row tensor-core GEMV of int4-g32 / int4-g64 takes 16-byte chunks spanning
    /// 2-4 groups where S leaves the n8 columns for them ([`crate::caps::rows_chunk`],
    /// gemv.cu `MmaClasses`); `false`: the format's own chunk (8 / 4 bytes).
    pub mma_classes: bool,
    /// The 16-row tensor-core GEMV folds each k-block with its own 128-column segment's 1/p
    /// (`-DTS_SEG_P`): for activations whose producer picked p per segment
    /// ([`crate::CudaBackend::gemv_launch_presplit`]). Off, every segment carries the row's
    /// p (the host's and `tile_prep` / `norm_prep`'s split) and the kernel applies it once
    /// at the end, which costs row-scaled formats no per-k-block work (session 9, H200:
    /// [28672 x 4096] int8-row 31.6 us without, 34.3 with). Set by the launch, not a knob.
    pub mma_segment_p: bool,
    /// Programmatic dependent launch of the 16-row tensor-core GEMV and of `tile_prep`
    /// (`-DTS_PDL`, `cuLaunchKernelEx`): the GEMV may start and load weights while the
    /// previous kernel of the stream finishes. Without [`Tuning::pdl_every_grid`] (the
    /// default), grids that [`crate::layout::pdl_pays`] rejects launch plainly (the
    /// kernel's wait is then a no-op).
    pub pdl: bool,
    /// With [`Tuning::pdl`], every 16-row grid takes the programmatic launch, not only those
    /// [`crate::layout::pdl_pays`] accepts (`TESSERA_CUDA_PDL=all`; `=rule` keeps the rule).
    /// Off by default: in session 28 (three H100 machines, docs/CUDA.md "Measured, session
    /// 28") it made the O = 4096 GEMVs 0.3-1.3 us faster alone in `bench_gemv`, but the
    /// engine's step 41-43 us slower on two machines (14 runs in a balanced order) and 42 us
    /// faster on the third. A launch choice: builds that differ only in it are one module.
    pub pdl_every_grid: bool,
    /// The split-K tile GEMV ([`Build::GemvTiles`]): `None` lets [`crate::KernelPath::Auto`]
    /// follow the capability table ([`crate::caps::Capability::tiles_from`]); `Some(n)`
    /// runs it for S >= n wherever the tensor cores take the shape (`Some(0)`: never,
    /// the 16-row tensor-core GEMV instead). Benchmarks compare them.
    pub tiles_from_s: Option<u32>,
    /// Persistent schedule of the 16-row tensor-core GEMV at S <= 4
    /// ([`Build::GemvMmaPersist`]: a grid of at most the device's resident blocks, each
    /// walking an equal share of the launch's (16-row tile, round) units with its weight
    /// pipeline kept full across tiles; a tile split between blocks is summed by its last
    /// block in a fixed order). `None` (the default): where
    /// [`crate::layout::rows_persistent`]'s rule says (8-bit codes at S = 1 on grids of 2-3
    /// waves: the only shapes where it won on the H200); `Some(true)` / `Some(false)`:
    /// always / never (benchmarks, tests).
    pub mma_persistent: Option<bool>,
    /// Blocks of a persistent launch: 0 = SMs x the blocks of the build that fit an SM at
    /// once (the occupancy the driver reports); n > 0 = at most n (tests use a few, so
    /// tiles are split between blocks). Never more than the launch's units.
    pub mma_persist_grid: u32,
    /// Warps of a tile-GEMV block (`TS_GEMM_WARPS`; 32 rows each).
    pub tile_warps: u32,
    /// Weight stages a tile-GEMV warp holds in registers (`TS_GEMM_WDEPTH`).
    pub tile_depth: u32,
    /// Minimum resident tile-GEMV blocks per SM (`TS_GEMM_MINB`, the register cap).
    pub tile_min_blocks: u32,
    /// Split-K target: the launch aims at this many blocks per SM ...
    pub tile_blocks_per_sm: u32,
    /// ... but gives each split at least this many stages of the row.
    pub tile_min_stages: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            mma_warps: crate::layout::MMA_WARPS,
            mma_depth: None,
            mma_min_blocks: None,
            mma_chains: None,
            mma_stage: None,
            mma_contig: false,
            mma_l2_prefetch: 128,
            mma_small_grid_warps: Some(12),
            diag: 0,
            mma_classes: true,
            mma_segment_p: false,
            pdl: true,
            pdl_every_grid: false,
            gemm_nt_split: 8,
            gemm_nt_f16: 8,
            gemm_stages: 4,
            gemm_min_blocks: 1,
            gemm_depth: 2,
            gemm_warps: crate::layout::GEMM_WARPS,
            gemm_split_k: None,
            gemm_wgmma: true,
            gemm_wgmma_scaled: true,
            shared_carveout: None,
            tiles_from_s: None,
            mma_persistent: None,
            mma_persist_grid: 0,
            tile_warps: 8,
            tile_depth: 2,
            tile_min_blocks: 2,
            tile_blocks_per_sm: 2,
            tile_min_stages: 4,
        }
    }
}

impl Tuning {
    /// Refuses knob values the kernels were not written for.
    pub fn check(&self) -> Result<(), String> {
        let ok = (1..=16).contains(&self.mma_warps)
            && self.mma_depth.is_none_or(|d| (1..=6).contains(&d))
            && self.mma_min_blocks.is_none_or(|b| (1..=8).contains(&b))
            && self.mma_chains.is_none_or(|c| (1..=2).contains(&c))
            && self.mma_stage.is_none_or(|b| [16, 32, 64].contains(&b))
            && self.diag <= 2
            && [0, 128, 256].contains(&self.mma_l2_prefetch)
            && self
                .mma_small_grid_warps
                .is_none_or(|w| (1..=16).contains(&w))
            && [1, 2, 4, 8].contains(&self.gemm_nt_split)
            && [1, 2, 4, 8].contains(&self.gemm_nt_f16)
            && (2..=8).contains(&self.gemm_stages)
            && (1..=4).contains(&self.gemm_min_blocks)
            && (1..=6).contains(&self.gemm_depth)
            && [2, 4, 8].contains(&self.gemm_warps)
            && self.gemm_split_k.is_none_or(|z| (1..=8).contains(&z))
            && (!self.gemm_wgmma || self.wgmma_block_fits())
            && self.shared_carveout.is_none_or(|c| c <= 100)
            && self.tiles_from_s.is_none_or(|s| s <= 17)
            && self.mma_persist_grid <= 1 << 20
            && [2, 4, 8].contains(&self.tile_warps)
            && (1..=6).contains(&self.tile_depth)
            && (1..=4).contains(&self.tile_min_blocks)
            && (1..=16).contains(&self.tile_blocks_per_sm)
            && (1..=64).contains(&self.tile_min_stages);
        if ok {
            Ok(())
        } else {
            Err(format!("tuning out of range: {self:?}"))
        }
    }

    /// The GEMM block the warpgroup MMA needs: whole warpgroups, and 3+ activation stages
    /// (a stage's tiles are rewritten two stages after its last MMA).
    pub fn wgmma_block_fits(&self) -> bool {
        self.gemm_warps.is_multiple_of(4) && self.gemm_stages >= 3
    }

    /// n8 tiles per GEMM block for `parts` activation parts.
    pub fn gemm_nt(&self, parts: u32) -> u32 {
        if parts == 2 {
            self.gemm_nt_split
        } else {
            self.gemm_nt_f16
        }
    }
}

/// What a [`Build::TilePrep`] launch splits: the activations as they are, or the engine's
/// RMSNorm computed on the way (one module exports both kernels; the key names the one a
/// launch takes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PrepInput {
    /// `tile_prep`: f32 rows already in the stored domain.
    Plain,
    /// `norm_prep` (S = 1): RMSNorm of a residual stream plus an optional update, which it
    /// also adds into the stream's next buffer.
    Norm,
}

impl PrepInput {
    /// The kernel the build exports for this input.
    pub fn function_name(self) -> &'static str {
        match self {
            PrepInput::Plain => "tile_prep",
            PrepInput::Norm => "norm_prep",
        }
    }
}

/// What a module builds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Build {
    /// The CUDA-core GEMV, `gemv_s<S>`.
    Gemv,
    /// The tensor-core GEMV (`-DTS_MMA=<chunk bytes>`), `gemv_mma_s<S>`.
    GemvMma(MmaKernel),
    /// The tensor-core GEMV on a persistent grid (`-DTS_MMA=<chunk bytes> -DTS_MMA_PERSIST`,
    /// S <= 4), `gemv_mma_s<S>` with two more parameters (partials scratch, per-tile
    /// arrival counters) ([`Tuning::mma_persistent`]).
    GemvMmaPersist(MmaKernel),
    /// The tensor-core GEMM (`-DTS_GEMM=<parts> -DTS_MMA=<chunk bytes>`), `gemm_p<parts>`;
    /// with `dequant` (`-DTS_DEQ`, one part: [`crate::GemmPrecision::F16Dequant`] on a format
    /// [`crate::caps::dequantizes`] admits) the weights are decoded with their scales and the
    /// kernel takes one more parameter, the rows' powers of two ([`Build::GemmRowPow`]).
    Gemm {
        mma: MmaKernel,
        parts: u32,
        dequant: bool,
    },
    /// The dequantized GEMM's row powers (`-DTS_GEMM_ROWPOW`), `gemm_row_pow_k`: a thread a
    /// row, once per tensor.
    GemmRowPow { mma: MmaKernel },
    /// The split-K tile GEMV for S <= 16: the GEMM kernel (`-DTS_GEMM=2`, hi + lo parts)
    /// with `nt` n8 tiles (1, 2 or 4: S <= 4, 8, 16) and the tile knobs of [`Tuning`];
    /// `gemm_p2`, launched with gridDim.z = splits.
    GemvTiles { mma: MmaKernel, nt: u32 },
    /// The tensor-core GEMVs' activation preparation on the device (`-DTS_PREP`,
    /// `tile_prep`): f32 rows -> the two-part GEMM layout of a `chunk_bytes` kernel (4-bit
    /// codes when `nibbles`), or with `rows` the 16-row GEMV's split layout, for activations
    /// that are already on the device.
    TilePrep {
        chunk_bytes: u32,
        nibbles: bool,
        rows: bool,
        input: PrepInput,
    },
    /// The MoE grouped GEMV over experts of these kernels (variant k = `variants[k]`),
    /// `moe_gemv`; `s` of the key is the pairs per work item.
    Moe { variants: Vec<KernelId> },
}

/// Identity of one compiled module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    /// The format kernel (GEMV, GEMM); unused by [`Build::Moe`].
    pub kernel: KernelId,
    pub build: Build,
    /// GEMV: the batch; MoE: pairs per work item; GEMM: 0.
    pub s: usize,
    /// `sm_XY`.
    pub arch: String,
    /// The `TS_MUTATE_*` symbol, if any (never set outside mutation tests).
    pub mutation: Option<&'static str>,
    pub tuning: Tuning,
}

impl ModuleKey {
    /// The kernel's exported name.
    pub fn function_name(&self) -> String {
        match &self.build {
            Build::Gemv => format!("gemv_s{}", self.s),
            Build::GemvMma(_) | Build::GemvMmaPersist(_) => format!("gemv_mma_s{}", self.s),
            Build::Gemm { parts, .. } => format!("gemm_p{parts}"),
            Build::GemmRowPow { .. } => "gemm_row_pow_k".to_string(),
            Build::GemvTiles { .. } => "gemm_p2".to_string(),
            Build::TilePrep { input, .. } => input.function_name().to_string(),
            Build::Moe { .. } => "moe_gemv".to_string(),
        }
    }

    /// NVRTC options of this build.
    pub fn options(&self) -> Vec<String> {
        let t = &self.tuning;
        // The warpgroup MMA exists only in the architecture-specific sm_90a target.
        let wgmma = match &self.build {
            Build::Gemm { parts, .. } => wgmma_gemm(t, &self.arch, self.kernel.fmt, *parts),
            _ => false,
        };
        let arch = if wgmma {
            format!("{}a", self.arch)
        } else {
            self.arch.clone()
        };
        let mut o = vec![
            format!("--gpu-architecture={arch}"),
            "-std=c++17".to_string(),
        ];
        match &self.build {
            Build::Gemv => {
                o.push(format!("-DTS_FMT={}", self.kernel.fmt));
                o.push(format!("-DTS_GS={}", self.kernel.group));
                o.push(format!("-DTS_S={}", self.s));
            }
            Build::GemvMma(m) | Build::GemvMmaPersist(m) => {
                if matches!(self.build, Build::GemvMmaPersist(_)) {
                    o.push("-DTS_MMA_PERSIST".to_string());
                }
                o.push(format!("-DTS_FMT={}", self.kernel.fmt));
                o.push(format!("-DTS_GS={}", self.kernel.group));
                o.push(format!("-DTS_S={}", self.s));
                o.push(format!("-DTS_MMA={}", m.chunk_bytes));
                if t.mma_warps != Tuning::default().mma_warps {
                    o.push(format!("-DTS_MMA_WARPS={}", t.mma_warps));
                }
                if let Some(d) = t.mma_depth {
                    o.push(format!("-DTS_MMA_DEPTH={d}"));
                }
                if let Some(b) = t.mma_min_blocks {
                    o.push(format!("-DTS_MMA_MIN_BLOCKS={b}"));
                }
                if let Some(c) = t.mma_chains {
                    o.push(format!("-DTS_MMA_CHAINS={c}"));
                }
                if let Some(b) = t.mma_stage {
                    o.push(format!("-DTS_MMA_STAGE={b}"));
                }
                if t.mma_contig {
                    o.push("-DTS_MMA_CONTIG".to_string());
                }
                if t.mma_l2_prefetch != 0 {
                    o.push(format!("-DTS_L2PF={}", t.mma_l2_prefetch));
                }
                if t.diag != 0 {
                    o.push(format!("-DTS_DIAG={}", t.diag));
                }
                if t.mma_segment_p {
                    o.push("-DTS_SEG_P".to_string());
                }
                if t.pdl {
                    o.push("-DTS_PDL".to_string());
                }
            }
            Build::Gemm {
                mma,
                parts,
                dequant,
            } => {
                o.push(format!("-DTS_FMT={}", self.kernel.fmt));
                o.push(format!("-DTS_GS={}", self.kernel.group));
                o.push(format!("-DTS_MMA={}", mma.chunk_bytes));
                o.push(format!("-DTS_GEMM={parts}"));
                if *dequant {
                    o.push("-DTS_DEQ".to_string());
                }
                o.push(format!("-DTS_GEMM_NT={}", t.gemm_nt(*parts)));
                o.push(format!("-DTS_GEMM_STAGES={}", t.gemm_stages));
                o.push(format!("-DTS_GEMM_WDEPTH={}", t.gemm_depth));
                o.push(format!("-DTS_GEMM_MINB={}", t.gemm_min_blocks));
                o.push(format!("-DTS_GEMM_WARPS={}", t.gemm_warps));
                if wgmma {
                    o.push("-DTS_WGMMA".to_string());
                }
            }
            Build::GemmRowPow { mma } => {
                o.push(format!("-DTS_FMT={}", self.kernel.fmt));
                o.push(format!("-DTS_GS={}", self.kernel.group));
                o.push(format!("-DTS_MMA={}", mma.chunk_bytes));
                o.push("-DTS_GEMM_ROWPOW".to_string());
            }
            Build::GemvTiles { mma, nt } => {
                o.push(format!("-DTS_FMT={}", self.kernel.fmt));
                o.push(format!("-DTS_GS={}", self.kernel.group));
                o.push(format!("-DTS_MMA={}", mma.chunk_bytes));
                o.push("-DTS_GEMM=2".to_string());
                o.push(format!("-DTS_GEMM_NT={nt}"));
                o.push(format!("-DTS_GEMM_STAGES={}", t.gemm_stages));
                o.push(format!("-DTS_GEMM_WARPS={}", t.tile_warps));
                o.push(format!("-DTS_GEMM_WDEPTH={}", t.tile_depth));
                o.push(format!("-DTS_GEMM_MINB={}", t.tile_min_blocks));
            }
            Build::TilePrep {
                chunk_bytes,
                nibbles,
                rows,
                input: _,
            } => {
                o.push("-DTS_PREP".to_string());
                o.push(format!("-DTS_MMA={chunk_bytes}"));
                o.push(format!("-DTS_PREP_NIB={}", u32::from(*nibbles)));
                if *rows {
                    o.push("-DTS_PREP_ROWS".to_string());
                }
                if t.pdl {
                    o.push("-DTS_PDL".to_string());
                }
            }
            Build::Moe { variants } => {
                o.push(format!("-DTS_MOE={}", self.s));
                let list: String = variants
                    .iter()
                    .enumerate()
                    .map(|(k, v)| format!("TS_MOE_CASE({k},{},{})", v.fmt, v.group))
                    .collect();
                o.push(format!("-DTS_MOE_LIST={list}"));
            }
        }
        if let Some(m) = self.mutation {
            o.push(format!("-D{m}"));
        }
        o
    }

    pub(crate) fn describe(&self) -> String {
        format!("gemv.cu [{}]", self.options().join(" "))
    }
}

/// Whether the GEMM of format `fmt` with `parts` activation parts runs on the warpgroup
/// MMA on a device of architecture `arch` ([`Tuning::gemm_wgmma`]): the one rule that the
/// build's options and the activations' layout ([`crate::layout::GemmLayout::canonical`])
/// both follow. Only formats with a tensor-core GEMM reach it (`Build::Gemm`); of those the
/// row-scaled ones need nothing more, the scaled ones [`Tuning::gemm_wgmma_scaled`].
pub fn wgmma_gemm(tuning: &Tuning, arch: &str, fmt: u32, parts: u32) -> bool {
    tuning.gemm_wgmma
        && arch == "sm_90"
        && (tuning.gemm_wgmma_scaled || crate::caps::row_scaled(fmt))
        && tuning.gemm_nt(parts) == 8
        && tuning.wgmma_block_fits()
}

/// `sm_XY` of a compute capability (H200: 9.0 -> sm_90).
pub fn arch_of(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// `Ok` when libnvrtc can be opened (no GPU needed to compile), else why not.
pub fn nvrtc_available() -> Result<(), CudaError> {
    // SAFETY: only dlopens libnvrtc by its standard names and closes it; no symbol is called.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::Unavailable {
            why: "no NVRTC: libnvrtc.so not found".into(),
        })
    }
}

fn cache() -> &'static Mutex<HashMap<ModuleKey, Ptx>> {
    static PTX: OnceLock<Mutex<HashMap<ModuleKey, Ptx>>> = OnceLock::new();
    PTX.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The PTX of `key`, compiled on first use. The lock is not held while NVRTC runs, so
/// [`prewarm`] compiles in parallel; two threads racing for one build both compile it and
/// keep either result (they are identical).
pub fn ptx(key: &ModuleKey) -> Result<Ptx, CudaError> {
    // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
    if let Some(p) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(key) {
        return Ok(p.clone());
    }
    let opts = CompileOptions {
        options: key.options(),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(GEMV_NVRTC_SOURCE, opts).map_err(|e| CudaError::Compile {
        module: key.describe(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })?;
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), ptx.clone());
    Ok(ptx)
}

/// Compiles `keys` on all cores (NVRTC is thread-safe), so a run that will need many
/// builds pays for them once, in parallel, up front.
pub fn prewarm(keys: &[ModuleKey]) -> Result<(), CudaError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(keys.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let first_error: Mutex<Option<CudaError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(key) = keys.get(k) else { break };
                    if let Err(e) = ptx(key) {
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::fmt_id;

    #[test]
    fn options_name_the_build() {
        let key = ModuleKey {
            kernel: KernelId {
                fmt: fmt_id::INT4_G,
                group: 64,
            },
            build: Build::Gemv,
            s: 3,
            arch: arch_of(9, 0),
            mutation: None,
            tuning: Tuning::default(),
        };
        assert_eq!(key.function_name(), "gemv_s3");
        assert_eq!(
            key.options(),
            [
                "--gpu-architecture=sm_90",
                "-std=c++17",
                "-DTS_FMT=6",
                "-DTS_GS=64",
                "-DTS_S=3"
            ]
        );
    }

    /// The source's format ids are the ones caps.rs launches with.
    #[test]
    fn source_ids_match_the_table() {
        let ids = [
            ("TS_FMT_F32", fmt_id::F32),
            ("TS_FMT_F16", fmt_id::F16),
            ("TS_FMT_BF16", fmt_id::BF16),
            ("TS_FMT_INT8_ROW", fmt_id::INT8_ROW),
            ("TS_FMT_INT4_ROW", fmt_id::INT4_ROW),
            ("TS_FMT_INT2_ROW", fmt_id::INT2_ROW),
            ("TS_FMT_INT4_G", fmt_id::INT4_G),
            ("TS_FMT_INT3_G64", fmt_id::INT3_G64),
            ("TS_FMT_E8", fmt_id::E8),
            ("TS_FMT_FP8_F32", fmt_id::FP8_F32),
            ("TS_FMT_FP8_UE8M0", fmt_id::FP8_UE8M0),
            ("TS_FMT_HFQ4", fmt_id::HFQ4),
            ("TS_FMT_MQ4_V2", fmt_id::MQ4_V2),
            ("TS_FMT_MQ4C", fmt_id::MQ4C),
            ("TS_FMT_MQ4K", fmt_id::MQ4K),
            ("TS_FMT_MXFP4", fmt_id::MXFP4),
        ];
        for (name, id) in ids {
            let line = format!("#define {name} {id}\n");
            assert!(
                GEMV_SOURCE.contains(&line),
                "gemv.cu lacks `{}`",
                line.trim()
            );
        }
        // The rows-per-warp rule of the source is layout::rows_per_warp's.
        assert!(GEMV_SOURCE.contains("enum { R = S <= 4 ? 2 : 4 };"));
        assert!(GEMV_SOURCE.contains("__launch_bounds__(128)"));
        // The GEMM's block shape is layout.rs's.
        assert!(GEMV_SOURCE.contains(&format!(
            "#define TS_GEMM_WARPS {}\n",
            crate::layout::GEMM_WARPS
        )));
        assert!(GEMV_SOURCE.contains(&format!(
            "#define TS_MMA_WARPS {}\n",
            crate::layout::MMA_WARPS
        )));
        // tile_prep's column blocks are the launch's, and so are the fused splits' blocks.
        assert!(GEMV_SOURCE.contains(&format!(
            "#define TS_PREP_COLS {}\n",
            crate::layout::PREP_COLS
        )));
        assert!(GEMV_SOURCE.contains(&format!(
            "#define TS_PREP_FUSED_THREADS {}\n",
            crate::layout::PREP_FUSED_THREADS
        )));
        // The split's segment is one number in the kernels, split.cuh and layout.rs, and
        // every NVRTC build carries split.cuh.
        let seg = crate::layout::MMA_SUM_SEGMENT;
        assert!(GEMV_SOURCE.contains(&format!("#define TS_SUM_SEG {seg}\n")));
        assert!(GEMV_NVRTC_SOURCE.contains(&format!("#define TS_SPLIT_SEG {seg}\n")));
        assert!(GEMV_NVRTC_SOURCE.ends_with(GEMV_SOURCE));
    }

    /// The warpgroup GEMM is asked for only where it exists: an sm_90 device, the
    /// row-scaled formats, the GEMM build (not the tile GEMV), 8 n8 tiles, whole
    /// warpgroups and 3+ stages; then the build targets sm_90a and defines TS_WGMMA.
    #[test]
    fn the_warpgroup_gemm_rule() {
        let on = Tuning::default();
        let off = Tuning {
            gemm_wgmma: false,
            ..Tuning::default()
        };
        assert!(on.check().is_ok());
        for fmt in [fmt_id::INT4_ROW, fmt_id::INT8_ROW] {
            for parts in [1, 2] {
                assert!(wgmma_gemm(&on, "sm_90", fmt, parts));
                assert!(!wgmma_gemm(&off, "sm_90", fmt, parts));
            }
            for arch in ["sm_80", "sm_89", "sm_100", "sm_120"] {
                assert!(!wgmma_gemm(&on, arch, fmt, 1), "{arch}");
            }
        }
        // The scaled formats follow `gemm_wgmma_scaled` (on by default); the row formats
        // do not.
        let rows_only = Tuning {
            gemm_wgmma_scaled: false,
            ..Tuning::default()
        };
        for fmt in [fmt_id::INT4_G, fmt_id::FP8_F32, fmt_id::MQ4_V2] {
            assert!(wgmma_gemm(&on, "sm_90", fmt, 1));
            assert!(!wgmma_gemm(&on, "sm_89", fmt, 1));
            assert!(!wgmma_gemm(&rows_only, "sm_90", fmt, 1));
            assert!(!wgmma_gemm(&off, "sm_90", fmt, 1));
        }
        for fmt in [fmt_id::INT4_ROW, fmt_id::INT8_ROW] {
            assert!(wgmma_gemm(&rows_only, "sm_90", fmt, 1));
        }
        let four = Tuning {
            gemm_nt_f16: 4,
            ..on.clone()
        };
        assert!(!wgmma_gemm(&four, "sm_90", fmt_id::INT4_ROW, 1));
        assert!(wgmma_gemm(&four, "sm_90", fmt_id::INT4_ROW, 2));
        for bad in [
            Tuning {
                gemm_warps: 2,
                ..on.clone()
            },
            Tuning {
                gemm_stages: 2,
                ..on.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
            assert!(!wgmma_gemm(&bad, "sm_90", fmt_id::INT4_ROW, 1), "{bad:?}");
        }
        let key = |build, tuning: &Tuning| ModuleKey {
            kernel: KernelId {
                fmt: fmt_id::INT4_ROW,
                group: 0,
            },
            build,
            s: 0,
            arch: arch_of(9, 0),
            mutation: None,
            tuning: tuning.clone(),
        };
        let gemm = Build::Gemm {
            mma: MmaKernel { chunk_bytes: 16 },
            parts: 1,
            dequant: false,
        };
        let o = key(gemm.clone(), &on).options();
        assert_eq!(o[0], "--gpu-architecture=sm_90a");
        assert!(o.contains(&"-DTS_WGMMA".to_string()));
        let o = key(gemm, &off).options();
        assert_eq!(o[0], "--gpu-architecture=sm_90");
        assert!(!o.contains(&"-DTS_WGMMA".to_string()));
        let tiles = Build::GemvTiles {
            mma: MmaKernel { chunk_bytes: 16 },
            nt: 4,
        };
        assert!(
            !key(tiles, &on)
                .options()
                .contains(&"-DTS_WGMMA".to_string())
        );
    }

    #[test]
    fn gemm_and_moe_builds_name_themselves() {
        let mut key = ModuleKey {
            kernel: KernelId {
                fmt: fmt_id::MQ4_V2,
                group: 0,
            },
            build: Build::Gemm {
                mma: MmaKernel { chunk_bytes: 8 },
                parts: 2,
                dequant: false,
            },
            s: 0,
            arch: arch_of(9, 0),
            mutation: None,
            tuning: Tuning::default(),
        };
        assert_eq!(key.function_name(), "gemm_p2");
        let o = key.options();
        assert!(o.contains(&"-DTS_GEMM=2".to_string()), "{o:?}");
        assert!(o.contains(&"-DTS_MMA=8".to_string()), "{o:?}");
        assert!(o.contains(&"-DTS_GEMM_NT=8".to_string()), "{o:?}");
        assert!(!o.contains(&"-DTS_DEQ".to_string()), "{o:?}");
        key.build = Build::Gemm {
            mma: MmaKernel { chunk_bytes: 8 },
            parts: 1,
            dequant: true,
        };
        assert_eq!(key.function_name(), "gemm_p1");
        assert!(key.options().contains(&"-DTS_DEQ".to_string()));
        key.build = Build::GemmRowPow {
            mma: MmaKernel { chunk_bytes: 8 },
        };
        assert_eq!(key.function_name(), "gemm_row_pow_k");
        let o = key.options();
        assert!(o.contains(&"-DTS_GEMM_ROWPOW".to_string()), "{o:?}");
        assert!(!o.iter().any(|v| v.starts_with("-DTS_GEMM=")), "{o:?}");
        key.build = Build::Moe {
            variants: vec![
                KernelId {
                    fmt: fmt_id::INT4_G,
                    group: 64,
                },
                KernelId {
                    fmt: fmt_id::FP8_F32,
                    group: 0,
                },
            ],
        };
        key.s = 4;
        assert_eq!(key.function_name(), "moe_gemv");
        assert!(
            key.options()
                .contains(&"-DTS_MOE_LIST=TS_MOE_CASE(0,6,64)TS_MOE_CASE(1,9,0)".to_string())
        );
        assert!(Tuning::default().check().is_ok());
        let bad = Tuning {
            gemm_nt_split: 3,
            ..Tuning::default()
        };
        assert!(bad.check().is_err());
    }

    #[cfg(feature = "mutation-test")]
    #[test]
    fn mutations_exist_in_the_source_and_are_off_by_default() {
        for m in [
            Mutation::SwapNibbles,
            Mutation::GroupOffByOne,
            Mutation::Scale1Pct,
            Mutation::SplitSum,
        ] {
            assert!(
                GEMV_SOURCE.contains(&format!("#ifdef {}", m.define())),
                "{m:?}"
            );
        }
        assert_eq!(Mutation::parse("scale-1pct"), Some(Mutation::Scale1Pct));
        assert_eq!(Mutation::parse("nope"), None);
    }
}
