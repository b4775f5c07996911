//! The collision census (seed 004): which shape families of a model the unstamped reader
//! cannot tell apart, for which legacy formats.
//!
//! A family is a tensor name with its numeric segments (layer, expert) replaced by `*`, at
//! one logical [O, I]. For each family and each legacy format, the census asks the resolver
//! what an unstamped tensor of that format and shape would read back as; a family is listed
//! when some format would be refused or read back as another format. Families come from a
//! container's tensors or from a Hugging Face `config.json` (DeepSeek-V3 / GLM MLA, Qwen,
//! Llama, gpt-oss / Mixtral-style MoE).

use crate::container::{Container, Item, ShapeHints};
use crate::legacy;
use crate::roles::{Role, classify};
use quant_core::Format;
use serde_json::Value;
use std::collections::BTreeMap;

/// One shape family.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Family {
    pub family: String,
    pub role: Role,
    pub rows: usize,
    pub cols: usize,
    pub count: usize,
}

/// A family and, per legacy format that can hold its shape, why an unstamped write of that
/// format would not round-trip (formats that round-trip are left out).
#[derive(Clone, Debug)]
pub struct Finding {
    pub family: Family,
    pub problems: Vec<(Format, String)>,
}

/// `model.layers.12.mlp.experts.7.up_proj.weight` -> `model.layers.*.mlp.experts.*.up_proj.weight`.
pub fn family_name(name: &str) -> String {
    name.split('.')
        .map(|s| {
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                "*"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn add(
    map: &mut BTreeMap<(String, usize, usize), (Role, usize)>,
    name: &str,
    rows: usize,
    cols: usize,
    count: usize,
) {
    if rows == 0 || cols == 0 || count == 0 {
        return;
    }
    let e = map
        .entry((family_name(name), rows, cols))
        .or_insert((classify(name), 0));
    e.1 += count;
}

fn collect(map: BTreeMap<(String, usize, usize), (Role, usize)>) -> Vec<Family> {
    map.into_iter()
        .map(|((family, rows, cols), (role, count))| Family {
            family,
            role,
            rows,
            cols,
            count,
        })
        .collect()
}

/// Families of a container's resolved 2-D weights (norms, routers, biases excluded: they
/// are never quantized).
pub fn families_from_container(c: &Container, hints: &ShapeHints) -> Vec<Family> {
    let mut map = BTreeMap::new();
    for (name, item) in c.resolve_all(hints) {
        if let Ok(Item::Tensor(r)) = item
            && !classify(&name).stays_f32()
        {
            add(&mut map, &name, r.rows, r.cols, 1);
        }
    }
    collect(map)
}

fn get(cfg: &Value, key: &str) -> Option<usize> {
    cfg.get(key)
        .and_then(Value::as_u64)
        .and_then(|v| usize::try_from(v).ok())
}

/// Families of the quantizable weights a Hugging Face `config.json` implies.
pub fn families_from_config(cfg: &Value) -> Result<Vec<Family>, String> {
    // Multimodal configs nest the language model.
    let cfg = cfg.get("text_config").unwrap_or(cfg);
    let need = |k: &str| get(cfg, k).ok_or_else(|| format!("config has no integer {k:?}"));
    let h = need("hidden_size")?;
    let layers = need("num_hidden_layers")?;
    let mtp = get(cfg, "num_nextn_predict_layers").unwrap_or(0);
    let total_layers = layers + mtp;
    let vocab = need("vocab_size")?;
    let nh = need("num_attention_heads")?;
    let nkv = get(cfg, "num_key_value_heads").unwrap_or(nh);
    let hd = get(cfg, "head_dim").unwrap_or(h / nh.max(1));
    let mut m = BTreeMap::new();
    let l = |s: &str| format!("model.layers.0.{s}");
    // Attention.
    if let Some(kv_lora) = get(cfg, "kv_lora_rank") {
        let nope = need("qk_nope_head_dim")?;
        let rope = need("qk_rope_head_dim")?;
        let v = need("v_head_dim")?;
        match get(cfg, "q_lora_rank") {
            Some(ql) => {
                add(&mut m, &l("self_attn.q_a_proj.weight"), ql, h, total_layers);
                add(
                    &mut m,
                    &l("self_attn.q_b_proj.weight"),
                    nh * (nope + rope),
                    ql,
                    total_layers,
                );
            }
            None => add(
                &mut m,
                &l("self_attn.q_proj.weight"),
                nh * (nope + rope),
                h,
                total_layers,
            ),
        }
        add(
            &mut m,
            &l("self_attn.kv_a_proj_with_mqa.weight"),
            kv_lora + rope,
            h,
            total_layers,
        );
        add(
            &mut m,
            &l("self_attn.kv_b_proj.weight"),
            nh * (nope + v),
            kv_lora,
            total_layers,
        );
        add(
            &mut m,
            &l("self_attn.o_proj.weight"),
            h,
            nh * v,
            total_layers,
        );
    } else {
        add(
            &mut m,
            &l("self_attn.q_proj.weight"),
            nh * hd,
            h,
            total_layers,
        );
        add(
            &mut m,
            &l("self_attn.k_proj.weight"),
            nkv * hd,
            h,
            total_layers,
        );
        add(
            &mut m,
            &l("self_attn.v_proj.weight"),
            nkv * hd,
            h,
            total_layers,
        );
        add(
            &mut m,
            &l("self_attn.o_proj.weight"),
            h,
            nh * hd,
            total_layers,
        );
    }
    // MLP: dense layers, routed experts, shared experts.
    let experts = get(cfg, "n_routed_experts")
        .or_else(|| get(cfg, "num_experts"))
        .or_else(|| get(cfg, "num_local_experts"));
    let inter = get(cfg, "intermediate_size");
    let dense_layers = match experts {
        Some(_) => get(cfg, "first_k_dense_replace").unwrap_or(0).min(layers),
        None => layers,
    };
    let moe_layers = total_layers - dense_layers;
    if let Some(di) = inter {
        add(&mut m, &l("mlp.gate_proj.weight"), di, h, dense_layers);
        add(&mut m, &l("mlp.up_proj.weight"), di, h, dense_layers);
        add(&mut m, &l("mlp.down_proj.weight"), h, di, dense_layers);
    }
    if let Some(e) = experts {
        let mi = get(cfg, "moe_intermediate_size")
            .or(inter)
            .ok_or("MoE config without moe_intermediate_size")?;
        add(
            &mut m,
            &l("mlp.experts.0.gate_proj.weight"),
            mi,
            h,
            moe_layers * e,
        );
        add(
            &mut m,
            &l("mlp.experts.0.up_proj.weight"),
            mi,
            h,
            moe_layers * e,
        );
        add(
            &mut m,
            &l("mlp.experts.0.down_proj.weight"),
            h,
            mi,
            moe_layers * e,
        );
        let shared = get(cfg, "n_shared_experts")
            .map(|n| n * mi)
            .or_else(|| get(cfg, "shared_expert_intermediate_size"))
            .unwrap_or(0);
        add(
            &mut m,
            &l("mlp.shared_experts.gate_proj.weight"),
            shared,
            h,
            moe_layers,
        );
        add(
            &mut m,
            &l("mlp.shared_experts.up_proj.weight"),
            shared,
            h,
            moe_layers,
        );
        add(
            &mut m,
            &l("mlp.shared_experts.down_proj.weight"),
            h,
            shared,
            moe_layers,
        );
    }
    add(&mut m, "model.embed_tokens.weight", vocab, h, 1);
    let tied = cfg
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !tied {
        add(&mut m, "lm_head.weight", vocab, h, 1);
    }
    Ok(collect(m))
}

/// Logical shapes for the tensors of a container from its model's `config.json`: each
/// tensor whose family (name with indices folded) matches a family the config implies gets
/// that family's [O, I]. This is how legacy engines knew the shapes of unstamped tensors.
pub fn hints_from_config<'a>(
    cfg: &Value,
    names: impl Iterator<Item = &'a str>,
) -> Result<ShapeHints, String> {
    let fams = families_from_config(cfg)?;
    let mut hints = ShapeHints::new();
    for n in names {
        let fam = family_name(n);
        if let Some(f) = fams.iter().find(|f| f.family == fam) {
            hints.insert(n.to_string(), (f.rows, f.cols));
        }
    }
    Ok(hints)
}

/// For each family, the legacy formats that would not round-trip unstamped.
pub fn census(families: &[Family]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in families {
        let mut problems = Vec::new();
        for fmt in legacy::legacy_formats() {
            if fmt.spec().check_shape(f.rows, f.cols).is_err() {
                continue;
            }
            if let Err(why) = legacy::check_unstamped_round_trip(fmt, f.rows, f.cols) {
                problems.push((fmt, why));
            }
        }
        // int4-g{gs} folded into int4-row decodes identically: not a hazard, not listed.
        problems.retain(|(fmt, why)| {
            !(why.contains(legacy::RULE_INT4_SINGLE_GROUP) && fmt.spec().group_size().is_some())
        });
        if !problems.is_empty() {
            out.push(Finding {
                family: f.clone(),
                problems,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_names_fold_indices() {
        assert_eq!(
            family_name("model.layers.12.mlp.experts.7.up_proj.weight"),
            "model.layers.*.mlp.experts.*.up_proj.weight"
        );
    }

    #[test]
    fn deepseek_v3_o_proj_is_the_collision_family() {
        let cfg: Value = serde_json::json!({
            "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280,
            "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "intermediate_size": 18432, "moe_intermediate_size": 2048,
            "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3,
            "num_nextn_predict_layers": 1
        });
        let fams = families_from_config(&cfg).unwrap();
        let found = census(&fams);
        let names: Vec<&str> = found.iter().map(|f| f.family.family.as_str()).collect();
        assert_eq!(
            names,
            vec!["model.layers.*.self_attn.o_proj.weight"],
            "{found:#?}"
        );
        assert_eq!(
            (
                found[0].family.rows,
                found[0].family.cols,
                found[0].family.count
            ),
            (7168, 16384, 62)
        );
        let fmts: Vec<Format> = found[0].problems.iter().map(|p| p.0).collect();
        assert_eq!(fmts, vec![Format::Fp8E4m3B128]);
    }
}
