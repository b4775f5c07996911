//! The small checkpoints in `fixtures/`, generated here so they can be reproduced.
//!
//! - `fixtures/tiny-llama/`: a Hugging Face-style Llama checkpoint (bf16, hidden 256, one
//!   decoder layer, 4 heads x 64, one KV head, MLP 256, vocab 128) with real HF names and a
//!   config.json. Every quantizable weight has I a multiple of 256, so the 256-block formats
//!   (mq4-g256-v2) accept it. Weights are seeded N(0, 0.02^2) with outlier rows
//!   (`quant_core::testdata::weights`).
//! - `fixtures/tiny-fp8/`: an FP8 checkpoint in the DeepSeek-V3 / GLM layout: F8_E4M3
//!   weights with F32 `weight_scale_inv` (and one UE8M0 / F8_E8M0 tensor, the DeepSeek-V4
//!   encoding), partial 128-tiles included, plus a bf16 norm.
//!
//! `TESSERA_REGEN_FIXTURES=1 cargo test -p container-io --release --test fixtures` rewrites
//! them; otherwise the test checks the files on disk are byte-identical to the generator.

use container_io::{Dtype, Plan};
use half::bf16;
use quant_core::testdata::{Rng, weights};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

type Tensors = Vec<(String, Dtype, Vec<u64>, Vec<u8>)>;

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
        .collect()
}

fn build(tensors: &Tensors) -> Vec<u8> {
    let mut p = Plan::new("fixture", true);
    for (n, d, s, _) in tensors {
        p.add_raw(n, *d, s).unwrap();
    }
    p.to_bytes(|t| tensors.iter().find(|x| x.0 == t.name).unwrap().3.clone())
        .unwrap()
}

pub fn tiny_llama() -> Tensors {
    let (h, heads, hd, kv, inter, vocab) = (256usize, 4usize, 64usize, 1usize, 256usize, 128usize);
    let mut rng = Rng::new(0x7E55E7A);
    let mut t: Tensors = Vec::new();
    let mut mat = |t: &mut Tensors, name: &str, o: usize, i: usize| {
        let w = weights(&mut rng, o, i);
        t.push((
            name.to_string(),
            Dtype::Bf16,
            vec![o as u64, i as u64],
            bf16_bytes(&w),
        ));
    };
    mat(&mut t, "model.embed_tokens.weight", vocab, h);
    let l = "model.layers.0";
    mat(
        &mut t,
        &format!("{l}.self_attn.q_proj.weight"),
        heads * hd,
        h,
    );
    mat(&mut t, &format!("{l}.self_attn.k_proj.weight"), kv * hd, h);
    mat(&mut t, &format!("{l}.self_attn.v_proj.weight"), kv * hd, h);
    mat(
        &mut t,
        &format!("{l}.self_attn.o_proj.weight"),
        h,
        heads * hd,
    );
    mat(&mut t, &format!("{l}.mlp.gate_proj.weight"), inter, h);
    mat(&mut t, &format!("{l}.mlp.up_proj.weight"), inter, h);
    mat(&mut t, &format!("{l}.mlp.down_proj.weight"), h, inter);
    mat(&mut t, "lm_head.weight", vocab, h);
    let ones = bf16_bytes(&vec![1.0f32; h]);
    for n in [
        format!("{l}.input_layernorm.weight"),
        format!("{l}.post_attention_layernorm.weight"),
        "model.norm.weight".to_string(),
    ] {
        t.push((n, Dtype::Bf16, vec![h as u64], ones.clone()));
    }
    t
}

pub const TINY_LLAMA_CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 256,
  "num_hidden_layers": 1,
  "num_attention_heads": 4,
  "num_key_value_heads": 1,
  "head_dim": 64,
  "vocab_size": 128,
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"
}
"#;

/// Random E4M3-FN bytes, never the NaN codes (0x7F / 0xFF).
fn fp8_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| {
            let b = (rng.next_u64() & 0xFF) as u8;
            if b & 0x7F == 0x7F { b ^ 1 } else { b }
        })
        .collect()
}

pub fn tiny_fp8() -> Tensors {
    let mut rng = Rng::new(0xF8F8);
    let mut t: Tensors = Vec::new();
    let fp8 = |t: &mut Tensors, rng: &mut Rng, name: &str, o: usize, i: usize, ue8m0: bool| {
        t.push((
            name.to_string(),
            Dtype::F8E4m3,
            vec![o as u64, i as u64],
            fp8_bytes(rng, o * i),
        ));
        let (bo, bi) = (o.div_ceil(128), i.div_ceil(128));
        let sname = format!("{name}_scale_inv");
        if ue8m0 {
            // Powers of two around 2^-8 (exponent byte 119..=122).
            let s: Vec<u8> = (0..bo * bi)
                .map(|_| 119 + (rng.next_u64() % 4) as u8)
                .collect();
            t.push((sname, Dtype::F8E8m0, vec![bo as u64, bi as u64], s));
        } else {
            let s: Vec<u8> = (0..bo * bi)
                .flat_map(|_| (0.001f32 + rng.uniform() as f32 * 0.003).to_le_bytes())
                .collect();
            t.push((sname, Dtype::F32, vec![bo as u64, bi as u64], s));
        }
    };
    let l = "model.layers.0";
    fp8(
        &mut t,
        &mut rng,
        &format!("{l}.self_attn.o_proj.weight"),
        256,
        384,
        false,
    );
    fp8(
        &mut t,
        &mut rng,
        &format!("{l}.self_attn.q_a_proj.weight"),
        200,
        300,
        true,
    );
    fp8(
        &mut t,
        &mut rng,
        &format!("{l}.self_attn.kv_b_proj.weight"),
        130,
        128,
        false,
    );
    fp8(
        &mut t,
        &mut rng,
        &format!("{l}.mlp.experts.0.up_proj.weight"),
        64,
        256,
        false,
    );
    fp8(
        &mut t,
        &mut rng,
        &format!("{l}.mlp.shared_experts.down_proj.weight"),
        256,
        130,
        false,
    );
    t.push((
        format!("{l}.input_layernorm.weight"),
        Dtype::Bf16,
        vec![256],
        bf16_bytes(&[1.0f32; 256]),
    ));
    t
}

fn check_or_write(rel: &str, bytes: &[u8]) {
    let path = root().join(rel);
    if std::env::var_os("TESSERA_REGEN_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        return;
    }
    let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; regenerate with TESSERA_REGEN_FIXTURES=1",
            path.display()
        )
    });
    assert!(
        on_disk == bytes,
        "{} differs from its generator; regenerate with TESSERA_REGEN_FIXTURES=1",
        path.display()
    );
}

#[test]
fn fixtures_are_reproducible() {
    let llama = build(&tiny_llama());
    assert!(llama.len() < 1 << 20, "tiny-llama is {} bytes", llama.len());
    check_or_write("tiny-llama/model.safetensors", &llama);
    check_or_write("tiny-llama/config.json", TINY_LLAMA_CONFIG.as_bytes());
    let fp8 = build(&tiny_fp8());
    check_or_write("tiny-fp8/model.safetensors", &fp8);
}
