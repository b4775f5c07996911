//! `tessera run` end to end: the embedded default model reproduces the committed
//! transformers tokens, `--logits-out` writes the logits the tokens were chosen from, a
//! container made by `tessera quantize` runs with `--config`, and every bad input exits
//! with status 2 and a message naming the file or setting.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("run tessera")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-run-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

fn reference(name: &str) -> serde_json::Value {
    let p = fixtures().join(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> String {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn default_model_reproduces_the_reference_tokens_and_logits() {
    let r = reference("parity-deepseek-v3");
    let d = tmp("default");
    let npy = d.join("logits.npy");
    let out = ok(&tessera(&[
        "run",
        "--backend",
        "cpu",
        "--logits-out",
        npy.to_str().unwrap(),
    ]));
    assert!(out.contains("deepseek_v3, 3 layers"), "{out}");
    assert!(
        out.contains(&format!("token ids: {}\n", ids(&r["greedy_tokens"]))),
        "{out}"
    );
    assert!(out.contains("tokens/s"), "{out}");
    assert!(out.contains("CPU fallbacks: none"), "{out}");
    let (shape, got) = engine::npy::read(&npy).unwrap();
    assert_eq!(shape, vec![16, 256]);
    let (_, want) = engine::npy::read(
        &fixtures()
            .join("parity-deepseek-v3")
            .join("reference_logits.npy"),
    )
    .unwrap();
    // Step k's logits are the reference row of position prompt_len - 1 + k.
    let p = r["prompt_ids"].as_array().unwrap().len();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (k, row) in got.chunks_exact(256).enumerate() {
        let refrow = &want[(p - 1 + k) * 256..(p + k) * 256];
        let err = row
            .iter()
            .zip(refrow)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-3 * scale, "step {k}: {err}");
    }
}

#[test]
fn a_tessera_quantize_container_runs_with_its_config() {
    let d = tmp("quant");
    let q = d.join("llama-int8.safetensors");
    let src = fixtures().join("parity-llama");
    ok(&tessera(&[
        "quantize",
        src.to_str().unwrap(),
        "-o",
        q.to_str().unwrap(),
        "--format",
        "int8-row",
    ]));
    let cfg = src.join("config.json");
    let out = ok(&tessera(&[
        "run",
        q.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--backend",
        "cpu",
        "--tokens",
        "4",
        "--prompt-ids",
        "5,6,7",
    ]));
    assert!(out.contains("prompt ids: 5,6,7"), "{out}");
    assert!(out.contains("token ids: "), "{out}");
}

#[test]
fn bad_inputs_exit_2_with_a_message() {
    fails(
        &tessera(&["run", "/nonexistent/model"]),
        "/nonexistent/model: no such",
    );
    fails(
        &tessera(&["run", "--backend", "wgpu"]),
        "this build has no wgpu support",
    );
    fails(
        &tessera(&["run", "--backend", "cpu", "--strict-gpu"]),
        "--strict-gpu",
    );
    fails(
        &tessera(&["run", "--prompt-ids", "1,x"]),
        "\"x\" is not a token id",
    );
    fails(
        &tessera(&["run", "--prompt-ids", "999"]),
        "outside the vocabulary",
    );
    fails(&tessera(&["run", "--tokens", "0"]), "--tokens");
    let d = tmp("bad");
    std::fs::write(d.join("config.json"), "{\"model_type\": \"llama\"}").unwrap();
    std::fs::copy(
        fixtures().join("parity-llama/model.safetensors"),
        d.join("model.safetensors"),
    )
    .unwrap();
    fails(
        &tessera(&["run", d.to_str().unwrap()]),
        "config.json: hidden_size: missing",
    );
    // A tensor the graph needs, missing: named with its file.
    let cfg = std::fs::read_to_string(fixtures().join("parity-deepseek-v3/config.json")).unwrap();
    std::fs::write(d.join("config.json"), cfg).unwrap();
    fails(
        &tessera(&["run", d.to_str().unwrap()]),
        "tensor model.layers.0.self_attn.q_a_proj.weight: missing",
    );
}
