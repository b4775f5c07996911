//! From llama.cpp's naming to Hugging Face's: tensor names (gguf-py's `TENSOR_NAMES` for the
//! llama, qwen3 and deepseek2 architectures, read in reverse) and the `config.json` a
//! Hugging Face loader (and tessera's engine) expects, rebuilt from the GGUF metadata keys
//! `convert_hf_to_gguf.py` writes.
//!
//! Three layout differences that a rename alone does not undo, each handled without
//! touching a block's bytes:
//! - llama's `attn_q` / `attn_k` rows are permuted by the converter (`LlamaModel.permute`:
//!   per head, rows (t, j) of Hugging Face's rotate-half order become rows (j, t), GGML's
//!   interleaved RoPE order). A row permutation moves whole rows, so the import puts each
//!   stored row back ([`unpermute_row`]) and the blocks stay byte for byte.
//! - Mixture-of-experts weights are stacked, `ne = [cols, rows, n_expert]`; expert e is the
//!   contiguous rows `[e * rows, (e + 1) * rows)` and becomes its own Hugging Face tensor.
//! - Recent deepseek2 files replace `kv_b_proj` with `attn_k_b` (transposed) and `attn_v_b`
//!   for MLA weight absorption. A transpose cannot be done block for block, so these are
//!   imported as `self_attn.k_b_proj` / `self_attn.v_b_proj` under their GGUF layout, and
//!   the import says so.

use super::error::{GgufError, Result};
use super::parse::{Gguf, Value};
use serde_json::{Map, Value as Json, json};

/// Where a GGUF tensor goes in a Hugging Face checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One tensor, renamed.
    One(String),
    /// One tensor, renamed, with its rows put back in Hugging Face's RoPE order; `heads`
    /// is the number of heads the rows are grouped in.
    Unpermute { name: String, heads: usize },
    /// A stacked expert tensor: one Hugging Face tensor per expert; `{e}` in the template
    /// is the expert index.
    Experts(String),
}

/// Per-block renames: GGUF suffix after `blk.N.` -> Hugging Face suffix after
/// `model.layers.N.` (gguf-py's `TENSOR_NAMES` for llama, qwen3, deepseek2).
const BLOCK: &[(&str, &str)] = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("attn_q_a.weight", "self_attn.q_a_proj.weight"),
    ("attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"),
    ("attn_q_b.weight", "self_attn.q_b_proj.weight"),
    (
        "attn_kv_a_mqa.weight",
        "self_attn.kv_a_proj_with_mqa.weight",
    ),
    ("attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"),
    ("attn_kv_b.weight", "self_attn.kv_b_proj.weight"),
    ("attn_k_b.weight", "self_attn.k_b_proj.weight"),
    ("attn_v_b.weight", "self_attn.v_b_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
    ("ffn_gate_inp.weight", "mlp.gate.weight"),
    ("exp_probs_b.bias", "mlp.gate.e_score_correction_bias"),
    (
        "ffn_gate_shexp.weight",
        "mlp.shared_experts.gate_proj.weight",
    ),
    ("ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"),
    (
        "ffn_down_shexp.weight",
        "mlp.shared_experts.down_proj.weight",
    ),
];

/// Stacked experts: GGUF suffix -> Hugging Face per-expert suffix.
const EXPERTS: &[(&str, &str)] = &[
    ("ffn_gate_exps.weight", "gate_proj.weight"),
    ("ffn_up_exps.weight", "up_proj.weight"),
    ("ffn_down_exps.weight", "down_proj.weight"),
];

/// The Hugging Face target of GGUF tensor `name` in a file of architecture `arch`, or
/// `None` for a name with no Hugging Face counterpart (kept under its GGUF name).
/// `heads` / `heads_kv` are the attention head counts (for llama's row permutation).
pub fn hf_target(arch: &str, name: &str, heads: usize, heads_kv: usize) -> Option<Target> {
    match name {
        "token_embd.weight" => return Some(Target::One("model.embed_tokens.weight".into())),
        "output_norm.weight" => return Some(Target::One("model.norm.weight".into())),
        "output.weight" => return Some(Target::One("lm_head.weight".into())),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (n, suffix) = rest.split_once('.')?;
    let layer: usize = n.parse().ok()?;
    if n != layer.to_string() {
        return None;
    }
    if let Some((_, hf)) = EXPERTS.iter().find(|(g, _)| *g == suffix) {
        return Some(Target::Experts(format!(
            "model.layers.{layer}.mlp.experts.{{e}}.{hf}"
        )));
    }
    let (_, hf) = BLOCK.iter().find(|(g, _)| *g == suffix)?;
    let hf = format!("model.layers.{layer}.{hf}");
    // convert_hf_to_gguf.py permutes q and k (weights and biases) for llama only.
    let permuted = arch == "llama";
    Some(match suffix {
        "attn_q.weight" | "attn_q.bias" if permuted => Target::Unpermute { name: hf, heads },
        "attn_k.weight" | "attn_k.bias" if permuted => Target::Unpermute {
            name: hf,
            heads: heads_kv,
        },
        _ => Target::One(hf),
    })
}

/// The stored (GGUF) row that Hugging Face row `r` comes from, for a tensor of `rows` rows
/// grouped in `heads` heads: Hugging Face row (h, t, j) = h*hd + t*hd/2 + j is GGUF row
/// h*hd + 2j + t. `None` when the rows do not split into heads of even size.
pub fn unpermute_row(r: usize, rows: usize, heads: usize) -> Option<usize> {
    if heads == 0 || !rows.is_multiple_of(heads) {
        return None;
    }
    let hd = rows / heads;
    if !hd.is_multiple_of(2) {
        return None;
    }
    let (h, within) = (r / hd, r % hd);
    let (t, j) = (within / (hd / 2), within % (hd / 2));
    Some(h * hd + 2 * j + t)
}

/// Reads `{arch}.{key}` as an unsigned integer.
fn arch_u64(g: &Gguf<'_>, arch: &str, key: &str) -> Option<u64> {
    g.get(&format!("{arch}.{key}")).and_then(Value::as_u64)
}

fn arch_f64(g: &Gguf<'_>, arch: &str, key: &str) -> Option<f64> {
    g.get(&format!("{arch}.{key}")).and_then(Value::as_f64)
}

/// `(n_head, n_head_kv)` of the file (0 where absent).
pub fn head_counts(g: &Gguf<'_>) -> (usize, usize) {
    let arch = g.architecture().unwrap_or("");
    let heads = arch_u64(g, arch, "attention.head_count").unwrap_or(0) as usize;
    let kv = arch_u64(g, arch, "attention.head_count_kv").map_or(heads, |v| v as usize);
    (heads, kv)
}

/// The Hugging Face `config.json` of a llama, qwen3 or deepseek2 GGUF file.
pub fn hf_config(g: &Gguf<'_>) -> Result<Json> {
    let file = &g.file;
    let bad = |msg: String| GgufError::Metadata {
        file: file.clone(),
        msg,
    };
    let arch = g
        .architecture()
        .ok_or_else(|| bad("general.architecture is missing or not a string".into()))?;
    let need = |key: &str| {
        arch_u64(g, arch, key)
            .ok_or_else(|| bad(format!("{arch}.{key} is missing or not an integer")))
    };
    let mut c = Map::new();
    let (class, model_type) = match arch {
        "llama" => ("LlamaForCausalLM", "llama"),
        "qwen3" => ("Qwen3ForCausalLM", "qwen3"),
        "deepseek2" => {
            // llama.cpp's deepseek2 covers DeepSeek-V2 (softmax gating) and V3 (sigmoid).
            match arch_u64(g, arch, "expert_gating_func") {
                Some(2) => ("DeepseekV3ForCausalLM", "deepseek_v3"),
                _ => ("DeepseekV2ForCausalLM", "deepseek_v2"),
            }
        }
        other => {
            return Err(bad(format!(
                "no config.json mapping for architecture {other:?} (tessera writes one for llama, qwen3 and deepseek2)"
            )));
        }
    };
    let hidden = need("embedding_length")?;
    let layers = need("block_count")?;
    let heads = need("attention.head_count")?;
    let heads_kv = arch_u64(g, arch, "attention.head_count_kv").unwrap_or(heads);
    c.insert("architectures".into(), json!([class]));
    c.insert("model_type".into(), json!(model_type));
    c.insert("hidden_size".into(), json!(hidden));
    c.insert("num_hidden_layers".into(), json!(layers));
    c.insert("num_attention_heads".into(), json!(heads));
    let vocab = g
        .tensor("token_embd.weight")
        .map(|t| t.logical_shape().0)
        .or_else(|| match g.get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => Some(a.len),
            _ => None,
        })
        .ok_or_else(|| {
            bad(
                "neither token_embd.weight nor tokenizer.ggml.tokens gives the vocabulary size"
                    .into(),
            )
        })?;
    c.insert("vocab_size".into(), json!(vocab));
    if let Some(v) = arch_u64(g, arch, "context_length") {
        c.insert("max_position_embeddings".into(), json!(v));
    }
    if let Some(v) = arch_u64(g, arch, "feed_forward_length") {
        c.insert("intermediate_size".into(), json!(v));
    }
    if let Some(v) = arch_f64(g, arch, "attention.layer_norm_rms_epsilon") {
        c.insert("rms_norm_eps".into(), json!(v));
    }
    c.insert(
        "rope_theta".into(),
        json!(arch_f64(g, arch, "rope.freq_base").unwrap_or(10_000.0)),
    );
    c.insert(
        "tie_word_embeddings".into(),
        json!(g.tensor("output.weight").is_none()),
    );
    for (key, hf) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
    ] {
        if let Some(v) = g.get(key).and_then(Value::as_u64) {
            c.insert(hf.into(), json!(v));
        }
    }
    if let Some(rs) = rope_scaling(g, arch) {
        c.insert("rope_scaling".into(), rs);
    }
    match arch {
        "llama" | "qwen3" => {
            c.insert("num_key_value_heads".into(), json!(heads_kv));
            let head_dim =
                arch_u64(g, arch, "attention.key_length").unwrap_or(hidden / heads.max(1));
            c.insert("head_dim".into(), json!(head_dim));
            if arch == "llama" {
                c.insert(
                    "attention_bias".into(),
                    json!(g.tensor("blk.0.attn_q.bias").is_some()),
                );
                c.insert("mlp_bias".into(), json!(false));
            }
        }
        _ => deepseek_config(g, arch, heads, &mut c).map_err(bad)?,
    }
    Ok(Json::Object(c))
}

/// `rope_scaling` from `{arch}.rope.scaling.*`.
fn rope_scaling(g: &Gguf<'_>, arch: &str) -> Option<Json> {
    let ty = g
        .get(&format!("{arch}.rope.scaling.type"))
        .and_then(Value::as_str)?;
    if ty == "none" {
        return None;
    }
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    m.insert("rope_type".into(), json!(ty));
    if let Some(f) = arch_f64(g, arch, "rope.scaling.factor") {
        m.insert("factor".into(), json!(f));
    }
    if let Some(n) = arch_u64(g, arch, "rope.scaling.original_context_length") {
        m.insert("original_max_position_embeddings".into(), json!(n));
    }
    // convert_hf_to_gguf.py writes yarn_log_multiplier = 0.1 * mscale_all_dim.
    if let Some(v) = arch_f64(g, arch, "rope.scaling.yarn_log_multiplier") {
        m.insert("mscale_all_dim".into(), json!(v / 0.1));
        m.insert("mscale".into(), json!(v / 0.1));
    }
    Some(Json::Object(m))
}

/// The MLA and mixture-of-experts keys of a deepseek2 file.
fn deepseek_config(
    g: &Gguf<'_>,
    arch: &str,
    heads: u64,
    c: &mut Map<String, Json>,
) -> std::result::Result<(), String> {
    let need = |key: &str| {
        arch_u64(g, arch, key).ok_or_else(|| format!("{arch}.{key} is missing or not an integer"))
    };
    // MLA files store the absorbed (MQA) view in key_length/value_length and the per-head
    // dims in key_length_mla/value_length_mla; older files only the latter meaning.
    let rope_dim = need("rope.dimension_count")?;
    let (qk_head, v_head) = match (
        arch_u64(g, arch, "attention.key_length_mla"),
        arch_u64(g, arch, "attention.value_length_mla"),
    ) {
        (Some(k), Some(v)) => (k, v),
        _ => (
            need("attention.key_length")?,
            need("attention.value_length")?,
        ),
    };
    let qk_nope = qk_head.checked_sub(rope_dim).ok_or_else(|| {
        format!("key length {qk_head} is smaller than the RoPE dimension {rope_dim}")
    })?;
    // Hugging Face's DeepSeek configs count KV heads as query heads (MLA has no GQA).
    c.insert("num_key_value_heads".into(), json!(heads));
    c.insert("qk_rope_head_dim".into(), json!(rope_dim));
    c.insert("qk_nope_head_dim".into(), json!(qk_nope));
    c.insert("v_head_dim".into(), json!(v_head));
    c.insert(
        "kv_lora_rank".into(),
        json!(need("attention.kv_lora_rank")?),
    );
    c.insert(
        "q_lora_rank".into(),
        arch_u64(g, arch, "attention.q_lora_rank").map_or(Json::Null, |v| json!(v)),
    );
    let opt = |key: &str| arch_u64(g, arch, key);
    for (key, hf) in [
        ("leading_dense_block_count", "first_k_dense_replace"),
        ("expert_feed_forward_length", "moe_intermediate_size"),
        ("expert_count", "n_routed_experts"),
        ("expert_shared_count", "n_shared_experts"),
        ("expert_used_count", "num_experts_per_tok"),
        ("expert_group_count", "n_group"),
        ("expert_group_used_count", "topk_group"),
    ] {
        if let Some(v) = opt(key) {
            c.insert(hf.into(), json!(v));
        }
    }
    if let Some(v) = arch_f64(g, arch, "expert_weights_scale") {
        c.insert("routed_scaling_factor".into(), json!(v));
    }
    if let Some(v) = g
        .get(&format!("{arch}.expert_weights_norm"))
        .and_then(Value::as_bool)
    {
        c.insert("norm_topk_prob".into(), json!(v));
    }
    let scoring = match opt("expert_gating_func") {
        Some(2) => "sigmoid",
        _ => "softmax",
    };
    c.insert("scoring_func".into(), json!(scoring));
    c.insert("moe_layer_freq".into(), json!(1));
    if scoring == "sigmoid" {
        c.insert("topk_method".into(), json!("noaux_tc"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_names_and_permutation() {
        assert_eq!(
            hf_target("llama", "blk.3.attn_q.weight", 8, 2),
            Some(Target::Unpermute {
                name: "model.layers.3.self_attn.q_proj.weight".into(),
                heads: 8
            })
        );
        assert_eq!(
            hf_target("llama", "blk.3.attn_k.weight", 8, 2),
            Some(Target::Unpermute {
                name: "model.layers.3.self_attn.k_proj.weight".into(),
                heads: 2
            })
        );
        assert_eq!(
            hf_target("qwen3", "blk.0.attn_q.weight", 8, 2),
            Some(Target::One("model.layers.0.self_attn.q_proj.weight".into()))
        );
        assert_eq!(
            hf_target("deepseek2", "blk.1.ffn_down_exps.weight", 8, 8),
            Some(Target::Experts(
                "model.layers.1.mlp.experts.{e}.down_proj.weight".into()
            ))
        );
        assert_eq!(hf_target("llama", "blk.01.attn_q.weight", 8, 8), None);
        assert_eq!(hf_target("llama", "rope_freqs.weight", 8, 8), None);
    }

    #[test]
    fn unpermute_inverts_llama_permute() {
        // LlamaModel.permute: w.reshape(heads, 2, hd/2, ...).swapaxes(1, 2): GGUF row
        // (h, j, t) holds Hugging Face row (h, t, j).
        let (heads, hd) = (3, 8);
        let rows = heads * hd;
        let mut gguf_of_hf = vec![usize::MAX; rows];
        for h in 0..heads {
            for j in 0..hd / 2 {
                for t in 0..2 {
                    let gguf_row = h * hd + j * 2 + t;
                    let hf_row = h * hd + t * (hd / 2) + j;
                    gguf_of_hf[hf_row] = gguf_row;
                }
            }
        }
        for (r, &want) in gguf_of_hf.iter().enumerate() {
            assert_eq!(unpermute_row(r, rows, heads), Some(want));
        }
        assert_eq!(unpermute_row(0, 10, 4), None);
    }
}
