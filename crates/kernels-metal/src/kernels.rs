//! The format -> WGSL kernel table, shared by every tier that runs `shaders/wgsl/` (this
//! crate's wgpu backend and kernels-rocm's raw-Vulkan backend): which file, entry point and
//! override constants serve each registry format, the workgroup shape, the dispatch grid
//! for (O, S), and the push-constant block. The contract is /work/briefs/shader-contract.md
//! and docs/WGPU.md.
//!
//! This module never touches wgpu (it builds with `default-features = false`), so the two
//! tiers read one table and one set of shader files and cannot drift apart.
//!
//! Every kernel has the same interface:
//! - group 0: binding 0 `weights` (the container's weight bytes, read as u32 words; the
//!   buffer is zero-padded to a multiple of [`BUFFER_ALIGN`] bytes), binding 1 `scales`
//!   (the sidecar bytes, padded the same way; a [`BUFFER_ALIGN`]-byte zero dummy when the
//!   format has none; for the fp8 family, the rows' NaN flags after them: [`scale_binding`]),
//!   binding 2 `x` ([S, x_stride] f32, zero past I, in the stored domain:
//!   the host rotates it for rotated formats; where [`int8_activations`] and the host opts
//!   in, followed by [`pack_int8_activations_as`] with `Params::reserved0` = the layout,
//!   [`int8_x_layout`]), binding 3 `y`
//!   ([S, O] f32, read-write);
//! - immediates (push constants): [`Params`], 32 bytes;
//! - workgroups of `WG` invocations ([`KernelSpec::workgroup_size`]: [`WORKGROUP_SIZE`], or
//!   [`NARROW_WORKGROUP_SIZE`] for the packed-activation S = 1 kernels), each owning `ROWS`
//!   consecutive rows (an override, [`rows_per_workgroup`]) and computing all S outputs of
//!   those rows;
//! - overrides `S` (the batch, 1..=16: one pipeline per S), `ROWS`, `WG`, `MUTATE` (0; see
//!   `Mutation` under the `mutation-test` feature) and the format's own constants below.

use quant_core::tables::e4m3_is_nan;
use quant_core::{Format, QTensor, QuantError};
use std::borrow::Cow;

/// Invocations of one workgroup (every pipeline but those of [`NARROW_WORKGROUP_SIZE`]).
pub const WORKGROUP_SIZE: u32 = 128;
/// Invocations of one workgroup of the S = 1 kernels with a packed-activation path
/// ([`KernelSpec::packs_int8_x`]). Their 4-row workgroups hold 71-80 registers an invocation
/// on the H200, so at 128 invocations 6-7 share an SM and the 1536 workgroups of
/// [6144 x 16384] run in 1.7-1.9 waves; at 64, 12-14 share one and the grid fits in one
/// wave (int4-g64 64% -> 72% of the copy ceiling through wgpu, docs/VULKAN.md "Session
/// 13"). The 8-bit kernels lost at 64 (int8-row 77% -> 75%) and keep 128.
pub const NARROW_WORKGROUP_SIZE: u32 = 64;
/// Largest batch a kernel computes (the accumulators are sized for it).
pub const MAX_S: usize = 16;
/// Activation rows are padded to a multiple of this many floats: a multiple of every
/// kernel's weights per work item (at most 256, one block), so no work item reads past the
/// padded row.
pub const X_STRIDE_ALIGN: usize = 256;
/// Weight and scale buffers are zero-padded to a multiple of this many bytes, plus one
/// more such unit, so kernels may read whole 16-byte vectors and the word after an
/// unaligned read without leaving the buffer.
pub const BUFFER_ALIGN: usize = 16;
/// Workgroups along the grid's x dimension before it wraps into y (Vulkan and Metal
/// guarantee 65535 per dimension).
pub const GRID_X_MAX: u32 = 32768;

/// The shared-memory variant and the subgroup variant of every kernel file, in order.
/// A `.subgroup.wgsl` file needs subgroup arithmetic (wgpu `Features::SUBGROUP`, naga
/// `Capabilities::SUBGROUP`); it carries no `enable subgroups;` directive because naga 30
/// rejects it as not yet implemented.
pub const SHADER_FILES: &[&str] = &[
    "gemv_float.wgsl",
    "gemv_float.subgroup.wgsl",
    "gemv_int_row.wgsl",
    "gemv_int_row.subgroup.wgsl",
    "gemv_int_group.wgsl",
    "gemv_int_group.subgroup.wgsl",
    "gemv_int3.wgsl",
    "gemv_int3.subgroup.wgsl",
    "gemv_e8.wgsl",
    "gemv_e8.subgroup.wgsl",
    "gemv_fp8.wgsl",
    "gemv_fp8.subgroup.wgsl",
    "gemv_mxfp4.wgsl",
    "gemv_mxfp4.subgroup.wgsl",
    "gemv_affine256.wgsl",
    "gemv_affine256.subgroup.wgsl",
    "gemv_ggml_q.wgsl",
    "gemv_ggml_q.subgroup.wgsl",
    "gemv_ggml_k.wgsl",
    "gemv_ggml_k.subgroup.wgsl",
];

/// The files under `shaders/wgsl/` that kernels are composed of: the prelude every kernel
/// starts with (interface and helpers), one file per family, and the two tails (the
/// workgroup reduction with shared memory or with subgroup operations). A kernel of
/// [`SHADER_FILES`] is `prelude + family + tail` ([`shader_parts`]), so what every family
/// shares is written once.
pub const SOURCE_FILES: &[&str] = &[
    PRELUDE_FILE,
    TAIL_SHARED_MEMORY_FILE,
    TAIL_SUBGROUP_FILE,
    "gemv_float.wgsl",
    "gemv_int_row.wgsl",
    "gemv_int_group.wgsl",
    "gemv_int3.wgsl",
    "gemv_e8.wgsl",
    "gemv_fp8.wgsl",
    "gemv_mxfp4.wgsl",
    "gemv_affine256.wgsl",
    "gemv_ggml_q.wgsl",
    "gemv_ggml_k.wgsl",
];
/// The interface and helpers at the top of every kernel.
pub const PRELUDE_FILE: &str = "prelude.wgsl";
/// The entry point and shared-memory reduction of the plain `gemv_*.wgsl` kernels.
pub const TAIL_SHARED_MEMORY_FILE: &str = "tail.shared-memory.wgsl";
/// The entry point and subgroup reduction of the `gemv_*.subgroup.wgsl` kernels.
pub const TAIL_SUBGROUP_FILE: &str = "tail.subgroup.wgsl";

/// The source files (names in [`SOURCE_FILES`]) that kernel `file` (a name from
/// [`SHADER_FILES`]) is composed of, in order: prelude, family, tail.
pub fn shader_parts(file: &str) -> Option<[&'static str; 3]> {
    let &name = SHADER_FILES.iter().find(|&&f| f == file)?;
    match name.strip_suffix(".subgroup.wgsl") {
        Some(stem) => {
            let family = SOURCE_FILES
                .iter()
                .find(|f| f.strip_suffix(".wgsl") == Some(stem))?;
            Some([PRELUDE_FILE, family, TAIL_SUBGROUP_FILE])
        }
        None => Some([PRELUDE_FILE, name, TAIL_SHARED_MEMORY_FILE]),
    }
}

/// The WGSL source of kernel `file` (a name from [`SHADER_FILES`]), composed at compile
/// time from its [`shader_parts`] and compiled into the crate.
pub fn shader_source(file: &str) -> Option<&'static str> {
    macro_rules! wgsl {
        ($($name:tt)+) => {
            include_str!(concat!("../../../shaders/wgsl/", $($name)+))
        };
    }
    macro_rules! sources {
        ($($stem:literal),* $(,)?) => {{
            $(
                if file == concat!($stem, ".wgsl") {
                    return Some(concat!(
                        wgsl!("prelude.wgsl"),
                        wgsl!($stem, ".wgsl"),
                        wgsl!("tail.shared-memory.wgsl")
                    ));
                }
                if file == concat!($stem, ".subgroup.wgsl") {
                    return Some(concat!(
                        wgsl!("prelude.wgsl"),
                        wgsl!($stem, ".wgsl"),
                        wgsl!("tail.subgroup.wgsl")
                    ));
                }
            )*
            None
        }};
    }
    sources!(
        "gemv_float",
        "gemv_int_row",
        "gemv_int_group",
        "gemv_int3",
        "gemv_e8",
        "gemv_fp8",
        "gemv_mxfp4",
        "gemv_affine256",
        "gemv_ggml_q",
        "gemv_ggml_k",
    )
}

/// Which kernel serves a format.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct KernelSpec {
    /// The shared-memory-reduction file (runs everywhere).
    pub file: &'static str,
    /// The same kernel reducing with `subgroupAdd` (only where subgroups are offered).
    pub subgroup_file: &'static str,
    /// Entry point of both files.
    pub entry: &'static str,
    /// The format's override constants (name, value). `S`, `ROWS`, `WG` and `MUTATE` are
    /// added by [`KernelSpec::overrides`].
    pub constants: &'static [(&'static str, f64)],
}

/// Rows one workgroup of the not yet measured families owns at batch `s`: 4 at S = 1 (four independent row streams per
/// invocation keep enough loads in flight), 2 up to S = 4, 1 beyond (the S accumulators of
/// every row live in registers).
pub const fn rows_per_workgroup(s: usize) -> u32 {
    if s <= 1 {
        4
    } else if s <= 4 {
        2
    } else {
        1
    }
}

/// Files whose default rows a workgroup above S = 1 come from the H200 measurements of the
/// five target formats (docs/WGPU.md). At S = 1 every family takes [`MAX_ROWS`]: the S = 1
/// paths share each activation read across the rows (docs/VULKAN.md, "Speed").
const MEASURED_FILES: [&str; 4] = [
    "gemv_int_row.wgsl",
    "gemv_int_group.wgsl",
    "gemv_fp8.wgsl",
    "gemv_affine256.wgsl",
];
/// Most rows a workgroup owns (the kernels' per-row arrays hold 4).
pub const MAX_ROWS: u32 = 4;
/// Most accumulators (ROWS * S) of one invocation.
pub const MAX_ROWS_TIMES_S: usize = 16;

impl KernelSpec {
    /// Whether `rows` rows a workgroup at batch `s` is a variant the kernels admit:
    /// 1 <= rows <= [`MAX_ROWS`] and `rows * s <= `[`MAX_ROWS_TIMES_S`], 1 <= s <= [`MAX_S`].
    /// Also admitted: [`MAX_ROWS`] rows at any S where [`KernelSpec::batch_tiled`] (that
    /// path keeps S x 4 partials in registers, not in the 16-entry private arrays).
    pub fn admits(&self, s: usize, rows: u32) -> bool {
        (1..=MAX_S).contains(&s)
            && (1..=MAX_ROWS).contains(&rows)
            && ((rows as usize)
                .checked_mul(s)
                .is_some_and(|v| v <= MAX_ROWS_TIMES_S)
                || (rows == MAX_ROWS && self.batch_tiled()))
    }

    /// The value of the format constant `name` (`BITS`, `GS`, ...), if the kernel has it.
    fn constant(&self, name: &str) -> Option<f64> {
        self.constants.iter().find(|c| c.0 == name).map(|c| c.1)
    }

    /// Whether the kernel has the S > 1 path that owns [`MAX_ROWS`] rows a workgroup and
    /// reads each activation vector once for all of them (WGSL `fastb()`: gemv_int_row
    /// BITS 8 and 4, gemv_int_group with GS a multiple of 32, gemv_fp8, gemv_affine256).
    /// The shaders take it when S > 1 and ROWS = 4; keep this in step with their `fastb()`.
    pub fn batch_tiled(&self) -> bool {
        if self.file == INT_ROW.0 {
            self.constant("BITS").is_some_and(|b| b == 8.0 || b == 4.0)
        } else if self.file == INT_GROUP.0 {
            self.constant("GS").is_some_and(|g| g % 32.0 == 0.0)
        } else {
            self.file == FP8.0 || self.file == AFFINE.0
        }
    }

    /// The default rows a workgroup at batch `s`: at S = 1, [`MAX_ROWS`] for every family
    /// (the S = 1 paths of int_row, int_group, fp8 and affine256 read each activation
    /// vector once for all the workgroup's rows; 8 rows, tried in session 5, were slower on
    /// the H200: docs/VULKAN.md); above S = 1, 1 for the families measured on the H200
    /// (int_row, int_group, fp8, affine256; docs/WGPU.md) and [`rows_per_workgroup`] for the
    /// others (not yet measured).
    ///
    /// Where [`KernelSpec::batch_tiled`], S > 1 takes [`MAX_ROWS`] too (the 4-row batch
    /// path), unless [`batch_tiling`] is off (`TESSERA_WGSL_BATCH_TILE=0`: today's path,
    /// for A/B runs; the Vulkan tier reads it when it is built).
    pub fn rows(&self, s: usize) -> u32 {
        if s <= 1 || (self.batch_tiled() && batch_tiling()) {
            MAX_ROWS
        } else if MEASURED_FILES.contains(&self.file) {
            1
        } else {
            rows_per_workgroup(s)
        }
    }

    /// Whether the kernel has the S = 1 path on packed int8 activations (WGSL
    /// `partial1_i8`): gemv_int_row BITS 4, gemv_int_group with GS a multiple of 32 (one
    /// 32-weight block never straddles two groups), gemv_affine256 (a 32-weight block lies
    /// in one half-block; s sum q x + z sum x, sum x from the header's plane sums). The one
    /// place that says which formats take [`int8_activations`].
    pub fn packs_int8_x(&self) -> bool {
        if self.file == INT_ROW.0 {
            self.constant("BITS").is_some_and(|b| b == 4.0)
        } else if self.file == INT_GROUP.0 {
            self.constant("GS").is_some_and(|g| g % 32.0 == 0.0)
        } else {
            self.file == AFFINE.0
        }
    }

    /// Invocations a workgroup of the pipeline for batch `s` (the `WG` override):
    /// [`NARROW_WORKGROUP_SIZE`] at S = 1 where [`KernelSpec::packs_int8_x`], else
    /// [`WORKGROUP_SIZE`].
    pub fn workgroup_size(&self, s: usize) -> u32 {
        if s == 1 && self.packs_int8_x() {
            NARROW_WORKGROUP_SIZE
        } else {
            WORKGROUP_SIZE
        }
    }

    /// The file to compile: the subgroup variant where the device offers subgroup
    /// arithmetic, the shared-memory one otherwise.
    pub fn file_for(&self, subgroups: bool) -> &'static str {
        if subgroups {
            self.subgroup_file
        } else {
            self.file
        }
    }

    /// Every override constant of the pipeline for batch `s` with `rows` rows a workgroup
    /// (normally [`rows_per_workgroup`]`(s)`) and mutation `mutate` (0 = none).
    pub fn overrides(&self, s: usize, rows: u32, mutate: u32) -> Vec<(&'static str, f64)> {
        let mut v = self.constants.to_vec();
        v.push(("S", s as f64));
        v.push(("ROWS", f64::from(rows)));
        v.push(("WG", f64::from(self.workgroup_size(s))));
        v.push(("MUTATE", f64::from(mutate)));
        v
    }

    /// The dispatch grid for O rows with `rows` rows a workgroup: workgroup w (=
    /// x + y * grid_x) owns rows [w * rows, (w + 1) * rows); workgroups past O do nothing.
    pub fn dispatch(&self, o: usize, rows: u32) -> Result<[u32; 3], QuantError> {
        let n = o.div_ceil(rows.max(1) as usize);
        let n = u32::try_from(n).map_err(|_| QuantError::SizeOverflow {
            format: Format::F32,
            rows: o,
            cols: 0,
        })?;
        let x = n.clamp(1, GRID_X_MAX);
        Ok([x, n.div_ceil(x).max(1), 1])
    }
}

/// The immediates (push constants) of every kernel, as WGSL's `struct Params`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Params {
    /// O: rows of the weight matrix.
    pub o: u32,
    /// I: logical weights a row.
    pub i: u32,
    /// S: activation rows (equal to the pipeline's `S` override).
    pub s: u32,
    /// Floats from one activation row to the next ([`x_stride`]).
    pub x_stride: u32,
    /// Stored bytes of one weight row (the registry's `row_bytes`).
    pub row_bytes: u32,
    /// Stored sidecar scales of one row (per-group formats: ceil(I / group)) or of one
    /// 128-row band (fp8 tiles: ceil(I / 128)); the registry's `scale_count(1, I)`.
    pub sc_row: u32,
    /// 1: packed int8 activations follow x ([`int8_activations`] kernels at S = 1 only);
    /// otherwise zero.
    pub reserved0: u32,
    /// Zero; no kernel reads it. (Until session 12, 1 selected gemv_fp8's session-4 E4M3
    /// decode at S = 1 for the benches' comparison; docs/VULKAN.md.)
    pub reserved1: u32,
}

impl Params {
    /// The immediates for an [O, I] tensor of `format` at batch `s`, from the registry.
    pub fn new(format: Format, rows: usize, cols: usize, s: usize) -> Result<Params, QuantError> {
        let spec = format.spec();
        spec.check_shape(rows, cols)?;
        let too_big = || QuantError::SizeOverflow { format, rows, cols };
        let u = |v: u64| u32::try_from(v).map_err(|_| too_big());
        let row_bytes = spec.row_bytes(cols)?;
        // The kernels index weights in u32 words and bytes in u32: the whole buffer must fit.
        let total = spec.weight_bytes(rows, cols)?;
        u(total
            .checked_add(2 * BUFFER_ALIGN as u64)
            .ok_or_else(too_big)?)?;
        let stride = x_stride(cols).ok_or_else(too_big)?;
        u((stride as u64)
            .checked_mul(s as u64)
            .ok_or_else(too_big)?
            .checked_mul(4)
            .ok_or_else(too_big)?)?;
        Ok(Params {
            o: u(rows as u64)?,
            i: u(cols as u64)?,
            s: u(s as u64)?,
            x_stride: u(stride as u64)?,
            row_bytes: u(row_bytes)?,
            sc_row: u(spec.scale_count(1, cols)?)?,
            reserved0: 0,
            reserved1: 0,
        })
    }

    /// The 32 bytes as the shaders read them (little-endian u32s).
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        let words = [
            self.o,
            self.i,
            self.s,
            self.x_stride,
            self.row_bytes,
            self.sc_row,
            self.reserved0,
            self.reserved1,
        ];
        for (dst, w) in b.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// Whether the S > 1 batch path of [`KernelSpec::batch_tiled`] kernels is on: yes unless
/// `TESSERA_WGSL_BATCH_TILE=0` (then [`KernelSpec::rows`] falls back to the rows of the
/// per-row path, which re-reads the activations once per row; kept for A/B runs).
pub fn batch_tiling() -> bool {
    std::env::var("TESSERA_WGSL_BATCH_TILE").as_deref() != Ok("0")
}

/// Floats from one activation row to the next for I = `cols`: I rounded up to
/// [`X_STRIDE_ALIGN`].
pub fn x_stride(cols: usize) -> Option<usize> {
    cols.checked_next_multiple_of(X_STRIDE_ALIGN)
}

/// 16-byte vectors of packed int8 activations a 32-weight block: planes 0, 1, 2 (two each)
/// and a header ([`pack_int8_activations`]).
pub const INT8_X_VEC4S_PER_BLOCK: usize = 7;

/// Whether the kernel of `format` at batch `s` can take packed int8 activations
/// ([`pack_int8_activations_as`], appended to x, with `Params::reserved0` = the layout,
/// [`int8_x_layout`]): at S = 1 where [`KernelSpec::packs_int8_x`] (int4-row, the int4-g*
/// formats whose group is a multiple of 32, the 136-byte affine formats), where
/// `partial1_i8` replaces 3-4 float operations a weight by one quarter of a packed 4 x 8-bit
/// dot product per plane (`dot4I8Packed`).
pub fn int8_activations(format: Format, s: usize) -> bool {
    s == 1 && kernel_for(format).is_some_and(|k| k.packs_int8_x())
}

/// The bits of the f32 1.5 * 2^23: an integer |v| < 2^22 added to them gives the f32
/// 1.5 * 2^23 + v exactly.
pub const INT8_X_BIAS: u32 = 0x4B40_0000;

/// A block whose largest |x| exceeds this many times the mean |x| of its other 31 takes the
/// f32 path: the planes' error, up to d / 2^17 = max |x| / (127 * 2^17) an element, then stays
/// below 32 / (127 * 2^17) < 2e-6 of the block's typical |x|. Without it one outlier
/// (1e4 among N(0, 1) values) cost 1e-4 of sum |w x| on rows whose weight under the
/// outlier is small (measured on lavapipe, kernels-rocm's device test). It was 128 until
/// session 28, when a CI run drew a 50 among N(0, 1) values (62 times their mean) in the
/// block under the one weight that an int4-g64 row kept after quantization, that weight on
/// an |x| of about 0.02: 1.014e-4 of sum |w x| (the wgpu conformance suite, seed
/// 1796662088840016110, I < group O = 9 I = 63). The planes' error is relative to the
/// block's largest |x|, so a row whose sum |w x| rests on one small activation can still
/// exceed 1e-4 where that block's range is wide; this bound makes it rarer, not impossible.
const INT8_X_OUTLIER: f64 = 32.0;

/// Activations below this (in absolute value, the block's largest) take the f32 path:
/// d / 256 stays a normal f32 above it.
const INT8_X_TINY: f32 = 1e-30;

/// The packed int8 activations of one x row (`x`: x_stride floats, a multiple of 32), as
/// the u32 words appended after it: per 32-element block, 3 planes of 8 words, then a
/// header of 4 words. With d = max |x| / 127 over the block and Q = round(x 65536 / d)
/// (|Q| <= 127 * 65536), Q = 65536 q0 + 256 q1 + q2 with q1, q2 balanced bytes in
/// [-128, 127] (so |q0| <= 127 and no clamp ever bites), and
/// |x - d (q0 + q1 / 256 + q2 / 65536)| <= d / 2^17 (+ one f32 rounding of d).
/// Plane word 2k holds elements 8k, 8k + 2, 8k + 4, 8k + 6 (byte j = 8k + 2j) and word
/// 2k + 1 the odd ones, as a 4-bit row's nibble bytes `w & 0x0F0F0F0F` and
/// `(w >> 4) & 0x0F0F0F0F` of word k hold them. Header: the bits of d / 256, then for
/// each plane [`INT8_X_BIAS`] - 8 sum q_k (the offset-binary weights' `- 8` term, on the
/// bits of 1.5 2^23, so the kernel's integer sums are f32 bits without a conversion). A block
/// with a non-finite value, or whose largest |x| is below 1e-30 but not 0, gets a NaN
/// for d / 256 and zero planes, and so does a block dominated by one outlier
/// (`INT8_X_OUTLIER`): the kernel then reads that block's floats instead.
pub fn pack_int8_activations(x: &[f32]) -> Vec<u32> {
    let blocks = x.len() / 32;
    let mut out = Vec::with_capacity(blocks * INT8_X_VEC4S_PER_BLOCK * 4);
    for blk in x.chunks_exact(32) {
        let finite = blk.iter().all(|v| v.is_finite());
        let max = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let rest = blk.iter().map(|v| f64::from(v.abs())).sum::<f64>() - f64::from(max);
        let outlier = f64::from(max) > INT8_X_OUTLIER * rest / 31.0;
        let mut words = [0u32; 28];
        words[25..28].fill(INT8_X_BIAS);
        if !finite || (max > 0.0 && (max < INT8_X_TINY || outlier)) {
            words[24] = 0x7FC0_0000;
        } else if max > 0.0 {
            let d = max / 127.0;
            let lim = 127 * 65536;
            let mut sums = [0i32; 3];
            for (e, &v) in blk.iter().enumerate() {
                // |v / d| <= 127 up to d's rounding; the clamp only undoes that rounding.
                let q = ((f64::from(v) / f64::from(d)) * 65536.0).round() as i32;
                let q = q.clamp(-lim, lim);
                let q2 = ((q + 128) & 255) - 128;
                let q = (q - q2) >> 8;
                let q1 = ((q + 128) & 255) - 128;
                let q0 = (q - q1) >> 8;
                let word = 2 * (e / 8) + (e % 2);
                let byte = (e % 8) / 2;
                for (k, qk) in [q0, q1, q2].into_iter().enumerate() {
                    words[8 * k + word] |= u32::from(qk as i8 as u8) << (8 * byte);
                    sums[k] += qk;
                }
            }
            words[24] = (d / 256.0).to_bits();
            for (w, sum) in words[25..28].iter_mut().zip(sums) {
                *w = w.wrapping_sub((8 * sum) as u32);
            }
        }
        out.extend_from_slice(&words);
    }
    out
}

/// `Params::reserved0` for [`pack_int8_activations`]'s block-by-block order.
pub const INT8_X_INTERLEAVED: u32 = 1;
/// `Params::reserved0` for [`pack_int8_activations_planar`]'s order (the default).
pub const INT8_X_PLANAR: u32 = 2;

/// The packed int8 layout the hosts use, as `Params::reserved0`: [`INT8_X_PLANAR`] unless
/// `TESSERA_INT8_X_LAYOUT=interleaved` ([`INT8_X_INTERLEAVED`], session 5's order; A/B runs).
/// Read when a backend is opened.
pub fn int8_x_layout() -> u32 {
    if std::env::var("TESSERA_INT8_X_LAYOUT").as_deref() == Ok("interleaved") {
        INT8_X_INTERLEAVED
    } else {
        INT8_X_PLANAR
    }
}

/// [`pack_int8_activations`] with its 16-byte units reordered plane-major: unit k
/// (k = 0..7: plane 0 words 0..3, 4..7, plane 1 .., plane 2 .., header) of block b at unit
/// k nb + b (nb = x.len() / 32 blocks). The kernels' `xq` then reads unit k of neighbouring
/// blocks from neighbouring addresses, so each of a subgroup's 7 loads is one contiguous
/// run instead of 32 pieces 112 bytes apart.
pub fn pack_int8_activations_planar(x: &[f32]) -> Vec<u32> {
    let inter = pack_int8_activations(x);
    let nb = inter.len() / (INT8_X_VEC4S_PER_BLOCK * 4);
    let mut out = vec![0u32; inter.len()];
    for (b, blk) in inter.chunks_exact(INT8_X_VEC4S_PER_BLOCK * 4).enumerate() {
        for (k, unit) in blk.chunks_exact(4).enumerate() {
            let at = 4 * (k * nb + b);
            out[at..at + 4].copy_from_slice(unit);
        }
    }
    out
}

/// The packed activations in `layout` ([`INT8_X_PLANAR`] or [`INT8_X_INTERLEAVED`]).
pub fn pack_int8_activations_as(x: &[f32], layout: u32) -> Vec<u32> {
    if layout == INT8_X_PLANAR {
        pack_int8_activations_planar(x)
    } else {
        pack_int8_activations(x)
    }
}

/// The bytes of `t`'s scale binding: its sidecar scale bytes as stored, and for the formats
/// of gemv_fp8.wgsl, after them (from the next 4-byte boundary) one bit per row, bit r % 32
/// of little-endian word r / 32 set where row r holds a NaN code (E4M3 0x7F / 0xFF). A NaN
/// weight poisons exactly its row; the flags are found once here, so the kernels test one
/// bit a row instead of every weight byte (on the H200 the S = 1 kernel on [6144 x 16384]
/// ran at 66% of the copy ceiling with the per-byte test and 74% without; docs/VULKAN.md,
/// "Session 12").
///
/// For the formats of gemv_affine256.wgsl the binding is instead every block's inline
/// header, back to back ([`weight_binding`] holds the payloads).
pub fn scale_binding<'a>(t: &'a QTensor<'_>) -> Cow<'a, [u8]> {
    if let Some((header, block)) = affine_split(t.format()) {
        return Cow::Owned(affine_part(t, block, 0..header));
    }
    if kernel_for(t.format()).is_none_or(|k| k.file != FP8.0) {
        return Cow::Borrowed(t.scales());
    }
    let mut b = t.scales().to_vec();
    b.resize(b.len().next_multiple_of(4), 0);
    let mut words = vec![0u32; t.rows().div_ceil(32)];
    for r in 0..t.rows() {
        // A fold, not `any`: no early exit, so it vectorizes.
        if t.row(r).iter().fold(false, |nan, &c| nan | e4m3_is_nan(c)) {
            words[r / 32] |= 1 << (r % 32);
        }
    }
    b.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    Cow::Owned(b)
}

/// The bytes of `t`'s weight binding: its weight bytes as stored, except for the formats of
/// gemv_affine256.wgsl, whose 136-byte blocks (an 8-byte header, then 128 payload bytes) are
/// split at upload: the payloads back to back here, the headers in [`scale_binding`]. In the
/// stored layout half the blocks' payloads start 8 bytes past a 16-byte boundary, so a
/// kernel cannot read four payload words with one 16-byte load; split, every block's
/// payload is 16-byte aligned. The bytes moved are the same.
pub fn weight_binding<'a>(t: &'a QTensor<'_>) -> Cow<'a, [u8]> {
    match affine_split(t.format()) {
        Some((header, block)) => Cow::Owned(affine_part(t, block, header..block)),
        None => Cow::Borrowed(t.weights()),
    }
}

/// (header bytes, block bytes) of `format`'s blocks where its kernel is gemv_affine256's, from
/// the registry (a block of 256 4-bit codes after its header).
fn affine_split(format: Format) -> Option<(usize, usize)> {
    kernel_for(format).filter(|k| k.file == AFFINE.0)?;
    let spec = format.spec();
    let block = spec.block_bytes as usize;
    Some((block.checked_sub(spec.block_weights as usize / 2)?, block))
}

/// The bytes `part` of every stored `block`-byte block of `t`, block after block.
fn affine_part(t: &QTensor<'_>, block: usize, part: std::ops::Range<usize>) -> Vec<u8> {
    t.weights()
        .chunks_exact(block)
        .flat_map(|b| &b[part.clone()])
        .copied()
        .collect()
}

/// Bytes a storage buffer holding `len` bytes is given: `len` rounded up to
/// [`BUFFER_ALIGN`] plus one more unit (never 0).
pub fn padded_len(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(BUFFER_ALIGN)?
        .checked_add(BUFFER_ALIGN)
}

const fn k(
    file: &'static str,
    subgroup_file: &'static str,
    constants: &'static [(&'static str, f64)],
) -> KernelSpec {
    KernelSpec {
        file,
        subgroup_file,
        entry: "main",
        constants,
    }
}

const FLOAT: (&str, &str) = ("gemv_float.wgsl", "gemv_float.subgroup.wgsl");
const INT_ROW: (&str, &str) = ("gemv_int_row.wgsl", "gemv_int_row.subgroup.wgsl");
const INT_GROUP: (&str, &str) = ("gemv_int_group.wgsl", "gemv_int_group.subgroup.wgsl");
const INT3: (&str, &str) = ("gemv_int3.wgsl", "gemv_int3.subgroup.wgsl");
const E8: (&str, &str) = ("gemv_e8.wgsl", "gemv_e8.subgroup.wgsl");
const FP8: (&str, &str) = ("gemv_fp8.wgsl", "gemv_fp8.subgroup.wgsl");
const MXFP4: (&str, &str) = ("gemv_mxfp4.wgsl", "gemv_mxfp4.subgroup.wgsl");
const AFFINE: (&str, &str) = ("gemv_affine256.wgsl", "gemv_affine256.subgroup.wgsl");
const GGML_Q: (&str, &str) = ("gemv_ggml_q.wgsl", "gemv_ggml_q.subgroup.wgsl");
const GGML_K: (&str, &str) = ("gemv_ggml_k.wgsl", "gemv_ggml_k.subgroup.wgsl");

/// The kernel of every registry format. `None` would mean "no WGSL kernel" (the backend's
/// capability table then has no row for it); today every format has one.
pub fn kernel_for(format: Format) -> Option<KernelSpec> {
    let spec = |(f, sg): (&'static str, &'static str), c: &'static [(&'static str, f64)]| {
        Some(k(f, sg, c))
    };
    match format {
        // gemv_float: KIND 0 = f32, 1 = f16, 2 = bf16.
        Format::F32 => spec(FLOAT, &[("KIND", 0.0)]),
        Format::F16 => spec(FLOAT, &[("KIND", 1.0)]),
        Format::Bf16 => spec(FLOAT, &[("KIND", 2.0)]),
        // gemv_int_row: BITS 8 / 4 / 2, one f32 scale per row.
        Format::Int8Row => spec(INT_ROW, &[("BITS", 8.0)]),
        Format::Int4Row => spec(INT_ROW, &[("BITS", 4.0)]),
        Format::Int2Row => spec(INT_ROW, &[("BITS", 2.0)]),
        // gemv_int_group: GS, one f32 scale per GS weights.
        Format::Int4G16 => spec(INT_GROUP, &[("GS", 16.0)]),
        Format::Int4G32 => spec(INT_GROUP, &[("GS", 32.0)]),
        Format::Int4G48 => spec(INT_GROUP, &[("GS", 48.0)]),
        Format::Int4G64 => spec(INT_GROUP, &[("GS", 64.0)]),
        Format::Int4G96 => spec(INT_GROUP, &[("GS", 96.0)]),
        Format::Int4G128 => spec(INT_GROUP, &[("GS", 128.0)]),
        Format::Int4G192 => spec(INT_GROUP, &[("GS", 192.0)]),
        Format::Int4G256 => spec(INT_GROUP, &[("GS", 256.0)]),
        Format::Int3G64 => spec(INT3, &[]),
        Format::E8Lattice => spec(E8, &[]),
        // gemv_fp8: UE8M0 0 = f32 tile scales, 1 = UE8M0 bytes.
        Format::Fp8E4m3B128 => spec(FP8, &[("UE8M0", 0.0)]),
        Format::Fp8E4m3B128Ue8m0 => spec(FP8, &[("UE8M0", 1.0)]),
        // gemv_affine256: HDR 0 = f32 scale/zero (hfq4, mq4), 1 = two fp16 pairs (v2),
        // 2 = one fp16 pair + pad (mq4c). Rotation is the host's.
        Format::Hfq4G256 | Format::Mq4G256 => spec(AFFINE, &[("HDR", 0.0)]),
        Format::Mq4G256V2 => spec(AFFINE, &[("HDR", 1.0)]),
        Format::Mq4cG256 => spec(AFFINE, &[("HDR", 2.0)]),
        Format::Mxfp4 => spec(MXFP4, &[]),
        // gemv_ggml_q: 32-weight GGML blocks, KIND per block type.
        Format::Q8_0 => spec(GGML_Q, &[("KIND", 0.0)]),
        Format::Q4_0 => spec(GGML_Q, &[("KIND", 1.0)]),
        Format::Q4_1 => spec(GGML_Q, &[("KIND", 2.0)]),
        Format::Q5_0 => spec(GGML_Q, &[("KIND", 3.0)]),
        Format::Q5_1 => spec(GGML_Q, &[("KIND", 4.0)]),
        Format::Iq4Nl => spec(GGML_Q, &[("KIND", 5.0)]),
        Format::GgufMxfp4 => spec(GGML_Q, &[("KIND", 6.0)]),
        // gemv_ggml_k: 256-weight GGML super-blocks, KIND per block type; mq4-k is q4_k's
        // block over rotated weights.
        Format::Q2K => spec(GGML_K, &[("KIND", 0.0)]),
        Format::Q3K => spec(GGML_K, &[("KIND", 1.0)]),
        Format::Q4K | Format::Mq4K => spec(GGML_K, &[("KIND", 2.0)]),
        Format::Q5K => spec(GGML_K, &[("KIND", 3.0)]),
        Format::Q6K => spec(GGML_K, &[("KIND", 4.0)]),
        Format::Iq4Xs => spec(GGML_K, &[("KIND", 5.0)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planar_int8_activations_are_the_interleaved_units_where_xq_reads_them() {
        // x_stride = 256 at S = 1: 8 blocks; unit k of block c at x_stride / 4 + k nb + c
        // vec4s into binding 2, i.e. unit k nb + c of the appended words (prelude `xq`).
        let x: Vec<f32> = (0..256).map(|k| (k as f32 * 0.37).sin()).collect();
        let inter = pack_int8_activations(&x);
        let planar = pack_int8_activations_planar(&x);
        assert_eq!(planar.len(), inter.len());
        let nb = 256 / 32;
        for c in 0..nb {
            for k in 0..INT8_X_VEC4S_PER_BLOCK {
                let at = 4 * (k * nb + c);
                assert_eq!(
                    planar[at..at + 4],
                    inter[28 * c + 4 * k..28 * c + 4 * k + 4]
                );
            }
        }
        assert_eq!(pack_int8_activations_as(&x, INT8_X_PLANAR), planar);
        assert_eq!(pack_int8_activations_as(&x, INT8_X_INTERLEAVED), inter);
    }

    /// gemv_fp8's S = 1 decode (WGSL `e4m3_h`), emulated word by word: bytes 0 and 2 (lo)
    /// and 1 and 3 (hi) of a word become binary16 pairs that are exactly the E4M3 values
    /// times 2^-8 for all 254 non-NaN codes (subnormals included), and the two NaN codes
    /// read as +-1.875 (480 2^-8, which the kernel's byte flag catches instead).
    #[test]
    fn e4m3_as_binary16_pairs_is_exact_for_every_code() {
        fn f16(h: u32) -> f64 {
            let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
            let m = f64::from(h & 0x3FF);
            match (h >> 10) & 31 {
                0 => s * m * 2f64.powi(-24),
                31 => f64::NAN,
                e => s * (1.0 + m / 1024.0) * 2f64.powi(e as i32 - 15),
            }
        }
        fn e4m3(b: u32) -> f64 {
            let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
            let m = f64::from(b & 7);
            match (b >> 3) & 15 {
                0 => s * m * 2f64.powi(-9),
                e => s * (1.0 + m / 8.0) * 2f64.powi(e as i32 - 7),
            }
        }
        for b in 0u32..256 {
            // b in every byte position, its neighbours other codes.
            let w =
                b | (((b + 37) & 255) << 8) | (((b + 101) & 255) << 16) | (((b + 200) & 255) << 24);
            let lo = ((w & 0x007F_007F) << 7) | ((w & 0x0080_0080) << 8);
            let hi = ((w >> 1) & 0x3F80_3F80) | (w & 0x8000_8000);
            let halves = [lo & 0xFFFF, hi & 0xFFFF, lo >> 16, hi >> 16];
            for (k, h) in halves.into_iter().enumerate() {
                let code = (w >> (8 * k)) & 255;
                let got = f16(h) * 256.0;
                if code & 0x7F == 0x7F {
                    assert_eq!(got.abs(), 480.0, "NaN code {code:#x}");
                } else {
                    let want = e4m3(code);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "code {code:#x}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn fp8_scale_bindings_carry_each_rows_nan_flag_after_the_scales() {
        // 40 rows (two flag words), 130 columns (two tiles a row); NaN codes in rows 0
        // (0x7F), 33 (0xFF, negative) and 39 (last byte of the tensor); 0x7E (448) and
        // 0xFE (-448) elsewhere are not NaN.
        let (rows, cols) = (40, 130);
        let mut w = vec![0x7Eu8; rows * cols];
        w[5] = 0xFE;
        w[0] = 0x7F;
        w[33 * cols + 129] = 0xFF;
        w[rows * cols - 1] = 0x7F;
        for (format, scale_len) in [(Format::Fp8E4m3B128, 4), (Format::Fp8E4m3B128Ue8m0, 1)] {
            let sc = vec![0x3Cu8; scale_len * 2]; // one band of two tiles
            let t = QTensor::new(format, rows, cols, &w, &sc, 0).expect("tensor");
            let b = scale_binding(&t);
            let flags = sc.len().next_multiple_of(4);
            assert_eq!(&b[..sc.len()], &sc[..], "{format}: scales first, as stored");
            assert!(
                b[sc.len()..flags].iter().all(|&v| v == 0),
                "{format}: padding"
            );
            let word = |k: usize| {
                u32::from_le_bytes(b[flags + 4 * k..flags + 4 * k + 4].try_into().unwrap())
            };
            assert_eq!(b.len(), flags + 8, "{format}: two flag words");
            assert_eq!(word(0), 1, "{format}: row 0 only in word 0");
            assert_eq!(
                word(1),
                (1 << 1) | (1 << 7),
                "{format}: rows 33 and 39 in word 1"
            );
        }
        // Other formats bind their sidecar bytes as they are.
        let t = QTensor::new(Format::Int8Row, 2, 4, &[0x7F; 8], &[0; 8], 0).expect("tensor");
        assert!(matches!(scale_binding(&t), Cow::Borrowed(b) if b == t.scales()));
    }

    #[test]
    fn affine_blocks_bind_payloads_and_headers_apart_and_back() {
        let mut seen = 0;
        for format in Format::all() {
            let Some((header, block)) = affine_split(format) else {
                continue;
            };
            seen += 1;
            // 3 rows of 2 blocks, every byte distinct in its position.
            let (rows, cols) = (3, 512);
            let w: Vec<u8> = (0..rows * 2 * block).map(|i| (i * 7 + 3) as u8).collect();
            let t = QTensor::new(format, rows, cols, &w, &[], 0).expect("tensor");
            let (wb, sb) = (weight_binding(&t), scale_binding(&t));
            assert_eq!((header, block), (8, 136), "{format}");
            assert_eq!(wb.len() + sb.len(), w.len(), "{format}: same bytes");
            // The round trip: block i is its header then its payload.
            let mut back = Vec::new();
            for (h, p) in sb.chunks_exact(header).zip(wb.chunks_exact(block - header)) {
                back.extend_from_slice(h);
                back.extend_from_slice(p);
            }
            assert_eq!(back, w, "{format}");
        }
        assert_eq!(seen, 4, "hfq4-g256, mq4-g256, mq4-g256-v2, mq4c-g256");
        let t = QTensor::new(Format::Int4Row, 2, 8, &[0x12; 8], &[0; 8], 0).expect("tensor");
        assert!(matches!(weight_binding(&t), Cow::Borrowed(b) if b == t.weights()));
    }

    #[test]
    fn every_format_has_a_kernel_whose_files_exist() {
        for f in Format::all() {
            let k = kernel_for(f).unwrap_or_else(|| panic!("{f}: no kernel"));
            for file in [k.file, k.subgroup_file] {
                assert!(SHADER_FILES.contains(&file), "{f}: {file} not listed");
                assert!(shader_source(file).is_some(), "{f}: {file} not embedded");
            }
        }
        for file in SHADER_FILES {
            assert!(shader_source(file).is_some(), "{file}");
            let parts = shader_parts(file).unwrap_or_else(|| panic!("{file}: no parts"));
            assert!(parts.iter().all(|p| SOURCE_FILES.contains(p)), "{file}");
        }
        assert_eq!(shader_source("nope.wgsl"), None);
        assert_eq!(shader_parts("prelude.wgsl"), None, "a part is not a kernel");
    }

    #[test]
    fn params_come_from_the_registry() {
        let p = Params::new(Format::Int4G64, 3, 100, 2).unwrap();
        assert_eq!((p.o, p.i, p.s, p.x_stride), (3, 100, 2, 256));
        assert_eq!((p.row_bytes, p.sc_row), (50, 2));
        let f = Params::new(Format::Fp8E4m3B128, 300, 300, 1).unwrap();
        assert_eq!(f.sc_row, 3, "tiles per 128-row band");
        assert_eq!(&p.to_bytes()[..8], &[3, 0, 0, 0, 100, 0, 0, 0]);
        assert!(Params::new(Format::Mq4G256V2, 1, 300, 1).is_err());
        assert!(Params::new(Format::F32, 1 << 20, 1 << 20, 1).is_err());
    }

    #[test]
    fn a_large_channel_among_unit_values_reads_its_floats() {
        // The conformance suite's large channel: 50 among values of mean |x| 0.8 (62 times
        // it). Packed, the block cost 1.014e-4 of sum |w x| on a row whose one weight sat
        // on an |x| of 0.02 (session 28); its header must send it to the f32 path.
        let mut x: Vec<f32> = (0..64)
            .map(|k| if k % 2 == 0 { 0.8 } else { -0.8 })
            .collect();
        x[7] = 50.0;
        x[40] = 20.0; // 25 times the others' mean: still packed
        let w = pack_int8_activations(&x);
        assert!(
            f32::from_bits(w[24]).is_nan(),
            "block 0 must take the f32 path"
        );
        assert!(!f32::from_bits(w[28 + 24]).is_nan(), "block 1 stays packed");
    }

    #[test]
    fn int8_activations_reconstruct_x_within_d_over_2_17() {
        let mut x: Vec<f32> = (0..256)
            .map(|k| ((k * 7919 % 1000) as f32 - 500.0) * 0.013)
            .collect();
        x[3] = 90.0; // a large value (not past INT8_X_OUTLIER) sets block 0's d
        x[40] = -127.0 / 256.0; // exactly half a step in block 1
        x[64..96].fill(0.0);
        x[100] = f32::INFINITY;
        x[128..160].fill(0.0);
        x[140] = 1e-35; // a tiny block: d / 256 would not be a normal f32
        x[200] = 1e4; // an outlier block (block 6)
        let w = pack_int8_activations(&x);
        assert_eq!(w.len(), 8 * 28);
        for (b, blk) in x.chunks_exact(32).enumerate() {
            let h = &w[28 * b + 24..28 * b + 28];
            if b == 3 || b == 4 || b == 6 {
                assert!(
                    f32::from_bits(h[0]).is_nan(),
                    "block {b} must take the f32 path"
                );
                continue;
            }
            let d = f64::from(f32::from_bits(h[0])) * 256.0;
            let mut sums = [0i32; 3];
            for (e, &v) in blk.iter().enumerate() {
                let word = 2 * (e / 8) + (e % 2);
                let byte = (e % 8) / 2;
                let q: Vec<i32> = (0..3)
                    .map(|k| i32::from((w[28 * b + 8 * k + word] >> (8 * byte)) as u8 as i8))
                    .collect();
                for (sum, qk) in sums.iter_mut().zip(&q) {
                    *sum += qk;
                }
                let r = d * (f64::from(q[0]) + f64::from(q[1]) / 256.0 + f64::from(q[2]) / 65536.0);
                assert!(
                    (r - f64::from(v)).abs() <= d / 131072.0 * 1.001 + 1e-300,
                    "block {b} elem {e}: {v} -> {r}"
                );
            }
            for (k, sum) in sums.iter().enumerate() {
                assert_eq!(
                    INT8_X_BIAS.wrapping_sub(h[1 + k]) as i32,
                    8 * sum,
                    "block {b} plane {k}"
                );
            }
        }
        assert!(int8_activations(Format::Int4Row, 1));
        assert!(!int8_activations(Format::Int4Row, 2));
        assert!(!int8_activations(Format::Int8Row, 1));
        assert!(int8_activations(Format::Int4G64, 1));
        assert!(int8_activations(Format::Mq4G256V2, 1));
        assert!(int8_activations(Format::Hfq4G256, 1));
        assert!(!int8_activations(Format::Fp8E4m3B128, 1));
        assert!(!int8_activations(Format::Int2Row, 1));
        for f in Format::all().filter(|&f| int8_activations(f, 1)) {
            let k = kernel_for(f).unwrap();
            let gs = k
                .constants
                .iter()
                .find(|c| c.0 == "GS")
                .map_or(32.0, |c| c.1);
            assert!(
                gs % 32.0 == 0.0,
                "{f}: a 32-weight block must sit in one group"
            );
        }
        assert!(
            !int8_activations(Format::Int4G48, 1),
            "GS 48 straddles blocks"
        );
    }

    /// The narrow workgroups are exactly the packed-activation S = 1 pipelines, every
    /// workgroup size is a multiple of 16 (the shared-memory tail's `reduce16` splits a
    /// value's partials 16 to an invocation) and the `WG` override carries it.
    #[test]
    fn narrow_workgroups_are_the_packed_s1_kernels() {
        assert_eq!(WORKGROUP_SIZE % 16, 0);
        assert_eq!(NARROW_WORKGROUP_SIZE % 16, 0);
        for f in Format::all() {
            let Some(k) = kernel_for(f) else { continue };
            for s in 1..=MAX_S {
                let wg = k.workgroup_size(s);
                let want = if int8_activations(f, s) {
                    NARROW_WORKGROUP_SIZE
                } else {
                    WORKGROUP_SIZE
                };
                assert_eq!(wg, want, "{f} S = {s}");
                let o = k.overrides(s, k.rows(s), 0);
                assert!(o.contains(&("WG", f64::from(wg))), "{f} S = {s}: {o:?}");
            }
        }
    }

    /// The batch path (WGSL `fastb()`) is where the shaders have it, and only there may 4
    /// rows run above S = 4 (the per-row path's private arrays hold 16 partials).
    #[test]
    fn batch_path_rows_follow_the_shaders() {
        let tiled = [
            Format::Int8Row,
            Format::Int4Row,
            Format::Int4G32,
            Format::Int4G64,
            Format::Int4G96,
            Format::Int4G128,
            Format::Int4G192,
            Format::Int4G256,
            Format::Fp8E4m3B128,
            Format::Fp8E4m3B128Ue8m0,
            Format::Hfq4G256,
            Format::Mq4G256V2,
        ];
        for f in Format::all() {
            let k = kernel_for(f).unwrap();
            assert_eq!(
                k.batch_tiled(),
                tiled.contains(&f) || (k.file == AFFINE.0),
                "{f}"
            );
            assert_eq!(k.admits(16, MAX_ROWS), k.batch_tiled(), "{f}");
            for s in 1..=MAX_S {
                assert!(k.admits(s, k.rows(s)), "{f} S={s}");
            }
        }
        assert!(!kernel_for(Format::Int2Row).unwrap().batch_tiled());
        assert!(!kernel_for(Format::Int4G48).unwrap().batch_tiled());
    }

    #[test]
    fn dispatch_covers_every_row_once() {
        let k = kernel_for(Format::Int8Row).unwrap();
        for o in [1usize, 3, 4, 5, 6144, 152_064, 1 << 20] {
            for rows in [1u32, 2, 4] {
                let [x, y, z] = k.dispatch(o, rows).unwrap();
                assert_eq!(z, 1);
                assert!(x <= GRID_X_MAX && y <= 65535);
                let covered = x as usize * y as usize * rows as usize;
                assert!(covered >= o, "o={o} rows={rows}");
                // At most one partially used row of workgroups.
                assert!(covered - o < x as usize * rows as usize + rows as usize);
            }
        }
        assert_eq!(padded_len(0), Some(16));
        assert_eq!(padded_len(17), Some(48));
        assert_eq!(x_stride(257), Some(512));
    }
}
