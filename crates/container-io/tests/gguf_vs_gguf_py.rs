//! tessera's decode of every GGUF block type against llama.cpp's own Python package
//! (`gguf.quants.dequantize`, gguf-py), through `tests/gguf_py_oracle.py`:
//!
//! - random valid blocks (random bytes, fp16 header fields drawn finite) of every type;
//! - blocks written by gguf-py's own `quantize`, where it has one (Q4_0, Q4_1, Q5_0, Q5_1,
//!   Q8_0, MXFP4, BF16, F16), and our encoder's bytes for the same input, which must be
//!   identical (both follow ggml-quants.c's reference quantizers);
//! - every tensor of the committed fixture `fixtures/tiny-llama.gguf`.
//!
//! The f32 decode must equal gguf-py's output within 1e-6 relative per value (it is in fact
//! bit-identical: both compute in f32 in GGML's order); the f64 decode (the kernels' oracle)
//! within 1e-6 of the block's largest magnitude, since gguf-py's f32 rounding of `d*q - m`
//! differs from the exact value by an ulp of the terms, not of the result.
//!
//! Needs `python3` with `gguf` and `numpy` (`python3 -m pip install gguf numpy`); without
//! them the tests print "skipped: <why>" and pass.

use container_io::gguf::{GgmlType, GgufFile, qtensor};
use quant_core::api::decode_rows_stored_f64;
use quant_core::testdata::{Rng, fresh_seed, weights};
use quant_core::{EncodeOptions, Format, QTensor, encode};
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf_py_oracle.py")
}

/// `Some(why)` when the oracle cannot run.
fn unavailable() -> Option<String> {
    match Command::new("python3").arg(script()).arg("check").output() {
        Err(e) => Some(format!("python3 not runnable: {e}")),
        Ok(o) if !o.status.success() => Some(format!(
            "gguf-py not importable ({}); run `python3 -m pip install gguf numpy`",
            String::from_utf8_lossy(&o.stdout).trim()
        )),
        Ok(_) => None,
    }
}

macro_rules! oracle_or_skip {
    () => {
        if let Some(why) = unavailable() {
            println!("skipped: {why}");
            return;
        }
    };
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-gguf-py-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) {
    let o = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "gguf_py_oracle.py {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// gguf-py's dequantization of `blocks` of GGML type `id`.
fn py_dequantize(dir: &Path, id: u32, blocks: &[u8]) -> Vec<f32> {
    let (i, o) = (dir.join(format!("{id}.bin")), dir.join(format!("{id}.f32")));
    std::fs::write(&i, blocks).unwrap();
    run(&[
        "dequantize",
        &id.to_string(),
        i.to_str().unwrap(),
        o.to_str().unwrap(),
    ]);
    read_f32(&o)
}

/// The registry formats that are GGUF types, with their GGML type.
fn ggml_formats() -> Vec<(Format, &'static GgmlType)> {
    Format::all()
        .filter_map(|f| {
            let id = f.spec().legacy.ggml?;
            Some((
                f,
                GgmlType::from_id(u32::from(id)).expect("registry ggml id is a GGML type"),
            ))
        })
        .collect()
}

/// Byte offsets of the fp16 header fields in one block of `f` (drawn finite), and whether
/// the whole block is fp16 / bf16 / f32 values.
fn f16_fields(f: Format) -> &'static [usize] {
    match f {
        Format::Q4_0 | Format::Q5_0 | Format::Q8_0 | Format::Iq4Nl | Format::Iq4Xs => &[0],
        Format::Q4_1 | Format::Q5_1 | Format::Q4K | Format::Q5K => &[0, 2],
        Format::Q2K => &[80, 82],
        Format::Q3K => &[108],
        Format::Q6K => &[208],
        _ => &[],
    }
}

/// A finite fp16 with a random sign, exponent and mantissa.
fn finite_f16(rng: &mut Rng) -> [u8; 2] {
    loop {
        let v = rng.next_u64() as u16;
        if (v >> 10) & 0x1F != 0x1F {
            return v.to_le_bytes();
        }
    }
}

/// Random valid blocks: `n` rows of `cols` weights of `f`.
fn random_blocks(f: Format, rng: &mut Rng, rows: usize, cols: usize) -> Vec<u8> {
    let spec = f.spec();
    let len = spec.weight_bytes(rows, cols).unwrap() as usize;
    let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    match f {
        Format::F32 => {
            for v in b.chunks_exact_mut(4) {
                let x = rng.normal() * 10f32.powi(rng.below(9) as i32 - 4);
                v.copy_from_slice(&x.to_le_bytes());
            }
        }
        Format::F16 => {
            for v in b.chunks_exact_mut(2) {
                v.copy_from_slice(&finite_f16(rng));
            }
        }
        Format::Bf16 => {
            for v in b.chunks_exact_mut(2) {
                // exponent 0xFF is inf/NaN in bf16
                while (u16::from_le_bytes([v[0], v[1]]) >> 7) & 0xFF == 0xFF {
                    v.copy_from_slice(&(rng.next_u64() as u16).to_le_bytes());
                }
            }
        }
        _ => {
            for block in b.chunks_exact_mut(spec.block_bytes as usize) {
                for &at in f16_fields(f) {
                    block[at..at + 2].copy_from_slice(&finite_f16(rng));
                }
            }
        }
    }
    b
}

/// Compares our f32 and f64 decodes of `t` with gguf-py's values `want`.
fn compare(what: &str, t: &QTensor<'_>, want: &[f32]) {
    let (rows, cols) = (t.rows(), t.cols());
    assert_eq!(
        want.len(),
        rows * cols,
        "{what}: gguf-py returned {} values",
        want.len()
    );
    let ours = quant_core::decode(t).unwrap();
    let mut ours64 = vec![0f64; rows * cols];
    decode_rows_stored_f64(t, 0, &mut ours64);
    let block = t.format().spec().block_weights as usize;
    let mut exact = 0usize;
    for (k, (&a, &w)) in ours.iter().zip(want).enumerate() {
        let ok = if w.is_finite() {
            (a - w).abs() as f64 <= 1e-6 * w.abs() as f64
        } else {
            a.to_bits() == w.to_bits() || (a.is_nan() && w.is_nan())
        };
        assert!(
            ok,
            "{what}: value {k} (row {}, col {}): ours {a:e}, gguf-py {w:e}",
            k / cols,
            k % cols
        );
        exact += usize::from(a.to_bits() == w.to_bits() || (a.is_nan() && w.is_nan()));
    }
    for (b, (o64, w)) in ours64.chunks(block).zip(want.chunks(block)).enumerate() {
        let scale = w
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f64, |m, v| m.max(v.abs() as f64));
        for (j, (&a, &w)) in o64.iter().zip(w).enumerate() {
            if !w.is_finite() {
                continue;
            }
            assert!(
                (a - w as f64).abs() <= 1e-6 * scale,
                "{what}: f64 value {} of block {b}: ours {a:e}, gguf-py {w:e}, block scale {scale:e}",
                j
            );
        }
    }
    println!(
        "{what}: {} values, {exact} bit-identical to gguf-py",
        want.len()
    );
}

#[test]
fn random_valid_blocks_of_every_type() {
    oracle_or_skip!();
    let seed = fresh_seed();
    println!("seed {seed}");
    let mut rng = Rng::new(seed);
    let dir = tmp("random");
    for (f, ty) in ggml_formats() {
        let bw = f.spec().block_weights as usize;
        let (rows, cols) = (3, bw * if bw == 1 { 64 } else { 16 });
        let bytes = random_blocks(f, &mut rng, rows, cols);
        let want = py_dequantize(&dir, ty.id, &bytes);
        let t = QTensor::new(f, rows, cols, &bytes, &[], 0).unwrap();
        compare(
            &format!("{f} (GGML {}), random blocks, seed {seed}", ty.name),
            &t,
            &want,
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn blocks_written_by_gguf_py_quantize() {
    oracle_or_skip!();
    let seed = fresh_seed();
    println!("seed {seed}");
    let mut rng = Rng::new(seed);
    let dir = tmp("quantize");
    let quantizable = [
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::GgufMxfp4,
        Format::Bf16,
        Format::F16,
    ];
    for f in quantizable {
        let id = u32::from(f.spec().legacy.ggml.unwrap());
        let (rows, cols) = (7, 256);
        let w = weights(&mut rng, rows, cols);
        let (i, o) = (
            dir.join(format!("q{id}.f32")),
            dir.join(format!("q{id}.bin")),
        );
        std::fs::write(
            &i,
            w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        )
        .unwrap();
        run(&[
            "quantize",
            &id.to_string(),
            &cols.to_string(),
            i.to_str().unwrap(),
            o.to_str().unwrap(),
        ]);
        let theirs = std::fs::read(&o).unwrap();
        let want = py_dequantize(&dir, id, &theirs);
        let t = QTensor::new(f, rows, cols, &theirs, &[], 0).unwrap();
        compare(
            &format!("{f}, blocks from gguf-py quantize, seed {seed}"),
            &t,
            &want,
        );
        // Our encoder ports GGML's reference; gguf-py's numpy versions follow it too.
        let ours = encode(f, rows, cols, &w, &EncodeOptions::default()).unwrap();
        let bb = f.spec().block_bytes as usize;
        let same = ours
            .weights
            .chunks(bb)
            .zip(theirs.chunks(bb))
            .filter(|(a, b)| a == b)
            .count();
        let total = theirs.len() / bb;
        println!("{f}: {same}/{total} blocks byte-identical to gguf-py's quantize");
        // gguf-py's numpy quantizers follow ggml-quants.c's reference row by row (its Q8_0
        // says so; the others agree on every block measured), as our ports do.
        assert_eq!(
            same, total,
            "{f}: our encoder differs from gguf-py's quantize (seed {seed})"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn fixture_tensors_match_gguf_py() {
    oracle_or_skip!();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-llama.gguf");
    let file = GgufFile::open(&path).unwrap();
    let g = file.parse().unwrap();
    let dir = tmp("fixture");
    run(&["tensors", path.to_str().unwrap(), dir.to_str().unwrap()]);
    for t in &g.tensors {
        let q = qtensor(&g, t).unwrap();
        let want = read_f32(&dir.join(format!("{}.f32", t.name)));
        compare(&format!("fixture {} ({})", t.name, t.ty.name), &q, &want);
    }
    let _ = std::fs::remove_dir_all(dir);
}
