//! GEMV (S=1) and small-batch GEMM (S=16) throughput of the CPU kernels, as weight bytes
//! streamed per second.
//!
//! Each (shape, format) encodes one tensor from seeded test weights and clones its bytes
//! into enough separate buffers that the working set is at least 256 MB — far past the last
//! level cache — and every iteration uses the next copy, so the figure is a memory-bound
//! stream, not a cache-resident loop. Throughput is the registry's stored bytes (weights +
//! sidecar scales) of one tensor per call. `cargo xtask bench-cpu` runs this and sets it
//! against the machine's read bandwidth and candle's quantized matvec.
//!
//! Formats with an int8-activation kernel are measured on both paths: the exact one under
//! the format's name, the opt-in one as `<name>+int8-act`
//! (`gemm_with(KernelPath::Int8Activations, ..)`, activations rounded to int8 per call).
//!
//! Narrow with `TESSERA_BENCH_FORMATS=int8-row,int4-g64` and `TESSERA_BENCH_SHAPES=4096x4096`;
//! `TESSERA_SIMD=avx2|portable` lowers the SIMD level.

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use quant_core::kernels::{KernelPath, gemm_with, has_int8_activations};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::hint::black_box;
use std::time::Duration;

/// Shapes [O, I] the issue names: a square projection, an MLP up-projection and GLM's o_proj.
const SHAPES: [(usize, usize); 3] = [(4096, 4096), (14336, 4096), (6144, 16384)];
const FORMATS: [Format; 9] = [
    Format::F32,
    Format::Int8Row,
    Format::Int4Row,
    Format::Int4G64,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
    // GGUF block types, set against candle's same formats.
    Format::Q8_0,
    Format::Q4K,
    Format::Q6K,
];
const BATCHES: [usize; 2] = [1, 16];
/// Minimum bytes the rotated copies of one tensor occupy together.
const WORKING_SET: u64 = 256_000_000;

fn env_list(name: &str) -> Option<Vec<String>> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
}

fn shapes() -> Vec<(usize, usize)> {
    match env_list("TESSERA_BENCH_SHAPES") {
        Some(list) => SHAPES
            .into_iter()
            .filter(|(o, i)| list.contains(&format!("{o}x{i}")))
            .collect(),
        None => SHAPES.to_vec(),
    }
}

fn formats() -> Vec<Format> {
    match env_list("TESSERA_BENCH_FORMATS") {
        Some(list) => list
            .iter()
            .map(|n| n.parse().expect("format name"))
            .collect(),
        None => FORMATS.to_vec(),
    }
}

fn gemv(c: &mut Criterion) {
    let mut rng = Rng::new(0x07E5_5E7A);
    for (o, i) in shapes() {
        let w = weights(&mut rng, o, i);
        let mut group = c.benchmark_group(format!("gemv/{o}x{i}"));
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1200));
        for f in formats() {
            let spec = f.spec();
            let t = encode(f, o, i, &w, &EncodeOptions::default()).expect("encode");
            let bytes =
                spec.weight_bytes(o, i).expect("size") + spec.scale_bytes(o, i).expect("size");
            let n = WORKING_SET.div_ceil(bytes).max(1) as usize;
            let copies: Vec<EncodedTensor> = (0..n).map(|_| t.clone()).collect();
            drop(t);
            group.throughput(Throughput::BytesDecimal(bytes));
            let mut paths = vec![(KernelPath::Exact, f.name().to_string())];
            if has_int8_activations(f) {
                let id = format!("{}+{}", f.name(), KernelPath::Int8Activations.name());
                paths.push((KernelPath::Int8Activations, id));
            }
            for (path, id) in paths {
                for s in BATCHES {
                    let x = activations(&mut rng, s, i);
                    let mut y = vec![0f32; s * o];
                    let mut k = 0;
                    group.bench_function(BenchmarkId::new(&id, format!("S={s}")), |b| {
                        b.iter(|| {
                            let t = copies[k % n].view();
                            gemm_with(path, &t, black_box(&x), s, &mut y).expect("gemm");
                            k += 1;
                            black_box(&y);
                        })
                    });
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, gemv);
criterion_main!(benches);
