//! cargo-fuzz target: parse arbitrary bytes as GGUF, then touch everything a reader would:
//! every metadata value (arrays iterated, nested ones too), every tensor's logical shape,
//! bytes and decode, and the Hugging Face mapping and config. Must never panic, read out
//! of bounds, or allocate beyond a small multiple of the input.
#![no_main]

use container_io::gguf::{Value, names, parse, qtensor};
use libfuzzer_sys::fuzz_target;

fn walk(v: &Value<'_>) {
    if let Value::Array(a) = v {
        for e in a.iter() {
            walk(&e);
        }
    }
    let _ = v.to_json(Some(4));
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = parse("fuzz.gguf", data) else {
        return;
    };
    for kv in &g.metadata {
        walk(&kv.value);
    }
    for t in &g.tensors {
        let _ = t.logical_shape();
        let _ = g.tensor_data(t);
        if let Ok(q) = qtensor(&g, t) {
            // The tensor's bytes lie inside the input, so decoding is bounded by it.
            let _ = quant_core::decode(&q);
        }
    }
    let _ = names::hf_config(&g);
});
