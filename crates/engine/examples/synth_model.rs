//! Writes a synthetic Llama-shaped model for the engine's bandwidth benchmark: config.json and
//! a stamped container whose projections (and lm_head) are in one quantized format.
//!
//! The benchmark measures how close decode gets to the memory floor (bytes touched per token
//! over the copy bandwidth), so the weights only need to be valid for their format, not
//! trained: each distinct projection shape is encoded once from random data and its bytes are
//! written for every layer (every layer still has its own copy in the file and on the device).
//!
//! `cargo run --release -p engine --example synth_model -- OUT_DIR [--layers 32]
//!  [--format int4-g64] [--hidden 4096] [--intermediate 14336] [--heads 32] [--kv-heads 8]
//!  [--vocab 32000]` prints the quantized bytes a decode step streams.

use container_io::writer::Plan;
use quant_core::{EncodeOptions, Format, encode};
use std::collections::HashMap;
use std::path::PathBuf;

struct Args {
    out: PathBuf,
    layers: usize,
    format: Format,
    hidden: usize,
    inter: usize,
    heads: usize,
    kv_heads: usize,
    vocab: usize,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        out: PathBuf::new(),
        layers: 32,
        format: Format::Int4G64,
        hidden: 4096,
        inter: 14336,
        heads: 32,
        kv_heads: 8,
        vocab: 32000,
    };
    let num = |v: Option<String>, k: &str| -> Result<usize, String> {
        v.ok_or(format!("{k} needs a value"))?
            .parse()
            .map_err(|e| format!("{k}: {e}"))
    };
    while let Some(x) = it.next() {
        match x.as_str() {
            "--layers" => a.layers = num(it.next(), &x)?,
            "--hidden" => a.hidden = num(it.next(), &x)?,
            "--intermediate" => a.inter = num(it.next(), &x)?,
            "--heads" => a.heads = num(it.next(), &x)?,
            "--kv-heads" => a.kv_heads = num(it.next(), &x)?,
            "--vocab" => a.vocab = num(it.next(), &x)?,
            "--format" => {
                let v = it.next().ok_or("--format needs a value")?;
                a.format = v.parse().map_err(|e| format!("--format {v}: {e}"))?;
            }
            other if a.out.as_os_str().is_empty() && !other.starts_with("--") => {
                a.out = PathBuf::from(other)
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.out.as_os_str().is_empty() {
        return Err("usage: synth_model OUT_DIR [--layers N] [--format F] ...".into());
    }
    Ok(a)
}

/// SplitMix64: deterministic weights without a dependency.
fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
        })
        .collect()
}

fn main() {
    if let Err(e) = run() {
        eprintln!("synth_model: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let a = parse()?;
    let (h, hd) = (a.hidden, a.hidden / a.heads);
    let kv = a.kv_heads * hd;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let file = a.out.join("model.safetensors");
    let mut plan = Plan::new(&file.display().to_string(), false);
    let e = |x: container_io::ContainerError| x.to_string();
    let projections = |l: usize| {
        let p = format!("model.layers.{l}");
        vec![
            (format!("{p}.self_attn.q_proj.weight"), h, h),
            (format!("{p}.self_attn.k_proj.weight"), kv, h),
            (format!("{p}.self_attn.v_proj.weight"), kv, h),
            (format!("{p}.self_attn.o_proj.weight"), h, h),
            (format!("{p}.mlp.gate_proj.weight"), a.inter, h),
            (format!("{p}.mlp.up_proj.weight"), a.inter, h),
            (format!("{p}.mlp.down_proj.weight"), h, a.inter),
        ]
    };
    let mut quantized: Vec<(String, usize, usize)> = Vec::new();
    for l in 0..a.layers {
        quantized.extend(projections(l));
    }
    quantized.push(("lm_head.weight".to_string(), a.vocab, h));
    plan.add_dense(
        "model.embed_tokens.weight",
        Format::Bf16,
        &[a.vocab as u64, h as u64],
    )
    .map_err(e)?;
    let mut norms = vec!["model.norm.weight".to_string()];
    for l in 0..a.layers {
        norms.push(format!("model.layers.{l}.input_layernorm.weight"));
        norms.push(format!("model.layers.{l}.post_attention_layernorm.weight"));
    }
    for n in &norms {
        plan.add_dense(n, Format::F32, &[h as u64]).map_err(e)?;
    }
    for (n, o, i) in &quantized {
        plan.add_quantized(
            n,
            a.format,
            *o,
            *i,
            quant_core::registry::DEFAULT_ROTATION_SEED,
        )
        .map_err(e)?;
    }
    let writer = plan.create(&file).map_err(e)?;

    // One encoding per distinct shape, reused by every layer.
    let mut encoded = HashMap::new();
    let mut streamed = 0u64;
    for (k, (n, o, i)) in quantized.iter().enumerate() {
        let t = match encoded.get(&(*o, *i)) {
            Some(t) => t,
            None => {
                eprintln!("synth_model: encoding {} [{o} x {i}]", a.format);
                let w = random_f32(o * i, k as u64 + 1);
                let t = encode(a.format, *o, *i, &w, &EncodeOptions::default())
                    .map_err(|x| format!("{n}: {x}"))?;
                encoded.entry((*o, *i)).or_insert(t)
            }
        };
        writer.write_at(n, 0, &t.weights).map_err(e)?;
        if !t.scales.is_empty() {
            writer
                .write_at(&container_io::stamp::sidecar_name(n), 0, &t.scales)
                .map_err(e)?;
        }
        streamed += (t.weights.len() + t.scales.len()) as u64;
    }
    let embed: Vec<u8> = random_f32(a.vocab * h, 7)
        .into_iter()
        .flat_map(|x| half::bf16::from_f32(x).to_le_bytes())
        .collect();
    writer
        .write_at("model.embed_tokens.weight", 0, &embed)
        .map_err(e)?;
    let ones: Vec<u8> = (0..h).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    for n in &norms {
        writer.write_at(n, 0, &ones).map_err(e)?;
    }
    writer.finish().map_err(e)?;

    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": a.inter,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": hd,
        "num_hidden_layers": a.layers,
        "vocab_size": a.vocab,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "tie_word_embeddings": false,
        "attention_bias": false,
        "mlp_bias": false,
        "hidden_act": "silu"
    });
    let cfg = a.out.join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_string_pretty(&config).map_err(|x| x.to_string())?,
    )
    .map_err(|x| format!("{}: {x}", cfg.display()))?;
    println!(
        "synth_model: {} layers of {}, {streamed} quantized bytes streamed per decoded token (plus one embedding row)",
        a.layers, a.format
    );
    Ok(())
}
