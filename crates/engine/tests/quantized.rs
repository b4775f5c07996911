//! Quantized containers against f32: each fixture is quantized to one format at a time
//! through container-io's pipeline (every 2-D weight the format's shape rules accept,
//! embeddings and LM head included, as `tessera quantize` does; norms, routers and biases
//! stay f32), run teacher-forced over the reference sequence, and compared with the f32
//! model by KL(p_f32 || p_quant) per position. The table printed with --nocapture is the one
//! in docs/ENGINE.md.

mod common;
use common::*;
use engine::{LoadOptions, Model};
use quant_core::Format;

/// Mean and max over positions of KL(softmax(p) || softmax(q)), and top-1 agreement.
fn kl_stats(p: &[f32], q: &[f32], vocab: usize) -> (f64, f64, f64) {
    let lsm = |row: &[f32]| -> Vec<f64> {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let z: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
        row.iter().map(|&v| v as f64 - z).collect()
    };
    let (mut sum, mut max, mut agree) = (0.0, 0f64, 0usize);
    let rows = p.len() / vocab;
    for r in 0..rows {
        let (a, b) = (
            &p[r * vocab..(r + 1) * vocab],
            &q[r * vocab..(r + 1) * vocab],
        );
        let (la, lb) = (lsm(a), lsm(b));
        let kl: f64 = la.iter().zip(&lb).map(|(x, y)| x.exp() * (x - y)).sum();
        sum += kl;
        max = max.max(kl);
        agree += usize::from(engine::ops::argmax(a) == engine::ops::argmax(b));
    }
    (sum / rows as f64, max, agree as f64 / rows as f64)
}

/// Loose ceilings on the mean KL, by how many bits a weight keeps. They catch a broken
/// quantized path (a scrambled tensor gives a KL of order 1 and more), not a codec's quality
/// (docs/QUALITY.md measures that): the tiny random MoE fixture is routing-sensitive, one
/// expert choice flipped by a small weight error moves a position's logits by O(1).
fn bound(f: Format) -> f64 {
    let bits = f.spec().bits_per_weight();
    if bits >= 7.5 {
        0.05
    } else if bits >= 4.0 {
        0.3
    } else if bits >= 3.0 {
        0.6
    } else {
        1.5
    }
}

#[test]
fn kl_against_f32_per_format() {
    let mut failures = Vec::new();
    println!("| model | format | bits/w | weights quantized | mean KL | max KL | top-1 agree |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for name in FIXTURES {
        let r = Reference::load(name);
        let seq = r.sequence();
        let f32_model = load_cpu(name);
        let mut c = f32_model.new_cache();
        let base = f32_model.forward(&mut c, &seq).unwrap();
        for f in Format::all().filter(|f| !matches!(f, Format::F32 | Format::F16 | Format::Bf16)) {
            let (path, frac) = quantize_fixture(name, f.name(), |_, _, _| Some(f));
            if frac == 0.0 {
                println!(
                    "| {name} | {f} | {:.2} | 0% (no tensor fits) | - | - | - |",
                    f.spec().bits_per_weight()
                );
                continue;
            }
            let m = Model::load(quantized_source(&path, name), &LoadOptions::default()).unwrap();
            let mut c = m.new_cache();
            let q = m.forward(&mut c, &seq).unwrap();
            let (mean, max, agree) = kl_stats(&base, &q, r.vocab);
            println!(
                "| {name} | {f} | {:.2} | {:.0}% | {mean:.2e} | {max:.2e} | {:.0}% |",
                f.spec().bits_per_weight(),
                frac * 100.0,
                agree * 100.0
            );
            if mean.is_nan() || mean > bound(f) {
                failures.push(format!("{name} {f}: mean KL {mean:.3e} > {:.0e}", bound(f)));
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The metric itself bites: a logit vector against itself is 0, against a shifted copy is
/// 0 (softmax is shift-invariant), against a permuted copy is large.
#[test]
fn kl_metric_sanity() {
    let p: Vec<f32> = (0..64).map(|i| ((i * 37 % 17) as f32) * 0.3).collect();
    assert_eq!(kl_stats(&p, &p, 64).0, 0.0);
    let shifted: Vec<f32> = p.iter().map(|v| v + 5.0).collect();
    assert!(kl_stats(&p, &shifted, 64).0 < 1e-12);
    let mut perm = p.clone();
    perm.reverse();
    assert!(kl_stats(&p, &perm, 64).0 > 0.1);
}

/// The engine on a quantized container computes the model those bytes stand for: the same
/// logits (to 1e-4 of their scale) as the engine on the container decoded back to f32
/// (container-io's dequantize pipeline), for every format and fixture. With f32 parity
/// against transformers, this ties every quantized path to the reference semantics.
#[test]
fn quantized_container_equals_its_f32_decode() {
    let mut worst = Vec::new();
    for name in FIXTURES {
        let r = Reference::load(name);
        let seq = r.sequence();
        for f in Format::all().filter(|f| !matches!(f, Format::F32 | Format::F16 | Format::Bf16)) {
            let (path, frac) =
                quantize_fixture(name, &format!("{}-dq", f.name()), |_, _, _| Some(f));
            if frac == 0.0 {
                continue;
            }
            let deq = dequantize(&path);
            let run = |p: &std::path::Path| {
                let m = Model::load(quantized_source(p, name), &LoadOptions::default()).unwrap();
                let mut c = m.new_cache();
                m.forward(&mut c, &seq).unwrap()
            };
            let (q, d) = (run(&path), run(&deq));
            let scale = d.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = max_abs_diff(&q, &d);
            worst.push((err / scale, format!("{name} {f}")));
            assert!(
                err <= 1e-4 * scale,
                "{name} {f}: quantized vs its f32 decode: max abs {err} > 1e-4 x {scale}"
            );
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&deq);
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!("worst relative differences: {:?}", &worst[..3]);
}
