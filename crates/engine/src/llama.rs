//! The Llama / Qwen3 dense graph: RMSNorm, GQA attention with RoPE (`rotate_half`), SwiGLU
//! MLP, following transformers' `modeling_llama.py` and `modeling_qwen3.py`. Qwen3 adds an
//! RMSNorm over each head of q and k (weights `[head_dim]`, eps = rms_norm_eps) before RoPE.
//! Optional q/k/v/o biases (`attention_bias`) and MLP biases (`mlp_bias`) are read.

use crate::config::{Arch, ModelConfig};
use crate::error::{EngineError, Result};
use crate::gate::{Kind, LayerFormats};
use crate::kv_cache::{KvCache, LayerCache};
use crate::model::{Exec, Linear};
use crate::ops::{self, Rope};
use crate::weights::Weights;

/// One decoder layer's weights.
pub struct LlamaLayer {
    pub(crate) input_norm: Vec<f32>,
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    pub(crate) q_norm: Option<Vec<f32>>,
    pub(crate) k_norm: Option<Vec<f32>>,
    pub(crate) post_norm: Vec<f32>,
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

/// The whole graph (its fields are read by the device-resident path, `crate::resident`).
pub struct LlamaGraph {
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) eps: f32,
    pub(crate) rope: Rope,
    pub(crate) layers: Vec<LlamaLayer>,
}

fn linear(
    w: &Weights,
    kind: Kind,
    name: &str,
    rows: usize,
    cols: usize,
    bias: bool,
) -> Result<Linear> {
    let mut lin = Linear::new(Some(kind), w.matrix(&format!("{name}.weight"), rows, cols)?);
    if bias {
        lin.bias = Some(w.vector(&format!("{name}.bias"), rows)?);
    }
    Ok(lin)
}

impl LlamaGraph {
    pub fn load(cfg: &ModelConfig, w: &Weights) -> Result<LlamaGraph> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (nq, nkv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
        let inter = cfg.intermediate_size;
        let qk_norm = cfg.arch == Arch::Qwen3;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let ab = cfg.attention_bias;
            let mb = cfg.mlp_bias;
            layers.push(LlamaLayer {
                input_norm: w.vector(&format!("{p}.input_layernorm.weight"), h)?,
                q: linear(w, Kind::Q, &format!("{p}.self_attn.q_proj"), nq, h, ab)?,
                k: linear(w, Kind::K, &format!("{p}.self_attn.k_proj"), nkv, h, ab)?,
                v: linear(w, Kind::V, &format!("{p}.self_attn.v_proj"), nkv, h, ab)?,
                o: linear(w, Kind::O, &format!("{p}.self_attn.o_proj"), h, nq, ab)?,
                q_norm: if qk_norm {
                    Some(w.vector(&format!("{p}.self_attn.q_norm.weight"), hd)?)
                } else {
                    None
                },
                k_norm: if qk_norm {
                    Some(w.vector(&format!("{p}.self_attn.k_norm.weight"), hd)?)
                } else {
                    None
                },
                post_norm: w.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
                gate: linear(
                    w,
                    Kind::MlpGate,
                    &format!("{p}.mlp.gate_proj"),
                    inter,
                    h,
                    mb,
                )?,
                up: linear(w, Kind::MlpUp, &format!("{p}.mlp.up_proj"), inter, h, mb)?,
                down: linear(
                    w,
                    Kind::MlpDown,
                    &format!("{p}.mlp.down_proj"),
                    h,
                    inter,
                    mb,
                )?,
            });
        }
        Ok(LlamaGraph {
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: hd,
            eps: cfg.rms_norm_eps,
            rope: Rope::from_config(&cfg.rope),
            layers,
        })
    }

    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = Vec::new();
        for l in &mut self.layers {
            v.extend([
                &mut l.q,
                &mut l.k,
                &mut l.v,
                &mut l.o,
                &mut l.gate,
                &mut l.up,
                &mut l.down,
            ]);
        }
        v
    }

    pub fn layer_formats(&self) -> Vec<LayerFormats> {
        self.layers
            .iter()
            .map(|l| LayerFormats {
                tensors: [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .filter_map(|lin| lin.kind.map(|k| (k, lin.r.format)))
                    .collect(),
            })
            .collect()
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache {
            layers: (0..self.layers.len())
                .map(|_| LayerCache::gqa(self.kv_heads * self.head_dim))
                .collect(),
        }
    }

    /// One decoder layer over `s` tokens at positions pos0.., in place on x [s, hidden].
    pub fn layer(
        &self,
        ex: &Exec<'_>,
        l: usize,
        x: &mut [f32],
        cache: &mut LayerCache,
        pos0: usize,
        s: usize,
    ) -> Result<()> {
        let w = &self.layers[l];
        let (hd, nh, nkv) = (self.head_dim, self.heads, self.kv_heads);
        let hn = ops::rms_norm(x, &w.input_norm, self.eps);
        let mut q = ex.linear(&w.q, &hn, s)?;
        let mut k = ex.linear(&w.k, &hn, s)?;
        let v = ex.linear(&w.v, &hn, s)?;
        if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
            ops::rms_norm_rows(&mut q, qn, self.eps);
            ops::rms_norm_rows(&mut k, kn, self.eps);
        }
        for t in 0..s {
            let pos = pos0 + t;
            for head in q[t * nh * hd..(t + 1) * nh * hd].chunks_exact_mut(hd) {
                self.rope.apply_half(head, pos);
            }
            for head in k[t * nkv * hd..(t + 1) * nkv * hd].chunks_exact_mut(hd) {
                self.rope.apply_half(head, pos);
            }
        }
        let LayerCache::Gqa { k: kc, v: vc, .. } = cache else {
            return Err(EngineError::Input(
                "the KV cache was made for another model (MLA, not GQA)".to_string(),
            ));
        };
        kc.extend_from_slice(&k);
        vc.extend_from_slice(&v);
        let scale = 1.0 / (hd as f32).sqrt();
        let group = nh / nkv;
        let kvw = nkv * hd;
        let mut attn = vec![0f32; s * nh * hd];
        for t in 0..s {
            let seen = pos0 + t + 1;
            for h in 0..nh {
                let g = h / group;
                let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
                let mut p: Vec<f32> = (0..seen)
                    .map(|j| ops::dot(qh, &kc[j * kvw + g * hd..j * kvw + (g + 1) * hd]) * scale)
                    .collect();
                ops::softmax(&mut p);
                let out = &mut attn[(t * nh + h) * hd..(t * nh + h + 1) * hd];
                for (j, pj) in p.iter().enumerate() {
                    let vj = &vc[j * kvw + g * hd..j * kvw + (g + 1) * hd];
                    for (o, vv) in out.iter_mut().zip(vj) {
                        *o += pj * vv;
                    }
                }
            }
        }
        let o = ex.linear(&w.o, &attn, s)?;
        add(x, &o);
        let hn = ops::rms_norm(x, &w.post_norm, self.eps);
        let mut g = ex.linear(&w.gate, &hn, s)?;
        let u = ex.linear(&w.up, &hn, s)?;
        ops::swiglu(&mut g, &u);
        let d = ex.linear(&w.down, &g, s)?;
        add(x, &d);
        Ok(())
    }
}

/// x += y elementwise.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
