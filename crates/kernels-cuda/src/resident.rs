//! The non-GEMV kernels of the engine's device-resident decode path
//! (`shaders/cuda/decode_ops.cu`): RMSNorm into the GEMV's padded activation layout, bias
//! and residual adds, single-token GQA attention over a device KV cache with Qwen3's
//! q_norm/k_norm, RoPE and the k and v cache appends in the same launch, SwiGLU and the
//! argmax. Each launch only enqueues on the backend's stream (no copy, no synchronisation),
//! so a whole token is queued behind one final read-back. Inputs are views, so the engine
//! can hand in slices of one fused GEMV output (q/k/v, gate/up). No argument changes from
//! one token to the next (the attention reads its position from a device buffer and its
//! grid does not depend on it), so the engine can capture a step into a CUDA graph once and
//! replay it.
//!
//! [`DecodeKernels::new`] compiles the source once per backend with NVRTC; a compile or
//! load failure is a typed [`CudaError::Compile`] naming the source and the kernel.
//!
//! [`resident_capability_table`] is the table the engine's gate reads for this path: the
//! tier's S = 1 GEMV rows minus the rotated formats (their activations would need the
//! FWHT-256 on the device, which this path does not do yet), so such layers never take it.

use crate::device::{CudaBackend, Param};
use crate::error::CudaError;
use crate::layout;
use crate::presplit::{SplitBuffers, SplitLayout};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    LaunchConfig, sys,
};
use cudarc::nvrtc::{CompileError, CompileOptions, compile_ptx_with_opts};
use quant_core::capability::{Capability, Op};
use std::sync::OnceLock;

/// The kernel source, embedded at build time.
pub const DECODE_OPS_SOURCE: &str = include_str!("../../../shaders/cuda/decode_ops.cu");

/// What NVRTC compiles: the 16-row GEMV's segment split (shaders/cuda/split.cuh, which
/// attention and SwiGLU use to write the split of the GEMV after them), then
/// [`DECODE_OPS_SOURCE`].
const DECODE_OPS_NVRTC_SOURCE: &str = concat!(
    include_str!("../../../shaders/cuda/split.cuh"),
    include_str!("../../../shaders/cuda/decode_ops.cu")
);

/// Threads of the one-block kernels (RMSNorm, argmax; the source's `TS_BLOCK`): the whole
/// GPU waits on these single blocks, so they take the most threads a block may have.
const BLOCK: u32 = 1024;
/// Threads per block of the elementwise kernels (bias add, SwiGLU).
const ELEMENTWISE: u32 = 256;
/// Threads of a per-head block (attention_rope), each thread summing one dim over every
/// position.
const HEAD_BLOCK: u32 = 128;
/// Threads of a per-head block when the positions are split over its warps (the source's
/// `TS_ATT_WARPS` warps at most).
const HEAD_BLOCK_SPLIT: u32 = 256;
/// The largest head the attention kernel's shared buffers hold.
pub const MAX_HEAD_DIM: usize = 1024;

/// A deliberate defect compiled into the decode kernels (mutation tests only).
#[cfg(feature = "mutation-test")]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DecodeMutation {
    /// RoPE's rotation skipped (q and k keep their unrotated values).
    DropRope,
    /// No kernel change: the engine stops writing the position once a step's CUDA graph
    /// is captured, as if the position had been baked into the graph (it reads
    /// [`DecodeMutation::from_env`] itself).
    StalePosition,
}

#[cfg(feature = "mutation-test")]
impl DecodeMutation {
    /// The `TESSERA_DECODE_MUTATE` spelling: drop-rope, stale-position.
    pub fn parse(name: &str) -> Option<DecodeMutation> {
        match name {
            "drop-rope" => Some(DecodeMutation::DropRope),
            "stale-position" => Some(DecodeMutation::StalePosition),
            _ => None,
        }
    }
    /// The mutation `TESSERA_DECODE_MUTATE` names, if it is set and valid.
    pub fn from_env() -> Option<DecodeMutation> {
        std::env::var("TESSERA_DECODE_MUTATE")
            .ok()
            .and_then(|v| DecodeMutation::parse(&v))
    }
    fn define(self) -> Option<&'static str> {
        match self {
            DecodeMutation::DropRope => Some("-DTS_MUTATE_DROP_ROPE"),
            DecodeMutation::StalePosition => None,
        }
    }
}

/// The mutation asked for through `TESSERA_DECODE_MUTATE` (only in builds with the
/// `mutation-test` feature; never in a library build).
fn mutation_define() -> Result<Option<&'static str>, CudaError> {
    #[cfg(feature = "mutation-test")]
    {
        if let Ok(v) = std::env::var("TESSERA_DECODE_MUTATE") {
            return match DecodeMutation::parse(&v) {
                Some(m) => Ok(m.define()),
                None => Err(CudaError::Input {
                    what: format!(
                        "TESSERA_DECODE_MUTATE={v}: expected drop-rope or stale-position"
                    ),
                }),
            };
        }
    }
    Ok(None)
}

/// The formats the resident path runs: S = 1 GEMV rows of the tier's table whose format
/// needs no activation rotation.
pub fn resident_capability_table() -> &'static [Capability] {
    static TABLE: OnceLock<Vec<Capability>> = OnceLock::new();
    TABLE.get_or_init(|| {
        crate::backend::capability_table()
            .iter()
            .filter(|c| {
                c.op == Op::Gemv
                    && c.constraint.s_min <= 1
                    && c.constraint.s_max >= 1
                    && c.format.spec().rotation == quant_core::Rotation::None
            })
            .copied()
            .collect()
    })
}

/// Whether the decode kernels take programmatic dependent launches on a device of `arch`
/// (`sm_XY`): sm_90 and later, unless `TESSERA_RESIDENT_PDL=0` (benchmarks compare both;
/// the results are the same).
fn pdl_on(arch: &str) -> bool {
    let digits: String = arch
        .trim_start_matches("sm_")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let new_enough = digits.parse::<u32>().is_ok_and(|v| v >= 90);
    new_enough && std::env::var("TESSERA_RESIDENT_PDL").map_or(true, |v| v != "0")
}

/// How the decode step's attention sums over the cached positions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttentionMode {
    /// `attention_rope`, each thread of the block (128 threads) one dim over every position
    /// (session 4's kernel).
    Serial,
    /// `attention_rope` with the positions split over the block's warps
    /// (256 threads; the default of sessions 5-7).
    Split,
    /// `attention_chunks`: the positions cut into chunks of [`ATTENTION_CHUNK`], one block
    /// each, combined by the last block of each head (the default since session 8: the
    /// H200 step was 2% faster than with `Split`, docs/ENGINE.md).
    Chunks,
}

/// Positions one `attention_chunks` block scores (decode_ops.cu `TS_ATT_CHUNK`).
pub const ATTENTION_CHUNK: usize = 32;

/// `TESSERA_RESIDENT_ATTN=serial|split|chunks` (unset: chunks). The results agree to
/// rounding (the summation orders differ).
fn attention_mode() -> Result<AttentionMode, CudaError> {
    match std::env::var("TESSERA_RESIDENT_ATTN").as_deref() {
        Ok("serial") => Ok(AttentionMode::Serial),
        Ok("split") => Ok(AttentionMode::Split),
        Err(_) | Ok("chunks") => Ok(AttentionMode::Chunks),
        Ok(other) => Err(CudaError::Input {
            what: format!("TESSERA_RESIDENT_ATTN={other}: expected serial, split or chunks"),
        }),
    }
}

/// The attention's scratch, shared by the layers (their launches run one after another):
/// the scores [heads, cap] of `attention_rope` and the chunk partials [heads, chunks,
/// head_dim + 2] of `attention_chunks` in one buffer, and the per-head arrival counters of
/// the latter (zero between launches: the last block of each head resets its own).
pub struct AttentionScratch {
    floats: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

impl AttentionScratch {
    /// Zeroed scratch for attention of `shape`.
    pub fn new(dev: &CudaBackend, shape: AttentionShape) -> Result<AttentionScratch, CudaError> {
        let n = Self::floats_for(shape).ok_or_else(|| CudaError::Input {
            what: format!("attention scratch for {shape:?} overflows"),
        })?;
        let st = dev.stream();
        Ok(AttentionScratch {
            floats: st
                .alloc_zeros::<f32>(n)
                .map_err(CudaError::driver("allocating the attention scratch"))?,
            counters: st
                .alloc_zeros::<u32>(shape.heads.max(1))
                .map_err(CudaError::driver("allocating the attention counters"))?,
        })
    }

    /// Floats the scratch needs for every mode.
    fn floats_for(shape: AttentionShape) -> Option<usize> {
        let scores = shape.heads.checked_mul(shape.cap)?;
        let chunks = shape.cap.div_ceil(ATTENTION_CHUNK);
        let partials = shape
            .heads
            .checked_mul(chunks)?
            .checked_mul(shape.head_dim.checked_add(2)?)?;
        Some(scores.max(partials).max(1))
    }
}

/// A read-only device pointer of `v` on `stream`.
fn rd<T, V: DevicePtr<T>>(v: &V, stream: &CudaStream) -> Param {
    // The guard only records an event in multi-stream mode; the backend uses one stream,
    // whose order already puts this launch after every earlier use.
    let (p, _guard) = v.device_ptr(stream);
    Param::Ptr(p)
}

/// A device pointer of `v` the kernel writes through.
fn wr<T, V: DevicePtrMut<T>>(v: &mut V, stream: &CudaStream) -> Param {
    let (p, _guard) = v.device_ptr_mut(stream);
    Param::Ptr(p)
}

/// The compiled decode kernels of one backend.
pub struct DecodeKernels {
    /// Programmatic dependent launch ([`pdl_on`]): each kernel lets the next kernel of the
    /// stream launch at once and waits for the previous one before it touches memory
    /// (decode_ops.cu `TS_PDL_ENTER`), so a launch's start-up overlaps the kernel before it.
    pdl: bool,
    /// How attention sums over the positions ([`attention_mode`]).
    attn: AttentionMode,
    add_rmsnorm: CudaFunction,
    add_vec: CudaFunction,
    attention_rope: CudaFunction,
    attention_chunks: CudaFunction,
    swiglu: CudaFunction,
    swiglu_split: CudaFunction,
    argmax: CudaFunction,
}

fn i32_arg(v: usize, what: &str) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| CudaError::Input {
        what: format!("{what} = {v} exceeds the decode kernels' 32-bit index"),
    })
}

fn need(len: usize, n: usize, what: &str) -> Result<(), CudaError> {
    if len < n {
        return Err(CudaError::Input {
            what: format!("{what}: buffer holds {len} floats, the launch needs {n}"),
        });
    }
    Ok(())
}

fn blocks(n: usize) -> Result<u32, CudaError> {
    u32::try_from(n.div_ceil(ELEMENTWISE as usize)).map_err(|_| CudaError::Input {
        what: format!("{n} elements overflow the grid"),
    })
}

impl DecodeKernels {
    /// Compiles decode_ops.cu for `dev`'s architecture and loads its five kernels.
    pub fn new(dev: &CudaBackend) -> Result<DecodeKernels, CudaError> {
        let mut options = vec![
            format!("--gpu-architecture={}", dev.arch()),
            "-std=c++17".to_string(),
        ];
        if let Some(d) = mutation_define()? {
            options.push(d.to_string());
        }
        let module_name = format!("decode_ops.cu [{}]", options.join(" "));
        let opts = CompileOptions {
            options,
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(DECODE_OPS_NVRTC_SOURCE, opts).map_err(|e| {
            CudaError::Compile {
                module: module_name.clone(),
                log: match e {
                    CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                    other => format!("{other:?}"),
                },
            }
        })?;
        let module = dev
            .context()
            .load_module(ptx)
            .map_err(|e| CudaError::Compile {
                module: module_name.clone(),
                log: format!("loading the module: {e:?}"),
            })?;
        let load = |name: &str| {
            module.load_function(name).map_err(|e| CudaError::Compile {
                module: format!("{module_name}, kernel `{name}`"),
                log: format!("{e:?}"),
            })
        };
        Ok(DecodeKernels {
            pdl: pdl_on(dev.arch()),
            attn: attention_mode()?,
            add_rmsnorm: load("add_rmsnorm")?,
            add_vec: load("add_vec")?,
            attention_rope: load("attention_rope")?,
            attention_chunks: load("attention_chunks")?,
            swiglu: load("swiglu")?,
            swiglu_split: load("swiglu_split")?,
            argmax: load("argmax")?,
        })
    }

    /// Whether the kernels take programmatic dependent launches.
    pub fn pdl(&self) -> bool {
        self.pdl
    }

    /// How attention sums over the positions.
    pub fn attention_mode(&self) -> AttentionMode {
        self.attn
    }

    /// `cuLaunchKernelEx` of `f` on the backend's stream, with the programmatic
    /// stream-serialization attribute when [`DecodeKernels::pdl`].
    ///
    /// # Safety
    /// `params` must match `f`'s parameter list in order and type, and every device pointer
    /// in it must address memory that stays allocated until the kernel has run and that
    /// holds what the kernel indexes. Every kernel of decode_ops.cu waits
    /// (`griddepcontrol.wait`) before it touches memory, which a programmatic launch needs.
    unsafe fn launch(
        &self,
        dev: &CudaBackend,
        f: &CudaFunction,
        cfg: LaunchConfig,
        params: &mut [Param],
        what: &'static str,
    ) -> Result<(), CudaError> {
        let mut addrs: Vec<*mut std::ffi::c_void> = params.iter_mut().map(Param::address).collect();
        // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of C values), for
        // which all-zero bytes are a valid value; the id and the one union field read for it
        // are set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: dev.stream().cu_stream(),
            attrs: &raw mut attr,
            numAttrs: u32::from(self.pdl),
        };
        dev.context()
            .bind_to_thread()
            .map_err(CudaError::driver(what))?;
        // SAFETY: `lc`, `attr` and `addrs` (pointing into `params`) outlive the call, which
        // copies the values; `params` and `f` as the caller guarantees.
        unsafe {
            sys::cuLaunchKernelEx(
                &raw const lc,
                f.cu_function(),
                addrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(CudaError::driver(what))
    }

    /// x[..n] += d[..n] (when `d` is given); out[..stride] = w * x / rms(x), zero past n.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rmsnorm(
        &self,
        dev: &CudaBackend,
        x: &mut CudaSlice<f32>,
        d: Option<&CudaView<'_, f32>>,
        w: &CudaSlice<f32>,
        out: &mut CudaViewMut<'_, f32>,
        n: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        let stride = out.len();
        need(x.len(), n, "add_rmsnorm x")?;
        need(w.len(), n, "add_rmsnorm weight")?;
        need(stride, n, "add_rmsnorm out")?;
        if let Some(d) = d {
            need(d.len(), n, "add_rmsnorm addend")?;
        }
        let st = dev.stream();
        let mut params = [
            wr(x, st),
            d.map_or(Param::Ptr(0), |d| rd(d, st)),
            rd(w, st),
            wr(out, st),
            Param::I32(i32_arg(n, "n")?),
            Param::I32(i32_arg(stride, "stride")?),
            Param::F32(eps),
        ];
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches decode_ops.cu's add_rmsnorm (f32*, f32* or null, f32*, f32*, i32,
        // i32, f32); x, d and w hold >= n floats and out `stride` floats (checked above), all
        // borrowed from buffers the caller keeps; the kernel reads and writes only below n
        // (x, d, w) and below stride (out).
        unsafe {
            self.launch(
                dev,
                &self.add_rmsnorm,
                cfg,
                &mut params,
                "launching add_rmsnorm",
            )
        }
    }

    /// y[..n] += b[..n].
    pub fn add_vec(
        &self,
        dev: &CudaBackend,
        y: &mut CudaViewMut<'_, f32>,
        bias: &CudaSlice<f32>,
    ) -> Result<(), CudaError> {
        let n = bias.len();
        need(y.len(), n, "add_vec y")?;
        let st = dev.stream();
        let mut params = [wr(y, st), rd(bias, st), Param::I32(i32_arg(n, "n")?)];
        let cfg = LaunchConfig {
            grid_dim: (blocks(n)?, 1, 1),
            block_dim: (ELEMENTWISE, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches add_vec (f32*, f32*, i32); both hold >= n floats (checked above)
        // and the kernel guards i < n.
        unsafe { self.launch(dev, &self.add_vec, cfg, &mut params, "launching add_vec") }
    }

    /// One token's attention at the position `pos[0]` holds on the device when the kernel
    /// runs (not when it is enqueued: a CUDA graph captures this launch once and replays it
    /// at every position; a position outside [0, cap) makes it a no-op): per query head,
    /// RMSNorm of q and of its group's k head with `rope.norms` (Qwen3's q_norm, k_norm,
    /// `[hd]` each) when given, RoPE, the rotated k and this token's v (`vnew`) written into
    /// row `pos` of `kc` / `vc`, then GQA attention over kc / vc [cap, kvw] up to `pos`.
    /// q `[nh, hd]`, knew and vnew `[kvw]` are the projections as written; `scores` is scratch
    /// [nh, cap]; writes out[..nh * hd]. With `split` it also writes out's split into those
    /// buffers, for [`CudaBackend::gemv_launch_presplit`] of the o projection: only the
    /// chunked kernel ([`AttentionMode::Chunks`]) does, with hd a multiple of 128 (a head's
    /// segments of the split are its own) and nh * hd columns within the buffers' stride.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_rope(
        &self,
        dev: &CudaBackend,
        q: &CudaView<'_, f32>,
        knew: &CudaView<'_, f32>,
        vnew: &CudaView<'_, f32>,
        kc: &mut CudaSlice<f32>,
        vc: &mut CudaSlice<f32>,
        scratch: &mut AttentionScratch,
        out: &mut CudaViewMut<'_, f32>,
        shape: AttentionShape,
        rope: RopeArgs<'_>,
        pos: &CudaSlice<i32>,
        split: Option<&mut SplitBuffers>,
    ) -> Result<(), CudaError> {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim: hd,
            cap,
        } = shape;
        if kv_heads == 0 || heads % kv_heads != 0 || cap == 0 {
            return Err(CudaError::Input {
                what: format!(
                    "attention: {heads} heads over {kv_heads} KV heads, a cache of {cap} positions"
                ),
            });
        }
        let half = rope.inv_freq.len();
        if hd == 0 || hd > MAX_HEAD_DIM || 2 * half > hd {
            return Err(CudaError::Input {
                what: format!(
                    "attention: head_dim {hd} (at most {MAX_HEAD_DIM}) with rope dim {}",
                    2 * half
                ),
            });
        }
        let kvw = kv_heads * hd;
        need(q.len(), heads * hd, "attention q")?;
        need(knew.len(), kvw, "attention new k")?;
        need(vnew.len(), kvw, "attention new v")?;
        let cache = cap.checked_mul(kvw).ok_or_else(|| CudaError::Input {
            what: format!("attention: a cache of {cap} x {kvw} overflows"),
        })?;
        need(kc.len(), cache, "attention keys")?;
        need(vc.len(), cache, "attention values")?;
        if pos.is_empty() {
            return Err(CudaError::Input {
                what: "attention: no position buffer".into(),
            });
        }
        let floats = AttentionScratch::floats_for(shape).ok_or_else(|| CudaError::Input {
            what: format!("attention scratch for {shape:?} overflows"),
        })?;
        need(scratch.floats.len(), floats, "attention scratch")?;
        if scratch.counters.len() < heads {
            return Err(CudaError::Input {
                what: format!(
                    "attention: {} arrival counters for {heads} heads",
                    scratch.counters.len()
                ),
            });
        }
        need(out.len(), heads * hd, "attention out")?;
        if let Some(sp) = &split
            && !Self::attention_splits(self.attn, shape, sp.layout())
        {
            return Err(CudaError::Input {
                what: format!(
                    "attention ({:?}, {heads} heads of {hd}) cannot write split buffers of stride {}",
                    self.attn,
                    sp.layout().x_stride
                ),
            });
        }
        if let Some((qn, kn)) = rope.norms {
            need(qn.len(), hd, "q_norm")?;
            need(kn.len(), hd, "k_norm")?;
        }
        let args = (
            i32_arg(hd, "head_dim")?,
            i32_arg(heads / kv_heads, "group")?,
            i32_arg(kvw, "kv width")?,
            i32_arg(cap, "capacity")?,
            i32_arg(half, "rope half")?,
        );
        let scale = 1.0 / (hd as f32).sqrt();
        let grid = u32::try_from(heads).map_err(|_| CudaError::Input {
            what: "too many heads".into(),
        })?;
        let st = dev.stream();
        let (qn, kn) = match rope.norms {
            Some((qn, kn)) => (rd(qn, st), rd(kn, st)),
            None => (Param::Ptr(0), Param::Ptr(0)),
        };
        // The two kernels' parameters: these six, (attention_chunks: the counters,) these
        // thirteen, (attention_rope: the split flag).
        let head = [
            rd(q, st),
            rd(knew, st),
            rd(vnew, st),
            wr(kc, st),
            wr(vc, st),
            wr(&mut scratch.floats, st),
        ];
        let tail = [
            wr(out, st),
            Param::I32(args.0),
            Param::I32(args.1),
            Param::I32(args.2),
            rd(pos, st),
            Param::I32(args.3),
            Param::F32(scale),
            qn,
            kn,
            Param::F32(rope.eps),
            rd(rope.inv_freq, st),
            Param::I32(args.4),
            Param::F32(rope.attn_factor),
        ];
        if self.attn == AttentionMode::Chunks {
            let chunks =
                u32::try_from(cap.div_ceil(ATTENTION_CHUNK)).map_err(|_| CudaError::Input {
                    what: format!("attention: {cap} positions overflow the grid"),
                })?;
            let mut params = head.to_vec();
            params.push(wr(&mut scratch.counters, st));
            params.extend(tail);
            params.extend(split_params(split, st)?);
            let cfg = LaunchConfig {
                grid_dim: (grid, chunks, 1),
                block_dim: (HEAD_BLOCK_SPLIT, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: matches decode_ops.cu's attention_chunks (f32* x 6, u32*, f32*, i32 x 3,
            // i32*, i32, f32, f32* or null x 2, f32, f32*, i32, f32, u16* or null, f32* or
            // null, i32, i32; the split buffers hold 2 xs halves and 2 xs / 128 floats with
            // heads * hd <= xs, checked by `attention_splits`) with TS_ATT_WARPS warps
            // a block (HEAD_BLOCK_SPLIT threads: its chunk of TS_ATT_WARPS x TS_ATT_ROWS
            // positions); every buffer holds what the kernel indexes (checked above): q
            // heads * hd, knew / vnew kvw, kc / vc cap * kvw with g * hd + d < kvw and rows j
            // <= pos < cap (the kernel returns for any other pos), the scratch heads x
            // ceil(cap / ATTENTION_CHUNK) x (hd + 2) floats and heads counters, out heads *
            // hd, norms hd, inv_freq `half` with 2 * half <= hd <= MAX_HEAD_DIM (the
            // kernel's shared head buffers), pos one int.
            return unsafe {
                self.launch(
                    dev,
                    &self.attention_chunks,
                    cfg,
                    &mut params,
                    "launching attention_chunks",
                )
            };
        }
        debug_assert!(split.is_none(), "refused above");
        let split = self.attn == AttentionMode::Split;
        let mut params = head.to_vec();
        params.extend(tail);
        params.push(Param::I32(i32::from(split)));
        let threads = if split { HEAD_BLOCK_SPLIT } else { HEAD_BLOCK };
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches decode_ops.cu's attention_rope (f32* x 7, i32 x 3, i32*, i32, f32,
        // f32* or null x 2, f32, f32*, i32, f32, i32); split launches have at most
        // TS_ATT_WARPS warps (the size of its shared partial sums); every buffer holds what
        // the kernel indexes (checked above): q heads * hd, knew / vnew kvw, kc / vc cap *
        // kvw with g * hd + d < kvw and rows j <= pos < cap (the kernel returns for any
        // other pos), the scratch at least heads * cap floats (its scores), out heads * hd,
        // norms hd, inv_freq `half` with 2 * half <= hd <= MAX_HEAD_DIM (the kernel's
        // shared head buffers), pos one int.
        unsafe {
            self.launch(
                dev,
                &self.attention_rope,
                cfg,
                &mut params,
                "launching attention_rope",
            )
        }
    }

    /// out[..n] = silu(g) * u for n = g.len().
    pub fn swiglu(
        &self,
        dev: &CudaBackend,
        g: &CudaView<'_, f32>,
        u: &CudaView<'_, f32>,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let n = g.len();
        need(u.len(), n, "swiglu up")?;
        need(out.len(), n, "swiglu out")?;
        let st = dev.stream();
        let mut params = [
            rd(g, st),
            rd(u, st),
            wr(out, st),
            Param::I32(i32_arg(n, "n")?),
        ];
        let cfg = LaunchConfig {
            grid_dim: (blocks(n)?, 1, 1),
            block_dim: (ELEMENTWISE, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches swiglu (f32*, f32*, f32*, i32); all hold >= n floats (checked
        // above) and the kernel guards i < n.
        unsafe { self.launch(dev, &self.swiglu, cfg, &mut params, "launching swiglu") }
    }

    /// Whether attention in `mode` of `shape` can write `split` (see
    /// [`DecodeKernels::attention_rope`]).
    pub fn attention_splits(
        mode: AttentionMode,
        shape: AttentionShape,
        split: SplitLayout,
    ) -> bool {
        let cols = shape.heads.checked_mul(shape.head_dim);
        mode == AttentionMode::Chunks
            && shape.head_dim.is_multiple_of(layout::MMA_SUM_SEGMENT)
            && cols.is_some_and(|c| c <= split.x_stride)
    }

    /// out[..n] = silu(g) * u for n = g.len(), and its split into `split` for
    /// [`CudaBackend::gemv_launch_presplit`] of the GEMV after it (columns n .. the
    /// buffers' stride are written as zeros).
    pub fn swiglu_split(
        &self,
        dev: &CudaBackend,
        g: &CudaView<'_, f32>,
        u: &CudaView<'_, f32>,
        out: &mut CudaViewMut<'_, f32>,
        split: &mut SplitBuffers,
    ) -> Result<(), CudaError> {
        let n = g.len();
        need(u.len(), n, "swiglu up")?;
        need(out.len(), n, "swiglu out")?;
        let xs = split.layout().x_stride;
        if n > xs {
            return Err(CudaError::Input {
                what: format!("swiglu: {n} values for split buffers of stride {xs}"),
            });
        }
        let st = dev.stream();
        let mut params = vec![
            rd(g, st),
            rd(u, st),
            wr(out, st),
            Param::I32(i32_arg(n, "n")?),
        ];
        params.extend(split_params(Some(split), st)?);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(xs / layout::MMA_SUM_SEGMENT).map_err(|_| CudaError::Input {
                    what: format!("swiglu: a stride of {xs} overflows the grid"),
                })?,
                1,
                1,
            ),
            block_dim: (layout::MMA_SUM_SEGMENT as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches swiglu_split (f32*, f32*, f32*, i32, u16*, f32*, i32, i32); g, u
        // and out hold >= n floats (checked above) and the kernel reads and writes them only
        // below n; the split buffers hold 2 xs halves and 2 xs / 128 floats
        // (`SplitBuffers`), and the grid's xs / 128 blocks of 128 threads (TS_SPLIT_SEG, one
        // column a thread, one segment a block) cover [0, xs) exactly (xs a multiple of
        // 1024), so every store stays inside them.
        unsafe {
            self.launch(
                dev,
                &self.swiglu_split,
                cfg,
                &mut params,
                "launching swiglu_split",
            )
        }
    }

    /// `out[0]` = the first index of the largest of x.
    pub fn argmax(
        &self,
        dev: &CudaBackend,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<i32>,
    ) -> Result<(), CudaError> {
        need(out.len(), 1, "argmax out")?;
        let st = dev.stream();
        let mut params = [rd(x, st), Param::I32(i32_arg(x.len(), "n")?), wr(out, st)];
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches argmax (f32*, i32, i32*); x holds n floats, out one int; the block
        // is TS_BLOCK threads, the size of the kernel's shared arrays.
        unsafe { self.launch(dev, &self.argmax, cfg, &mut params, "launching argmax") }
    }
}

/// The trailing parameters of a kernel that may write a split (decode_ops.cu: u16* xg,
/// f32* xa, i32 xs, i32 nib): the buffers', or null pointers (no split).
fn split_params(
    split: Option<&mut SplitBuffers>,
    st: &CudaStream,
) -> Result<Vec<Param>, CudaError> {
    Ok(match split {
        Some(sp) => {
            let SplitLayout {
                x_stride: xs,
                nibbles: nib,
            } = sp.layout();
            let (halves, aux) = sp.parts_mut();
            vec![
                wr(halves, st),
                wr(aux, st),
                Param::I32(i32_arg(xs, "split stride")?),
                Param::I32(i32::from(nib)),
            ]
        }
        None => vec![Param::Ptr(0), Param::Ptr(0), Param::I32(0), Param::I32(0)],
    })
}

/// RoPE (and Qwen3's per-head norms) of one attention launch.
#[derive(Copy, Clone, Debug)]
pub struct RopeArgs<'a> {
    /// q_norm and k_norm weights, `[head_dim]` each; `None` for Llama.
    pub norms: Option<(&'a CudaSlice<f32>, &'a CudaSlice<f32>)>,
    pub eps: f32,
    /// [R / 2] frequencies (ops.rs's `Rope::inv_freq`).
    pub inv_freq: &'a CudaSlice<f32>,
    /// yarn's factor on cos and sin; 1 otherwise.
    pub attn_factor: f32,
}

/// The dimensions of one attention launch.
#[derive(Copy, Clone, Debug)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Positions the cache and the scores scratch hold.
    pub cap: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention writes a split only from the chunked kernel, only where a head is whole
    /// segments of 128 columns, and only into buffers that hold every head.
    #[test]
    fn attention_writes_a_split_only_where_its_heads_are_whole_segments() {
        let shape = |heads, head_dim| AttentionShape {
            heads,
            kv_heads: 1,
            head_dim,
            cap: 64,
        };
        let l = |x_stride| SplitLayout {
            x_stride,
            nibbles: true,
        };
        let ok = DecodeKernels::attention_splits;
        assert!(ok(AttentionMode::Chunks, shape(32, 128), l(4096)));
        assert!(ok(AttentionMode::Chunks, shape(8, 256), l(4096)));
        assert!(ok(AttentionMode::Chunks, shape(7, 128), l(1024)));
        assert!(!ok(AttentionMode::Chunks, shape(32, 64), l(4096)));
        assert!(!ok(AttentionMode::Chunks, shape(14, 96), l(2048)));
        assert!(!ok(AttentionMode::Chunks, shape(32, 128), l(3072)));
        assert!(!ok(AttentionMode::Split, shape(32, 128), l(4096)));
        assert!(!ok(AttentionMode::Serial, shape(32, 128), l(4096)));
        assert!(!ok(AttentionMode::Chunks, shape(usize::MAX, 128), l(4096)));
    }

    #[test]
    fn source_names_every_kernel_and_the_block() {
        for k in [
            "add_rmsnorm",
            "add_vec",
            "attention_rope",
            "attention_chunks",
            "swiglu",
            "swiglu_split",
            "argmax",
        ] {
            assert!(
                DECODE_OPS_SOURCE.contains(&format!("__global__ void {k}(")),
                "{k}"
            );
        }
        assert!(DECODE_OPS_SOURCE.contains(&format!("#define TS_BLOCK {BLOCK}\n")));
        assert!(
            DECODE_OPS_SOURCE
                .contains(&format!("#define TS_ATT_WARPS {}\n", HEAD_BLOCK_SPLIT / 32))
        );
        assert!(DECODE_OPS_SOURCE.contains(&format!("part[TS_ATT_WARPS * {MAX_HEAD_DIM}]")));
        // attention_chunks: a chunk is one round of TS_ATT_ROWS positions a warp.
        assert!(DECODE_OPS_SOURCE.contains("#define TS_ATT_CHUNK (TS_ATT_WARPS * TS_ATT_ROWS)\n"));
        let rows = ATTENTION_CHUNK / (HEAD_BLOCK_SPLIT as usize / 32);
        assert!(DECODE_OPS_SOURCE.contains(&format!("#define TS_ATT_ROWS {rows}\n")));
        assert!(DECODE_OPS_SOURCE.contains(&format!("qs[{MAX_HEAD_DIM}]")));
        assert!(DECODE_OPS_SOURCE.contains(&format!("ks[{MAX_HEAD_DIM}]")));
        assert!(DECODE_OPS_SOURCE.contains("#ifndef TS_MUTATE_DROP_ROPE"));
        // A programmatic launch is sound only if every kernel waits before touching memory.
        assert_eq!(
            DECODE_OPS_SOURCE.matches("__global__ void").count(),
            DECODE_OPS_SOURCE.matches("    TS_PDL_ENTER();\n").count()
        );
    }

    #[test]
    fn attention_scratch_holds_every_mode() {
        let shape = AttentionShape {
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            cap: 100,
        };
        // Chunk partials: 32 heads x 4 chunks x 130 floats, more than the 3200 scores.
        assert_eq!(AttentionScratch::floats_for(shape), Some(32 * 4 * 130));
        let long = AttentionShape {
            head_dim: 8,
            cap: 4096,
            ..shape
        };
        assert_eq!(AttentionScratch::floats_for(long), Some(32 * 4096));
        let huge = AttentionShape {
            cap: usize::MAX,
            ..shape
        };
        assert_eq!(AttentionScratch::floats_for(huge), None);
    }

    #[test]
    fn pdl_needs_sm_90() {
        // (the TESSERA_RESIDENT_PDL override is not set in tests)
        assert!(pdl_on("sm_90"));
        assert!(pdl_on("sm_100"));
        assert!(!pdl_on("sm_89"));
        assert!(!pdl_on("sm_80"));
        assert!(!pdl_on("compute"));
    }

    #[test]
    fn resident_table_has_no_rotated_format() {
        let t = resident_capability_table();
        assert!(!t.is_empty());
        assert!(
            t.iter()
                .all(|c| c.format.spec().rotation == quant_core::Rotation::None)
        );
        assert!(t.iter().any(|c| c.format == quant_core::Format::Int4G64));
    }

    /// Compiles the source as the backend does (split.cuh first) where NVRTC exists (no
    /// GPU needed).
    #[test]
    fn source_compiles_where_nvrtc_exists() {
        if let Err(e) = crate::compile::nvrtc_available() {
            eprintln!("skipped: {e}");
            return;
        }
        for extra in [None, Some("-DTS_MUTATE_DROP_ROPE")] {
            let mut options = vec!["--gpu-architecture=sm_90".to_string()];
            options.extend(extra.map(str::to_string));
            let r = compile_ptx_with_opts(
                DECODE_OPS_NVRTC_SOURCE,
                CompileOptions {
                    options,
                    ..Default::default()
                },
            );
            assert!(r.is_ok(), "{extra:?}: {r:?}");
        }
    }
}
