//! Opening and resolving a 1,000-tensor stamped container must read no tensor data and take
//! 50 ms or less. The container is written once to a temp file (header + sparse data
//! section); each iteration maps it, validates the header and resolves every tensor.

use container_io::Plan;
use container_io::container::{Container, ShapeHints};
use criterion::{Criterion, criterion_group, criterion_main};
use quant_core::Format;

fn bench(c: &mut Criterion) {
    let path =
        std::env::temp_dir().join(format!("tessera-bench-{}.safetensors", std::process::id()));
    let mut p = Plan::new("bench", false);
    let formats = [
        Format::Int4G64,
        Format::Mq4G256V2,
        Format::Fp8E4m3B128,
        Format::Int8Row,
    ];
    for k in 0..1000 {
        let f = formats[k % formats.len()];
        p.add_quantized(
            &format!(
                "model.layers.{}.mlp.experts.{}.up_proj.weight",
                k / 50,
                k % 50
            ),
            f,
            512,
            1024,
            42,
        )
        .unwrap();
    }
    // Data is never written: the file is sparse, so any tensor read would show as zeros, and
    // resolving reads headers only.
    let w = p.create(&path).unwrap();
    w.finish().unwrap();
    c.bench_function("open + resolve 1000 tensors", |b| {
        b.iter(|| {
            let c = Container::open(&path).unwrap();
            let n = c
                .resolve_all(&ShapeHints::new())
                .into_iter()
                .filter(|(_, r)| r.is_ok())
                .count();
            assert_eq!(n, 1000);
        })
    });
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
