//! The GGUF commands end to end on the committed fixture (`fixtures/tiny-llama.gguf`,
//! written by `fixtures/make_gguf_fixture.py` with gguf-py): `inspect [--json]`,
//! `dequantize` and `import-gguf`, and malformed files refused with exit status 2 and a
//! message, never a panic.

use container_io::container::{Container, Item, ShapeHints};
use container_io::gguf::{GgufFile, names, qtensor};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-llama.gguf")
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("run tessera")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-gguf-cli-{}-{tag}", std::process::id()));
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

#[test]
fn inspect_lists_metadata_and_tensors() {
    let f = fixture();
    let text = ok(&tessera(&["inspect", f.to_str().unwrap()]));
    assert!(
        text.contains("GGUF v3, 20 metadata entries, 21 tensors"),
        "{text}"
    );
    assert!(text.contains("llama.attention.head_count_kv"), "{text}");
    assert!(
        text.contains("model.layers.1.mlp.gate_proj.weight"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&tessera(&["inspect", f.to_str().unwrap(), "--json"]))).unwrap();
    assert_eq!(json["container"], "gguf");
    assert_eq!(json["metadata"]["general.architecture"]["value"], "llama");
    assert_eq!(
        json["metadata"]["tessera.fixture.nested"]["value"],
        serde_json::json!([[1, 2], [3]])
    );
    let tensors = json["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 21);
    let q = tensors
        .iter()
        .find(|t| t["name"] == "blk.0.attn_output.weight")
        .unwrap();
    assert_eq!(q["format"], "q2_k");
    assert_eq!(q["shape"], serde_json::json!([256, 256]));
    assert_eq!(q["role"], "o");
}

#[test]
fn dequantize_keeps_names_and_logical_shapes() {
    let dir = tmp("deq");
    let out = dir.join("deq.safetensors");
    ok(&tessera(&[
        "dequantize",
        fixture().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]));
    let file = GgufFile::open(&fixture()).unwrap();
    let g = file.parse().unwrap();
    let c = Container::open(&out).unwrap();
    assert_eq!(c.names().len(), g.tensors.len());
    for t in &g.tensors {
        let q = qtensor(&g, t).unwrap();
        let want = quant_core::decode(&q).unwrap();
        let Ok(Item::Tensor(r)) = c.resolve(t.name, &ShapeHints::new()) else {
            panic!("{} missing", t.name)
        };
        assert_eq!((r.rows, r.cols), (q.rows(), q.cols()), "{}", t.name);
        assert_eq!(r.dims, vec![q.rows() as u64, q.cols() as u64]);
        let got = quant_core::decode(&c.qtensor(&r).unwrap()).unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}",
            t.name
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn import_copies_blocks_byte_for_byte() {
    let dir = tmp("import");
    let out = dir.join("model");
    ok(&tessera(&[
        "import-gguf",
        fixture().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]));
    let file = GgufFile::open(&fixture()).unwrap();
    let g = file.parse().unwrap();
    let c = Container::open(&out).unwrap();
    assert_eq!(c.names().len(), g.tensors.len());
    let (heads, heads_kv) = names::head_counts(&g);
    for t in &g.tensors {
        let target =
            names::hf_target("llama", t.name, heads, heads_kv).expect("every fixture name maps");
        let (hf, permute_heads) = match target {
            names::Target::One(n) => (n, None),
            names::Target::Unpermute { name, heads } => (name, Some(heads)),
            names::Target::Experts(_) => unreachable!("no experts in the fixture"),
        };
        let Ok(Item::Tensor(r)) = c.resolve(&hf, &ShapeHints::new()) else {
            panic!("{hf} missing")
        };
        assert_eq!(r.how, container_io::How::Stamp, "{hf} is not stamped");
        assert_eq!(Some(r.format), t.ty.format(), "{hf}");
        let stored = c.data(r.weights);
        let src = g.tensor_data(t);
        match permute_heads {
            None => assert_eq!(stored, src, "{hf}: bytes differ from the GGUF tensor"),
            Some(h) => {
                // Rows moved, blocks untouched: HF row r is GGUF row unpermute_row(r).
                let rb = src.len() / r.rows;
                assert_ne!(stored, src, "{hf}: rows were not put back in HF order");
                for row in 0..r.rows {
                    let from = names::unpermute_row(row, r.rows, h).unwrap();
                    assert_eq!(
                        &stored[row * rb..(row + 1) * rb],
                        &src[from * rb..(from + 1) * rb]
                    );
                }
            }
        }
    }
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(cfg["num_key_value_heads"], 1);
    assert_eq!(cfg["vocab_size"], 32);
    assert_eq!(cfg["intermediate_size"], 128);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("gguf_metadata.json")).unwrap())
            .unwrap();
    assert_eq!(meta["tokenizer.ggml.tokens"].as_array().unwrap().len(), 32);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn malformed_files_exit_2_without_panicking() {
    let dir = tmp("bad");
    let good = std::fs::read(fixture()).unwrap();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() - 100].to_vec()),
        ("header-only", good[..40].to_vec()),
    ];
    let mut huge_kv = good.clone();
    huge_kv[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push(("huge-n-kv", huge_kv));
    let mut huge_tensors = good.clone();
    huge_tensors[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    cases.push(("huge-n-tensors", huge_tensors));
    let mut bad_version = good.clone();
    bad_version[4..8].copy_from_slice(&1u32.to_le_bytes());
    cases.push(("version-1", bad_version));
    // The first key's length field (right after the 24-byte header) made enormous.
    let mut long_key = good.clone();
    long_key[24..32].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    cases.push(("long-key", long_key));
    for (tag, bytes) in cases {
        let p = dir.join(format!("{tag}.gguf"));
        std::fs::write(&p, &bytes).unwrap();
        for args in [
            vec!["inspect", p.to_str().unwrap()],
            vec![
                "dequantize",
                p.to_str().unwrap(),
                "-o",
                dir.join("o.safetensors").to_str().unwrap(),
            ],
            vec![
                "import-gguf",
                p.to_str().unwrap(),
                "-o",
                dir.join("o").to_str().unwrap(),
            ],
        ] {
            let o = tessera(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{tag} {args:?}: {err}");
            assert!(
                err.contains("tessera: error:") && err.contains(&format!("{tag}.gguf")),
                "{tag}: {err}"
            );
            assert!(!err.contains("panicked"), "{tag}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
