//! The device-resident decode path (CUDA, Llama / Qwen3 graphs): one token is every layer
//! enqueued on the backend's stream (RMSNorm, one q/k/v GEMV over the three projections'
//! rows concatenated, one attention launch doing q_norm/k_norm, RoPE, the k and v appends
//! and attention, o_proj, residual add fused into the next RMSNorm, one gate/up GEMV,
//! SwiGLU, down; then the final norm, the LM head and the argmax) with no host
//! synchronisation until the 4-byte token id (and, when asked, the logits) comes back. The
//! embedding row is decoded on the host and uploaded (hidden floats a token), and so is the
//! position (one int), which the attention kernel reads from device memory.
//!
//! Since no kernel argument changes from one step to the next, a generation's second step
//! captures its launches into a CUDA graph (everything from the embedding row's arrival to
//! the argmax), and each later step is the two uploads, one graph launch and the read-back:
//! one host call instead of ~260 launches (~390 without the fused norms and presplits;
//! 2.9 ms of host enqueue a step on the H200, docs/PERF.md). The graph belongs to the
//! generation's [`ResidentState`] (its arguments point into that state's buffers and the
//! GEMVs' scratch, which nothing reallocates while the generation runs, since it alone uses
//! the backend). `TESSERA_CUDA_GRAPH=0` or [`Resident::set_graph`] launches the same kernels
//! one by one instead.
//!
//! The fused q/k/v and gate/up tensors are built at load ([`fuse_layers`], through
//! [`crate::fuse::concat_rows`]) where the registry says the concatenation equals the
//! stacked encoding; their outputs are consecutive slices of one buffer, which the
//! attention and SwiGLU kernels read through views. A group whose format cannot be fused
//! runs its projections one GEMV each into the same slices. Each GEMV on the tensor cores
//! is two launches inside kernels-cuda (its activation split, then the GEMV), so fusing
//! also leaves one split per distinct activation.
//!
//! Where the GEMV after an RMSNorm is one tensor whose split runs on the device, the norm
//! (and the residual add before it) runs inside that split
//! (`CudaBackend::gemv_launch_resident_norm`): 65 launches fewer a Llama-3-8B step,
//! 408 -> 431 tokens/s on the H200 in one call (docs/ENGINE.md). The split's blocks all read the old
//! residual whole, so the updated one goes to the other of two buffers and the stream
//! alternates between them in the same order every step (the graph replays it).
//! `TESSERA_RESIDENT_PROLOGUE=0` runs add_rmsnorm as its own kernel instead.
//!
//! The attention and SwiGLU kernels write the o and down projections' split themselves
//! (kernels-cuda `presplit`: a power of two per 128-column segment, which a kernel that
//! writes whole segments can choose alone), so those GEMVs need no split launch: 64 launches
//! fewer a Llama-3-8B step, 434 -> 456 tokens/s on the H200 in one call (468 with attention's
//! cache loads in one round; docs/ENGINE.md).
//! `TESSERA_RESIDENT_PRESPLIT=0|attn|mlp` turns it off or keeps one of the two.
//!
//! The loader takes this path only when the gate ([`crate::gate::layer_path_with`] against
//! the backend's fused table) puts every layer on it and the LM head's format is covered
//! too; otherwise the model runs op by op as before. Activations stay f32 and every
//! operation follows [`crate::llama`] (the host graph) step for step, so the token streams
//! equal the CPU's (tests/gpu.rs).

use crate::backend::{Backend, Slot, cuda_error};
use crate::error::{EngineError, Result};
use crate::llama::LlamaGraph;
use crate::model::Linear;
use crate::weights::Weights;
use kernels_cuda::cudarc::driver::{
    CudaGraph, CudaSlice, CudaStream, CudaViewMut, DriverError, sys,
};
use kernels_cuda::resident::{
    AttentionMode, AttentionScratch, AttentionShape, DecodeKernels, RopeArgs,
};
use kernels_cuda::{CudaBackend, CudaError, DeviceTensor, SplitBuffers, SplitLayout};
use std::cell::Cell;
use std::sync::Arc;

/// The stored bytes (codes and sidecars) of `tensors`, checked against overflow.
pub(crate) fn sum_stored_bytes<'a>(
    tensors: impl IntoIterator<Item = &'a DeviceTensor>,
) -> Result<usize> {
    tensors
        .into_iter()
        .try_fold(0usize, |acc, t| acc.checked_add(t.stored_bytes()))
        .ok_or_else(|| EngineError::Input("weight bytes overflow".into()))
}

fn err(e: CudaError) -> EngineError {
    EngineError::Backend {
        backend: "cuda".to_string(),
        source: cuda_error(e),
    }
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> EngineError {
    move |e| {
        err(CudaError::Driver {
            during,
            detail: format!("{e:?}"),
        })
    }
}

fn missing(what: &str) -> EngineError {
    EngineError::Input(format!(
        "the resident path needs {what} on the device, and it is not uploaded"
    ))
}

/// A weight of the resident path: its uploaded tensor and its bias on the device.
struct DevLinear {
    slot: Slot,
    bias: Option<CudaSlice<f32>>,
}

/// Projections that read one activation and write consecutive slices of one output: a
/// single GEMV over their concatenated rows, or (formats that cannot be concatenated) one
/// GEMV each, each into its slice.
enum Group {
    Fused(DevLinear),
    Split(Vec<DevLinear>),
}

/// The RMSNorm before a GEMV group: its weight, the update that joins the residual stream
/// first (none: the stream as it is) and whether it runs inside the GEMV's split.
#[derive(Copy, Clone)]
struct Norm<'a> {
    weight: &'a CudaSlice<f32>,
    d: Option<&'a CudaSlice<f32>>,
    fused: bool,
}

struct DevLayer {
    input_norm: CudaSlice<f32>,
    post_norm: CudaSlice<f32>,
    qk_norm: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// q, k, v into `qkv` [nh * hd + 2 kvw].
    qkv: Group,
    o: DevLinear,
    /// gate, up into `gu` [2 inter].
    gate_up: Group,
    down: DevLinear,
}

/// The fused tensors of one layer, uploaded by [`fuse_layers`]: `None` where the group's
/// format (or a mix of formats) cannot be row-concatenated, so its projections run apart.
#[derive(Copy, Clone, Debug, Default)]
pub struct FusedSlots {
    pub qkv: Option<Slot>,
    pub gate_up: Option<Slot>,
}

/// Whether the step computes each RMSNorm inside the activation split of the GEMV that reads
/// it (kernels-cuda `gemv_launch_resident_norm`) where that GEMV is one tensor the backend
/// splits on the device: two launches fewer a layer. `TESSERA_RESIDENT_PROLOGUE=0` turns it
/// off (add_rmsnorm then runs as its own kernel), so a bench can time both; the tokens are
/// the same (the norm's sum is added in another order).
pub fn prologue_fusion_default() -> bool {
    std::env::var("TESSERA_RESIDENT_PROLOGUE").map_or(true, |v| v != "0")
}

/// Whether the attention and SwiGLU kernels write the split of the GEMV after them
/// (kernels-cuda `presplit`: one power of two per 128-column segment, so a kernel that
/// writes whole segments needs no row-wide maximum), so the o and down projections run
/// without a split launch of their own: two launches fewer a layer.
/// `TESSERA_RESIDENT_PRESPLIT=0` turns it off, `attn` / `mlp` keeps it for the o / down
/// projection only, so a bench can time each; the tokens are the same up to the GEMVs'
/// rounding. Returns (o, down).
pub fn presplit_default() -> [bool; 2] {
    match std::env::var("TESSERA_RESIDENT_PRESPLIT").as_deref() {
        Ok("0") => [false, false],
        Ok("attn") => [true, false],
        Ok("mlp") => [false, true],
        _ => [true, true],
    }
}

/// Whether [`fuse_layers`] fuses: `TESSERA_RESIDENT_UNFUSED=1` turns it off, so a bench can
/// time both in one run (the results are the same tokens; only the launches differ).
pub fn fusion_enabled() -> bool {
    std::env::var("TESSERA_RESIDENT_UNFUSED").map_or(true, |v| v != "1")
}

/// The container names of the tensors `fused` concatenates: the resident path never reads
/// them apart, so the loader does not upload them.
pub fn fused_parts(g: &LlamaGraph, fused: &[FusedSlots]) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for (l, f) in g.layers.iter().zip(fused) {
        if f.qkv.is_some() {
            out.extend([&l.q, &l.k, &l.v].map(|x| x.r.name.clone()));
        }
        if f.gate_up.is_some() {
            out.extend([&l.gate, &l.up].map(|x| x.r.name.clone()));
        }
    }
    out
}

/// Row-concatenates and uploads each layer's q/k/v and gate/up where [`crate::fuse`]
/// admits it (the loader then leaves the separate tensors on the host: [`fused_parts`]).
pub fn fuse_layers(
    g: &LlamaGraph,
    weights: &Weights,
    backend: &mut dyn Backend,
) -> Result<Vec<FusedSlots>> {
    let mut out = Vec::with_capacity(g.layers.len());
    let enabled = fusion_enabled();
    let mut group = |lins: &[&Linear]| -> Result<Option<Slot>> {
        if !enabled {
            return Ok(None);
        }
        let parts = lins
            .iter()
            .map(|l| weights.qtensor(&l.r))
            .collect::<Result<Vec<_>>>()?;
        let (f, cols) = (parts[0].format(), parts[0].cols());
        let same = parts.iter().all(|p| p.format() == f && p.cols() == cols);
        let rows: Vec<usize> = parts.iter().map(|p| p.rows()).collect();
        if !same || crate::fuse::refusal(f, &rows).is_some() {
            return Ok(None);
        }
        let cat = crate::fuse::concat_rows(&parts)?;
        let slot = backend
            .upload(&cat.view())
            .map_err(|source| EngineError::Backend {
                backend: backend.name().to_string(),
                source,
            })?;
        Ok(Some(slot))
    };
    for l in &g.layers {
        out.push(FusedSlots {
            qkv: group(&[&l.q, &l.k, &l.v])?,
            gate_up: group(&[&l.gate, &l.up])?,
        });
    }
    Ok(out)
}

/// Launches one decode step enqueues (kernels, and the host-to-device copy of the
/// embedding row), by kind.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Launches {
    /// GEMV kernels.
    pub gemv: usize,
    /// kernels-cuda's activation splits before the tensor-core GEMVs (`tile_prep`).
    pub prep: usize,
    /// The decode kernels: norms, attention, SwiGLU, bias adds, argmax.
    pub other: usize,
    /// Host-to-device copies (the embedding row, the position).
    pub copies: usize,
}

impl Launches {
    /// Kernel launches (copies apart).
    pub fn kernels(&self) -> usize {
        self.gemv + self.prep + self.other
    }
}

/// Which operations a step enqueues. Every field true is the decode step; the others exist
/// to time the GEMVs apart from the rest ([`Resident::profile`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StepOps {
    pub gemv: bool,
    pub other: bool,
    /// The attention kernel (among the others): off only to time a step without it.
    pub attention: bool,
}

impl StepOps {
    pub const ALL: StepOps = StepOps {
        gemv: true,
        other: true,
        attention: true,
    };
}

/// The model's device-side constants: norms, biases, RoPE frequencies, the compiled kernels.
pub struct Resident {
    kernels: DecodeKernels,
    layers: Vec<DevLayer>,
    final_norm: CudaSlice<f32>,
    lm_head: DevLinear,
    inv_freq: CudaSlice<f32>,
    attn_factor: f32,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    inter: usize,
    vocab: usize,
    eps: f32,
    /// Activation buffer lengths: the largest x_stride of the tensors reading [hidden],
    /// the attention output and the MLP activation.
    hidden_stride: usize,
    attn_stride: usize,
    act_stride: usize,
    /// Whether prologues fuse into the GEMVs' splits ([`prologue_fusion_default`]).
    fuse_prologue: bool,
    /// Per layer, whether its input norm and post-attention norm run inside the split of
    /// the one GEMV that reads each; then the LM head's final norm.
    fused_prologues: Vec<[bool; 2]>,
    final_fused: bool,
    /// Whether the attention / SwiGLU kernels write their GEMV's split
    /// ([`presplit_default`]).
    presplit: [bool; 2],
    /// The split layouts the attention output and the SwiGLU output are written in (those
    /// of layer 0's o and down projections, where those have a presplit launch and the
    /// producer can write it), and per layer whether its o / down projection reads them.
    presplit_layouts: [Option<SplitLayout>; 2],
    presplit_layers: Vec<[bool; 2]>,
    /// The launches of one step, counted once at construction by walking the layers as
    /// [`Resident::enqueue`] does (the profile line reports them).
    launches: Launches,
    /// Whether [`Resident::step`] replays a CUDA graph of the step ([`graph_default`];
    /// [`Resident::set_graph`]).
    graph: Cell<bool>,
    /// Graph replays so far (tests check that the graph path really ran).
    replays: Cell<u64>,
}

/// Mutation tests only (`TESSERA_DECODE_MUTATE=stale-position`): the position is no longer
/// written once the graph exists, as if it were baked into the graph; tests/gpu.rs must fail.
fn stale_position() -> bool {
    #[cfg(feature = "mutation-test")]
    {
        kernels_cuda::resident::DecodeMutation::from_env()
            == Some(kernels_cuda::resident::DecodeMutation::StalePosition)
    }
    #[cfg(not(feature = "mutation-test"))]
    {
        false
    }
}

/// Whether the decode step runs as a CUDA graph unless told otherwise:
/// `TESSERA_CUDA_GRAPH=0` turns it off (the same kernels then launch one by one), so a
/// bench can time both in one run; the tokens are the same.
pub fn graph_default() -> bool {
    std::env::var("TESSERA_CUDA_GRAPH").map_or(true, |v| v != "0")
}

/// One generation's device buffers: the residual stream, the padded GEMV inputs, the KV
/// cache (capacity fixed at creation), scratch, logits and the token id.
pub struct ResidentState {
    cap: usize,
    len: usize,
    /// The position of the step being run, [1]: written by the host before each step,
    /// outside the graph, and read by the attention kernel (RoPE angle, cache row, length).
    pos: CudaSlice<i32>,
    /// The step captured as a CUDA graph (after one step run eagerly, so every buffer the
    /// GEMVs keep is allocated and every kernel loaded), with the operations it holds.
    /// Its kernels' arguments point into this state, so it lives and dies with it.
    graph: Option<(StepOps, CudaGraph)>,
    /// The operations of the last step run eagerly on this state (capture waits for one).
    warmed: Option<StepOps>,
    /// The residual stream: the embedding row arrives in `x`; a fused norm that adds an
    /// update writes the sum into the other of `x` and `x2` (its blocks all read the old
    /// one whole), so the stream alternates between them in a fixed order every step.
    x: CudaSlice<f32>,
    x2: CudaSlice<f32>,
    xn: CudaSlice<f32>,
    /// This token's q, k and v [nh * hd + 2 kvw] as the projections write them (the
    /// attention kernel rotates k and appends k and v to the cache).
    qkv: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    tmp: CudaSlice<f32>,
    /// gate and up [2 inter].
    gu: CudaSlice<f32>,
    act: CudaSlice<f32>,
    /// The attention's scratch (scores or chunk partials, arrival counters).
    scores: AttentionScratch,
    /// The splits the attention and SwiGLU kernels write for the o and down projections
    /// (`Resident::presplit_layouts`; None where no layer reads one).
    splits: [Option<SplitBuffers>; 2],
    logits: CudaSlice<f32>,
    id: CudaSlice<i32>,
    kv: Vec<(CudaSlice<f32>, CudaSlice<f32>)>,
}

impl ResidentState {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn upload(stream: &Arc<CudaStream>, v: &[f32]) -> Result<CudaSlice<f32>> {
    stream
        .clone_htod(v)
        .map_err(driver("uploading the resident path's constants"))
}

fn zeros(stream: &Arc<CudaStream>, n: usize) -> Result<CudaSlice<f32>> {
    stream
        .alloc_zeros::<f32>(n.max(1))
        .map_err(driver("allocating the resident path's buffers"))
}

fn dev_linear(stream: &Arc<CudaStream>, lin: &Linear) -> Result<DevLinear> {
    let slot = lin
        .slot
        .ok_or_else(|| missing(&format!("`{}`", lin.r.name)))?;
    let bias = match &lin.bias {
        Some(b) => Some(upload(stream, b)?),
        None => None,
    };
    Ok(DevLinear { slot, bias })
}

/// A group's device form: the fused tensor with the parts' biases concatenated (zeros for a
/// part without one), or the parts apart.
fn dev_group(stream: &Arc<CudaStream>, fused: Option<Slot>, parts: &[&Linear]) -> Result<Group> {
    let Some(slot) = fused else {
        return Ok(Group::Split(
            parts
                .iter()
                .map(|l| dev_linear(stream, l))
                .collect::<Result<_>>()?,
        ));
    };
    let bias = if parts.iter().any(|l| l.bias.is_some()) {
        let mut b = Vec::new();
        for l in parts {
            match &l.bias {
                Some(v) => b.extend_from_slice(v),
                None => b.resize(b.len() + l.rows(), 0.0),
            }
        }
        Some(upload(stream, &b)?)
    } else {
        None
    };
    Ok(Group::Fused(DevLinear { slot, bias }))
}

impl Group {
    fn linears(&self) -> Vec<&DevLinear> {
        match self {
            Group::Fused(l) => vec![l],
            Group::Split(v) => v.iter().collect(),
        }
    }
}

fn tensor<'a>(tensors: &'a [DeviceTensor], l: &DevLinear) -> Result<&'a DeviceTensor> {
    tensors
        .get(l.slot.0)
        .ok_or_else(|| missing(&format!("slot {}", l.slot.0)))
}

impl Resident {
    /// Uploads the graph's norms, biases and RoPE table and compiles the decode kernels.
    /// Every linear must already be resident (`slot` set); `fused` holds, per layer, the
    /// fused q/k/v and gate/up tensors [`fuse_layers`] uploaded (empty: none).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        g: &LlamaGraph,
        fused: &[FusedSlots],
        final_norm: &[f32],
        lm_head: &Linear,
        vocab: usize,
        inter: usize,
    ) -> Result<Resident> {
        let kernels = DecodeKernels::new(dev).map_err(err)?;
        let stream = dev.stream();
        let mut layers = Vec::with_capacity(g.layers.len());
        for (i, l) in g.layers.iter().enumerate() {
            let f = fused.get(i).copied().unwrap_or_default();
            let qk_norm = match (&l.q_norm, &l.k_norm) {
                (Some(qn), Some(kn)) => Some((upload(stream, qn)?, upload(stream, kn)?)),
                _ => None,
            };
            layers.push(DevLayer {
                input_norm: upload(stream, &l.input_norm)?,
                post_norm: upload(stream, &l.post_norm)?,
                qk_norm,
                qkv: dev_group(stream, f.qkv, &[&l.q, &l.k, &l.v])?,
                o: dev_linear(stream, &l.o)?,
                gate_up: dev_group(stream, f.gate_up, &[&l.gate, &l.up])?,
                down: dev_linear(stream, &l.down)?,
            });
        }
        let lm_head = dev_linear(stream, lm_head)?;
        let hidden = final_norm.len();
        let mut hidden_stride = hidden;
        let mut attn_stride = g.heads * g.head_dim;
        let mut act_stride = inter;
        let kvw = g.kv_heads * g.head_dim;
        for l in &layers {
            // The attention and SwiGLU kernels read the groups' outputs by offset: each group
            // must fill its buffer exactly.
            for (grp, want, what) in [
                (&l.qkv, g.heads * g.head_dim + 2 * kvw, "q/k/v"),
                (&l.gate_up, 2 * inter, "gate/up"),
            ] {
                let mut rows = 0usize;
                for lin in grp.linears() {
                    rows = rows.saturating_add(tensor(tensors, lin)?.rows());
                }
                if rows != want {
                    return Err(EngineError::Input(format!(
                        "the {what} projections have {rows} rows in all, the graph needs {want}"
                    )));
                }
            }
            for lin in l.qkv.linears().into_iter().chain(l.gate_up.linears()) {
                hidden_stride = hidden_stride.max(tensor(tensors, lin)?.x_stride());
            }
            attn_stride = attn_stride.max(tensor(tensors, &l.o)?.x_stride());
            act_stride = act_stride.max(tensor(tensors, &l.down)?.x_stride());
        }
        hidden_stride = hidden_stride.max(tensor(tensors, &lm_head)?.x_stride());
        let mut r = Resident {
            kernels,
            layers,
            final_norm: upload(stream, final_norm)?,
            lm_head,
            inv_freq: upload(stream, g.rope.inv_freq())?,
            attn_factor: g.rope.attention_factor(),
            hidden,
            heads: g.heads,
            kv_heads: g.kv_heads,
            head_dim: g.head_dim,
            inter,
            vocab,
            eps: g.eps,
            hidden_stride,
            attn_stride,
            act_stride,
            fuse_prologue: prologue_fusion_default(),
            fused_prologues: Vec::new(),
            final_fused: false,
            presplit: presplit_default(),
            presplit_layouts: [None, None],
            presplit_layers: Vec::new(),
            launches: Launches::default(),
            graph: Cell::new(graph_default()),
            replays: Cell::new(0),
        };
        r.plan_prologues(dev, tensors)?;
        Ok(r)
    }

    /// Decides, per layer, which prologues run inside their GEMV's split (where
    /// [`Resident::prologue_fusion`] is on and the GEMV is one tensor the backend splits on
    /// the device), and counts the launches that makes.
    fn plan_prologues(&mut self, dev: &CudaBackend, tensors: &[DeviceTensor]) -> Result<()> {
        let on = self.fuse_prologue;
        let one = |lins: Vec<&DevLinear>| -> Result<bool> {
            Ok(on
                && match lins.as_slice() {
                    [lin] => dev.resident_prologue_fusable(tensor(tensors, lin)?),
                    _ => false,
                })
        };
        let mut per_layer = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            per_layer.push([one(l.qkv.linears())?, one(l.gate_up.linears())?]);
        }
        self.fused_prologues = per_layer;
        self.final_fused = one(vec![&self.lm_head])?;
        self.plan_presplit(dev, tensors)?;
        self.launches = self.count_launches(tensors)?;
        Ok(())
    }

    /// Decides which o / down projections read a split their producer writes (where
    /// [`presplit_default`] is on): the layout of layer 0's tensor, where it has a presplit
    /// launch and the producer can write it (attention: the chunked kernel, head_dim a
    /// multiple of 128), and every layer whose tensor reads that same layout.
    fn plan_presplit(&mut self, dev: &CudaBackend, tensors: &[DeviceTensor]) -> Result<()> {
        let shape = AttentionShape {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            cap: 1,
        };
        let mode = self.kernels.attention_mode();
        let layout_of = |lin: &DevLinear| -> Result<Option<SplitLayout>> {
            Ok(dev.presplit_layout(tensor(tensors, lin)?))
        };
        let mut layouts = [None, None];
        if let Some(l0) = self.layers.first() {
            let [o, down] = self.presplit;
            layouts[0] =
                layout_of(&l0.o)?.filter(|&l| o && DecodeKernels::attention_splits(mode, shape, l));
            layouts[1] = layout_of(&l0.down)?.filter(|l| down && l.x_stride >= self.inter);
        }
        let mut per_layer = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let o = layouts[0].is_some() && layout_of(&l.o)? == layouts[0];
            let down = layouts[1].is_some() && layout_of(&l.down)? == layouts[1];
            per_layer.push([o, down]);
        }
        self.presplit_layouts = layouts;
        self.presplit_layers = per_layer;
        Ok(())
    }

    /// Whether prologues fuse into the GEMVs' splits where the tensors allow it
    /// ([`prologue_fusion_default`], read when the model loads).
    pub fn prologue_fusion(&self) -> bool {
        self.fuse_prologue
    }

    /// The launches [`Resident::enqueue`] makes per step: its own walk, with nothing
    /// enqueued.
    fn count_launches(&self, tensors: &[DeviceTensor]) -> Result<Launches> {
        let mut n = Launches {
            copies: 2,
            ..Default::default()
        };
        // A presplit GEMV reads what its producer split: no split launch.
        let gemv = |lin: &DevLinear, presplit: bool, n: &mut Launches| -> Result<()> {
            n.gemv += 1;
            if !presplit && tensor(tensors, lin)?.uses_tensor_cores(1) {
                n.prep += 1;
            }
            if lin.bias.is_some() {
                n.other += 1;
            }
            Ok(())
        };
        for ((l, fused), pre) in self
            .layers
            .iter()
            .zip(&self.fused_prologues)
            .zip(&self.presplit_layers)
        {
            // add_rmsnorm, attention_rope, add_rmsnorm, swiglu; a fused norm is its GEMV's
            // split
            n.other += 2 + fused.iter().filter(|&&f| !f).count();
            for lin in l.qkv.linears().into_iter().chain(l.gate_up.linears()) {
                gemv(lin, false, &mut n)?;
            }
            gemv(&l.o, pre[0], &mut n)?;
            gemv(&l.down, pre[1], &mut n)?;
        }
        // the final norm (unless fused), the argmax
        n.other += if self.final_fused { 1 } else { 2 };
        gemv(&self.lm_head, false, &mut n)?;
        Ok(n)
    }

    /// Launches per decode step when it runs eagerly (a graph replay is one launch of
    /// these, after the same two copies).
    pub fn launches(&self) -> Launches {
        self.launches
    }

    /// Weight bytes (codes and sidecars) one step reads: every tensor the path multiplies
    /// by, once.
    pub fn weight_bytes(&self, tensors: &[DeviceTensor]) -> Result<usize> {
        let mut lins: Vec<&DevLinear> = vec![&self.lm_head];
        for l in &self.layers {
            lins.extend(l.qkv.linears());
            lins.extend(l.gate_up.linears());
            lins.extend([&l.o, &l.down]);
        }
        let read: Vec<&DeviceTensor> = lins
            .into_iter()
            .map(|lin| tensor(tensors, lin))
            .collect::<Result<_>>()?;
        sum_stored_bytes(read)
    }

    /// Turns the CUDA graph replay of [`Resident::step`] on or off (from the next step on;
    /// a state's graph is kept for when it is turned back on).
    pub fn set_graph(&self, on: bool) {
        self.graph.set(on);
    }

    /// Whether [`Resident::step`] replays a CUDA graph.
    pub fn graph(&self) -> bool {
        self.graph.get()
    }

    /// Graph replays so far, over every state.
    pub fn graph_replays(&self) -> u64 {
        self.replays.get()
    }

    /// Device buffers for a generation of up to `cap` positions.
    pub fn new_state(&self, dev: &CudaBackend, cap: usize) -> Result<ResidentState> {
        let s = dev.stream();
        let kvw = self.kv_heads * self.head_dim;
        let cache = cap
            .checked_mul(kvw)
            .ok_or_else(|| EngineError::Input(format!("KV cache of {cap} positions overflows")))?;
        let mut kv = Vec::with_capacity(self.layers.len());
        for _ in &self.layers {
            kv.push((zeros(s, cache)?, zeros(s, cache)?));
        }
        Ok(ResidentState {
            cap,
            len: 0,
            pos: s
                .alloc_zeros::<i32>(1)
                .map_err(driver("allocating the position"))?,
            graph: None,
            warmed: None,
            x: zeros(s, self.hidden)?,
            x2: zeros(s, self.hidden)?,
            xn: zeros(s, self.hidden_stride)?,
            qkv: zeros(s, self.heads * self.head_dim + 2 * kvw)?,
            attn: zeros(s, self.attn_stride)?,
            tmp: zeros(s, self.hidden)?,
            gu: zeros(s, 2 * self.inter)?,
            act: zeros(s, self.act_stride)?,
            scores: AttentionScratch::new(
                dev,
                AttentionShape {
                    heads: self.heads,
                    kv_heads: self.kv_heads,
                    head_dim: self.head_dim,
                    cap,
                },
            )
            .map_err(err)?,
            splits: [
                self.presplit_layouts[0]
                    .map(|l| dev.split_buffers(l))
                    .transpose()
                    .map_err(err)?,
                self.presplit_layouts[1]
                    .map(|l| dev.split_buffers(l))
                    .transpose()
                    .map_err(err)?,
            ],
            logits: zeros(s, self.vocab)?,
            id: s
                .alloc_zeros::<i32>(1)
                .map_err(driver("allocating the token id"))?,
            kv,
        })
    }

    /// Enqueues one GEMV (and its bias) from `x` into `y`.
    fn linear(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        lin: &DevLinear,
        x: &CudaSlice<f32>,
        y: &mut CudaViewMut<'_, f32>,
        ops: StepOps,
    ) -> Result<()> {
        if ops.gemv {
            let w = tensor(tensors, lin)?;
            dev.gemv_launch_resident(w, &x.slice(..), 1, y)
                .map_err(err)?;
        }
        self.bias(dev, lin, y, ops)
    }

    /// Enqueues a linear's bias add into `y`, if it has one.
    /// Enqueues one GEMV (and its bias) from the split its producer wrote into `split`.
    fn linear_presplit(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        lin: &DevLinear,
        split: &SplitBuffers,
        y: &mut CudaViewMut<'_, f32>,
        ops: StepOps,
    ) -> Result<()> {
        if ops.gemv {
            let w = tensor(tensors, lin)?;
            dev.gemv_launch_presplit(w, split, y).map_err(err)?;
        }
        self.bias(dev, lin, y, ops)
    }

    fn bias(
        &self,
        dev: &CudaBackend,
        lin: &DevLinear,
        y: &mut CudaViewMut<'_, f32>,
        ops: StepOps,
    ) -> Result<()> {
        if ops.other
            && let Some(b) = &lin.bias
        {
            self.kernels.add_vec(dev, y, b).map_err(err)?;
        }
        Ok(())
    }

    /// Enqueues the RMSNorm of the residual stream (after `norm.d` joins it) and the GEMVs
    /// of `lins` on it, into consecutive slices of `y`. Fused (one tensor whose split
    /// allows it): the norm runs inside that GEMV's activation split, which writes the
    /// updated stream into the other of the two stream buffers; otherwise add_rmsnorm
    /// updates the stream in place and writes `xn`, which the GEMVs read.
    #[allow(clippy::too_many_arguments)]
    fn norm_group(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        (x, x2, cur): (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &mut bool),
        norm: Norm<'_>,
        xn: &mut CudaSlice<f32>,
        lins: Vec<&DevLinear>,
        y: &mut CudaSlice<f32>,
        ops: StepOps,
    ) -> Result<()> {
        let (now, next) = if *cur { (x2, x) } else { (x, x2) };
        if let (true, [lin]) = (norm.fused, lins.as_slice()) {
            let w = tensor(tensors, lin)?;
            let rows = w.rows();
            if ops.gemv {
                let d = norm.d.map(|v| v.slice(..));
                dev.gemv_launch_resident_norm(
                    w,
                    &now.slice(..),
                    d.as_ref(),
                    &norm.weight.slice(..),
                    &mut next.slice_mut(..),
                    self.hidden,
                    self.eps,
                    &mut y.slice_mut(..rows),
                )
                .map_err(err)?;
            }
            if norm.d.is_some() {
                *cur = !*cur;
            }
            return self.bias(dev, lin, &mut y.slice_mut(..rows), ops);
        }
        if ops.other {
            let d = norm.d.map(|v| v.slice(..));
            self.kernels
                .add_rmsnorm(
                    dev,
                    now,
                    d.as_ref(),
                    norm.weight,
                    &mut xn.slice_mut(..),
                    self.hidden,
                    self.eps,
                )
                .map_err(err)?;
        }
        self.group(dev, tensors, &lins, xn, y, ops)
    }

    /// Enqueues a group's GEMVs from `x` into consecutive slices of `y`, starting at 0.
    fn group(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        lins: &[&DevLinear],
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        ops: StepOps,
    ) -> Result<()> {
        let mut at = 0usize;
        for &lin in lins {
            let rows = tensor(tensors, lin)?.rows();
            let end = at
                .checked_add(rows)
                .filter(|&e| e <= y.len())
                .ok_or_else(|| {
                    EngineError::Input(format!(
                        "a group's outputs overflow its buffer of {} floats",
                        y.len()
                    ))
                })?;
            self.linear(dev, tensors, lin, x, &mut y.slice_mut(at..end), ops)?;
            at = end;
        }
        Ok(())
    }

    /// Runs one token (its embedding row `row`, `[hidden]`) at position `st.len()` through
    /// every layer and the LM head, appending to the device cache: the state's CUDA graph
    /// replayed when [`Resident::graph`] (captured on the state's second step), else the
    /// kernels launched one by one. Returns the argmax id, and the logits when
    /// `want_logits`. The only host synchronisation is the read-back.
    pub fn step(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        row: &[f32],
        want_logits: bool,
    ) -> Result<(u32, Option<Vec<f32>>)> {
        self.enqueue(dev, tensors, st, row, StepOps::ALL, self.graph.get())?;
        let s = dev.stream();
        let mut id = [0i32; 1];
        s.memcpy_dtoh(&st.id, &mut id[..])
            .map_err(driver("reading the token id"))?;
        let logits = if want_logits {
            Some(
                s.clone_dtoh(&st.logits)
                    .map_err(driver("reading the logits"))?,
            )
        } else {
            None
        };
        s.synchronize()
            .map_err(driver("waiting for the decode step"))?;
        let tok = u32::try_from(id[0])
            .ok()
            .filter(|&t| (t as usize) < self.vocab)
            .ok_or_else(|| EngineError::Input(format!("the device argmax returned {}", id[0])))?;
        Ok((tok, logits))
    }

    /// Enqueues a step's operations (all of them, or only the GEMVs / only the rest): the
    /// uploads of the embedding row and of the position, then the kernels, launched one by
    /// one or, when `graph`, as one replay of the state's graph of `ops`. The graph is
    /// captured on the first such step after a step of the same `ops` ran eagerly on this
    /// state (that step allocates the GEMVs' scratch and loads their kernels, neither of
    /// which may happen inside a capture); until then the step runs eagerly.
    pub fn enqueue(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        row: &[f32],
        ops: StepOps,
        graph: bool,
    ) -> Result<()> {
        let pos = st.len;
        if pos >= st.cap {
            return Err(EngineError::Input(format!(
                "the resident KV cache holds {} positions and is full",
                st.cap
            )));
        }
        if row.len() != self.hidden {
            return Err(EngineError::Input(format!(
                "embedding row of {} values, hidden is {}",
                row.len(),
                self.hidden
            )));
        }
        let position = i32::try_from(pos)
            .map_err(|_| EngineError::Input(format!("position {pos} exceeds 32 bits")))?;
        let s = dev.stream();
        s.memcpy_htod(row, &mut st.x)
            .map_err(driver("uploading the embedding row"))?;
        if !(stale_position() && st.graph.is_some()) {
            s.memcpy_htod(&[position], &mut st.pos)
                .map_err(driver("uploading the position"))?;
        }
        if graph {
            if st.graph.as_ref().is_some_and(|(o, _)| *o != ops) {
                st.graph = None;
            }
            if st.graph.is_none() && st.warmed == Some(ops) {
                let g = self.capture(dev, tensors, st, ops)?;
                st.graph = Some((ops, g));
            }
        }
        match (&st.graph, graph) {
            (Some((_, g)), true) => {
                g.launch()
                    .map_err(driver("launching the decode step's graph"))?;
                self.replays.set(self.replays.get().saturating_add(1));
            }
            (Some(_), false) | (None, true) | (None, false) => {
                self.record(dev, tensors, st, ops)?;
                st.warmed = Some(ops);
            }
        }
        st.len = pos + 1;
        Ok(())
    }

    /// Captures `ops` of a step on `st` into a CUDA graph (nothing runs). The capture is
    /// thread-local: an allocation or a synchronisation on this thread while capturing
    /// fails the capture instead of being recorded.
    fn capture(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        ops: StepOps,
    ) -> Result<CudaGraph> {
        let s = dev.stream();
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("beginning the decode step's graph capture"))?;
        let recorded = self.record(dev, tensors, st, ops);
        // The capture ends whatever happened, or the stream would stay in capture mode.
        let ended = s.end_capture(sys::CUgraphInstantiate_flags(0));
        recorded?;
        let g = ended
            .map_err(driver("ending the decode step's graph capture"))?
            .ok_or_else(|| {
                EngineError::Input("the decode step's graph capture recorded nothing".into())
            })?;
        g.upload()
            .map_err(driver("uploading the decode step's graph"))?;
        Ok(g)
    }

    /// Enqueues `ops` of one step on the stream, kernel by kernel: the inputs (the
    /// embedding row in `x`, the position in `pos`) are already there or queued before.
    fn record(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        ops: StepOps,
    ) -> Result<()> {
        let k = &self.kernels;
        let (hd, nh, nkv) = (self.head_dim, self.heads, self.kv_heads);
        let kvw = nkv * hd;
        let shape = AttentionShape {
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
            cap: st.cap,
        };
        let ResidentState {
            pos,
            x,
            x2,
            xn,
            qkv,
            attn,
            tmp,
            gu,
            act,
            scores,
            splits,
            logits,
            id,
            kv,
            ..
        } = st;
        let [attn_split, act_split] = splits;
        // The residual stream: in `x` (false) or `x2` (true).
        let mut cur = false;
        for (l, (((w, (kc, vc)), fused), pre)) in self
            .layers
            .iter()
            .zip(kv.iter_mut())
            .zip(&self.fused_prologues)
            .zip(&self.presplit_layers)
            .enumerate()
        {
            // This layer's o / down projections read the split their producer writes.
            let mut o_split = attn_split.as_mut().filter(|_| pre[0]);
            let mut down_split = act_split.as_mut().filter(|_| pre[1]);
            // The previous layer's down_proj output joins the residual here.
            let d = (l > 0).then_some(&*tmp);
            let norm = Norm {
                weight: &w.input_norm,
                d,
                fused: fused[0],
            };
            self.norm_group(
                dev,
                tensors,
                (x, x2, &mut cur),
                norm,
                xn,
                w.qkv.linears(),
                qkv,
                ops,
            )?;
            if ops.other && ops.attention {
                let nq = nh * hd;
                let (qv, kv_new, vv) = (
                    qkv.slice(..nq),
                    qkv.slice(nq..nq + kvw),
                    qkv.slice(nq + kvw..nq + 2 * kvw),
                );
                let rope = RopeArgs {
                    norms: w.qk_norm.as_ref().map(|(a, b)| (a, b)),
                    eps: self.eps,
                    inv_freq: &self.inv_freq,
                    attn_factor: self.attn_factor,
                };
                k.attention_rope(
                    dev,
                    &qv,
                    &kv_new,
                    &vv,
                    kc,
                    vc,
                    scores,
                    &mut attn.slice_mut(..),
                    shape,
                    rope,
                    pos,
                    o_split.as_deref_mut(),
                )
                .map_err(err)?;
            }
            match &o_split {
                Some(sp) => {
                    self.linear_presplit(dev, tensors, &w.o, sp, &mut tmp.slice_mut(..), ops)?
                }
                None => self.linear(dev, tensors, &w.o, attn, &mut tmp.slice_mut(..), ops)?,
            }
            let norm = Norm {
                weight: &w.post_norm,
                d: Some(&*tmp),
                fused: fused[1],
            };
            self.norm_group(
                dev,
                tensors,
                (x, x2, &mut cur),
                norm,
                xn,
                w.gate_up.linears(),
                gu,
                ops,
            )?;
            if ops.other {
                let f = self.inter;
                let (gv, uv) = (gu.slice(..f), gu.slice(f..2 * f));
                match down_split.as_deref_mut() {
                    Some(sp) => k.swiglu_split(dev, &gv, &uv, &mut act.slice_mut(..f), sp),
                    None => k.swiglu(dev, &gv, &uv, &mut act.slice_mut(..f)),
                }
                .map_err(err)?;
            }
            match &down_split {
                Some(sp) => {
                    self.linear_presplit(dev, tensors, &w.down, sp, &mut tmp.slice_mut(..), ops)?
                }
                None => self.linear(dev, tensors, &w.down, act, &mut tmp.slice_mut(..), ops)?,
            }
        }
        let norm = Norm {
            weight: &self.final_norm,
            d: (!self.layers.is_empty()).then_some(&*tmp),
            fused: self.final_fused,
        };
        self.norm_group(
            dev,
            tensors,
            (x, x2, &mut cur),
            norm,
            xn,
            vec![&self.lm_head],
            logits,
            ops,
        )?;
        if ops.other {
            k.argmax(dev, logits, id).map_err(err)?;
        }
        Ok(())
    }

    /// Times `reps` steps of each kind (all operations; GEMVs only; everything else only),
    /// launched one by one and as graph replays, each on a scratch state and synchronised
    /// once at its end: seconds per step.
    pub fn profile(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        row: &[f32],
        reps: usize,
    ) -> Result<ResidentProfile> {
        // (seconds per step, of which the host spent enqueueing)
        let time = |ops: StepOps, graph: bool| -> Result<(f64, f64)> {
            let mut st = self.new_state(dev, reps.saturating_add(2))?;
            // Two steps first: kernels are compiled and loaded, and the graph captured,
            // before the clock starts.
            for _ in 0..2 {
                self.enqueue(dev, tensors, &mut st, row, ops, graph)?;
            }
            dev.stream()
                .synchronize()
                .map_err(driver("waiting for the profile"))?;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                self.enqueue(dev, tensors, &mut st, row, ops, graph)?;
            }
            let queued = t.elapsed().as_secs_f64();
            dev.stream()
                .synchronize()
                .map_err(driver("waiting for the profile"))?;
            let n = reps.max(1) as f64;
            Ok((t.elapsed().as_secs_f64() / n, queued / n))
        };
        let times = |graph: bool| -> Result<StepTimes> {
            let (step_s, step_enqueue_s) = time(StepOps::ALL, graph)?;
            let (gemv_only_s, gemv_enqueue_s) = time(
                StepOps {
                    other: false,
                    ..StepOps::ALL
                },
                graph,
            )?;
            let (other_only_s, other_enqueue_s) = time(
                StepOps {
                    gemv: false,
                    ..StepOps::ALL
                },
                graph,
            )?;
            let (no_attention_s, _) = time(
                StepOps {
                    attention: false,
                    ..StepOps::ALL
                },
                graph,
            )?;
            Ok(StepTimes {
                step_s,
                gemv_only_s,
                other_only_s,
                no_attention_s,
                step_enqueue_s,
                gemv_enqueue_s,
                other_enqueue_s,
            })
        };
        Ok(ResidentProfile {
            launches: self.launches,
            pdl: self.kernels.pdl(),
            attention: self.kernels.attention_mode(),
            prologue_fusion: self.fuse_prologue,
            eager: times(false)?,
            graph: times(true)?,
        })
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }
}

/// The resident path's decode step timed, launched one by one and as CUDA graph replays.
#[derive(Copy, Clone, Debug)]
pub struct ResidentProfile {
    /// Launches per step run eagerly (GEMVs, their activation splits, the rest, copies); a
    /// graph replay is one launch after the same copies.
    pub launches: Launches,
    /// Whether the decode kernels took programmatic dependent launches.
    pub pdl: bool,
    /// How attention summed over the positions (`TESSERA_RESIDENT_ATTN`).
    pub attention: AttentionMode,
    /// Whether the RMSNorms ran inside the GEMVs' activation splits where the tensors allow
    /// it (`TESSERA_RESIDENT_PROLOGUE`; then "GEMVs alone" includes them).
    pub prologue_fusion: bool,
    /// The kernels launched one by one.
    pub eager: StepTimes,
    /// One graph replay a step.
    pub graph: StepTimes,
}

/// Seconds per decode step on the resident path, and of its parts run alone.
#[derive(Copy, Clone, Debug)]
pub struct StepTimes {
    /// Every operation (no read-back).
    pub step_s: f64,
    /// Only the GEMVs (4 per layer fused, 7 unfused, + the LM head; with their splits) and
    /// the two uploads.
    pub gemv_only_s: f64,
    /// Only the rest: norms, RoPE, attention, SwiGLU, argmax, and the two uploads.
    pub other_only_s: f64,
    /// Every operation but the attention kernel (what attention costs the step; the
    /// tokens are wrong without it, only the time counts).
    pub no_attention_s: f64,
    /// Host time spent enqueueing (launch calls returning) in each of the three, per step:
    /// close to the total means the host's launch rate, not the GPU, sets the pace.
    pub step_enqueue_s: f64,
    pub gemv_enqueue_s: f64,
    pub other_enqueue_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Slot;
    use crate::config::ModelConfig;

    /// The loader skips exactly the parts of the groups that were fused, per layer.
    #[test]
    fn fused_parts_names_the_fused_groups_members_only() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/parity-llama");
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let cfg = ModelConfig::from_json("config.json", &text).unwrap();
        let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let container = container_io::Container::open(dir.join("model.safetensors")).unwrap();
        let w = Weights::new(container, json.as_ref());
        let g = LlamaGraph::load(&cfg, &w).unwrap();
        assert_eq!(g.layers.len(), 2);
        let fused = [
            FusedSlots {
                qkv: Some(Slot(0)),
                gate_up: None,
            },
            FusedSlots {
                qkv: None,
                gate_up: Some(Slot(1)),
            },
        ];
        let got = fused_parts(&g, &fused);
        let (l0, l1) = (&g.layers[0], &g.layers[1]);
        let want: std::collections::HashSet<String> = [&l0.q, &l0.k, &l0.v, &l1.gate, &l1.up]
            .iter()
            .map(|l| l.r.name.clone())
            .collect();
        assert_eq!(got, want);
        assert!(fused_parts(&g, &[]).is_empty());
    }
}
