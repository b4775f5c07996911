//! The device-resident decode path (CUDA, Llama / Qwen3 graphs): one token is every layer
//! enqueued on the backend's stream (RMSNorm, the q/k/v GEMVs (v straight into the device
//! KV cache), one attention launch doing q_norm/k_norm, RoPE, the k append and attention,
//! o_proj, residual add fused into the next RMSNorm, gate/up, SwiGLU, down; then the final
//! norm, the LM head and the argmax)
//! with no host synchronisation until the 4-byte token id (and, when asked, the logits)
//! comes back. The embedding row is decoded on the host and uploaded (hidden floats a token).
//!
//! The loader takes this path only when the gate ([`crate::gate::layer_path_with`] against
//! the backend's fused table) puts every layer on it and the LM head's format is covered
//! too; otherwise the model runs op by op as before. Activations stay f32 and every
//! operation follows [`crate::llama`] (the host graph) step for step, so the token streams
//! equal the CPU's (tests/gpu.rs).

use crate::backend::{Slot, cuda_error};
use crate::error::{EngineError, Result};
use crate::llama::LlamaGraph;
use crate::model::Linear;
use kernels_cuda::cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DriverError};
use kernels_cuda::resident::{AttentionShape, DecodeKernels, RopeArgs};
use kernels_cuda::{CudaBackend, CudaError, DeviceTensor};
use std::sync::Arc;

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

struct DevLayer {
    input_norm: CudaSlice<f32>,
    post_norm: CudaSlice<f32>,
    qk_norm: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    q: DevLinear,
    k: DevLinear,
    v: DevLinear,
    o: DevLinear,
    gate: DevLinear,
    up: DevLinear,
    down: DevLinear,
}

/// Which operations a step enqueues. Every field true is the decode step; the others exist
/// to time the GEMVs apart from the rest ([`Resident::profile`]).
#[derive(Copy, Clone, Debug)]
pub struct StepOps {
    pub gemv: bool,
    pub other: bool,
}

impl StepOps {
    pub const ALL: StepOps = StepOps {
        gemv: true,
        other: true,
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
}

/// One generation's device buffers: the residual stream, the padded GEMV inputs, the KV
/// cache (capacity fixed at creation), scratch, logits and the token id.
pub struct ResidentState {
    cap: usize,
    len: usize,
    x: CudaSlice<f32>,
    xn: CudaSlice<f32>,
    q: CudaSlice<f32>,
    /// This token's k as k_proj writes it (the attention kernel rotates it into the cache).
    knew: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    tmp: CudaSlice<f32>,
    g: CudaSlice<f32>,
    u: CudaSlice<f32>,
    act: CudaSlice<f32>,
    scores: CudaSlice<f32>,
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

fn tensor<'a>(tensors: &'a [DeviceTensor], l: &DevLinear) -> Result<&'a DeviceTensor> {
    tensors
        .get(l.slot.0)
        .ok_or_else(|| missing(&format!("slot {}", l.slot.0)))
}

impl Resident {
    /// Uploads the graph's norms, biases and RoPE table and compiles the decode kernels.
    /// Every linear must already be resident (`slot` set).
    pub fn new(
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        g: &LlamaGraph,
        final_norm: &[f32],
        lm_head: &Linear,
        vocab: usize,
        inter: usize,
    ) -> Result<Resident> {
        let kernels = DecodeKernels::new(dev).map_err(err)?;
        let stream = dev.stream();
        let mut layers = Vec::with_capacity(g.layers.len());
        for l in &g.layers {
            let qk_norm = match (&l.q_norm, &l.k_norm) {
                (Some(qn), Some(kn)) => Some((upload(stream, qn)?, upload(stream, kn)?)),
                _ => None,
            };
            layers.push(DevLayer {
                input_norm: upload(stream, &l.input_norm)?,
                post_norm: upload(stream, &l.post_norm)?,
                qk_norm,
                q: dev_linear(stream, &l.q)?,
                k: dev_linear(stream, &l.k)?,
                v: dev_linear(stream, &l.v)?,
                o: dev_linear(stream, &l.o)?,
                gate: dev_linear(stream, &l.gate)?,
                up: dev_linear(stream, &l.up)?,
                down: dev_linear(stream, &l.down)?,
            });
        }
        let lm_head = dev_linear(stream, lm_head)?;
        let hidden = final_norm.len();
        let mut hidden_stride = hidden;
        let mut attn_stride = g.heads * g.head_dim;
        let mut act_stride = inter;
        for l in &layers {
            for lin in [&l.q, &l.k, &l.v, &l.gate, &l.up] {
                hidden_stride = hidden_stride.max(tensor(tensors, lin)?.x_stride());
            }
            attn_stride = attn_stride.max(tensor(tensors, &l.o)?.x_stride());
            act_stride = act_stride.max(tensor(tensors, &l.down)?.x_stride());
        }
        hidden_stride = hidden_stride.max(tensor(tensors, &lm_head)?.x_stride());
        Ok(Resident {
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
        })
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
            x: zeros(s, self.hidden)?,
            xn: zeros(s, self.hidden_stride)?,
            q: zeros(s, self.heads * self.head_dim)?,
            knew: zeros(s, kvw)?,
            attn: zeros(s, self.attn_stride)?,
            tmp: zeros(s, self.hidden)?,
            g: zeros(s, self.inter)?,
            u: zeros(s, self.inter)?,
            act: zeros(s, self.act_stride)?,
            scores: zeros(s, self.heads * cap)?,
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
        if ops.other
            && let Some(b) = &lin.bias
        {
            self.kernels.add_vec(dev, y, b).map_err(err)?;
        }
        Ok(())
    }

    /// Runs one token (its embedding row `row`, [hidden]) at position `st.len()` through
    /// every layer and the LM head, appending to the device cache. Returns the argmax id, and
    /// the logits when `want_logits`. The only host synchronisation is the read-back.
    pub fn step(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        row: &[f32],
        want_logits: bool,
    ) -> Result<(u32, Option<Vec<f32>>)> {
        self.enqueue(dev, tensors, st, row, StepOps::ALL)?;
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

    /// Enqueues a step's operations (all of them, or only the GEMVs / only the rest).
    pub fn enqueue(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        st: &mut ResidentState,
        row: &[f32],
        ops: StepOps,
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
        let s = dev.stream();
        let k = &self.kernels;
        let (hd, nh, nkv) = (self.head_dim, self.heads, self.kv_heads);
        let kvw = nkv * hd;
        let shape = AttentionShape {
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
            cap: st.cap,
        };
        s.memcpy_htod(row, &mut st.x)
            .map_err(driver("uploading the embedding row"))?;
        let ResidentState {
            x,
            xn,
            q,
            knew,
            attn,
            tmp,
            g,
            u,
            act,
            scores,
            logits,
            id,
            kv,
            ..
        } = st;
        for (l, (w, (kc, vc))) in self.layers.iter().zip(kv.iter_mut()).enumerate() {
            if ops.other {
                // The previous layer's down_proj output joins the residual here.
                let d = (l > 0).then(|| tmp.slice(..));
                k.add_rmsnorm(
                    dev,
                    x,
                    d.as_ref(),
                    &w.input_norm,
                    &mut xn.slice_mut(..),
                    self.hidden,
                    self.eps,
                )
                .map_err(err)?;
            }
            let row_kv = pos * kvw..(pos + 1) * kvw;
            self.linear(dev, tensors, &w.q, xn, &mut q.slice_mut(..), ops)?;
            self.linear(dev, tensors, &w.k, xn, &mut knew.slice_mut(..), ops)?;
            self.linear(dev, tensors, &w.v, xn, &mut vc.slice_mut(row_kv), ops)?;
            if ops.other {
                let rope = RopeArgs {
                    norms: w.qk_norm.as_ref().map(|(a, b)| (a, b)),
                    eps: self.eps,
                    inv_freq: &self.inv_freq,
                    attn_factor: self.attn_factor,
                };
                k.attention_rope(
                    dev,
                    q,
                    knew,
                    kc,
                    vc,
                    scores,
                    &mut attn.slice_mut(..),
                    shape,
                    rope,
                    pos + 1,
                )
                .map_err(err)?;
            }
            self.linear(dev, tensors, &w.o, attn, &mut tmp.slice_mut(..), ops)?;
            if ops.other {
                k.add_rmsnorm(
                    dev,
                    x,
                    Some(&tmp.slice(..)),
                    &w.post_norm,
                    &mut xn.slice_mut(..),
                    self.hidden,
                    self.eps,
                )
                .map_err(err)?;
            }
            self.linear(dev, tensors, &w.gate, xn, &mut g.slice_mut(..), ops)?;
            self.linear(dev, tensors, &w.up, xn, &mut u.slice_mut(..), ops)?;
            if ops.other {
                k.swiglu(dev, g, u, &mut act.slice_mut(..)).map_err(err)?;
            }
            self.linear(dev, tensors, &w.down, act, &mut tmp.slice_mut(..), ops)?;
        }
        if ops.other {
            let d = (!self.layers.is_empty()).then(|| tmp.slice(..));
            k.add_rmsnorm(
                dev,
                x,
                d.as_ref(),
                &self.final_norm,
                &mut xn.slice_mut(..),
                self.hidden,
                self.eps,
            )
            .map_err(err)?;
        }
        self.linear(
            dev,
            tensors,
            &self.lm_head,
            xn,
            &mut logits.slice_mut(..),
            ops,
        )?;
        if ops.other {
            k.argmax(dev, logits, id).map_err(err)?;
        }
        st.len = pos + 1;
        Ok(())
    }

    /// Times `reps` steps of each kind (all operations; GEMVs only; everything else only)
    /// on a scratch state, each batch synchronised once at its end: seconds per step.
    pub fn profile(
        &self,
        dev: &CudaBackend,
        tensors: &[DeviceTensor],
        row: &[f32],
        reps: usize,
    ) -> Result<ResidentProfile> {
        // (seconds per step, of which the host spent enqueueing)
        let time = |ops: StepOps| -> Result<(f64, f64)> {
            let mut st = self.new_state(dev, reps + 1)?;
            // One step first: kernels are compiled and loaded before the clock starts.
            self.enqueue(dev, tensors, &mut st, row, ops)?;
            dev.stream()
                .synchronize()
                .map_err(driver("waiting for the profile"))?;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                self.enqueue(dev, tensors, &mut st, row, ops)?;
            }
            let queued = t.elapsed().as_secs_f64();
            dev.stream()
                .synchronize()
                .map_err(driver("waiting for the profile"))?;
            let n = reps.max(1) as f64;
            Ok((t.elapsed().as_secs_f64() / n, queued / n))
        };
        let (step_s, step_enqueue_s) = time(StepOps::ALL)?;
        let (gemv_only_s, gemv_enqueue_s) = time(StepOps {
            gemv: true,
            other: false,
        })?;
        let (other_only_s, other_enqueue_s) = time(StepOps {
            gemv: false,
            other: true,
        })?;
        Ok(ResidentProfile {
            step_s,
            gemv_only_s,
            other_only_s,
            step_enqueue_s,
            gemv_enqueue_s,
            other_enqueue_s,
        })
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }
}

/// Seconds per decode step on the resident path, and of its parts run alone.
#[derive(Copy, Clone, Debug)]
pub struct ResidentProfile {
    /// Every operation (no read-back).
    pub step_s: f64,
    /// Only the GEMVs (7 per layer + the LM head).
    pub gemv_only_s: f64,
    /// Only the rest: norms, RoPE, attention, SwiGLU, argmax, the embedding upload.
    pub other_only_s: f64,
    /// Host time spent enqueueing (launch calls returning) in each of the three, per step:
    /// close to the total means the host's launch rate, not the GPU, sets the pace.
    pub step_enqueue_s: f64,
    pub gemv_enqueue_s: f64,
    pub other_enqueue_s: f64,
}
