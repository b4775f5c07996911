//! The DeepSeek-V3 graph (`modeling_deepseek_v3.py`): multi-head latent attention with kv_b
//! absorption, dense MLP in the first `first_k_dense_replace` layers, then a shared expert
//! plus routed experts chosen by group-limited, bias-corrected sigmoid routing.
//!
//! Attention. q = q_b(RMSNorm(q_a(x))) (or q_proj), split per head into [nope | rope];
//! kv_a(x) = [latent | k_rot]; latent = RMSNorm(latent) (eps 1e-6: transformers builds
//! q_a_layernorm and kv_a_layernorm with the default eps, not rms_norm_eps). RoPE on q's
//! rope part and the shared k_rot, interleaved or by halves as `rope_interleave` says;
//! softmax scale qk_head_dim^-0.5, times yarn's mscale² when the config has one.
//! Rather than expanding every cached latent to keys and values through kv_b (as the
//! reference does), the cache keeps latent and k_rot, and kv_b is absorbed:
//! score_j = (W_kbᵀ q_nope) · latent_j + q_rot · k_rot_j, out = W_vb (Σ_j p_j latent_j),
//! which is the reference's q·k and p·v reassociated. kv_b is decoded to f32 once at load
//! and the absorption runs on the host on every backend.
//!
//! Routing (DeepseekV3TopkRouter): s = sigmoid(x · W_gᵀ); choice = s + e_score_correction_bias;
//! a group scores the sum of its two best choices; the topk_group best groups stay; the
//! top_k experts by choice among them are taken with weights s (not choice), normalised to
//! sum 1 when norm_topk_prob (+1e-20), then times routed_scaling_factor.

use crate::config::{MlaConfig, ModelConfig, MoeConfig};
use crate::error::{EngineError, Result};
use crate::gate::{Kind, LayerFormats};
use crate::kv_cache::{KvCache, LayerCache};
use crate::llama::add;
use crate::model::{Exec, Linear};
use crate::ops::{self, Rope};
use crate::weights::Weights;

/// transformers' DeepseekV3RMSNorm default, used by q_a_layernorm and kv_a_layernorm.
const LATENT_NORM_EPS: f32 = 1e-6;

/// A SwiGLU MLP (dense, shared expert, or one routed expert).
pub struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn load(w: &Weights, p: &str, kinds: [Kind; 3], hidden: usize, inter: usize) -> Result<Mlp> {
        let m = |kind, n: &str, r, c| -> Result<Linear> {
            Ok(Linear::new(
                Some(kind),
                w.matrix(&format!("{p}.{n}.weight"), r, c)?,
            ))
        };
        Ok(Mlp {
            gate: m(kinds[0], "gate_proj", inter, hidden)?,
            up: m(kinds[1], "up_proj", inter, hidden)?,
            down: m(kinds[2], "down_proj", hidden, inter)?,
        })
    }

    fn run(&self, ex: &Exec<'_>, x: &[f32], s: usize) -> Result<Vec<f32>> {
        let mut g = ex.linear(&self.gate, x, s)?;
        let u = ex.linear(&self.up, x, s)?;
        ops::swiglu(&mut g, &u);
        ex.linear(&self.down, &g, s)
    }

    fn linears_mut(&mut self) -> [&mut Linear; 3] {
        [&mut self.gate, &mut self.up, &mut self.down]
    }

    fn linears(&self) -> [&Linear; 3] {
        [&self.gate, &self.up, &self.down]
    }
}

/// A mixture-of-experts block.
pub struct Moe {
    router: Linear,
    correction_bias: Vec<f32>,
    shared: Option<Mlp>,
    experts: Vec<Mlp>,
}

/// The MLP of a layer.
pub enum Ffn {
    Dense(Box<Mlp>),
    Moe(Box<Moe>),
}

/// The query path.
pub enum QueryProj {
    /// q_b(RMSNorm(q_a(x))).
    LowRank {
        q_a: Box<Linear>,
        norm: Vec<f32>,
        q_b: Box<Linear>,
    },
    /// A plain q_proj (q_lora_rank null).
    Full(Box<Linear>),
}

/// One decoder layer's weights.
pub struct DeepseekLayer {
    input_norm: Vec<f32>,
    q: QueryProj,
    kv_a: Linear,
    kv_a_norm: Vec<f32>,
    /// kv_b_proj's resolution (for the gate) and its f32 decode [heads * (nope + v), rank].
    kv_b: Linear,
    kv_b_f32: Vec<f32>,
    o: Linear,
    post_norm: Vec<f32>,
    ffn: Ffn,
}

/// The whole graph.
pub struct DeepseekGraph {
    heads: usize,
    /// qk_head_dim^-0.5, times yarn's mscale² (`yarn_apply_mscale`).
    softmax_scale: f32,
    eps: f32,
    mla: MlaConfig,
    moe: MoeConfig,
    rope: Rope,
    layers: Vec<DeepseekLayer>,
}

impl DeepseekGraph {
    pub fn load(cfg: &ModelConfig, w: &Weights) -> Result<DeepseekGraph> {
        let (Some(mla), Some(moe)) = (cfg.mla.clone(), cfg.moe.clone()) else {
            return Err(EngineError::Input(
                "deepseek graph needs MLA and MoE settings".to_string(),
            ));
        };
        let (h, nh) = (cfg.hidden_size, cfg.num_attention_heads);
        let qk = mla.qk_head_dim();
        let rank = mla.kv_lora_rank;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let a = format!("{p}.self_attn");
            let lin = |kind, n: &str, r, c| -> Result<Linear> {
                Ok(Linear::new(
                    Some(kind),
                    w.matrix(&format!("{a}.{n}.weight"), r, c)?,
                ))
            };
            let q = match mla.q_lora_rank {
                Some(qr) => QueryProj::LowRank {
                    q_a: Box::new(lin(Kind::QA, "q_a_proj", qr, h)?),
                    norm: w.vector(&format!("{a}.q_a_layernorm.weight"), qr)?,
                    q_b: Box::new(lin(Kind::QB, "q_b_proj", nh * qk, qr)?),
                },
                None => QueryProj::Full(Box::new(lin(Kind::Q, "q_proj", nh * qk, h)?)),
            };
            let kv_b = lin(
                Kind::KvB,
                "kv_b_proj",
                nh * (mla.qk_nope_head_dim + mla.v_head_dim),
                rank,
            )?;
            let kv_b_f32 = w.decode(&kv_b.r)?;
            let ffn = if moe.is_moe_layer(l) {
                let m = format!("{p}.mlp");
                let e = moe.n_routed_experts;
                let router = Linear::new(
                    Some(Kind::Router),
                    w.matrix(&format!("{m}.gate.weight"), e, h)?,
                );
                let correction_bias = w.vector(&format!("{m}.gate.e_score_correction_bias"), e)?;
                let shared = if moe.n_shared_experts > 0 {
                    Some(Mlp::load(
                        w,
                        &format!("{m}.shared_experts"),
                        [Kind::ShGate, Kind::ShUp, Kind::ShDown],
                        h,
                        moe.moe_intermediate_size * moe.n_shared_experts,
                    )?)
                } else {
                    None
                };
                if w.has(&format!("{m}.experts.gate_up_proj")) {
                    return Err(EngineError::Tensor {
                        file: w.file().to_string(),
                        tensor: format!("{m}.experts.gate_up_proj"),
                        msg: "fused 3-D expert tensors are not read; the engine expects the \
                              checkpoint layout, one {m}.experts.E.{gate,up,down}_proj.weight \
                              per expert"
                            .to_string(),
                    });
                }
                let experts = (0..e)
                    .map(|k| {
                        Mlp::load(
                            w,
                            &format!("{m}.experts.{k}"),
                            [Kind::ExpGate, Kind::ExpUp, Kind::ExpDown],
                            h,
                            moe.moe_intermediate_size,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ffn::Moe(Box::new(Moe {
                    router,
                    correction_bias,
                    shared,
                    experts,
                }))
            } else {
                Ffn::Dense(Box::new(Mlp::load(
                    w,
                    &format!("{p}.mlp"),
                    [Kind::MlpGate, Kind::MlpUp, Kind::MlpDown],
                    h,
                    cfg.intermediate_size,
                )?))
            };
            layers.push(DeepseekLayer {
                input_norm: w.vector(&format!("{p}.input_layernorm.weight"), h)?,
                q,
                kv_a: lin(
                    Kind::KvA,
                    "kv_a_proj_with_mqa",
                    rank + mla.qk_rope_head_dim,
                    h,
                )?,
                kv_a_norm: w.vector(&format!("{a}.kv_a_layernorm.weight"), rank)?,
                kv_b,
                kv_b_f32,
                o: lin(Kind::O, "o_proj", h, nh * mla.v_head_dim)?,
                post_norm: w.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
                ffn,
            });
        }
        Ok(DeepseekGraph {
            heads: nh,
            softmax_scale: ((qk as f64).powf(-0.5) * cfg.rope.softmax_mscale()) as f32,
            eps: cfg.rms_norm_eps,
            rope: Rope::from_config(&cfg.rope),
            mla,
            moe,
            layers,
        })
    }

    fn layer_linears(l: &DeepseekLayer) -> Vec<&Linear> {
        let mut v: Vec<&Linear> = Vec::new();
        match &l.q {
            QueryProj::LowRank { q_a, q_b, .. } => v.extend([&**q_a, &**q_b]),
            QueryProj::Full(q) => v.push(&**q),
        }
        v.extend([&l.kv_a, &l.kv_b, &l.o]);
        match &l.ffn {
            Ffn::Dense(m) => v.extend(m.linears()),
            Ffn::Moe(m) => {
                v.push(&m.router);
                if let Some(s) = &m.shared {
                    v.extend(s.linears());
                }
                for e in &m.experts {
                    v.extend(e.linears());
                }
            }
        }
        v
    }

    /// Every tensor the backend multiplies by. kv_b is absent: it is absorbed on the host.
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v: Vec<&mut Linear> = Vec::new();
        for l in &mut self.layers {
            match &mut l.q {
                QueryProj::LowRank { q_a, q_b, .. } => v.extend([&mut **q_a, &mut **q_b]),
                QueryProj::Full(q) => v.push(&mut **q),
            }
            v.extend([&mut l.kv_a, &mut l.o]);
            match &mut l.ffn {
                Ffn::Dense(m) => v.extend(m.linears_mut()),
                Ffn::Moe(m) => {
                    v.push(&mut m.router);
                    if let Some(s) = &mut m.shared {
                        v.extend(s.linears_mut());
                    }
                    for e in &mut m.experts {
                        v.extend(e.linears_mut());
                    }
                }
            }
        }
        v
    }

    pub fn layer_formats(&self) -> Vec<LayerFormats> {
        self.layers
            .iter()
            .map(|l| LayerFormats {
                tensors: Self::layer_linears(l)
                    .iter()
                    .filter_map(|lin| lin.kind.map(|k| (k, lin.r.format)))
                    .collect(),
            })
            .collect()
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache {
            layers: (0..self.layers.len())
                .map(|_| LayerCache::mla(self.mla.kv_lora_rank, self.mla.qk_rope_head_dim))
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
        let hn = ops::rms_norm(x, &w.input_norm, self.eps);
        let attn = self.attention(ex, w, &hn, cache, pos0, s)?;
        let o = ex.linear(&w.o, &attn, s)?;
        add(x, &o);
        let hn = ops::rms_norm(x, &w.post_norm, self.eps);
        let y = match &w.ffn {
            Ffn::Dense(m) => m.run(ex, &hn, s)?,
            Ffn::Moe(m) => self.moe(ex, m, &hn, s)?,
        };
        add(x, &y);
        Ok(())
    }

    fn attention(
        &self,
        ex: &Exec<'_>,
        w: &DeepseekLayer,
        hn: &[f32],
        cache: &mut LayerCache,
        pos0: usize,
        s: usize,
    ) -> Result<Vec<f32>> {
        let m = &self.mla;
        let (nh, nope, rope, vd, rank) = (
            self.heads,
            m.qk_nope_head_dim,
            m.qk_rope_head_dim,
            m.v_head_dim,
            m.kv_lora_rank,
        );
        let qk = nope + rope;
        let mut q = match &w.q {
            QueryProj::LowRank { q_a, norm, q_b } => {
                let mut qa = ex.linear(q_a, hn, s)?;
                ops::rms_norm_rows(&mut qa, norm, LATENT_NORM_EPS);
                ex.linear(q_b, &qa, s)?
            }
            QueryProj::Full(qp) => ex.linear(qp, hn, s)?,
        };
        let ckv = ex.linear(&w.kv_a, hn, s)?;
        let LayerCache::Mla { latent, k_rot, .. } = cache else {
            return Err(EngineError::Input(
                "the KV cache was made for another model (GQA, not MLA)".to_string(),
            ));
        };
        for t in 0..s {
            let pos = pos0 + t;
            let row = &ckv[t * (rank + rope)..(t + 1) * (rank + rope)];
            let mut c = row[..rank].to_vec();
            ops::rms_norm_rows(&mut c, &w.kv_a_norm, LATENT_NORM_EPS);
            let mut kr = row[rank..].to_vec();
            self.apply_rope(&mut kr, pos);
            latent.extend_from_slice(&c);
            k_rot.extend_from_slice(&kr);
            for head in q[t * nh * qk..(t + 1) * nh * qk].chunks_exact_mut(qk) {
                self.apply_rope(&mut head[nope..], pos);
            }
        }
        let scale = self.softmax_scale;
        let wkv = &w.kv_b_f32;
        let stride = nope + vd;
        let mut out = vec![0f32; s * nh * vd];
        let mut q_lat = vec![0f32; rank];
        let mut o_lat = vec![0f32; rank];
        for t in 0..s {
            let seen = pos0 + t + 1;
            for h in 0..nh {
                let qh = &q[(t * nh + h) * qk..(t * nh + h + 1) * qk];
                // Absorb W_kb into the query: q_lat = W_kbᵀ q_nope.
                q_lat.fill(0.0);
                for (n, qn) in qh[..nope].iter().enumerate() {
                    let wrow = &wkv[(h * stride + n) * rank..(h * stride + n + 1) * rank];
                    for (a, b) in q_lat.iter_mut().zip(wrow) {
                        *a += qn * b;
                    }
                }
                let mut p: Vec<f32> = (0..seen)
                    .map(|j| {
                        (ops::dot(&q_lat, &latent[j * rank..(j + 1) * rank])
                            + ops::dot(&qh[nope..], &k_rot[j * rope..(j + 1) * rope]))
                            * scale
                    })
                    .collect();
                ops::softmax(&mut p);
                o_lat.fill(0.0);
                for (j, pj) in p.iter().enumerate() {
                    for (a, b) in o_lat.iter_mut().zip(&latent[j * rank..(j + 1) * rank]) {
                        *a += pj * b;
                    }
                }
                // Absorb W_vb on the way out: v = W_vb o_lat.
                let dst = &mut out[(t * nh + h) * vd..(t * nh + h + 1) * vd];
                for (d, o) in dst.iter_mut().enumerate() {
                    let r = h * stride + nope + d;
                    *o = ops::dot(&wkv[r * rank..(r + 1) * rank], &o_lat);
                }
            }
        }
        Ok(out)
    }

    fn apply_rope(&self, x: &mut [f32], pos: usize) {
        if self.mla.rope_interleave {
            self.rope.apply_interleaved(x, pos);
        } else {
            self.rope.apply_half(x, pos);
        }
    }

    /// The experts token `t` goes to, with their weights (DeepseekV3TopkRouter).
    pub fn route(&self, logits: &[f32], bias: &[f32]) -> Vec<(usize, f32)> {
        route(&self.moe, logits, bias)
    }

    fn moe(&self, ex: &Exec<'_>, m: &Moe, hn: &[f32], s: usize) -> Result<Vec<f32>> {
        let hid = hn.len() / s;
        let e = self.moe.n_routed_experts;
        let logits = ex.linear(&m.router, hn, s)?;
        // expert -> [(token, weight)], so each expert runs once over all its tokens.
        let mut assigned: Vec<Vec<(usize, f32)>> = vec![Vec::new(); e];
        for t in 0..s {
            for (k, wgt) in self.route(&logits[t * e..(t + 1) * e], &m.correction_bias) {
                assigned[k].push((t, wgt));
            }
        }
        let mut y = vec![0f32; s * hid];
        for (k, toks) in assigned.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            let mut xs = Vec::with_capacity(toks.len() * hid);
            for (t, _) in toks {
                xs.extend_from_slice(&hn[t * hid..(t + 1) * hid]);
            }
            let out = m.experts[k].run(ex, &xs, toks.len())?;
            for ((t, wgt), row) in toks.iter().zip(out.chunks_exact(hid)) {
                for (a, b) in y[t * hid..(t + 1) * hid].iter_mut().zip(row) {
                    *a += b * wgt;
                }
            }
        }
        if let Some(sh) = &m.shared {
            let z = sh.run(ex, hn, s)?;
            add(&mut y, &z);
        }
        Ok(y)
    }
}

/// DeepseekV3TopkRouter for one token: (expert, weight) pairs, `num_experts_per_tok` of them.
pub fn route(cfg: &MoeConfig, logits: &[f32], bias: &[f32]) -> Vec<(usize, f32)> {
    let e = cfg.n_routed_experts;
    let per = e / cfg.n_group;
    let scores: Vec<f32> = logits.iter().map(|v| ops::sigmoid(*v)).collect();
    let choice: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    // A group's score: the sum of its two best choices.
    let group_scores: Vec<f32> = choice
        .chunks_exact(per)
        .map(|g| {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for &v in g {
                if v > a {
                    b = a;
                    a = v;
                } else if v > b {
                    b = v;
                }
            }
            a + b
        })
        .collect();
    let groups = top_indices(&group_scores, cfg.topk_group);
    let mut masked = vec![f32::NEG_INFINITY; e];
    for g in groups {
        masked[g * per..(g + 1) * per].copy_from_slice(&choice[g * per..(g + 1) * per]);
    }
    let picked = top_indices(&masked, cfg.num_experts_per_tok);
    let mut weights: Vec<f32> = picked.iter().map(|&k| scores[k]).collect();
    if cfg.norm_topk_prob {
        let denom = weights.iter().sum::<f32>() + 1e-20;
        for w in &mut weights {
            *w /= denom;
        }
    }
    picked
        .into_iter()
        .zip(weights)
        .map(|(k, w)| (k, w * cfg.routed_scaling_factor))
        .collect()
}

/// Indices of the `k` largest values, largest first (lower index first on ties).
fn top_indices(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> MoeConfig {
        MoeConfig {
            n_routed_experts: 8,
            n_shared_experts: 1,
            num_experts_per_tok: 2,
            n_group: 4,
            topk_group: 2,
            norm_topk_prob: true,
            routed_scaling_factor: 2.5,
            moe_intermediate_size: 16,
            first_k_dense_replace: 1,
        }
    }

    #[test]
    fn routing_respects_groups_bias_and_weights() {
        let c = cfg();
        // Unbiased: experts 0 (0.953) and 4 (0.943) score best, but expert 4's group
        // (4, 5) sums to 0.99 and loses to groups (0, 1) and (2, 3): group limiting picks 0, 1.
        let logits = [3.0, 2.5, 0.0, 0.0, 2.8, -3.0, -3.0, -3.0];
        let r0 = route(&c, &logits, &[0.0; 8]);
        assert_eq!(
            r0.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![0, 1],
            "{r0:?}"
        );
        // The correction bias lifts experts 2 and 3 above them.
        let bias = [0.0, 0.0, 0.6, 0.6, 0.0, 0.0, 0.0, 0.0];
        let r = route(&c, &logits, &bias);
        assert_eq!(
            r.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![2, 3],
            "{r:?}"
        );
        // Weights are the unbiased sigmoid scores (0.5 each), normalised, times 2.5.
        for (_, w) in &r {
            assert!((w - 1.25).abs() < 1e-6, "{r:?}");
        }
        // Without normalisation the raw score is scaled.
        let raw = route(
            &MoeConfig {
                norm_topk_prob: false,
                ..cfg()
            },
            &logits,
            &bias,
        );
        for (_, w) in &raw {
            assert!((w - 0.5 * 2.5).abs() < 1e-6, "{raw:?}");
        }
    }
}
