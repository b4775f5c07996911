//! The KV cache: decoding token by token (and prefilling in uneven chunks) gives the logits
//! of one full recompute over the whole sequence, for every graph.

mod common;
use common::*;

fn check(name: &str) {
    let r = Reference::load(name);
    let model = load_cpu(name);
    let seq = r.sequence();
    let v = r.vocab;
    let mut full_cache = model.new_cache();
    let full = model.forward(&mut full_cache, &seq).unwrap();
    assert_eq!(full_cache.len(), seq.len());

    // One token at a time.
    let mut cache = model.new_cache();
    let mut steps = Vec::new();
    for &t in &seq {
        steps.extend(model.forward(&mut cache, &[t]).unwrap());
    }
    let bound = 1e-5 * r.scale();
    let err = max_abs_diff(&steps, &full);
    assert!(
        err <= bound,
        "{name}: token-by-token vs full: {err} > {bound}"
    );

    // Chunks of 3, 1, 5, ...: positions continue across calls.
    let mut cache = model.new_cache();
    let mut chunked = Vec::new();
    let mut k = 0;
    for n in [3, 1, 5, 2, 7, 4].iter().cycle() {
        if k >= seq.len() {
            break;
        }
        let end = (k + n).min(seq.len());
        chunked.extend(model.forward(&mut cache, &seq[k..end]).unwrap());
        k = end;
    }
    let err2 = max_abs_diff(&chunked, &full);
    assert!(err2 <= bound, "{name}: chunked vs full: {err2} > {bound}");
    assert_eq!(chunked.len(), seq.len() * v);
    eprintln!("{name}: decode vs recompute {err:.2e}, chunked vs recompute {err2:.2e}");
}

#[test]
fn llama_decode_equals_recompute() {
    check("parity-llama");
}

#[test]
fn qwen3_decode_equals_recompute() {
    check("parity-qwen3");
}

#[test]
fn deepseek_decode_equals_recompute() {
    check("parity-deepseek-v3");
}

#[test]
fn a_cache_of_another_graph_is_refused() {
    let llama = load_cpu("parity-llama");
    let ds = load_cpu("parity-deepseek-v3");
    let mut cache = ds.new_cache();
    let e = llama.forward(&mut cache, &[1]).unwrap_err();
    assert!(e.to_string().contains("another model"), "{e}");
}
