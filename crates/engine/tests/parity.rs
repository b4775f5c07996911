//! f32 parity with transformers: the committed reference logits of every fixture
//! (fixtures/gen_models.py) against the engine on the CPU, for every position of the
//! sequence (one full forward pass) and for the greedy tokens (decoded with the KV cache).
//! The Llama and DeepSeek weights are also run under scaled-RoPE configs (llama3, yarn).
//! parity-deepseek-v3-qproj covers DeepSeek's other branches (plain q_proj, RoPE by halves,
//! unnormalised top-k weights, two shared experts).
//! Bound: max |engine - reference| <= 1e-3 x max |reference logit|.

mod common;
use common::*;
use engine::{LoadOptions, Model, ModelSource};

const REL: f32 = 1e-3;

fn parity(name: &str) {
    check(name, &fixture(name), ModelSource::Path(fixture(name)));
}

/// The same weights under a scaled-RoPE config (fixtures/<name>/variants/<variant>/).
fn variant(name: &str, variant: &str) {
    let dir = fixture(name).join("variants").join(variant);
    let src = ModelSource::WithConfig {
        container: fixture(name).join("model.safetensors"),
        config: dir.join("config.json"),
    };
    check(&format!("{name}/{variant}"), &dir, src);
}

fn check(name: &str, dir: &std::path::Path, src: ModelSource) {
    let r = Reference::load_dir(dir);
    let model = Model::load(src, &LoadOptions::default()).unwrap();
    assert_eq!(model.config.vocab_size, r.vocab);
    let bound = REL * r.scale();

    // Full recompute over every reference position at once.
    let seq = r.sequence();
    let mut cache = model.new_cache();
    let logits = model.forward(&mut cache, &seq).unwrap();
    let full_err = max_abs_diff(&logits, &r.logits);
    assert!(
        full_err <= bound,
        "{name}: full-sequence max abs error {full_err} > {bound} (1e-3 x {})",
        r.scale()
    );

    // Greedy decoding with the KV cache: the same tokens, the same logits.
    let g = model.generate(&r.prompt, r.greedy.len()).unwrap();
    assert_eq!(g.tokens, r.greedy, "{name}: greedy tokens differ");
    let mut step_err = 0f32;
    for (k, row) in g.logits.iter().enumerate() {
        step_err = step_err.max(max_abs_diff(row, r.row(r.prompt.len() - 1 + k)));
    }
    assert!(
        step_err <= bound,
        "{name}: decode max abs error {step_err} > {bound}"
    );
    eprintln!(
        "{name}: max|logit| {:.4}, full-forward max abs err {full_err:.3e} ({:.2e} of scale), \
         KV-cache decode max abs err {step_err:.3e}, {} greedy tokens identical",
        r.scale(),
        full_err / r.scale(),
        g.tokens.len()
    );
}

#[test]
fn llama_f32_matches_transformers() {
    parity("parity-llama");
}

#[test]
fn qwen3_f32_matches_transformers() {
    parity("parity-qwen3");
}

#[test]
fn deepseek_v3_f32_matches_transformers() {
    parity("parity-deepseek-v3");
}

/// The other MLA / MoE branches: a plain q_proj (q_lora_rank null), RoPE by halves,
/// routing weights not renormalised (norm_topk_prob false), two shared experts.
#[test]
fn deepseek_v3_q_proj_f32_matches_transformers() {
    parity("parity-deepseek-v3-qproj");
}

#[test]
fn llama_llama3_rope_matches_transformers() {
    variant("parity-llama", "llama3");
}

#[test]
fn deepseek_v3_yarn_rope_matches_transformers() {
    variant("parity-deepseek-v3", "yarn");
}
