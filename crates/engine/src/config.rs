//! config.json -> a typed model configuration.
//!
//! Keys and defaults follow transformers' own config classes (LlamaConfig, Qwen3Config,
//! DeepseekV3Config), so a config.json written with `use_diff=True` (defaults left out)
//! reads the same as a full one. Shapes are required; a missing or malformed one, and any
//! setting the graphs do not implement (another activation, sliding windows, scaled RoPE
//! variants), is refused by name instead of being ignored.

use crate::error::{EngineError, Result};
use serde_json::{Map, Value};

/// Which graph runs the model.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama: GQA attention, SwiGLU MLP.
    Llama,
    /// Qwen3 (dense): Llama plus per-head RMSNorm on q and k before RoPE.
    Qwen3,
    /// DeepSeek-V3: MLA attention, dense first layers, then shared + routed experts.
    DeepseekV3,
}

impl Arch {
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen3 => "qwen3",
            Arch::DeepseekV3 => "deepseek_v3",
        }
    }
}

/// Multi-head latent attention (DeepSeek-V2/V3).
#[derive(Clone, Debug, PartialEq)]
pub struct MlaConfig {
    /// Rank of the query down-projection (`q_a_proj`); `None` means a plain `q_proj`.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    /// RoPE on interleaved pairs (x0, x1), (x2, x3), ... rather than on halves.
    pub rope_interleave: bool,
}

impl MlaConfig {
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// DeepSeek-V3 mixture of experts with group-limited, bias-corrected sigmoid routing.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_routed_experts: usize,
    pub n_shared_experts: usize,
    pub num_experts_per_tok: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
    pub moe_intermediate_size: usize,
    /// Layers below this index use the dense MLP.
    pub first_k_dense_replace: usize,
}

impl MoeConfig {
    /// Whether layer `l` is a mixture-of-experts layer.
    pub fn is_moe_layer(&self, l: usize) -> bool {
        l >= self.first_k_dense_replace
    }
}

/// How RoPE frequencies are scaled for long contexts (transformers' `rope_type`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// `default`: plain RoPE.
    None,
    /// `llama3` (Llama 3.1+): low frequencies divided by `factor`, a smooth band between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// `yarn` (DeepSeek-V3, Qwen long-context): NTK-by-parts interpolation; cos and sin are
    /// multiplied by `attention_factor`.
    Yarn {
        factor: f64,
        attention_factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        original_max_position_embeddings: f64,
        truncate: bool,
        /// DeepSeek's softmax-scale correction (`yarn_apply_mscale`), when given.
        mscale_all_dim: Option<f64>,
    },
}

/// Rotary position embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    /// Rotated dimensions a head (head_dim, or qk_rope_head_dim under MLA).
    pub dim: usize,
    pub scaling: RopeScaling,
}

/// transformers' `yarn_get_mscale`.
pub fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl RopeConfig {
    /// The factor DeepSeek's softmax scale is multiplied by (`yarn_apply_mscale`): mscale²
    /// of `mscale_all_dim` under yarn, 1 otherwise.
    pub fn softmax_mscale(&self) -> f64 {
        match &self.scaling {
            RopeScaling::Yarn {
                factor,
                mscale_all_dim: Some(m),
                ..
            } if *m != 0.0 => {
                let s = yarn_get_mscale(*factor, *m);
                s * s
            }
            RopeScaling::Yarn { .. } | RopeScaling::None | RopeScaling::Llama3 { .. } => 1.0,
        }
    }
}

/// A model's configuration, as the graphs read it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Per-head dimension of q/k/v under GQA (unused by MLA, which has its own dims).
    pub head_dim: usize,
    pub intermediate_size: usize,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    pub rope: RopeConfig,
    pub mla: Option<MlaConfig>,
    pub moe: Option<MoeConfig>,
}

/// Reads config.json values with messages that name the file and the key.
struct Reader<'a> {
    file: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Reader<'a> {
    fn err(&self, msg: String) -> EngineError {
        EngineError::Config {
            file: self.file.to_string(),
            msg,
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn usize_opt(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.err(format!("{key}: expected a non-negative integer, got {v}"))
                }),
        }
    }

    fn usize_req(&self, key: &str) -> Result<usize> {
        self.usize_opt(key)?
            .ok_or_else(|| self.err(format!("{key}: missing (required)")))
    }

    fn positive(&self, key: &str, v: usize) -> Result<usize> {
        if v == 0 {
            return Err(self.err(format!("{key}: must be positive, got 0")));
        }
        Ok(v)
    }

    fn pos_req(&self, key: &str) -> Result<usize> {
        let v = self.usize_req(key)?;
        self.positive(key, v)
    }

    fn pos_or(&self, key: &str, default: usize) -> Result<usize> {
        let v = self.usize_opt(key)?.unwrap_or(default);
        self.positive(key, v)
    }

    fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| self.err(format!("{key}: expected a number, got {v}"))),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(format!("{key}: expected true or false, got {v}"))),
        }
    }

    fn str_opt(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(format!("{key}: expected a string, got {v}"))),
        }
    }
}

impl ModelConfig {
    /// Reads a config.json file.
    pub fn from_file(path: &std::path::Path) -> Result<ModelConfig> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::Config {
            file: file.clone(),
            msg: format!("cannot read: {e}"),
        })?;
        ModelConfig::from_json(&file, &text)
    }

    /// Parses config.json text; `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<ModelConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| EngineError::Config {
            file: file.to_string(),
            msg: format!("not valid JSON: {e}"),
        })?;
        let map = v.as_object().ok_or_else(|| EngineError::Config {
            file: file.to_string(),
            msg: "expected a JSON object".to_string(),
        })?;
        let r = Reader { file, map };
        let model_type = r
            .str_opt("model_type")?
            .ok_or_else(|| r.err("model_type: missing (required)".to_string()))?;
        let arch = match model_type {
            "llama" => Arch::Llama,
            "qwen3" => Arch::Qwen3,
            "deepseek_v3" => Arch::DeepseekV3,
            other => {
                return Err(r.err(format!(
                    "model_type {other:?} is not supported (supported: llama, qwen3, deepseek_v3)"
                )));
            }
        };
        let act = r.str_opt("hidden_act")?.unwrap_or("silu");
        if act != "silu" {
            return Err(r.err(format!(
                "hidden_act {act:?} is not supported (the graphs run SwiGLU with silu)"
            )));
        }
        if r.bool_or("use_sliding_window", false)? {
            return Err(
                r.err("use_sliding_window: sliding-window attention is not supported".to_string())
            );
        }
        let hidden_size = r.pos_req("hidden_size")?;
        let heads = r.pos_req("num_attention_heads")?;
        let kv_heads = r.pos_or("num_key_value_heads", heads)?;
        if !heads.is_multiple_of(kv_heads) {
            return Err(r.err(format!(
                "num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})"
            )));
        }
        // LlamaConfig, Qwen3Config and DeepseekV3Config all default rms_norm_eps to 1e-6.
        let eps_default = 1e-6;
        let mut cfg = ModelConfig {
            arch,
            vocab_size: r.pos_req("vocab_size")?,
            hidden_size,
            num_hidden_layers: r.pos_req("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: 0,
            intermediate_size: r.pos_req("intermediate_size")?,
            rms_norm_eps: r.f64_or("rms_norm_eps", eps_default)? as f32,
            tie_word_embeddings: r.bool_or("tie_word_embeddings", false)?,
            attention_bias: r.bool_or("attention_bias", false)?,
            mlp_bias: r.bool_or("mlp_bias", false)?,
            rope: RopeConfig {
                theta: 0.0,
                dim: 0,
                scaling: RopeScaling::None,
            },
            mla: None,
            moe: None,
        };
        match arch {
            Arch::Llama | Arch::Qwen3 => {
                // DeepseekV3Config writes head_dim = qk_rope_head_dim, so head_dim is read
                // only for the GQA graphs.
                let derived = hidden_size / heads;
                cfg.head_dim = r.pos_or("head_dim", derived)?;
                if !cfg.head_dim.is_multiple_of(2) {
                    return Err(r.err(format!(
                        "head_dim {} is odd; RoPE rotates pairs",
                        cfg.head_dim
                    )));
                }
            }
            Arch::DeepseekV3 => {
                let mla = MlaConfig {
                    q_lora_rank: r.usize_opt("q_lora_rank")?.filter(|&n| n > 0),
                    kv_lora_rank: r.pos_req("kv_lora_rank")?,
                    qk_nope_head_dim: r.pos_req("qk_nope_head_dim")?,
                    qk_rope_head_dim: r.pos_req("qk_rope_head_dim")?,
                    v_head_dim: r.pos_req("v_head_dim")?,
                    rope_interleave: r.bool_or("rope_interleave", true)?,
                };
                if !mla.qk_rope_head_dim.is_multiple_of(2) {
                    return Err(r.err(format!(
                        "qk_rope_head_dim {} is odd; RoPE rotates pairs",
                        mla.qk_rope_head_dim
                    )));
                }
                if kv_heads != heads {
                    return Err(r.err(format!(
                        "num_key_value_heads ({kv_heads}) != num_attention_heads ({heads}): MLA \
                         shares one latent across all heads and the reference model repeats nothing"
                    )));
                }
                if let Some(f) = r.str_opt("scoring_func")?
                    && f != "sigmoid"
                {
                    return Err(r.err(format!(
                        "scoring_func {f:?} is not supported (DeepSeek-V3 routes with sigmoid)"
                    )));
                }
                let moe = MoeConfig {
                    n_routed_experts: r.pos_or("n_routed_experts", 256)?,
                    n_shared_experts: r.usize_opt("n_shared_experts")?.unwrap_or(1),
                    num_experts_per_tok: r.pos_or("num_experts_per_tok", 8)?,
                    n_group: r.pos_or("n_group", 8)?,
                    topk_group: r.pos_or("topk_group", 4)?,
                    norm_topk_prob: r.bool_or("norm_topk_prob", true)?,
                    routed_scaling_factor: r.f64_or("routed_scaling_factor", 2.5)? as f32,
                    moe_intermediate_size: r.pos_or("moe_intermediate_size", 2048)?,
                    first_k_dense_replace: r.usize_opt("first_k_dense_replace")?.unwrap_or(3),
                };
                check_moe(&r, &moe)?;
                cfg.head_dim = mla.qk_head_dim();
                cfg.mla = Some(mla);
                cfg.moe = Some(moe);
            }
        }
        let rope_dim = match &cfg.mla {
            Some(m) => m.qk_rope_head_dim,
            None => cfg.head_dim,
        };
        cfg.rope = rope_config(&r, rope_dim)?;
        Ok(cfg)
    }

    /// Whether layer `l` runs routed experts.
    pub fn is_moe_layer(&self, l: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| m.is_moe_layer(l))
    }
}

fn check_moe(r: &Reader<'_>, m: &MoeConfig) -> Result<()> {
    if !m.n_routed_experts.is_multiple_of(m.n_group) {
        return Err(r.err(format!(
            "n_routed_experts ({}) is not a multiple of n_group ({})",
            m.n_routed_experts, m.n_group
        )));
    }
    // The reference scores a group by the sum of its two best experts (`topk(2)`).
    if m.n_routed_experts / m.n_group < 2 {
        return Err(r.err(format!(
            "n_routed_experts / n_group = {} experts a group; group scoring needs at least 2",
            m.n_routed_experts / m.n_group
        )));
    }
    if m.topk_group > m.n_group {
        return Err(r.err(format!(
            "topk_group ({}) exceeds n_group ({})",
            m.topk_group, m.n_group
        )));
    }
    let reachable = m.topk_group * (m.n_routed_experts / m.n_group);
    if m.num_experts_per_tok > reachable {
        return Err(r.err(format!(
            "num_experts_per_tok ({}) exceeds the {reachable} experts of the topk_group groups",
            m.num_experts_per_tok
        )));
    }
    Ok(())
}

/// RoPE from transformers 5's `rope_parameters` or the older `rope_theta` + `rope_scaling`,
/// with transformers' defaults (`standardize_rope_params`, `_compute_*_parameters`).
/// Supported types: default, llama3, yarn; any other is refused by name.
fn rope_config(r: &Reader<'_>, dim: usize) -> Result<RopeConfig> {
    let mut theta = r.f64_or("rope_theta", 10000.0)?;
    let mut scaling = RopeScaling::None;
    let max_pos = r.f64_or("max_position_embeddings", 0.0)?;
    for key in ["rope_scaling", "rope_parameters"] {
        let Some(v) = r.get(key) else { continue };
        let Some(m) = v.as_object() else {
            return Err(r.err(format!("{key}: expected an object, got {v}")));
        };
        let p = Reader {
            file: r.file,
            map: m,
        };
        theta = p.f64_or("rope_theta", theta)?;
        let partial = p.f64_or("partial_rotary_factor", 1.0)?;
        if partial != 1.0 {
            return Err(r.err(format!(
                "{key}.partial_rotary_factor {partial} is not supported (only 1.0)"
            )));
        }
        let kind = match p.str_opt("rope_type")? {
            Some(k) => k,
            None => p.str_opt("type")?.unwrap_or("default"),
        };
        // standardize_rope_params: the pretraining length, for the scaled types.
        let orig = || -> Result<f64> {
            let top = r.f64_or("original_max_position_embeddings", max_pos)?;
            let v = p.f64_or("original_max_position_embeddings", top)?;
            if v <= 0.0 {
                return Err(r.err(format!(
                    "{key}.original_max_position_embeddings: missing or not positive ({v})"
                )));
            }
            Ok(v)
        };
        let req = |name: &str| -> Result<f64> {
            match p.get(name) {
                Some(_) => p.f64_or(name, 0.0),
                None => Err(r.err(format!(
                    "{key}.{name}: missing (required by rope_type {kind:?})"
                ))),
            }
        };
        scaling = match kind {
            "default" => RopeScaling::None,
            "llama3" => RopeScaling::Llama3 {
                factor: req("factor")?,
                low_freq_factor: req("low_freq_factor")?,
                high_freq_factor: req("high_freq_factor")?,
                original_max_position_embeddings: orig()?,
            },
            "yarn" => {
                let original = orig()?;
                let factor = match p.get("factor") {
                    Some(_) => p.f64_or("factor", 1.0)?,
                    None => max_pos / original,
                };
                let mscale = p.f64_or("mscale", 0.0)?;
                let mscale_all_dim = p.f64_or("mscale_all_dim", 0.0)?;
                let attention_factor = match p.get("attention_factor") {
                    Some(_) => p.f64_or("attention_factor", 1.0)?,
                    None if mscale != 0.0 && mscale_all_dim != 0.0 => {
                        yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
                    }
                    None => yarn_get_mscale(factor, 1.0),
                };
                // transformers: `get("beta_fast") or 32`, so 0 also means the default.
                let beta = |name: &str, d: f64| -> Result<f64> {
                    let v = p.f64_or(name, d)?;
                    Ok(if v == 0.0 { d } else { v })
                };
                RopeScaling::Yarn {
                    factor,
                    attention_factor,
                    beta_fast: beta("beta_fast", 32.0)?,
                    beta_slow: beta("beta_slow", 1.0)?,
                    original_max_position_embeddings: original,
                    truncate: p.bool_or("truncate", true)?,
                    mscale_all_dim: p.get("mscale_all_dim").map(|_| mscale_all_dim),
                }
            }
            other => {
                return Err(r.err(format!(
                    "{key}.rope_type {other:?} is not supported (supported: default, llama3, yarn)"
                )));
            }
        };
    }
    if theta <= 0.0 {
        return Err(r.err(format!("rope_theta must be positive, got {theta}")));
    }
    Ok(RopeConfig {
        theta,
        dim,
        scaling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelConfig> {
        ModelConfig::from_json("config.json", text)
    }

    #[test]
    fn llama_defaults_follow_transformers() {
        let c = parse(
            r#"{"model_type":"llama","vocab_size":128,"hidden_size":256,"intermediate_size":256,
                "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":1}"#,
        )
        .unwrap();
        assert_eq!(c.head_dim, 64);
        assert_eq!(c.rope.theta, 10000.0);
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse(r#"{"model_type":"llama","vocab_size":128}"#).unwrap_err();
        assert!(e.to_string().contains("hidden_size: missing"), "{e}");
        let e = parse(r#"{"model_type":"mamba"}"#).unwrap_err();
        assert!(e.to_string().contains("\"mamba\" is not supported"), "{e}");
        let e = parse(
            r#"{"model_type":"llama","vocab_size":128,"hidden_size":64,"intermediate_size":64,
                "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a multiple"), "{e}");
        let e = parse(
            r#"{"model_type":"llama","vocab_size":128,"hidden_size":64,"intermediate_size":64,
                "num_hidden_layers":1,"num_attention_heads":4,
                "rope_parameters":{"rope_type":"longrope","factor":4.0}}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("\"longrope\" is not supported"),
            "{e}"
        );
        let e = parse(
            r#"{"model_type":"llama","vocab_size":"x","hidden_size":64,"intermediate_size":64,
                "num_hidden_layers":1,"num_attention_heads":4}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("vocab_size: expected"), "{e}");
    }

    #[test]
    fn deepseek_reads_mla_and_moe() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/parity-deepseek-v3/config.json"
        ))
        .unwrap();
        let c = parse(&text).unwrap();
        let mla = c.mla.as_ref().unwrap();
        assert_eq!(mla.q_lora_rank, Some(32));
        assert_eq!(c.rope.dim, 8);
        assert!(mla.rope_interleave);
        let moe = c.moe.as_ref().unwrap();
        assert_eq!(
            (moe.n_group, moe.topk_group, moe.first_k_dense_replace),
            (4, 2, 1)
        );
        assert!(!c.is_moe_layer(0) && c.is_moe_layer(1));
    }

    #[test]
    fn deepseek_v3_published_yarn_config_reads() {
        // DeepSeek-V3's own config.json spells RoPE the transformers-4 way.
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/parity-deepseek-v3/config.json"
        ))
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("rope_parameters");
        m.insert("rope_theta".into(), 10000.0.into());
        m.insert("max_position_embeddings".into(), 163840.into());
        m.insert(
            "rope_scaling".into(),
            serde_json::json!({"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}),
        );
        let c = parse(&v.to_string()).unwrap();
        match &c.rope.scaling {
            RopeScaling::Yarn {
                factor,
                attention_factor,
                original_max_position_embeddings,
                ..
            } => {
                assert_eq!(*factor, 40.0);
                // mscale == mscale_all_dim: the cos/sin factor cancels to 1.
                assert_eq!(*attention_factor, 1.0);
                assert_eq!(*original_max_position_embeddings, 4096.0);
            }
            other => panic!("{other:?}"),
        }
        let m = 0.1 * 40f64.ln() + 1.0;
        assert!((c.rope.softmax_mscale() - m * m).abs() < 1e-12);
    }
}
