//! `import-gguf` on small synthetic qwen3 and deepseek2 files: the Hugging Face names, the
//! stacked experts split into one tensor per expert (bytes unchanged), and the config.json
//! rebuilt from the metadata keys llama.cpp's converter writes.

use container_io::container::{Container, Item, ShapeHints};
use container_io::gguf::{import, parse};
use container_io::roles::Role;

enum V<'a> {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(&'a str),
}

/// A valid little-endian GGUF v3 file: metadata, then tensors laid out in order, each at
/// the next multiple of 32.
struct Builder {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    data: Vec<u8>,
    n_tensors: u64,
}

fn gstr(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

impl Builder {
    fn new(arch: &str) -> Builder {
        let b = Builder {
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            data: vec![],
            n_tensors: 0,
        };
        b.kv("general.architecture", V::Str(arch))
    }
    fn kv(mut self, key: &str, v: V<'_>) -> Builder {
        self.kv.extend(gstr(key.as_bytes()));
        match v {
            V::U32(x) => {
                self.kv.extend(4u32.to_le_bytes());
                self.kv.extend(x.to_le_bytes());
            }
            V::F32(x) => {
                self.kv.extend(6u32.to_le_bytes());
                self.kv.extend(x.to_le_bytes());
            }
            V::Bool(x) => {
                self.kv.extend(7u32.to_le_bytes());
                self.kv.push(u8::from(x));
            }
            V::Str(s) => {
                self.kv.extend(8u32.to_le_bytes());
                self.kv.extend(gstr(s.as_bytes()));
            }
        }
        self.n_kv += 1;
        self
    }
    /// A tensor of GGML type `ty` with `ne` dims and `nbytes` bytes of distinct content.
    fn tensor(mut self, name: &str, ne: &[u64], ty: u32, nbytes: usize) -> Builder {
        while !self.data.len().is_multiple_of(32) {
            self.data.push(0);
        }
        self.infos.extend(gstr(name.as_bytes()));
        self.infos.extend((ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend((self.data.len() as u64).to_le_bytes());
        let salt = self.n_tensors as usize * 7;
        // Q8_0 blocks need a finite fp16 scale at the start of every 34 bytes; 0x3C00 = 1.0.
        self.data.extend((0..nbytes).map(|i| {
            if ty == 8 && i % 34 == 1 {
                0x3C
            } else {
                ((i + salt) % 251) as u8
            }
        }));
        self.n_tensors += 1;
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend(3u32.to_le_bytes());
        v.extend(self.n_tensors.to_le_bytes());
        v.extend(self.n_kv.to_le_bytes());
        v.extend(&self.kv);
        v.extend(&self.infos);
        while !v.len().is_multiple_of(32) {
            v.push(0);
        }
        v.extend(&self.data);
        v
    }
}

fn tmp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-gguf-import-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

#[test]
fn qwen3_names_and_config() {
    let b = Builder::new("qwen3")
        .kv("qwen3.embedding_length", V::U32(64))
        .kv("qwen3.block_count", V::U32(1))
        .kv("qwen3.attention.head_count", V::U32(4))
        .kv("qwen3.attention.head_count_kv", V::U32(2))
        .kv("qwen3.attention.key_length", V::U32(32))
        .kv("qwen3.feed_forward_length", V::U32(96))
        .kv("qwen3.context_length", V::U32(4096))
        .kv("qwen3.rope.freq_base", V::F32(1_000_000.0))
        .kv("qwen3.attention.layer_norm_rms_epsilon", V::F32(1e-6))
        .tensor("token_embd.weight", &[64, 10], 0, 64 * 10 * 4)
        .tensor("blk.0.attn_q.weight", &[64, 128], 8, 128 * 2 * 34)
        .tensor("blk.0.attn_q_norm.weight", &[32], 0, 128)
        .bytes();
    let g = parse("qwen3.gguf", &b).unwrap();
    let dir = tmp("qwen3");
    let report = import::import(&g, &dir, &|_| {}).unwrap();
    assert!(report.config && report.kept.is_empty(), "{report:?}");
    let c = Container::open(&dir).unwrap();
    let Ok(Item::Tensor(q)) =
        c.resolve("model.layers.0.self_attn.q_proj.weight", &ShapeHints::new())
    else {
        panic!("q_proj missing")
    };
    // qwen3 is not permuted by the converter: the bytes are the file's, in order.
    assert_eq!(
        c.data(q.weights),
        g.tensor_data(g.tensor("blk.0.attn_q.weight").unwrap())
    );
    assert!(
        c.names()
            .contains(&"model.layers.0.self_attn.q_norm.weight".to_string())
    );
    let cfg = config(&dir);
    assert_eq!(cfg["architectures"][0], "Qwen3ForCausalLM");
    assert_eq!(cfg["head_dim"], 32);
    assert_eq!(cfg["num_key_value_heads"], 2);
    assert_eq!(cfg["rope_theta"], 1_000_000.0);
    assert_eq!(cfg["vocab_size"], 10);
    assert_eq!(cfg["tie_word_embeddings"], true);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn deepseek2_experts_and_config() {
    let (n_expert, ff_exp, hidden) = (3u64, 4u64, 32u64);
    let per_expert = (ff_exp * hidden / 32 * 34) as usize;
    let b = Builder::new("deepseek2")
        .kv("deepseek2.embedding_length", V::U32(32))
        .kv("deepseek2.block_count", V::U32(2))
        .kv("deepseek2.attention.head_count", V::U32(2))
        .kv("deepseek2.attention.head_count_kv", V::U32(1))
        .kv("deepseek2.attention.key_length", V::U32(80))
        .kv("deepseek2.attention.value_length", V::U32(64))
        .kv("deepseek2.attention.key_length_mla", V::U32(24))
        .kv("deepseek2.attention.value_length_mla", V::U32(16))
        .kv("deepseek2.rope.dimension_count", V::U32(8))
        .kv("deepseek2.attention.kv_lora_rank", V::U32(64))
        .kv("deepseek2.attention.q_lora_rank", V::U32(48))
        .kv("deepseek2.leading_dense_block_count", V::U32(1))
        .kv("deepseek2.expert_count", V::U32(3))
        .kv("deepseek2.expert_shared_count", V::U32(1))
        .kv("deepseek2.expert_used_count", V::U32(2))
        .kv("deepseek2.expert_feed_forward_length", V::U32(4))
        .kv("deepseek2.expert_weights_scale", V::F32(2.5))
        .kv("deepseek2.expert_weights_norm", V::Bool(true))
        .kv("deepseek2.expert_gating_func", V::U32(2))
        .kv("deepseek2.rope.scaling.type", V::Str("yarn"))
        .kv("deepseek2.rope.scaling.factor", V::F32(40.0))
        .kv(
            "deepseek2.rope.scaling.original_context_length",
            V::U32(4096),
        )
        .kv("deepseek2.rope.scaling.yarn_log_multiplier", V::F32(0.1))
        .kv("tokenizer.ggml.bos_token_id", V::U32(0))
        .tensor("token_embd.weight", &[32, 16], 1, 32 * 16 * 2)
        .tensor(
            "blk.1.ffn_gate_exps.weight",
            &[hidden, ff_exp, n_expert],
            8,
            per_expert * n_expert as usize,
        )
        .tensor("blk.1.exp_probs_b.bias", &[n_expert], 0, 12)
        .tensor(
            "blk.1.ffn_gate_inp.weight",
            &[32, n_expert],
            0,
            (32 * n_expert * 4) as usize,
        )
        .tensor("blk.1.attn_k_b.weight", &[32, 64, 2], 8, 2 * 64 * 34)
        .tensor("blk.1.attn_kv_a_mqa.weight", &[32, 72], 30, 32 * 72 * 2)
        .bytes();
    let g = parse("ds.gguf", &b).unwrap();
    let dir = tmp("deepseek2");
    let report = import::import(&g, &dir, &|_| {}).unwrap();
    assert!(
        report.warnings.iter().any(|w| w.contains("attn_k_b")),
        "{report:?}"
    );
    assert_eq!(report.written, 3 + 5);
    let c = Container::open(&dir).unwrap();
    let src = g.tensor_data(g.tensor("blk.1.ffn_gate_exps.weight").unwrap());
    for e in 0..n_expert as usize {
        let name = format!("model.layers.1.mlp.experts.{e}.gate_proj.weight");
        let Ok(Item::Tensor(t)) = c.resolve(&name, &ShapeHints::new()) else {
            panic!("{name}")
        };
        assert_eq!((t.rows, t.cols), (ff_exp as usize, hidden as usize));
        assert_eq!(
            c.data(t.weights),
            &src[e * per_expert..(e + 1) * per_expert],
            "{name}"
        );
        assert_eq!(container_io::roles::classify(&name), Role::RoutedExpert);
    }
    for n in [
        "model.layers.1.mlp.gate.e_score_correction_bias",
        "model.layers.1.mlp.gate.weight",
        "model.layers.1.self_attn.k_b_proj.weight",
        "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
    ] {
        assert!(
            c.names().contains(&n.to_string()),
            "{n} missing: {:?}",
            c.names()
        );
    }
    let cfg = config(&dir);
    assert_eq!(cfg["architectures"][0], "DeepseekV3ForCausalLM");
    assert_eq!(cfg["qk_nope_head_dim"], 16);
    assert_eq!(cfg["qk_rope_head_dim"], 8);
    assert_eq!(cfg["v_head_dim"], 16);
    assert_eq!(cfg["kv_lora_rank"], 64);
    assert_eq!(cfg["q_lora_rank"], 48);
    assert_eq!(cfg["num_key_value_heads"], 2);
    assert_eq!(cfg["n_routed_experts"], 3);
    assert_eq!(cfg["first_k_dense_replace"], 1);
    assert_eq!(cfg["scoring_func"], "sigmoid");
    assert_eq!(cfg["norm_topk_prob"], true);
    assert_eq!(cfg["routed_scaling_factor"], 2.5);
    assert_eq!(cfg["rope_scaling"]["type"], "yarn");
    assert_eq!(
        cfg["rope_scaling"]["original_max_position_embeddings"],
        4096
    );
    assert!((cfg["rope_scaling"]["mscale_all_dim"].as_f64().unwrap() - 1.0).abs() < 1e-6);
    let _ = std::fs::remove_dir_all(dir);
}
