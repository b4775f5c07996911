//! End-to-end pipelines on the fixtures and on small generated checkpoints: quantize to
//! every format and read back through stamps, fp8 passthrough byte for byte, the
//! legacy-unstamped writer's refusals, sharded inputs, the int4 single-group equivalence the
//! resolver relies on, Python `safetensors` interop, and a mutation smoke test of the parser.

// The helpers return the library's own error type, as callers do.
#![allow(clippy::result_large_err)]

use container_io::container::{Container, How, Item, ShapeHints};
use container_io::error::ContainerError;
use container_io::pipeline::{self, QuantizeOptions, RepackOptions};
use container_io::writer::write_index;
use container_io::{Dtype, Plan};
use quant_core::testdata::Rng;
use quant_core::{EncodeOptions, Format, QTensor, decode, encode};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-pipe-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn quantize(
    input: &Container,
    out: &std::path::Path,
    format: Format,
    legacy: bool,
) -> Result<(), ContainerError> {
    let opts = QuantizeOptions {
        format,
        roles: HashMap::new(),
        legacy_unstamped: legacy,
        seed: 7,
        gpu_tables: Vec::new(),
    };
    let planned = pipeline::plan_quantize(input, &out.display().to_string(), &opts)?;
    pipeline::execute(input, planned, out, 7, &|_| {}).map(|_| ())
}

#[test]
fn quantize_fixture_to_every_format_and_verify() {
    let input = Container::open(fixture("tiny-llama")).unwrap();
    let d = tmp("every");
    for f in Format::all() {
        let out = d.join(format!("{}.safetensors", f.name()));
        quantize(&input, &out, f, false).unwrap_or_else(|e| panic!("{f}: {e}"));
        let c = Container::open(&out).unwrap();
        let mut n = 0;
        for (name, item) in c.resolve_all(&ShapeHints::new()) {
            let Item::Tensor(r) = item.unwrap_or_else(|e| panic!("{f} {name}: {e}")) else {
                panic!("{name} raw")
            };
            assert_eq!(r.how, How::Stamp, "{name}");
            if !name.contains("norm") {
                assert_eq!(r.format, f, "{name}");
                n += 1;
            }
            let e = pipeline::verify_tensor(&c, &r, 2, 11).unwrap();
            assert!(e.error <= 1e-4, "{f} {name}: gemm vs oracle {e:?}");
        }
        assert_eq!(n, 9, "{f}");
        // The quantized weights approximate the source (loose bound: int2/e8 are coarse).
        let src = match input
            .resolve("model.layers.0.mlp.up_proj.weight", &ShapeHints::new())
            .unwrap()
        {
            Item::Tensor(r) => decode(&input.qtensor(&r).unwrap()).unwrap(),
            Item::Raw(_) => unreachable!(),
        };
        let got = match c
            .resolve("model.layers.0.mlp.up_proj.weight", &ShapeHints::new())
            .unwrap()
        {
            Item::Tensor(r) => decode(&c.qtensor(&r).unwrap()).unwrap(),
            Item::Raw(_) => unreachable!(),
        };
        let (mut num, mut den) = (0f64, 0f64);
        for (a, b) in src.iter().zip(&got) {
            num += ((a - b) as f64).powi(2);
            den += (*a as f64).powi(2);
        }
        let rel = (num / den).sqrt();
        assert!(rel < 0.6, "{f}: relative RMS error {rel}");
    }
}

#[test]
fn repack_fp8_copies_bytes_verbatim() {
    let input = Container::open(fixture("tiny-fp8")).unwrap();
    let d = tmp("fp8");
    let out = d.join("out.safetensors");
    let planned = pipeline::plan_repack_fp8(
        &input,
        &out.display().to_string(),
        &RepackOptions::default(),
    )
    .unwrap();
    let skipped: Vec<&str> = planned.skipped.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        skipped.iter().any(|n| n.contains("kv_b_proj"))
            && skipped.iter().any(|n| n.contains("experts.0")),
        "{skipped:?}"
    );
    pipeline::execute(&input, planned, &out, 42, &|_| {}).unwrap();
    let c = Container::open(&out).unwrap();
    for (name, want) in [
        (
            "model.layers.0.self_attn.o_proj.weight",
            Format::Fp8E4m3B128,
        ),
        (
            "model.layers.0.self_attn.q_a_proj.weight",
            Format::Fp8E4m3B128Ue8m0,
        ),
        (
            "model.layers.0.mlp.shared_experts.down_proj.weight",
            Format::Fp8E4m3B128,
        ),
    ] {
        let Item::Tensor(r) = c.resolve(name, &ShapeHints::new()).unwrap() else {
            panic!()
        };
        assert_eq!((r.format, r.how.clone()), (want, How::Stamp));
        assert_eq!(
            c.data(r.weights),
            input.data(input.id(name).unwrap()),
            "{name} weights"
        );
        let sname = format!("{name}_scale_inv");
        assert_eq!(
            c.data(r.scales.unwrap()),
            input.data(input.id(&sname).unwrap()),
            "{name} scales"
        );
        assert!(pipeline::verify_tensor(&c, &r, 3, 5).unwrap().error <= 1e-4);
    }
    assert!(c.id("model.layers.0.self_attn.kv_b_proj.weight").is_none());
    // --all-roles takes kv_b and the routed expert too.
    let planned = pipeline::plan_repack_fp8(
        &input,
        "x",
        &RepackOptions {
            all_roles: true,
            legacy_unstamped: false,
        },
    )
    .unwrap();
    assert!(planned.skipped.is_empty());
}

/// An HF FP8 checkpoint with one o_proj at [2, 200]: O == ceil(O/128)*ceil(I/128) = 2.
fn fp8_collision_checkpoint(path: &std::path::Path) {
    let mut p = Plan::new("gen", true);
    p.add_raw(
        "model.layers.0.self_attn.o_proj.weight",
        Dtype::F8E4m3,
        &[2, 200],
    )
    .unwrap();
    p.add_raw(
        "model.layers.0.self_attn.o_proj.weight_scale_inv",
        Dtype::F32,
        &[1, 2],
    )
    .unwrap();
    let bytes = p
        .to_bytes(|t| {
            if t.dtype == Dtype::F32 {
                [0.5f32, 0.25]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            } else {
                vec![0x38; 400]
            }
        })
        .unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn legacy_unstamped_refuses_what_the_reader_would_misresolve() {
    let d = tmp("legacy");
    let src = d.join("fp8.safetensors");
    fp8_collision_checkpoint(&src);
    let input = Container::open(&src).unwrap();
    let e = pipeline::plan_repack_fp8(
        &input,
        "legacy.safetensors",
        &RepackOptions {
            all_roles: false,
            legacy_unstamped: true,
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(e, ContainerError::LegacyWouldMisresolve { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("int8-row"), "{e}");
    // Stamped, the same tensor is written and read back as fp8.
    let out = d.join("stamped.safetensors");
    let planned = pipeline::plan_repack_fp8(
        &input,
        &out.display().to_string(),
        &RepackOptions::default(),
    )
    .unwrap();
    pipeline::execute(&input, planned, &out, 42, &|_| {}).unwrap();
    let c = Container::open(&out).unwrap();
    let Item::Tensor(r) = c
        .resolve("model.layers.0.self_attn.o_proj.weight", &ShapeHints::new())
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(r.format, Format::Fp8E4m3B128);
    // Legacy int4-g64 output of the fixture reads back (with shapes from the config) as written.
    let input = Container::open(fixture("tiny-llama")).unwrap();
    let out = d.join("int4.safetensors");
    quantize(&input, &out, Format::Int4G64, true).unwrap();
    let c = Container::open(&out).unwrap();
    assert!(
        c.shards[0].header.metadata.is_empty(),
        "legacy output carries no stamps"
    );
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("tiny-llama/config.json")).unwrap()).unwrap();
    let hints = container_io::census::hints_from_config(&cfg, c.names().iter().map(String::as_str))
        .unwrap();
    for (name, item) in c.resolve_all(&hints) {
        let Item::Tensor(r) = item.unwrap() else {
            panic!("{name}")
        };
        if !name.contains("norm") {
            assert_eq!(
                (r.format, r.how),
                (Format::Int4G64, How::Inferred),
                "{name}"
            );
        }
    }
    // mq4 has no legacy id: refused in legacy mode.
    let e = quantize(&input, &d.join("mq4.safetensors"), Format::Mq4G256V2, true)
        .err()
        .unwrap();
    assert!(matches!(e, ContainerError::LegacyWouldMisresolve { .. }));
}

#[test]
fn sharded_input_quantizes() {
    let d = tmp("sharded");
    let mut rng = Rng::new(3);
    let mut map = BTreeMap::new();
    for (k, names) in [
        ["model.layers.0.mlp.up_proj.weight", "model.norm.weight"],
        ["model.layers.0.mlp.down_proj.weight", "lm_head.weight"],
    ]
    .iter()
    .enumerate()
    {
        let shard = format!("model-0000{}-of-00002.safetensors", k + 1);
        let mut p = Plan::new(&shard, true);
        for n in names {
            let dims: Vec<u64> = if n.contains("norm") {
                vec![64]
            } else {
                vec![16, 64]
            };
            p.add_raw(n, Dtype::F16, &dims).unwrap();
            map.insert(n.to_string(), shard.clone());
        }
        let bytes = p
            .to_bytes(|t| {
                (0..t.nbytes / 2)
                    .flat_map(|_| half::f16::from_f32(rng.normal()).to_le_bytes())
                    .collect()
            })
            .unwrap();
        std::fs::write(d.join(&shard), bytes).unwrap();
    }
    write_index(&d.join("model.safetensors.index.json"), &map, 0).unwrap();
    let input = Container::open(&d).unwrap();
    assert_eq!(input.shards.len(), 2);
    let out = d.join("q.safetensors");
    quantize(&input, &out, Format::Int4G32, false).unwrap();
    let c = Container::open(&out).unwrap();
    let Item::Tensor(r) = c
        .resolve("model.layers.0.mlp.down_proj.weight", &ShapeHints::new())
        .unwrap()
    else {
        panic!()
    };
    assert_eq!((r.format, r.rows, r.cols), (Format::Int4G32, 16, 64));
}

#[test]
fn single_group_int4_decodes_exactly_as_int4_row() {
    // The resolver folds int4-g{gs >= I} into int4-row; these bytes must decode identically.
    let mut rng = Rng::new(quant_core::testdata::fresh_seed());
    for (rows, cols) in [(7, 100), (3, 16), (5, 255), (2, 1), (4, 33)] {
        let w = quant_core::testdata::weights(&mut rng, rows, cols);
        for f in [
            Format::Int4G16,
            Format::Int4G32,
            Format::Int4G48,
            Format::Int4G64,
            Format::Int4G96,
            Format::Int4G128,
            Format::Int4G192,
            Format::Int4G256,
        ] {
            if (f.spec().group_size().unwrap() as usize) < cols {
                continue;
            }
            let t = encode(f, rows, cols, &w, &EncodeOptions::default()).unwrap();
            let as_row =
                QTensor::new(Format::Int4Row, rows, cols, &t.weights, &t.scales, 42).unwrap();
            let a = decode(&t.view()).unwrap();
            let b = decode(&as_row).unwrap();
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{f} [{rows}, {cols}]"
            );
        }
    }
}

#[test]
fn python_safetensors_reads_ours_and_we_read_theirs() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import safetensors, numpy"])
        .output();
    match probe {
        Err(e) => {
            println!("skipped: python3 not runnable ({e})");
            return;
        }
        Ok(o) if !o.status.success() => {
            println!(
                "skipped: python3 lacks safetensors/numpy ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Ok(_) => {}
    }
    let d = tmp("python");
    let input = Container::open(fixture("tiny-llama")).unwrap();
    let out = d.join("ours.safetensors");
    quantize(&input, &out, Format::Int4G64, false).unwrap();
    let theirs = d.join("theirs.safetensors");
    let script = format!(
        r#"
import json, numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
t = load_file({ours:?})
with safe_open({ours:?}, framework="np") as f:
    meta = f.metadata()
w = t["model.layers.0.mlp.up_proj.weight"]; s = t["model.layers.0.mlp.up_proj.weight.qs"]
stamp = json.loads(meta["tessera.model.layers.0.mlp.up_proj.weight"])
assert w.dtype == np.uint8 and w.shape == (256, 128), w.shape
assert s.nbytes == 256 * 4 * 4, s.nbytes
assert stamp["format"] == "int4-g64" and stamp["shape"] == [256, 256], stamp
assert t["model.norm.weight"].dtype == np.float32
rng = np.random.default_rng(1)
save_file({{"model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 256), dtype=np.float32),
            "model.layers.0.input_layernorm.weight": np.ones(256, dtype=np.float16)}}, {theirs:?}, metadata={{"format": "pt"}})
print("ok", len(t))
"#,
        ours = out.display().to_string(),
        theirs = theirs.display().to_string()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "python: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    println!("{}", String::from_utf8_lossy(&o.stdout).trim());
    // Python's file opens, resolves as dense, and quantizes.
    let c = Container::open(&theirs).unwrap();
    let out2 = d.join("from-python.safetensors");
    quantize(&c, &out2, Format::Mq4G256V2, false).unwrap();
    let q = Container::open(&out2).unwrap();
    let Item::Tensor(r) = q
        .resolve("model.layers.0.self_attn.q_proj.weight", &ShapeHints::new())
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(r.format, Format::Mq4G256V2);
}

#[test]
fn mutated_containers_never_panic() {
    // A stable-toolchain stand-in for the cargo-fuzz target: random byte flips, truncations
    // and header-length edits of a real container; open + resolve must return, not panic.
    let base = std::fs::read(fixture("tiny-fp8/model.safetensors")).unwrap();
    let hlen = u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
    let seed = quant_core::testdata::fresh_seed();
    let mut rng = Rng::new(seed);
    let mut opened = 0;
    for _ in 0..3000 {
        let mut b = base.clone();
        match rng.below(4) {
            0 => {
                for _ in 0..1 + rng.below(4) {
                    let k = rng.below(8 + hlen);
                    b[k] = (rng.next_u64() & 0xFF) as u8;
                }
            }
            1 => b.truncate(rng.below(b.len())),
            2 => {
                let k = 8 + rng.below(hlen);
                b[k] = b"0123456789,:[]{}\"-"[rng.below(18)];
            }
            _ => b[..8].copy_from_slice(&(rng.next_u64() >> rng.below(64)).to_le_bytes()),
        }
        if let Ok(c) = Container::from_bytes("m", b) {
            opened += 1;
            for (_, r) in c.resolve_all(&ShapeHints::new()) {
                if let Ok(Item::Tensor(t)) = r {
                    let _ = c.qtensor(&t);
                }
            }
        }
    }
    println!("mutation seed {seed}: {opened} of 3000 mutants opened");
}
