//! The tensor-role classifier: what a Hugging Face tensor name is for, across the naming
//! schemes of DeepSeek-V3, GLM (glm4_moe / MLA), Qwen2/3 (dense and MoE), Llama and gpt-oss.
//!
//! Names are matched by dot-separated segments, not substrings, so `mlp.gate.weight` (a
//! router) and `mlp.gate_proj.weight` (a dense MLP weight) cannot be confused.

use quant_core::Format;
use std::fmt;

/// What a tensor is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Embed,
    LmHead,
    Norm,
    Router,
    Bias,
    /// MLA query down-projection (`q_a_proj`).
    AttnQA,
    /// MLA query up-projection (`q_b_proj`).
    AttnQB,
    /// MLA joint KV down-projection (`kv_a_proj_with_mqa`).
    AttnKvA,
    /// MLA KV up-projection (`kv_b_proj`).
    AttnKvB,
    AttnO,
    AttnQ,
    AttnK,
    AttnV,
    /// Fused q/k/v (`qkv_proj`, `query_key_value`).
    AttnQkv,
    SharedExpert,
    RoutedExpert,
    DenseMlp,
    /// FP8 checkpoints' block scales (`weight_scale_inv`) and other scale tensors.
    Scale,
    Other,
}

impl Role {
    pub const ALL: [Role; 19] = [
        Role::Embed,
        Role::LmHead,
        Role::Norm,
        Role::Router,
        Role::Bias,
        Role::AttnQA,
        Role::AttnQB,
        Role::AttnKvA,
        Role::AttnKvB,
        Role::AttnO,
        Role::AttnQ,
        Role::AttnK,
        Role::AttnV,
        Role::AttnQkv,
        Role::SharedExpert,
        Role::RoutedExpert,
        Role::DenseMlp,
        Role::Scale,
        Role::Other,
    ];

    /// The short name used by `--role ROLE=FORMAT` and `inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Embed => "embed",
            Role::LmHead => "lm_head",
            Role::Norm => "norm",
            Role::Router => "router",
            Role::Bias => "bias",
            Role::AttnQA => "q_a",
            Role::AttnQB => "q_b",
            Role::AttnKvA => "kv_a",
            Role::AttnKvB => "kv_b",
            Role::AttnO => "o",
            Role::AttnQ => "q",
            Role::AttnK => "k",
            Role::AttnV => "v",
            Role::AttnQkv => "qkv",
            Role::SharedExpert => "shared_expert",
            Role::RoutedExpert => "expert",
            Role::DenseMlp => "mlp",
            Role::Scale => "scale",
            Role::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.iter().copied().find(|r| r.name() == s)
    }

    /// Norms, routers and biases stay f32 whatever format is asked for: they are tiny and
    /// precision-critical (a router's logits pick experts; a norm scales every activation).
    pub const fn stays_f32(self) -> bool {
        match self {
            Role::Norm | Role::Router | Role::Bias | Role::Scale => true,
            Role::Embed
            | Role::LmHead
            | Role::AttnQA
            | Role::AttnQB
            | Role::AttnKvA
            | Role::AttnKvB
            | Role::AttnO
            | Role::AttnQ
            | Role::AttnK
            | Role::AttnV
            | Role::AttnQkv
            | Role::SharedExpert
            | Role::RoutedExpert
            | Role::DenseMlp
            | Role::Other => false,
        }
    }

    /// Seed 004's fp8 passthrough selection: resident tensors (attention projections
    /// except kv_b, shared experts, dense MLP, generic residents) are repacked; kv_b
    /// (no fp8 case in the MLA absorb path), routed experts (int4 streaming tier),
    /// routers/norms/biases and embed/lm_head are not.
    pub const fn fp8_passthrough(self) -> bool {
        match self {
            Role::AttnQA
            | Role::AttnQB
            | Role::AttnKvA
            | Role::AttnO
            | Role::AttnQ
            | Role::AttnK
            | Role::AttnV
            | Role::AttnQkv
            | Role::SharedExpert
            | Role::DenseMlp
            | Role::Other => true,
            Role::AttnKvB
            | Role::RoutedExpert
            | Role::Embed
            | Role::LmHead
            | Role::Norm
            | Role::Router
            | Role::Bias
            | Role::Scale => false,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Classifies a Hugging Face tensor name.
pub fn classify(name: &str) -> Role {
    let lower = name.to_ascii_lowercase();
    let segs: Vec<&str> = lower.split('.').collect();
    let has = |s: &str| segs.contains(&s);
    let last = segs.last().copied().unwrap_or("");
    if last.contains("scale_inv")
        || last.ends_with("_scales")
        || last == "weight_scale"
        || last == "input_scale"
    {
        return Role::Scale;
    }
    if last == "bias" || last.ends_with("_bias") {
        return Role::Bias;
    }
    if segs
        .iter()
        .any(|s| s.contains("norm") || *s == "ln_f" || s.starts_with("ln_"))
    {
        return Role::Norm;
    }
    if has("embed_tokens") || has("wte") || has("word_embeddings") || has("embed") {
        return Role::Embed;
    }
    if has("lm_head") || has("output") && segs.len() <= 2 {
        return Role::LmHead;
    }
    // Routers: DeepSeek/GLM/Qwen-MoE `mlp.gate`, gpt-oss `mlp.router`, Qwen2-MoE's
    // `shared_expert_gate`.
    if has("router")
        || has("shared_expert_gate")
        || segs.windows(2).any(|w| w[0] == "mlp" && w[1] == "gate")
    {
        return Role::Router;
    }
    if segs
        .iter()
        .any(|s| *s == "shared_experts" || *s == "shared_expert" || *s == "shared_mlp")
    {
        return Role::SharedExpert;
    }
    if has("experts") {
        return Role::RoutedExpert;
    }
    for s in &segs {
        let r = match *s {
            "q_a_proj" => Some(Role::AttnQA),
            "q_b_proj" => Some(Role::AttnQB),
            "kv_a_proj_with_mqa" | "kv_a_proj" => Some(Role::AttnKvA),
            "kv_b_proj" => Some(Role::AttnKvB),
            "o_proj" | "out_proj" => Some(Role::AttnO),
            "q_proj" => Some(Role::AttnQ),
            "k_proj" => Some(Role::AttnK),
            "v_proj" => Some(Role::AttnV),
            "qkv_proj" | "query_key_value" | "c_attn" | "w_pack" => Some(Role::AttnQkv),
            "gate_proj" | "up_proj" | "down_proj" | "gate_up_proj" | "fc1" | "fc2" | "w1"
            | "w2" | "w3" | "c_fc" => Some(Role::DenseMlp),
            _ => None,
        };
        if let Some(r) = r {
            return r;
        }
    }
    Role::Other
}

/// A GPU backend's capability table, as the converter sees it (the backend crates export
/// them in quant-core's vocabulary; container-io does not depend on any backend).
#[derive(Copy, Clone, Debug)]
pub struct GpuTable {
    pub backend: &'static str,
    pub table: &'static [quant_core::capability::Capability],
}

/// Seed 003's convert-time warning, read from the backends' own capability tables (the one
/// place that says what runs where): for a weight tensor of `role` stored as `format`, one
/// line per GPU backend whose table has no GEMV row for `format`, naming the role, the
/// format, the backend and the remedy. Tensors that stay f32 (norms, routers, biases) and
/// formats every table covers get no warning.
pub fn fused_path_warning(role: Role, format: Format, tables: &[GpuTable]) -> Option<String> {
    let weight = match role {
        Role::AttnKvB
        | Role::AttnQA
        | Role::AttnQB
        | Role::AttnKvA
        | Role::AttnO
        | Role::SharedExpert
        | Role::Embed
        | Role::LmHead
        | Role::AttnQ
        | Role::AttnK
        | Role::AttnV
        | Role::AttnQkv
        | Role::RoutedExpert
        | Role::DenseMlp
        | Role::Other => true,
        Role::Norm | Role::Router | Role::Bias | Role::Scale => false,
    };
    if !weight {
        return None;
    }
    let missing: Vec<&str> = tables
        .iter()
        .filter(|t| {
            !t.table
                .iter()
                .any(|c| c.op == quant_core::capability::Op::Gemv && c.format == format)
        })
        .map(|t| t.backend)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let covered: Vec<&str> = quant_core::Format::all()
        .filter(|f| {
            tables.iter().all(|t| {
                t.table
                    .iter()
                    .any(|c| c.op == quant_core::capability::Op::Gemv && c.format == *f)
            })
        })
        .map(|f| f.name())
        .filter(|n| n.starts_with("int4") || n.starts_with("mq4") || n.starts_with("fp8"))
        .take(3)
        .collect();
    Some(format!(
        "{} tensors at {format}: {} has no GEMV kernel for {format} (its capability table), so \
         these tensors will run on the CPU there. Pass --role {}=FORMAT with a covered format \
         (e.g. {}) to keep them on the GPU.",
        role.name(),
        missing.join(", "),
        role.name(),
        covered.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_v3_and_glm_names() {
        let cases = [
            ("model.embed_tokens.weight", Role::Embed),
            ("lm_head.weight", Role::LmHead),
            ("model.norm.weight", Role::Norm),
            ("model.layers.0.input_layernorm.weight", Role::Norm),
            ("model.layers.0.self_attn.q_a_layernorm.weight", Role::Norm),
            ("model.layers.0.self_attn.q_a_proj.weight", Role::AttnQA),
            ("model.layers.0.self_attn.q_b_proj.weight", Role::AttnQB),
            (
                "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                Role::AttnKvA,
            ),
            ("model.layers.0.self_attn.kv_b_proj.weight", Role::AttnKvB),
            ("model.layers.0.self_attn.o_proj.weight", Role::AttnO),
            (
                "model.layers.0.self_attn.o_proj.weight_scale_inv",
                Role::Scale,
            ),
            ("model.layers.0.mlp.gate_proj.weight", Role::DenseMlp),
            ("model.layers.0.mlp.down_proj.weight", Role::DenseMlp),
            ("model.layers.5.mlp.gate.weight", Role::Router),
            (
                "model.layers.5.mlp.gate.e_score_correction_bias",
                Role::Bias,
            ),
            (
                "model.layers.5.mlp.shared_experts.up_proj.weight",
                Role::SharedExpert,
            ),
            (
                "model.layers.5.mlp.experts.17.down_proj.weight",
                Role::RoutedExpert,
            ),
            ("model.layers.0.self_attn.q_proj.bias", Role::Bias),
        ];
        for (n, r) in cases {
            assert_eq!(classify(n), r, "{n}");
        }
    }

    #[test]
    fn qwen_llama_gpt_oss_names() {
        let cases = [
            ("model.layers.3.self_attn.q_proj.weight", Role::AttnQ),
            ("model.layers.3.self_attn.k_proj.weight", Role::AttnK),
            ("model.layers.3.self_attn.v_proj.weight", Role::AttnV),
            ("model.layers.3.self_attn.q_norm.weight", Role::Norm),
            (
                "model.layers.3.mlp.shared_expert.gate_proj.weight",
                Role::SharedExpert,
            ),
            ("model.layers.3.mlp.shared_expert_gate.weight", Role::Router),
            (
                "model.layers.3.mlp.experts.0.up_proj.weight",
                Role::RoutedExpert,
            ),
            ("model.layers.3.mlp.router.weight", Role::Router),
            (
                "model.layers.3.mlp.experts.gate_up_proj",
                Role::RoutedExpert,
            ),
            ("model.layers.3.mlp.experts.gate_up_proj_bias", Role::Bias),
            (
                "model.layers.3.mlp.experts.down_proj_blocks",
                Role::RoutedExpert,
            ),
            ("model.layers.3.mlp.experts.down_proj_scales", Role::Scale),
            ("model.layers.3.self_attn.sinks", Role::Other),
            ("model.layers.3.post_attention_layernorm.weight", Role::Norm),
        ];
        for (n, r) in cases {
            assert_eq!(classify(n), r, "{n}");
        }
    }

    #[test]
    fn gpu_warning_reads_the_capability_tables() {
        use quant_core::capability::{Capability, Constraint, Op};
        static TABLE: [Capability; 1] = [Capability {
            op: Op::Gemv,
            format: Format::Int4G64,
            constraint: Constraint::batch(1, 16),
        }];
        let tables = [GpuTable {
            backend: "cuda",
            table: &TABLE,
        }];
        let w = fused_path_warning(Role::AttnO, Format::Q4K, &tables).unwrap();
        assert!(
            w.contains("cuda") && w.contains("q4_k") && w.contains("int4-g64"),
            "{w}"
        );
        assert!(fused_path_warning(Role::AttnO, Format::Int4G64, &tables).is_none());
        assert!(fused_path_warning(Role::Norm, Format::Q4K, &tables).is_none());
        assert!(fused_path_warning(Role::AttnO, Format::Q4K, &[]).is_none());
    }
}
