//! `tessera quality` end to end on a small safetensors file written here: which tensors are
//! measured and skipped (embeddings, 1-D, I not a multiple of 256), `--rotate` making an
//! un-rotated format quantize the same blocks as its rotated twin, `--flatten`, the SVG, and
//! bad arguments refused with exit status 2.

use quant_core::testdata::Rng;
use std::path::PathBuf;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("run tessera")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-quality-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A safetensors file of f32 tensors (name, shape), random normal values.
fn write_model(dir: &std::path::Path) -> PathBuf {
    let tensors: [(&str, &[usize]); 4] = [
        ("model.embed_tokens.weight", &[4, 256]),
        ("model.layers.0.mlp.down_proj.weight", &[8, 512]),
        ("model.layers.0.self_attn.q_proj.weight", &[4, 384]),
        ("model.norm.weight", &[512]),
    ];
    let mut rng = Rng::new(7);
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    for (name, shape) in tensors {
        let n: usize = shape.iter().product();
        let start = data.len();
        for _ in 0..n {
            data.extend_from_slice(&(rng.normal() * 0.02).to_le_bytes());
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(&data);
    let p = dir.join("model.safetensors");
    std::fs::write(&p, bytes).unwrap();
    p
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The table row of `label`: its whitespace-separated fields.
fn row(text: &str, label: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(label))
        .unwrap_or_else(|| panic!("no row {label} in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn measures_2d_weights_and_says_what_it_skipped() {
    let d = tmp("plain");
    let m = write_model(&d);
    let text = ok(&tessera(&["quality", m.to_str().unwrap()]));
    assert!(text.contains("domain: logical"), "{text}");
    assert!(
        text.contains("skipped, embeddings: model.embed_tokens.weight"),
        "{text}"
    );
    assert!(text.contains("ignored: 1 tensors"), "{text}");
    assert!(text.contains("measured: 2 tensors, 5632 weights"), "{text}");
    // The I = 384 tensor is skipped by every 256-weight format, and said so.
    assert!(
        text.contains("mq4-g256-v2: skipped 1 tensors (mq4-g256-v2: I = 384"),
        "{text}"
    );
    for label in [
        "mq4-g256",
        "mq4c-g256",
        "mq4-g256-v2",
        "mq4-g256-v2+ea",
        "mq4-k",
        "mq4-k+ea",
    ] {
        let r = row(&text, label);
        assert_eq!(r[2], "4096", "{label}: weights measured\n{text}");
    }
    assert_eq!(row(&text, "mq4-g256")[1], "4.2500");
    assert_eq!(row(&text, "mq4-k")[1], "4.5000");
    assert!(text.contains("mq4-g256-v2+ea   vs mq4-g256-v2"), "{text}");
}

#[test]
fn rotate_and_flatten() {
    let d = tmp("rotate");
    let m = write_model(&d);
    let svg = d.join("h.svg");
    let args = [
        "quality",
        m.to_str().unwrap(),
        "--formats",
        "hfq4-g256,mq4-g256,int4-g32",
        "--rotate",
    ];
    let text = ok(&tessera(&args));
    assert!(
        text.contains("not rotatable (all formats): 1 tensors"),
        "{text}"
    );
    // Under --rotate, hfq4-g256 encodes the rotated weights: the same blocks as mq4-g256.
    let (h, q) = (row(&text, "hfq4-g256"), row(&text, "mq4-g256"));
    assert_eq!(h[2..6], q[2..6], "{text}");
    assert_eq!(h[5], "0.000%", "{text}");

    let mut flat = args.to_vec();
    flat.extend(["--flatten", "--svg", svg.to_str().unwrap()]);
    let text = ok(&tessera(&flat));
    assert!(
        text.contains("measured: 2 tensors, 5632 weights, 22 chunks"),
        "{text}"
    );
    assert_eq!(row(&text, "mq4-g256")[2], "5632", "{text}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(s.matches("<polyline").count(), 3);
}

#[test]
fn bad_arguments_are_refused_with_status_2() {
    let d = tmp("bad");
    let m = write_model(&d);
    let m = m.to_str().unwrap();
    for (args, want) in [
        (vec!["quality", m, "--formats", "nope"], "unknown format"),
        (
            vec!["quality", m, "--formats", "mq4-k", "--baseline", "mq4-g256"],
            "--baseline mq4-g256 is not one of --formats",
        ),
        (
            vec!["quality", m, "--formats", "mq4-k,mq4-k"],
            "listed twice",
        ),
        (vec!["quality", "/nonexistent.safetensors"], "nonexistent"),
    ] {
        let o = tessera(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
